"""The chapters outside the book: readable, student and instructor notebooks.

book/_ext/plain_copies.py turns each executed chapter into plain notebooks. These tests
fail when a committed readable copy (book/notebooks/) is stale or missing, when any copy a
reader can open still contains MyST syntax, when a filled-in number differs from the value
the chapter glued, when a student copy keeps any solution text or cannot run, and when an
instructor copy is not a valid nbgrader source. tests/fixtures/00_fixture.ipynb uses every
allowed construct once, with a checked and an unchecked exercise.

Student copies are not run top to bottom here (that would double the notebook time of
`pytest`): a student copy is its chapter, which nbval runs, minus the solution cells plus
the work cells. So these tests check that no kept cell uses a name only a solution defined,
run every work cell, and run the whole fixture's student copy; .ci/run runs every
chapter's student copy top to bottom after the build (.ci/run_student_copies).
"""
from __future__ import annotations

import ast
import contextlib
import copy
import importlib.util
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from myst_nb.core.variables import format_plain_text

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "00_fixture.ipynb"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


PC = _load("plain_copies", ROOT / "book" / "_ext" / "plain_copies.py")
CTX = PC.Context(ROOT)
CHAPTERS = PC.chapters(ROOT)
IDS = [p.name for p in CHAPTERS]

# -- MyST left in plain markdown (written here, independent of the converter) -----------
RAW_MYST = [
    (re.compile(r"\{[A-Za-z][\w:.+-]*\}`"), "a MyST role"),
    (re.compile(r"^ {0,3}(`{3,}|~{3,}|:{3,})\s*\{", re.M), "a directive fence"),
    (re.compile(r"^ {0,3}:{3,}", re.M), "a colon fence"),
    (re.compile(r"^:(label|class|name|dropdown):", re.M), "a directive option"),
    (re.compile(r"^\([\w.:-]+\)=\s*$", re.M), "a MyST target"),
    (re.compile(r"\{\{\s*[\w.]+\s*\}\}"), "a MyST substitution"),
]
CODE_BLOCK = re.compile(r"^[ \t>]*(`{3,}|~{3,})[^`{\n]*\n.*?^[ \t>]*\1\s*$", re.M | re.S)


def raw_myst(text: str) -> list[str]:
    """What MyST syntax text still contains, outside plain fenced code blocks."""
    text = CODE_BLOCK.sub("", text)
    return [f"{what}: {m.group(0)!r}" for regex, what in RAW_MYST for m in regex.finditer(text)]


def markdown(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "markdown"]


def stored_glue(nb) -> dict[str, str]:
    """{key: text/plain} of every glue() output stored in the notebook."""
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            scrap = out.get("metadata", {}).get("scrapbook")
            if scrap:
                values[scrap["name"]] = out["data"][scrap.get("mime_prefix", "") + "text/plain"]
    return values


def split_solutions(nb) -> tuple[list, list]:
    """(pieces of cells between solution-start and solution-end, all other pieces), read
    from the source chapter; a markdown cell may hold text and a fence together."""
    inside, outside, within = [], [], False
    for cell in nb.cells:
        pieces = re.split(r"(^`{3,}\{solution-(?:start|end)\}.*?^`{3,}\s*$)", cell.source,
                          flags=re.M | re.S) if cell.cell_type == "markdown" else [cell.source]
        for piece in pieces:
            if re.match(r"^`{3,}\{solution-start\}", piece):
                within = True
            elif re.match(r"^`{3,}\{solution-end\}", piece):
                within = False
            elif piece.strip():
                (inside if within else outside).append((cell.cell_type, piece))
    return inside, outside


@pytest.fixture(scope="module")
def fixture_copies():
    return {v: PC.build(FIXTURE, v, ROOT, CTX) for v in PC.VARIANTS}


@pytest.fixture(scope="module", params=CHAPTERS, ids=IDS)
def chapter(request):
    path = request.param
    source = nbformat.read(path, as_version=4)
    copies = {v: PC.build(path, v, ROOT, CTX) for v in PC.VARIANTS}
    return path, source, copies


# -- readable copies --------------------------------------------------------------------
def test_every_chapter_has_a_current_readable_copy(chapter):
    path, _, copies = chapter
    committed = PC.readable_path(path, ROOT)
    assert committed.is_file(), (
        f"{committed.relative_to(ROOT)} is missing: run python .ci/execute_notebooks "
        f"{path.relative_to(ROOT)} (or --copies-only) and commit it")
    stored = json.loads(committed.read_text())
    fresh = json.loads(nbformat.writes(copies["readable"]))
    assert stored == fresh, (
        f"{committed.relative_to(ROOT)} is stale (its chapter, references.bib or a page title "
        "changed): run python .ci/execute_notebooks --copies-only and commit it")


def test_no_copy_without_its_chapter():
    names = {p.name for p in CHAPTERS}
    orphans = [p.name for p in (ROOT / PC.COPIES_DIR).glob("*.ipynb") if p.name not in names]
    assert not orphans, f"copies in {PC.COPIES_DIR}/ with no chapter: {orphans}"


@pytest.mark.parametrize("copy", sorted((ROOT / PC.COPIES_DIR).glob("*.ipynb")),
                         ids=lambda p: p.name)
def test_committed_copies_have_no_raw_myst(copy):
    nb = nbformat.read(copy, as_version=4)
    found = [(i, f) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
             for f in raw_myst(c.source)]
    assert not found, f"{copy.name}: MyST left in markdown cells (index, what): {found}"


def test_student_and_instructor_copies_have_no_raw_myst(chapter):
    path, _, copies = chapter
    for variant in ("student", "instructor"):
        found = [f for c in markdown(copies[variant]) for f in raw_myst(c.source)]
        assert not found, f"{path.name}, {variant} copy: {found}"


def _glue_expectations(source) -> list[tuple[str, str, str]]:
    """(cell id, text before the role on its line, value myst-nb shows) per glue role."""
    values = stored_glue(source)
    expected = []
    for cell in markdown(source):
        for m in re.finditer(r"\{glue:text\}`([^`]+)`", cell.source):
            key, _, fmt = m[1].rpartition(":") if ":" in m[1] else (m[1], "", "")
            before = cell.source[:m.start()].split("\n")[-1][-12:]
            if re.search(r"[`{}\[\]$*<>]", before):
                before = ""
            expected.append((cell.id, before, format_plain_text(values[key], fmt)))
    return expected


def _check_glue(source, readable, name):
    texts = {}
    for cell in markdown(readable):
        texts.setdefault(cell.id.split("-")[0], []).append(cell.source)
    expectations = _glue_expectations(source)
    for cell_id, before, value in expectations:
        text = "\n".join(texts.get(cell_id, []))
        assert before + value in text, (
            f"{name}, cell {cell_id}: expected the glued value {value!r} after {before!r}; "
            "the copy shows something else: run python .ci/execute_notebooks --copies-only")
    return expectations


def test_readable_copy_shows_the_glued_values(chapter):
    path, source, _ = chapter
    committed = nbformat.read(PC.readable_path(path, ROOT), as_version=4)
    _check_glue(source, committed, path.name)


def test_fixture_glue_cite_and_roles(fixture_copies):
    source = nbformat.read(FIXTURE, as_version=4)
    readable = fixture_copies["readable"]
    checked = _check_glue(source, readable, FIXTURE.name)
    assert {value for _, _, value in checked} >= {"512", "0.667", "66.7%", "measured 12.3 GB/s",
                                                 "2,048"}
    text = "\n".join(c.source for c in markdown(readable))
    assert "[Shazeer, 2019; Ainslie et al., 2023]" in text
    assert "[Vaswani et al., 2017]" in text
    assert "counted in\nKV heads [" in text            # {term}`KV heads <KV head>`
    assert "`toykv.kv_values_per_token()`" in text and "`kv_cache_bytes()`" in text
    assert "*Notation*" in text and "*the notation page*" in text
    assert "> **Takeaways**\n>\n> - One token: 512 values." in text
    assert '>   print("{term}`not a role`")' in text   # code inside stays code
    assert "> **Warning**" in text and "> **Note**" in text
    assert text.startswith("# 0. A fixture chapter")
    references = readable.cells[-1].source
    assert references.startswith("## References")
    assert references.count("\n- [") == 3 and "arxiv.org/abs/1706.03762" in references
    assert not [f for c in markdown(readable) for f in raw_myst(c.source)]


def test_fixture_exercises_and_folded_solutions(fixture_copies):
    readable = fixture_copies["readable"]
    headings = [c for c in markdown(readable) if c.source.startswith("###")]
    assert [c.source for c in headings] == [
        "### Exercise 0.1", "#### Solution to exercise 0.1",
        "### Exercise 0.2 (Bytes)", "#### Solution to exercise 0.2"]
    assert all(c.metadata.get("jp-MarkdownHeadingCollapsed") for c in headings
               if "Solution" in c.source)
    hidden = [c for c in readable.cells if "hide-input" in c.metadata.get("tags", [])]
    assert hidden and all(c.metadata["jupyter"]["source_hidden"] for c in hidden)


def test_chapter_numbers_follow_the_toc():
    sys.path.insert(0, str(ROOT / "tests"))
    from test_book_frame import toc_files

    chapters = [f for f in toc_files() if re.match(r"book/\d+_", f)]
    numbers = [int(re.match(r"book/(\d+)_", f)[1]) for f in chapters]
    assert numbers == list(range(1, len(chapters) + 1)), (
        f"chapter files {chapters} must be numbered 1, 2, ... in toc order: the plain copies "
        "number chapters and exercises from the file name, the book from the toc")


# -- converter errors -------------------------------------------------------------------
def _tiny(*markdown_cells, code="from myst_nb import glue\nglue('x', 3, display=False)"):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(code)] + [nbformat.v4.new_markdown_cell(s)
                                                    for s in markdown_cells]
    nb.cells[0].outputs = [nbformat.v4.new_output(
        "display_data", data={"application/papermill.record/text/plain": "3"},
        metadata={"scrapbook": {"name": "x", "mime_prefix": "application/papermill.record/"}})]
    return nb


@pytest.mark.parametrize("text, message", [
    ("{numref}`fig-1`", "role {numref}"),
    ("```{figure} a.png\n```", "directive {figure}"),
    ("```{tab-set}\n```", "directive {tab-set}"),
    ("{glue:text}`missing:.1f`", "no stored glue value 'missing'"),
    ("{cite}`no_such_key`", "not in references.bib"),
    ("a\n% comment", "starts with '%'"),
    ("```{note}\nnever closed", "never closed"),
    ("{glue:text}`x:d` then\n```{exercise-start}\n:label: ch9-ex1\n```\nmore", "ends inside an exercise"),
])
def test_unknown_or_broken_myst_is_refused(text, message):
    with pytest.raises(PC.ConversionError, match=re.escape(message)):
        PC.convert(_tiny(text), "book/09_x.ipynb", "readable", CTX)


def test_a_solution_value_glued_into_the_prompt_is_refused():
    F = "```"
    nb = _tiny(f"{F}{{exercise-start}}\n:label: ch9-ex1\n{F}", "How much?",
               f"{F}{{exercise-end}}\n{F}", f"{F}{{solution-start}} ch9-ex1\n{F}")
    solution = nb.cells.pop(0)
    nb.cells += [solution, nbformat.v4.new_markdown_cell(f"{F}{{solution-end}}\n{F}"),
                 nbformat.v4.new_markdown_cell("The answer was {glue:text}`x`.")]
    with pytest.raises(PC.ConversionError, match="computed in an exercise's solution"):
        PC.convert(nb, "book/09_x.ipynb", "student", CTX)


# -- student copies ---------------------------------------------------------------------
def _solution_patterns(source) -> list[re.Pattern]:
    """One pattern per line of the solutions that appears nowhere else in the chapter (a
    student copy that matches one holds part of a solution). MyST roles in a line match
    whatever the converter made of them."""
    inside, outside = split_solutions(source)
    assert inside, "no solutions found"
    elsewhere = {line.strip() for _, piece in outside for line in piece.split("\n")}
    patterns = []
    for _, piece in inside:
        for line in (line.strip() for line in piece.split("\n")):
            literal = re.split(r"\{[A-Za-z][\w:.+-]*\}`[^`]*`", line)
            if line in elsewhere or len("".join(literal)) < 16:
                continue
            body = ".{0,80}?".join(re.escape(part) for part in literal)
            patterns.append(re.compile(rf"^[ \t>]*{body}[ \t]*$", re.M))
    return patterns


def _leaks(source, text: str) -> list[str]:
    return sorted(p.pattern for p in _solution_patterns(source) if p.search(text))


def _student_text(student) -> str:
    """Every cell's source and every text its outputs show, line by line."""
    parts = []
    for cell in student.cells:
        parts.append(cell.source)
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.extend(v for k, v in out.get("data", {}).items()
                         if isinstance(v, str) and k.startswith("text/"))
    return "\n".join(parts)


def test_student_copy_keeps_no_solution_text(chapter):
    path, source, copies = chapter
    text = _student_text(copies["student"])
    leaked = _leaks(source, text)
    assert not leaked, f"{path.name}: solution lines in the student copy: {leaked[:5]}"
    assert "Solution to exercise" not in text and "BEGIN SOLUTION" not in text


def test_fixture_student_copy_keeps_no_solution_text(fixture_copies):
    source = nbformat.read(FIXTURE, as_version=4)
    text = _student_text(fixture_copies["student"])
    # the test sees the solution, also after the converter filled in its glued number
    assert _leaks(source, "answer = 2 * solution_layers * solution_row")
    assert _leaks(source, "That is 2,048 bytes, four per value.")
    assert not _leaks(source, text)
    assert "solution_" not in text and "2,048" not in text


def _python(source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager

    return TransformerManager().transform_cell(source)


def _names(source: str) -> tuple[set, set]:
    """(names a cell binds at any level, names it reads) - a deliberate over-approximation
    of the bindings, so that only names bound in no kept cell are reported."""
    tree = ast.parse(_python(source))
    bound, read = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else read).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound, read


def _imports_check_module(source: str) -> bool:
    return bool(re.search(r"^\s*(import toykv\.check|from toykv import .*\bcheck\b|"
                          r"from toykv\.check import)", _python(source), re.M))


def _toykv_imports_check() -> bool:
    code = "import sys, toykv; print('toykv.check' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    return out.stdout.strip() == "True"


def assert_student_copy_runs(student, name: str, checks_imported: bool,
                             run_work_cells: bool = True) -> None:
    """No kept cell reads a name that only a removed solution bound; every check call has
    toykv.check imported before it; every work cell runs and says "Not answered yet"."""
    import builtins

    import toykv.check
    from toykv.check import NOT_ANSWERED

    bound, has_check = set(dir(builtins)) | {"get_ipython", "display"}, checks_imported
    for index, cell in enumerate(student.cells):
        if cell.cell_type != "code":
            continue
        binds, reads = _names(cell.source)
        missing = sorted(reads - bound - binds)
        assert not missing, (
            f"{name}, student copy, code cell {index}: reads {missing}, which no earlier "
            "kept cell defines (a solution did?): a student copy would stop with NameError")
        bound |= binds
        has_check = has_check or _imports_check_module(cell.source)
        if PC.META_KEY in cell.metadata:              # a work cell: run it
            assert has_check or "toykv.check" not in cell.source, (
                f"{name}, code cell {index}: calls toykv.check before any kept cell imports "
                "it (import toykv.check in the chapter's first code cell)")
            if not run_work_cells:
                continue
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(_python(cell.source), f"{name}[{index}]", "exec"),
                     {"toykv": toykv})
            if "toykv.check" in cell.source:
                assert out.getvalue().strip() == NOT_ANSWERED, (
                    f"{name}, work cell {index} printed {out.getvalue()!r}")


def test_student_copy_runs_without_the_solutions(chapter):
    path, _, copies = chapter
    assert_student_copy_runs(copies["student"], path.name, _toykv_imports_check())


def test_fixture_student_copy_runs_top_to_bottom(fixture_copies, tmp_path):
    """The whole student copy in a fresh kernel, as a student would run it."""
    from nbclient import NotebookClient

    student = fixture_copies["student"]
    work = [c for c in student.cells if PC.META_KEY in c.metadata]
    assert [c.source for c in work] == [
        "answer = None  # your answer\ntoykv.check.ch0_ex1(answer)", "# your code here"]
    assert_student_copy_runs(student, FIXTURE.name, _toykv_imports_check(),
                             run_work_cells=False)   # its check is defined in the notebook
    nb = nbformat.reads(nbformat.writes(student), as_version=4)
    # as in Colab or a plain Jupyter: no myst-nb (its glue comes from toykv.glue), no Sphinx
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        "import sys\nsys.modules.update(myst_nb=None, sphinx=None)  # importing them fails"))
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = [o.get("text", "") for o in nb.cells[nb.cells.index(
        next(c for c in nb.cells if c.id == "ch0-ex1-work"))].outputs]
    assert "".join(printed).startswith("Not answered yet")
    # every kept cell shows what the readable copy stored (a glue with display=True too)
    stored = {c.id: _shown(c) for c in fixture_copies["readable"].cells if c.cell_type == "code"}
    ran = {c.id: _shown(c) for c in nb.cells if c.id in stored}   # solutions are not kept
    assert ran == {key: stored[key] for key in ran} and ["2", "512\n"] in ran.values()


def _shown(cell) -> list[str]:
    """What a code cell's outputs show as text (streams, text/plain)."""
    return ["".join(o.get("text", "")) if o.output_type == "stream"
            else "".join(o.get("data", {}).get("text/plain", "")) for o in cell.outputs]


def test_plain_copies_need_no_book_tools(chapter):
    path, source, copies = chapter
    glued = any(PC.GLUE_IMPORT.search(c.source) for c in source.cells if c.cell_type == "code")
    for variant, nb in copies.items():
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert not [c.id for c in code if "myst_nb" in c.source], (path.name, variant)
        assert not [c.id for c in code for o in c.outputs if "scrapbook" in o.get("metadata", {})]
        assert not glued or any(PC.PLAIN_GLUE_IMPORT in c.source for c in code)
        install = code[0]
        assert PC.INSTALL_TAG in install.metadata["tags"]
        assert install.metadata["jupyter"]["source_hidden"] is True          # JupyterLab
        assert install.metadata["cellView"] == "form"                         # Colab
        assert install.source.startswith("#@title "), "Colab shows this line instead"


def test_a_myst_nb_use_beyond_glue_is_refused():
    with pytest.raises(PC.ConversionError, match="beyond `from myst_nb import glue`"):
        PC.convert(_tiny("Text.", code="import myst_nb\nmyst_nb.glue('x', 3)"),
                   "book/09_x.ipynb", "readable", CTX)


def _imports(source: str) -> set[str]:
    """Top-level module names a cell imports."""
    names = set()
    for node in ast.walk(ast.parse(_python(source))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_colab_install_has_what_the_plain_notebooks_import_and_no_more():
    """The install cell installs toykv[notebooks]: every package a plain notebook or toykv
    imports is in it (or comes with it), and each of its packages is imported by one."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert "toykv[notebooks]" in PC.INSTALL_REQUIREMENT
    name = lambda req: re.match(r"[\w.-]+", req)[0].lower().replace("-", "_")  # noqa: E731
    notebooks = {name(r) for r in extras["notebooks"]}
    assert not notebooks & {"myst_nb", "sphinx", "jupyter_book"}
    copies = [nbformat.read(p, as_version=4) for p in (ROOT / PC.COPIES_DIR).glob("*.ipynb")]
    used = set().union(*(_imports(c.source) for nb in copies for c in nb.cells
                         if c.cell_type == "code"))
    third_party = used - set(sys.stdlib_module_names) - {"toykv"}
    # IPython comes with ipywidgets (and is every kernel's); numpy is toykv's dependency
    missing = third_party - notebooks - {"IPython", "numpy"}
    assert not missing, f"plain notebooks import {sorted(missing)}: add them to [notebooks]"
    toykv_imports = set().union(*(_imports(f.read_text())
                                  for f in (ROOT / "toykv").rglob("*.py")))
    unused = notebooks - used - toykv_imports
    assert not unused, f"[notebooks] installs {sorted(unused)}, which nothing imports"


def test_the_static_check_catches_a_solution_variable_used_later(fixture_copies):
    student = nbformat.reads(nbformat.writes(fixture_copies["student"]), as_version=4)
    student.cells.append(nbformat.v4.new_code_cell("print(solution_bytes)"))
    with pytest.raises(AssertionError, match=r"reads \['solution_bytes'\]"):
        assert_student_copy_runs(student, "fixture", True, run_work_cells=False)


# -- instructor copies and nbgrader -----------------------------------------------------
def _nbgrader_cells(nb):
    return [c for c in nb.cells if "nbgrader" in c.metadata]


def test_instructor_copy_marks_every_solution_cell(chapter):
    path, source, copies = chapter
    instructor = copies["instructor"]
    marked = _nbgrader_cells(instructor)
    solution_pieces, _ = split_solutions(source)
    assert len([c for c in marked if c.metadata["nbgrader"]["solution"]]) == len(solution_pieces)
    for cell in marked:
        meta = cell.metadata["nbgrader"]
        if meta["solution"] and cell.cell_type == "code":
            assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
    ids = [c.metadata["nbgrader"]["grade_id"] for c in marked]
    assert len(ids) == len(set(ids)), f"{path.name}: duplicate nbgrader grade ids"
    nbgraderformat = pytest.importorskip("nbgrader.nbgraderformat")
    nbgraderformat.MetadataValidator().validate_nb(instructor)


def run_test_cell(source: str, answer) -> tuple[str, str]:
    """(stdout, stderr) of an instructor copy's test cell run with this answer; an
    exception propagates (a test cell must never raise: it would stop a student's Run All)."""
    import toykv

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        exec(compile(_python(source), "test cell", "exec"), {"toykv": toykv, "answer": answer})
    return out.getvalue(), err.getvalue()


def nbgrader_score(cell, stdout: str, stderr: str) -> float:
    """The points nbgrader's autograde gives a test cell that printed this."""
    from nbgrader.utils import determine_grade

    cell = copy.deepcopy(cell)
    cell.outputs = [nbformat.v4.new_output("stream", name=name, text=text)
                    for name, text in (("stdout", stdout), ("stderr", stderr)) if text]
    return determine_grade(cell)[0]


def test_fixture_instructor_copy_splits_the_check(fixture_copies, monkeypatch):
    import toykv.check

    instructor = fixture_copies["instructor"]
    by_id = {c.id: c for c in instructor.cells}
    check = by_id["ch0-ex1-check"]
    assert "toykv.check.ch0_ex1(answer)" in check.source
    assert check.metadata["nbgrader"]["grade"] and check.metadata["nbgrader"]["locked"]
    assert check.metadata["nbgrader"]["points"] == PC.TEST_POINTS
    answer = instructor.cells[instructor.cells.index(check) - 1]
    assert answer.source.split("\n")[:2] == ["answer = None  # your answer",
                                             "### BEGIN SOLUTION"]
    # the cell runs the check without raising; only "Right." keeps stderr empty
    monkeypatch.setattr(toykv.check, "ch0_ex1",
                        lambda a: toykv.check.answer_check(a, 512), raising=False)
    printed = {a: run_test_cell(check.source, a) for a in (None, 511, 512)}
    assert printed[None][0].strip() == toykv.check.NOT_ANSWERED and printed[None][1]
    assert printed[511][0].startswith("Not right yet") and printed[511][1]
    assert printed[512] == ("Right.\n", "")
    if importlib.util.find_spec("nbgrader"):
        assert [nbgrader_score(check, *printed[a]) for a in (None, 511, 512)] == [
            0, 0, PC.TEST_POINTS]


def test_instructor_copy_points_and_test_cells(chapter):
    """Cheap stand-in for a course run of every chapter (tests/test_nbgrader_flow.py runs
    one): every test cell runs unanswered without raising, says "Not answered yet" and is
    scored zero; the points are the self-checks' (book/instructors.md says so)."""
    from toykv.check import NOT_ANSWERED

    assert (PC.TEST_POINTS, PC.MANUAL_POINTS) == (1, 0), (
        "book/instructors.md and README.md describe 1 point per self-check, 0 per cell "
        "graded by hand: change them with the constants")
    path, source, copies = chapter
    instructor = copies["instructor"]
    _, exercises = PC.parse_chapter(nbformat.from_dict(
        {**source, "cells": PC.expand_cells(source, path.name)}), path.name)
    graded = [c for c in instructor.cells if c.metadata.get("nbgrader", {}).get("grade")]
    tests = [c for c in graded if not c.metadata["nbgrader"]["solution"]]
    assert len(tests) == sum(1 for e in exercises.values() if e.check)
    assert all(c.metadata["nbgrader"]["points"] == PC.TEST_POINTS for c in tests)
    assert all(c.metadata["nbgrader"]["points"] == PC.MANUAL_POINTS
               for c in graded if c not in tests)
    for cell in tests:
        assert not re.search(r"^\s*assert\b", cell.source, re.M), cell.source
        stdout, stderr = run_test_cell(cell.source, None)
        assert stdout.strip() == NOT_ANSWERED and stderr, (path.name, cell.id, stdout, stderr)
        if importlib.util.find_spec("nbgrader"):
            assert nbgrader_score(cell, stdout, stderr) == 0


def _nbgrader_release(notebooks: dict, tmp_path: Path) -> Path:
    """Run `nbgrader generate_assignment` once on an assignment made of the given
    instructor copies ({name: notebook}); returns the release folder."""
    course = tmp_path / "course"
    for name, nb in notebooks.items():
        PC.write(nb, course / "source" / "assignment" / f"{name}.ipynb")
    (course / "nbgrader_config.py").write_text(PC.NBGRADER_CONFIG)
    # --no-db: skip the gradebook (an SQLite file nbgrader sets up with alembic, which
    # doubles the run time and does not depend on our notebooks)
    result = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment",
                             "assignment", "--force", "--no-db"], cwd=course,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return course / "release" / "assignment"


@pytest.mark.skipif(importlib.util.find_spec("nbgrader") is None,
                    reason="nbgrader is in the [test] extra: pip install -e '.[test]'")
def test_nbgrader_generates_every_assignment(fixture_copies, tmp_path):
    """nbgrader itself makes the students' version of the fixture and of every chapter (one
    run: importing nbgrader takes seconds); tests/test_nbgrader_flow.py runs one chapter
    through a whole course run."""
    sources = {"fixture": nbformat.read(FIXTURE, as_version=4)}
    sources |= {c.stem: nbformat.read(c, as_version=4) for c in CHAPTERS}
    instructor = {"fixture": fixture_copies["instructor"]}
    instructor |= {c.stem: PC.build(c, "instructor", ROOT, CTX) for c in CHAPTERS}
    release = _nbgrader_release(instructor, tmp_path)
    for name, source in sources.items():
        nb = nbformat.read(release / f"{name}.ipynb", as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        leaked = [p for p in _leaks(source, text) if "toykv\\.check" not in p]
        assert not leaked, f"{name}: nbgrader's release keeps solution lines {leaked[:3]}"
        assert "BEGIN SOLUTION" not in text and "Solution to exercise" not in text
        assert "NotImplementedError" not in text, f"{name}: a stub that stops Run All"
        assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
        tests = [c.source for c in instructor[name].cells
                 if c.metadata.get("nbgrader", {}).get("grade")
                 and not c.metadata["nbgrader"]["solution"]]
        kept = [c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
                and not c.metadata["nbgrader"]["solution"]]
        assert kept == tests, f"{name}: nbgrader changed the test cells"
    fixture = nbformat.read(release / "fixture.ipynb", as_version=4)
    text = "\n".join(c.source for c in fixture.cells)
    assert "answer = None  # your answer\n# your code here" in text
    assert "toykv.check.ch0_ex1(answer)" in text


def test_a_words_only_solution_gets_a_markdown_cell_to_write_in():
    F = "```"
    nb = _tiny(f"{F}{{exercise-start}}\n:label: ch9-ex1\n{F}", "Why?",
               f"{F}{{exercise-end}}\n{F}", f"{F}{{solution-start}} ch9-ex1\n{F}",
               f"Because {{glue:text}}`x` is odd.\n\n{F}{{solution-end}}\n{F}")
    student = PC.convert(nb, "book/09_x.ipynb", "student", CTX)
    work = [c for c in student.cells if PC.META_KEY in c.metadata]
    assert [(c.cell_type, c.source) for c in work] == [("markdown", PC.WRITE_STUB)]
    assert "Because" not in nbformat.writes(student)
    instructor = PC.convert(nb, "book/09_x.ipynb", "instructor", CTX)
    marked = [c for c in instructor.cells if "nbgrader" in c.metadata]
    assert [(c.source, c.metadata["nbgrader"]["points"]) for c in marked] == [
        ("Because 3 is odd.", PC.MANUAL_POINTS)]
