"""The course pages extension (book/_ext/course_pages.py): buttons, downloads, course map, API.

Binder, Colab and Thebe cannot be reached from here, so the URLs are checked instead: a
small Sphinx build with the book's theme, launch-button settings and extensions renders a
fixture chapter, and its Binder, Colab and download links must name the readable copy
(book/notebooks/NN.ipynb in the repository, notebooks/NN.ipynb in the site). The same build
checks the zips, the instructors' page directives and the toykv cross-references, and what
the accessibility extensions do to the pages (figure_alt.py, a11y_theme.py).
"""
from __future__ import annotations

import html
import importlib.util
import inspect
import io
import re
import shutil
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "00_fixture.ipynb"
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import course_pages as CP  # noqa: E402
import plain_copies as PC  # noqa: E402


def test_goals_are_read_from_a_heading_or_a_bold_line():
    text = ("# T\n\nIntro.\n\n## What you will be able to do\n\n- one\n- two, which goes\n"
            "  on\n- three\n\n## Next\n\n- not a goal\n")
    assert CP.chapter_goals(text) == ["one", "two, which goes on", "three"]
    assert CP.chapter_goals(text.replace("## What", "**What").replace("do\n", "do**\n", 1)) \
        == ["one", "two, which goes on", "three"]
    assert CP.chapter_goals("# T\n\nNo goals.\n") == []


def test_fixture_facts():
    facts = CP.chapter_facts(FIXTURE, ROOT)
    assert facts["title"] == "A fixture chapter" and facts["number"] == 0
    assert facts["goals"] == [
        "Read a glued number, {glue:text}`values_per_token:,` values, as a number.",
        "Follow a citation {cite}`vaswani2017attention` to the reference list."]
    assert (facts["exercises"], facts["checked"]) == (2, 1)
    # words: counted by hand from the fixture's markdown would be brittle; bounds suffice
    assert 150 < facts["words"] < 400 and facts["code_lines"] > 10
    assert CP.glue_only(facts["goals"][0], FIXTURE) == \
        "Read a glued number, 512 values, as a number."


@pytest.mark.parametrize("docname", CP.toc_chapters(ROOT))
def test_every_chapter_states_three_to_five_goals(docname):
    facts = CP.chapter_facts(ROOT / f"{docname}.ipynb", ROOT)
    assert 3 <= len(facts["goals"]) <= 5, (
        f"{docname}: {len(facts['goals'])} goals under 'What you will be able to do' "
        "(the instructors' course map shows them): the README's Contributing section asks "
        "for 3 to 5")


def test_builds_on_counts_only_earlier_chapters(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "# Five\n\nAs chapter 2 showed, and chapters 3 and 4 measured; chapter 7 goes on, "
        "see also {doc}`01_attention`.")])
    path = tmp_path / "book" / "05_five.ipynb"
    path.parent.mkdir()
    nbformat.write(nb, path)
    assert CP.chapter_facts(path, tmp_path)["builds_on"] == [1, 2, 3, 4]


def test_reading_estimate_rounds_up_to_five_minutes():
    assert [CP.rounded_minutes(m) for m in (0.4, 5, 5.2, 11, 14.6)] == [5, 5, 5, 15, 15]


def test_launch_urls_are_pointed_at_the_readable_copy():
    binder = ("https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/book/04_cache_size.ipynb")
    assert CP.readable_url(binder, "book/04_cache_size") == (
        "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/book/notebooks/04_cache_size.ipynb")
    colab = "https://colab.research.google.com/github/o/r/blob/main/book/04_cache_size.ipynb"
    assert CP.readable_url(colab, "book/04_cache_size").endswith(
        "/blob/main/book/notebooks/04_cache_size.ipynb")
    with pytest.raises(ValueError, match="does not end with"):
        CP.readable_url("https://mybinder.org/v2/gh/o/r/main", "book/04_cache_size")


# -- docstrings as the API page shows them -----------------------------------------------
def _rst_problems(lines: list[str]) -> list[str]:
    """Messages docutils gives for these rST lines (what -W would turn into errors)."""
    from docutils.core import publish_doctree
    from docutils.utils import Reporter

    doctree = publish_doctree("\n".join(lines), settings_overrides={
        "report_level": Reporter.WARNING_LEVEL, "halt_level": 5, "warning_stream": False})
    return [m.astext() for m in doctree.findall(lambda n: n.tagname == "system_message")]


def test_plain_docstrings_keep_their_layout_and_need_no_rst():
    lines = ["Sizes: |V| = vocab_size, 2*L*H_kv*d_h values, `tokens` tokens, name_ here.",
             "", "Prints", "1. decode: a", "   wrapped line,", "2. prefill.", "After."]
    assert _rst_problems(lines), "docutils should object to the raw text (else no test)"
    out = CP.plain_docstring(lines)
    assert not _rst_problems(out)
    assert out[0] == (r"Sizes: \|V\| = vocab_size, 2\*L\*H_kv\*d_h values, ``tokens`` tokens, "
                      r"name\_ here.")
    assert out[2:7] == ["| Prints", "| 1. decode: a", "|    wrapped line,", "| 2. prefill.",
                        "| After."]


def _toykv_modules():
    import pkgutil

    import toykv

    names = ["toykv"] + [m.name for m in pkgutil.walk_packages(toykv.__path__, "toykv.")]
    return [importlib.import_module(n) for n in names]


def test_every_toykv_docstring_renders_without_warnings():
    """What `jupyter-book build -W` would stop on in book/api.md, found without a build."""
    problems = []
    for module in _toykv_modules():
        objects = [module] + [obj for _, obj in inspect.getmembers(module)
                              if getattr(obj, "__module__", None) == module.__name__
                              and (inspect.isclass(obj) or inspect.isfunction(obj))]
        for obj in objects:
            doc = inspect.getdoc(obj)
            if doc:
                problems += [f"{module.__name__}.{getattr(obj, '__qualname__', '')}: {p}"
                             for p in _rst_problems(CP.plain_docstring(doc.split("\n")))]
    assert not problems, "\n".join(problems)


# -- a small Sphinx build: buttons, downloads, instructors' page, cross-references -------
CONF = '''
import sys
sys.path.insert(0, {ext!r})
project = "mini"
extensions = ["myst_nb", "sphinx_book_theme", "sphinx_exercise", "sphinxcontrib.bibtex",
              "sphinx_thebe", "sphinx.ext.autodoc", "course_pages", "figure_alt", "a11y_theme"]
html_theme = "sphinx_book_theme"
html_theme_options = {{
    "repository_url": {url!r}, "repository_branch": {branch!r}, "path_to_docs": "",
    "use_download_button": True, "launch_buttons": {launch!r}}}
html_context = {{"default_mode": "light"}}
bibtex_bibfiles = ["references.bib"]
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
exclude_patterns = ["_build", "book/notebooks", "book/_ext"]
suppress_warnings = ["myst.header"]
root_doc = "index"
'''
INDEX = """# Mini

```{toctree}
book/01_fixture
book/instructors
book/api
book/notation
book/glossary
book/bibliography
```
"""


@pytest.fixture(scope="module")
def mini_site(tmp_path_factory):
    """A one-chapter book built with the real theme and extensions (no execution)."""
    from sphinx.application import Sphinx

    src = tmp_path_factory.mktemp("mini")
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    (src / "conf.py").write_text(CONF.format(
        ext=str(ROOT / "book" / "_ext"), url=config["repository"]["url"],
        branch=config["repository"]["branch"], launch=config["launch_buttons"]))
    (src / "index.md").write_text(INDEX)
    shutil.copy(ROOT / "references.bib", src)
    shutil.copy(ROOT / "_config.yml", src)
    (src / "_toc.yml").write_text(yaml.safe_dump({
        "format": "jb-book", "root": "index",
        "chapters": [{"file": "book/01_fixture"}, {"file": "book/instructors"}]}))
    book = src / "book"
    book.mkdir()
    shutil.copy(FIXTURE, book / "01_fixture.ipynb")
    shutil.copy(ROOT / "book" / "notation.md", book)
    shutil.copy(ROOT / "book" / "glossary.md", book)
    PC.write(PC.build(book / "01_fixture.ipynb", "readable", src), book / "notebooks" /
             "01_fixture.ipynb")   # committed in a real repository
    shutil.copy(ROOT / "book" / "bibliography.md", book)
    (book / "instructors.md").write_text(
        "# Instructors\n\n```{course-map}\n```\n\n```{course-times}\n```\n\n"
        "```{course-downloads}\n```\n")
    (book / "api.md").write_text(
        "# API\n\n```{toykv-toplevel}\n```\n\n```{eval-rst}\n.. automodule:: toykv.sizing\n"
        "   :members:\n\n.. automodule:: toykv.config\n   :members:\n```\n\nLinks: {py:func}`toykv.kv_cache_bytes`, "
        "{py:func}`toykv.sizing.kv_share`, {py:func}`toykv.no_such_function`.\n")
    out = src / "_build" / "html"
    warnings = io.StringIO()
    app = Sphinx(str(src), str(src), str(out), str(src / "_build" / "doctrees"), "html",
                 status=None, warning=warnings, freshenv=True)
    app.build()
    return src, out, warnings.getvalue()


def _hrefs(page: Path) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]+)"', page.read_text())]


def test_launch_and_download_buttons_open_the_readable_copy(mini_site):
    src, out, _ = mini_site
    url, branch = CP._repository(ROOT)
    org_repo = url.removeprefix("https://github.com/")
    links = _hrefs(out / "book" / "01_fixture.html")
    binder = [h for h in links if "mybinder.org" in h]
    colab = [h for h in links if "colab.research.google.com" in h]
    assert binder == [f"https://mybinder.org/v2/gh/{org_repo}/{branch}"
                      "?urlpath=lab/tree/book/notebooks/01_fixture.ipynb"]
    assert colab == [f"https://colab.research.google.com/github/{org_repo}/blob/{branch}"
                     "/book/notebooks/01_fixture.ipynb"]
    download = [h for h in links if h.endswith(".ipynb") and not h.startswith("http")]
    assert download == ["../notebooks/01_fixture.ipynb"]
    served = (out / "book" / download[0]).resolve()
    assert served.is_file()
    copy = nbformat.read(served, as_version=4)
    assert copy.metadata[PC.META_KEY]["variant"] == "readable"
    assert not re.search(r"\{glue:text\}|\{cite\}", nbformat.writes(copy))
    # the repository path the launch buttons name is where the copies are committed
    assert PC.COPIES_DIR == "book/notebooks" and (ROOT / PC.COPIES_DIR).is_dir()


def test_the_site_offers_student_and_instructor_notebooks(mini_site):
    src, out, _ = mini_site
    site = out / CP.SITE_DIR
    with zipfile.ZipFile(site / CP.STUDENT_ZIP) as z:
        names = sorted(z.namelist())
        student = nbformat.reads(z.read("kv-cache-course-student/01_fixture.ipynb").decode(),
                                 as_version=4)
    assert names == ["kv-cache-course-student/01_fixture.ipynb",
                     "kv-cache-course-student/README.md"]
    assert student.metadata[PC.META_KEY]["variant"] == "student"
    with zipfile.ZipFile(site / CP.INSTRUCTOR_ZIP) as z:
        names = sorted(z.namelist())
        # the same course folder as `plain_copies.py --instructor DIR` writes
        for name, text in PC.course_files().items():
            assert z.read(f"kv-cache-course-instructor/{name}").decode() == text
        assert "c.ClearSolutions.code_stub" in PC.NBGRADER_CONFIG
    assert "kv-cache-course-instructor/source/01_fixture/01_fixture.ipynb" in names
    page = out / "book" / "instructors.html"
    links = _hrefs(page)
    for target in ["../notebooks/01_fixture.ipynb", "../notebooks/student/01_fixture.ipynb",
                   "../notebooks/instructor/01_fixture.ipynb",
                   f"../notebooks/{CP.STUDENT_ZIP}", f"../notebooks/{CP.INSTRUCTOR_ZIP}"]:
        assert target in links and (page.parent / target).resolve().is_file()


def test_the_instructors_page_shows_map_goals_and_times(mini_site):
    _, out, _ = mini_site
    text = re.sub(r"<[^>]+>", "", (out / "book" / "instructors.html").read_text())
    text = re.sub(r"\s+", " ", html.unescape(text))
    assert "1. A fixture chapter. Builds on: Python and numpy only." in text
    assert "Read a glued number, 512 values, as a number." in text
    assert re.search(r"Follow a citation \[[\w+]+\] to the reference list\.", text)  # live
    assert "not run" in text          # execution is off here; a real build shows seconds


def test_toykv_references_resolve_to_their_documented_name(mini_site):
    _, out, warnings = mini_site
    page = (out / "book" / "api.html").read_text()
    assert 'href="#toykv.sizing.kv_cache_bytes"' in page     # toykv.kv_cache_bytes
    assert 'href="#toykv.sizing.kv_share"' in page
    assert "toykv.no_such_function is not in the API reference" in warnings
    unexpected = [line for line in warnings.splitlines()
                  if "WARNING" in line and "no_such_function" not in line]
    assert not unexpected, unexpected


def glossary_terms() -> set[str]:
    """The terms book/glossary.md defines (lower case: Sphinx matches them so)."""
    text = (ROOT / "book" / "glossary.md").read_text()
    block = re.search(r"```\{glossary\}\n(.*?)^```", text, re.M | re.S)[1]
    return {line.strip().lower() for line in block.split("\n")
            if line.strip() and not line.startswith((" ", "\t", ":"))}


def test_glossary_terms_are_found():
    assert {"prefill", "kv head", "gqa", "ridge point", "kv share"} <= glossary_terms()


@pytest.mark.parametrize("path", PC.chapters(ROOT), ids=lambda p: p.name)
def test_chapter_terms_are_in_the_glossary(path):
    """What the -W build would stop on ('term not in glossary'), found without a build."""
    nb = nbformat.read(path, as_version=4)
    used = {re.sub(r"^.*<(.+)>$", r"\1", content, flags=re.S).strip().lower()
            for cell in nb.cells if cell.cell_type == "markdown"
            for content in re.findall(r"\{term\}`([^`]+)`", cell.source)}
    missing = sorted(used - glossary_terms())
    assert not missing, f"{path.name}: {{term}} targets not in book/glossary.md: {missing}"


# -- accessibility: figure_alt and a11y_theme on the same pages ----------------------------
def test_a_figure_shown_with_plots_show_gets_its_alt_text_on_the_page(mini_site):
    """The fixture's figure (toykv.plots.show): its alt text reaches the page's <img>, and
    the plain copy Binder and Colab open keeps it in the output's metadata."""
    src, out, _ = mini_site
    imgs = re.findall(r'<img[^>]*src="[^"]*_images/[^"]*"[^>]*>', (out / "book" /
                                                                   "01_fixture.html").read_text())
    alts = [html.unescape(re.search(r'alt="([^"]*)"', tag).group(1)) for tag in imgs]
    assert alts == ["Line plot of the values the toy's cache holds against position: a "
                    "straight line rising by 512 per token, to 4,096 at position 8."]
    copy = nbformat.read(src / "book" / "notebooks" / "01_fixture.ipynb", as_version=4)
    shown = [o.metadata["image/png"]["alt"] for c in copy.cells for o in c.get("outputs", [])
             if "image/png" in o.get("data", {})]
    assert shown == alts


def test_the_theme_fixes_reach_the_pages(mini_site):
    _, out, _ = mini_site
    page = (out / "book" / "01_fixture.html").read_text()
    search = re.findall(r'<button class="btn search-button-field[^>]*>', page)
    assert search and all("aria-label" not in b for b in search)        # named by its text
    switch = re.search(r'<button[^>]*theme-switch-button.*?</button>', page, re.S).group(0)
    assert 'aria-label="Color mode"' in switch and "title=" not in switch.split(">", 1)[1]
    assert "a11y.css" in page and (out / "_static" / "a11y.css").is_file()
    assert '<summary aria-label=' not in page and "<summary>" in page   # hide-input cell
    bibliography = (out / "book" / "bibliography.html").read_text()
    assert 'role="list"' in bibliography and "doc-biblioentry" not in bibliography
    assert bibliography.count('role="listitem"') >= 2
