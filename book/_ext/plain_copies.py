#!/usr/bin/env python3
"""Plain Jupyter copies of the chapters: readable, student and instructor notebooks.

A chapter (book/NN_name.ipynb) is written in MyST for the book: glued numbers, {cite},
{term}, {doc} and {py:*} roles, admonitions, sphinx-exercise fences. Outside the book
(JupyterLab, Colab, a download) that syntax shows raw. This module turns an executed
chapter into three plain notebooks, with the glue values stored in its outputs filled in:

- readable: the whole chapter; citations as [Author, year] with a reference list at the
  end, terms and pages as plain words, admonitions as block quotes, exercises and their
  solutions under headings (the solution heading folded in JupyterLab, like the book's
  dropdown). Committed under book/notebooks/; the launch and download buttons open it.
- student: the same without the solutions; each exercise gets a place to work and, for a
  checked exercise, `answer = None  # your answer` and the check call.
- instructor: the same with the solutions, marked for nbgrader (cell metadata, BEGIN/END
  SOLUTION markers, the self-check as an autograded test cell that never stops a run).

All three need no book tools: the chapters' `from myst_nb import glue` becomes toykv.glue
(which stores nothing: the text has the values filled in), and the install cell is folded.
The MyST it accepts is exactly the list in the README's Contributing section; anything else
raises ConversionError naming the chapter and the cell, so a chapter cannot reach a reader
half converted.

Usage, from the repository root (python .ci/execute_notebooks runs the first for you):
    python book/_ext/plain_copies.py                      # refresh book/notebooks/
    python book/_ext/plain_copies.py --student DIR        # student notebooks into DIR
    python book/_ext/plain_copies.py --instructor DIR     # an nbgrader course folder in DIR
"""
from __future__ import annotations

import argparse
import copy
import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
COPIES_DIR = "book/notebooks"          # readable copies, relative to the repository root
VARIANTS = ("readable", "student", "instructor")
META_KEY = "toykv_course"              # our notebook and cell metadata
STUDENT_STUB = "answer = None  # your answer\n{check}(answer)"
WORK_STUB = "# your code here"
WRITE_STUB = "*Write your answer here (double-click to edit).*"
MANUAL_POINTS = 0                      # a cell the instructor grades: feedback, no points
TEST_POINTS = 1                        # an autograded self-check
COURSE_ID = "kv-cache-course"
# The instructor course folder (--instructor DIR, and the instructor zip) holds these files
# besides source/<chapter>/<chapter>.ipynb.
NBGRADER_CONFIG = f"""\
# nbgrader settings for the KV-cache course's instructor notebooks (source/<chapter>/).
# Run nbgrader in this folder; the instructors' page of the book gives a whole course run.
import os

c = get_config()  # noqa: F821 (nbgrader provides it)
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))   # this folder
c.CourseDirectory.course_id = "{COURSE_ID}"
# Where release_assignment, fetch, submit and collect meet; students set the same
# (nbgrader's default is /srv/nbgrader/exchange).
# c.Exchange.root = "/srv/nbgrader/exchange"
# A solution becomes this stub rather than nbgrader's `raise NotImplementedError()`, and a
# self-check cell never raises (it writes to stderr, which nbgrader scores zero), so a
# student's Run All goes top to bottom before anything is answered.
c.ClearSolutions.code_stub = {{"python": "# your code here"}}
c.ClearSolutions.text_stub = "Your answer here."
# Seconds a cell may run during autograde (nbgrader's default, 30, is short for chapter 9
# on a busy machine).
c.Execute.timeout = 600
"""
INSTRUCTOR_README = f"""\
# The KV Cache, Built and Measured: instructor notebooks (an nbgrader course folder)

source/<chapter>/<chapter>.ipynb are the chapters with their solutions, marked for nbgrader:
solution code between `### BEGIN SOLUTION` and `### END SOLUTION`; each self-check an
autograded test cell worth {TEST_POINTS} point; written answers, and the code of exercises
without a self-check, cells you grade by hand worth {MANUAL_POINTS} points (for feedback:
grades.csv counts the self-checks only, so it reads right before you grade anything).
In this folder, with nbgrader installed (pip install nbgrader==0.9.6):

    nbgrader generate_assignment 04_cache_size   # release/04_cache_size/: the student version
    nbgrader release_assignment 04_cache_size    # students: nbgrader fetch_assignment, submit
    nbgrader collect 04_cache_size               # submitted/<student>/04_cache_size/
    nbgrader autograde 04_cache_size
    nbgrader export                              # grades.csv

nbgrader names a student by the user name of the account that ran `nbgrader submit` (on
JupyterHub, the hub user). Without an exchange, put each submission in
submitted/<student id>/<chapter>/ yourself, then autograde and export. The book's page
"For instructors" says more. Change points in the cells' nbgrader metadata (Jupyter's
Create Assignment toolbar). nbgrader_config.py sets the course id, the solution stubs and
the autograde timeout; the exchange is nbgrader's default, /srv/nbgrader/exchange, unless you
uncomment its line there and give another folder.
Licence: code MIT, text and figures CC BY 4.0 (see the repository's LICENSE and LICENSE-text).
"""
TEST_CELL = """\
# Autograded: full points when the check says "Right.", none otherwise.
import sys
if not {check}(answer):
    print("Autograder: no points for exercise {number} yet.", file=sys.stderr)"""
# In a plain copy the glue calls stay (the code reads as in the book), served by toykv.
GLUE_IMPORT = re.compile(r"^(?P<indent>[ \t]*)from myst_nb import glue[ \t]*(?:#.*)?$", re.M)
PLAIN_GLUE_IMPORT = "from toykv.glue import glue  # the text shows the glued values"
INSTALL_TAG = "colab-install"          # the first code cell (.ci/execute_notebooks)
# What that cell installs where toykv is missing (Colab): toykv and what the notebooks import.
INSTALL_REQUIREMENT = "toykv[notebooks] @ git+{url}@{branch}"
CHECK_LINE = re.compile(r"^assert\s+(?P<check>toykv\.check\.\w+)\(answer\)\s*(#.*)?$")

ROLE = re.compile(r"\{(?P<name>[A-Za-z][\w:.+-]*)\}`(?P<content>[^`]+)`")
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
DIRECTIVE = re.compile(r"^\{(?P<name>[\w-]+)\}\s*(?P<arg>.*)$")
OPTION = re.compile(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$")
TITLED = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", re.S)
ADMONITIONS = {"note": "Note", "tip": "Tip", "warning": "Warning", "important": "Important",
               "hint": "Hint", "caution": "Caution", "attention": "Attention",
               "danger": "Danger", "error": "Error", "seealso": "See also"}
GATES = ("exercise-start", "exercise-end", "solution-start", "solution-end")
ALLOWED = "(the README's Contributing section lists the MyST they know)"


class ConversionError(ValueError):
    """A chapter uses MyST the converter does not know, or uses it wrongly."""


# -- what a conversion needs besides the notebook ---------------------------------------
@dataclass
class Context:
    """Shared inputs: the bibliography and the page titles {doc} refers to."""

    root: Path = ROOT
    _bib: dict | None = None
    _titles: dict = field(default_factory=dict)

    @property
    def bibliography(self) -> dict:
        if self._bib is None:
            from pybtex.database import parse_file

            self._bib = dict(parse_file(str(self.root / "references.bib")).entries)
        return self._bib

    def title(self, docname: str) -> str:
        """The first '# ' heading of book/<docname>.md or .ipynb (what {doc} shows)."""
        if docname not in self._titles:
            self._titles[docname] = page_title(self.root, docname)
        return self._titles[docname]


def page_title(root: Path, docname: str) -> str:
    for suffix in (".ipynb", ".md"):
        path = root / f"{docname}{suffix}"
        if not path.is_file():
            continue
        if suffix == ".ipynb":
            nb = nbformat.read(path, as_version=4)
            text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
        else:
            text = path.read_text()
        match = re.search(r"^#\s+(.+?)\s*$", text, re.M)
        if match:
            return match[1]
    raise ConversionError(f"{{doc}} target {docname!r}: no page {docname}.md or .ipynb "
                          "with a '# Title' line")


@functools.lru_cache(maxsize=None)
def _latex_text(value: str) -> str:
    """BibTeX's LaTeX (braces, accents) as plain text."""
    from pybtex.backends.plaintext import Backend
    from pybtex.richtext import Text

    return Text.from_latex(value).render(Backend())


def _last_names(entry) -> list[str]:
    return [_latex_text(" ".join(p.prelast_names + p.last_names))
            for p in entry.persons.get("author", [])]


def cite_label(entry) -> str:
    """'Vaswani et al., 2017'; a short title when the source names no author."""
    names = _last_names(entry)
    if not names:
        who = _latex_text(entry.fields.get("title", entry.key)).split(":")[0]
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    year = entry.fields.get("year")
    return f"{who}, {year}" if year else who


def reference_line(entry) -> str:
    """One markdown list item of the reference list: label, authors, title, venue, link."""
    fields = entry.fields
    names = _last_names(entry)
    parts = [f"[{cite_label(entry)}]"]
    if names:
        parts.append(", ".join(names[:3]) + (", et al." if len(names) > 3 else "."))
    parts.append(f"*{_latex_text(fields.get('title', entry.key))}*.")
    venue = fields.get("booktitle") or fields.get("journal") or fields.get("howpublished")
    if venue:
        parts.append(_latex_text(venue) + ".")
    if fields.get("url"):
        parts.append(f"<{fields['url']}>")
    elif fields.get("eprint"):
        parts.append(f"[arXiv:{fields['eprint']}](https://arxiv.org/abs/{fields['eprint']})")
    return "- " + " ".join(parts)


# -- the glue values a chapter stored ---------------------------------------------------
def glue_values(nb) -> dict[str, tuple[str, int]]:
    """{key: (text/plain value, index of the code cell that glued it)}, as myst-nb reads them."""
    found = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            scrap = output.get("metadata", {}).get("scrapbook")
            if not scrap:
                continue
            prefix = scrap.get("mime_prefix", "")
            data = {k[len(prefix):]: v for k, v in output.get("data", {}).items()}
            if "text/plain" in data:
                found[scrap["name"]] = (data["text/plain"], index)
    return found


def format_glue(text: str, fmt: str) -> str:
    """The text myst-nb's {glue:text} role shows for a stored value and a format spec."""
    from myst_nb.core.variables import format_plain_text

    return format_plain_text(text, fmt)


# -- MyST markdown to plain markdown ----------------------------------------------------
@dataclass
class Cell:
    """One markdown cell being converted: where it is, and what it cites and glues."""

    path: str
    index: int
    glue: dict
    ctx: Context
    cited: list = field(default_factory=list)
    glued: list = field(default_factory=list)

    def fail(self, message: str) -> ConversionError:
        return ConversionError(f"{self.path}, cell {self.index}: {message}")


def split_blocks(text: str, cell: Cell) -> list[tuple]:
    """Split markdown into ('text', str), ('code', str) and ('directive', name, arg,
    options, body) blocks. Fences close on a line of the same character, at least as long."""
    lines = text.split("\n")
    blocks, prose, i = [], [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            prose.append(lines[i])
            i += 1
            continue
        if prose:
            blocks.append(("text", "\n".join(prose)))
            prose = []
        fence = match["fence"]
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        end = i + 1
        while end < len(lines) and not close.match(lines[end]):
            end += 1
        if end == len(lines):
            raise cell.fail(f"the fence {lines[i].strip()!r} is never closed")
        body = lines[i + 1:end]
        directive = DIRECTIVE.match(match["info"].strip())
        if directive:
            options = {}
            while body and OPTION.match(body[0]):
                option = OPTION.match(body[0])
                options[option["key"]] = option["value"].strip()
                body = body[1:]
            blocks.append(("directive", directive["name"], directive["arg"].strip(), options,
                           "\n".join(body), "\n".join(lines[i:end + 1])))
        else:
            blocks.append(("code", "\n".join(lines[i:end + 1])))
        i = end + 1
    if prose:
        blocks.append(("text", "\n".join(prose)))
    return blocks


def _titled(content: str) -> tuple[str, str]:
    """'text <target>' -> (text, target); 'target' -> ('', target)."""
    match = TITLED.match(content.strip())
    return (match["text"].strip(), match["target"].strip()) if match else ("", content.strip())


def convert_role(name: str, content: str, cell: Cell) -> str:
    if name == "glue:text":
        key, _, fmt = content.rpartition(":") if ":" in content else (content, "", "")
        if "::" in key:
            raise cell.fail(f"{{glue:text}}`{content}` glues from another page: not supported")
        if key not in cell.glue:
            raise cell.fail(f"{{glue:text}}`{content}`: no stored glue value {key!r} "
                            "(run python .ci/execute_notebooks on the chapter)")
        cell.glued.append(key)
        return format_glue(cell.glue[key][0], fmt)
    if name in ("cite", "cite:p"):
        labels = []
        for key in (k.strip() for k in content.split(",")):
            if key not in cell.ctx.bibliography:
                raise cell.fail(f"{{cite}} key {key!r} is not in references.bib")
            if key not in cell.cited:
                cell.cited.append(key)
            labels.append(cite_label(cell.ctx.bibliography[key]))
        return "[" + "; ".join(labels) + "]"
    if name == "term":
        text, target = _titled(content)
        return text or target
    if name == "doc":
        text, target = _titled(content)
        docname = target.lstrip("/") if target.startswith("/") else f"book/{target}"
        return f"*{text or cell.ctx.title(docname)}*"
    if name.startswith("py:"):
        text, target = _titled(content)
        if not text:
            text = target.lstrip("~").split(".")[-1] if target.startswith("~") else target
            if name in ("py:func", "py:meth"):
                text += "()"
        return f"`{text}`"
    raise cell.fail(f"the role {{{name}}} is not one the plain notebooks know {ALLOWED}")


def convert_prose(text: str, cell: Cell) -> str:
    for line in text.split("\n"):
        if re.match(r"^%", line):
            raise cell.fail(f"the line {line!r} starts with '%', a MyST comment the book "
                            "drops: rewrap the paragraph so no line starts with '%'")
        if re.match(r"^\(\S+\)=\s*$", line):
            raise cell.fail(f"the target {line!r} is not MyST the plain notebooks know "
                            f"{ALLOWED}")
    return ROLE.sub(lambda m: convert_role(m["name"], m["content"], cell), text)


def convert_markdown(text: str, cell: Cell) -> str:
    """A markdown cell (outside the exercise gates) in plain markdown."""
    out = []
    for block in split_blocks(text, cell):
        if block[0] == "text":
            out.append(convert_prose(block[1], cell))
        elif block[0] == "code":
            out.append(block[1])
        else:
            _, name, arg, options, body, _ = block
            if name == "admonition":
                title = arg or "Note"
            elif name in ADMONITIONS:
                title = ADMONITIONS[name] + (f": {arg}" if arg else "")
            elif name in GATES:
                raise cell.fail(f"{{{name}}} must be alone in its markdown cell")
            else:
                raise cell.fail(f"the directive {{{name}}} is not one the plain notebooks "
                                f"know {ALLOWED}")
            inner = convert_markdown(body, cell)
            lines = [f"**{convert_prose(title, cell)}**", ""] + inner.strip("\n").split("\n")
            out.append("\n".join(f"> {line}".rstrip() for line in lines))
    return "\n".join(out)


def gate(cell) -> tuple[str, str, dict] | None:
    """(name, argument, options) when a markdown cell is one exercise/solution fence."""
    if cell.cell_type != "markdown":
        return None
    stripped = cell.source.strip()
    match = FENCE.match(stripped.split("\n")[0]) if stripped else None
    if not match:
        return None
    directive = DIRECTIVE.match(match["info"].strip())
    if not directive or directive["name"] not in GATES:
        return None
    blocks = split_blocks(stripped, Cell("", 0, {}, Context()))
    if len(blocks) != 1 or blocks[0][0] != "directive" or blocks[0][4].strip():
        return None  # text around or inside the fence: convert_markdown reports it
    return blocks[0][1], blocks[0][2], blocks[0][3]


def expand_cells(nb, path: str) -> list:
    """The notebook's cells, with a markdown cell that holds an exercise/solution fence
    among other text split into pieces (text before, the fence, text after). Each piece
    keeps its cell's metadata; ids after the first get a suffix."""
    units = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown" or not any(f"{{{name}}}" in cell.source
                                                   for name in GATES):
            units.append(cell)
            continue
        pieces, text = [], []
        for block in split_blocks(cell.source, Cell(path, index, {}, Context())):
            if block[0] == "directive" and block[1] in GATES:
                if "\n".join(text).strip():
                    pieces.append("\n".join(text).strip("\n"))
                pieces.append(block[-1])
                text = []
            else:
                text.append(block[-1])
        if "\n".join(text).strip():
            pieces.append("\n".join(text).strip("\n"))
        for k, piece in enumerate(pieces):
            unit = copy.deepcopy(cell)
            unit.source = piece
            unit.id = cell.id if k == 0 else f"{cell.id}-{k}"
            units.append(unit)
    return units


# -- one chapter ------------------------------------------------------------------------
def chapter_number(path: Path) -> int | None:
    match = re.match(r"^(\d+)_", path.name)
    return int(match[1]) if match else None


@dataclass
class Exercise:
    label: str
    number: str                     # "4.2"
    title: str
    check: str | None = None        # toykv.check.ch4_ex2 when the solution ends with it
    solution_cells: list = field(default_factory=list)   # indices into the source notebook
    code_cells: set = field(default_factory=set)          # those of them that are code


def parse_chapter(nb, path: str) -> tuple[list, dict]:
    """Walk the cells: returns [(kind, index, exercise label or None)] and {label: Exercise}.

    kind: 'cell' (ordinary), 'exercise' (the exercise-start fence), 'prompt', 'solution'
    (the solution-start fence), 'solution-cell', 'drop' (the -end fences)."""
    number = chapter_number(Path(path))
    plan, exercises, state, current = [], {}, "normal", None
    for index, cell in enumerate(nb.cells):
        fence = gate(cell)
        name = fence[0] if fence else None
        where = f"{path}, cell {index}"
        if name == "exercise-start":
            if state != "normal":
                raise ConversionError(f"{where}: exercise-start inside {state}")
            label = fence[2].get("label")
            if not label:
                raise ConversionError(f"{where}: exercise-start needs a :label:")
            ordinal = len(exercises) + 1
            shown = f"{number}.{ordinal}" if number is not None else str(ordinal)
            exercises[label] = current = Exercise(label, shown, fence[1])
            plan.append(("exercise", index, label))
            state = "exercise"
        elif name == "exercise-end":
            if state != "exercise":
                raise ConversionError(f"{where}: exercise-end without exercise-start")
            plan.append(("drop", index, current.label))
            state = "normal"
        elif name == "solution-start":
            label = fence[1]
            if state != "normal" or label not in exercises:
                raise ConversionError(f"{where}: solution-start {label!r} must follow its "
                                      "exercise's exercise-end")
            current = exercises[label]
            plan.append(("solution", index, label))
            state = "solution"
        elif name == "solution-end":
            if state != "solution":
                raise ConversionError(f"{where}: solution-end without solution-start")
            code = [i for i in current.solution_cells if nb.cells[i].cell_type == "code"]
            if code:
                last = nb.cells[code[-1]].source.rstrip().split("\n")[-1]
                check = CHECK_LINE.match(last.strip())
                current.check = check["check"] if check else None
            plan.append(("drop", index, current.label))
            state = "normal"
        elif state == "exercise":
            plan.append(("prompt", index, current.label))
        elif state == "solution":
            current.solution_cells.append(index)
            if cell.cell_type == "code":
                current.code_cells.add(index)
            plan.append(("solution-cell", index, current.label))
        else:
            plan.append(("cell", index, None))
    if state != "normal":
        raise ConversionError(f"{path}: the notebook ends inside an {state}")
    return plan, exercises


def _markdown(source: str, cell_id: str, **metadata) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_markdown_cell(source, metadata=metadata)
    cell.id = cell_id
    return cell


def _code(source: str, cell_id: str, **metadata) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, metadata=metadata)
    cell.id = cell_id
    return cell


def _nbgrader(grade_id: str, solution=False, grade=False, points=0, locked=False) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return meta


def convert(nb, path: str, variant: str = "readable", ctx: Context | None = None):
    """The plain notebook of one executed chapter: variant 'readable', 'student' or
    'instructor'. path (relative to the repository root) names it in errors and metadata."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    ctx = ctx or Context()
    nb = nbformat.from_dict({**nb, "cells": expand_cells(nb, path)})
    glue = glue_values(nb)
    plan, exercises = parse_chapter(nb, path)
    solution_glue = {key for key, (_, i) in glue.items()
                     if any(i in ex.solution_cells for ex in exercises.values())}
    number = chapter_number(Path(path))
    out = nbformat.v4.new_notebook(metadata=copy.deepcopy(nb.metadata))
    out.nbformat, out.nbformat_minor = 4, max(nb.nbformat_minor, 5)
    cited: list[str] = []
    titled = False

    def markdown_of(index: int, in_solution: bool) -> str:
        cell = Cell(path, index, glue, ctx, cited)
        text = convert_markdown(nb.cells[index].source, cell)
        leaked = sorted(set(cell.glued) & solution_glue)
        if leaked and not in_solution:
            raise cell.fail(f"glues {leaked}, computed in an exercise's solution: the student "
                            "copy would give the answer away (and could not compute it)")
        return text

    for kind, index, label in plan:
        source = nb.cells[index]
        exercise = exercises.get(label)
        if kind == "drop":
            continue
        if kind == "exercise":
            title = f" ({convert_prose(exercise.title, Cell(path, index, glue, ctx, cited))})" \
                if exercise.title else ""
            out.cells.append(_markdown(f"### Exercise {exercise.number}{title}", source.id))
            continue
        if kind == "solution":
            if variant == "readable":
                out.cells.append(_markdown(f"#### Solution to exercise {exercise.number}",
                                           source.id, **{"jp-MarkdownHeadingCollapsed": True}))
            elif variant == "instructor":
                out.cells.append(_markdown("#### Answer", source.id))
            else:
                out.cells.extend(student_work(exercise, source.id))
            continue
        if kind == "solution-cell" and variant == "student":
            continue
        cell = copy.deepcopy(source)
        if cell.cell_type == "markdown":
            cell.source = markdown_of(index, kind == "solution-cell")
            if not titled and re.match(r"^#\s", cell.source):
                titled = True
                if number is not None:
                    cell.source = re.sub(r"^#\s+", f"# {number}. ", cell.source, count=1)
        elif cell.cell_type == "code":
            plain_code(cell, f"{path}, cell {index}")
        if kind == "solution-cell" and variant == "instructor":
            out.cells.extend(instructor_cells(cell, exercise, index))
        else:
            out.cells.append(cell)
    if cited:
        lines = ["## References", ""] + [reference_line(ctx.bibliography[k]) for k in cited]
        out.cells.append(_markdown("\n".join(lines), "references"))
    out.metadata[META_KEY] = {
        "variant": variant, "source": path,
        "generated_by": "python .ci/execute_notebooks (book/_ext/plain_copies.py); "
                        f"edit {path}, not this copy"}
    nbformat.validate(out)
    return out


def plain_code(cell, where: str) -> None:
    """A code cell as the plain notebooks run it: glue from toykv.glue, and no glue
    outputs (that glue stores nothing); input folded where the book hides it, and the
    install cell folded (Jupyter) or shown as its #@title line (Colab)."""
    cell.source = GLUE_IMPORT.sub(lambda m: m["indent"] + PLAIN_GLUE_IMPORT, cell.source)
    if re.search(r"\bmyst_nb\b", cell.source):
        raise ConversionError(f"{where}: uses myst_nb beyond `from myst_nb import glue`, "
                              "which is all the plain notebooks replace (with toykv.glue)")
    cell.outputs = [out for out in cell.get("outputs", [])
                    if not out.get("metadata", {}).get("scrapbook", {}).get("mime_prefix")]
    for out in cell.outputs:
        out.get("metadata", {}).pop("scrapbook", None)
    tags = set(cell.metadata.get("tags", []))
    if {"hide-input", "remove-input", INSTALL_TAG} & tags:
        cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    if INSTALL_TAG in tags:
        cell.metadata["cellView"] = "form"


def student_work(exercise: Exercise, cell_id: str) -> list:
    """The place to work that replaces a solution in the student copy: a code cell (with
    `answer = None` and the check call for a checked exercise), or a markdown cell to
    write in when the solution is words only."""
    meta = {META_KEY: {"exercise": exercise.label}}
    if exercise.check:
        text = ("#### Your answer\n\nWork in the cell below (add cells as you need), set "
                f"`answer` and run the check: `{exercise.check}(answer)` says whether it is "
                "right, or gives a hint, without giving the answer away.")
        work = _code(STUDENT_STUB.format(check=exercise.check), f"{exercise.label}-work", **meta)
    elif exercise.code_cells:
        text = "#### Your answer\n\nWork in the cell below (add cells as you need)."
        work = _code(WORK_STUB, f"{exercise.label}-work", **meta)
    else:
        text = "#### Your answer"
        work = _markdown(WRITE_STUB, f"{exercise.label}-work", **meta)
    return [_markdown(text, cell_id), work]


def instructor_cells(cell, exercise: Exercise, index: int) -> list:
    """One solution cell marked for nbgrader. Markdown: an answer graded by hand. Code: an
    answer between BEGIN/END SOLUTION markers; a checked exercise's last code cell is split
    into the answer (starting from `answer = None`, as students do) and an autograded test
    cell with the self-check (TEST_CELL: it never raises, so a student's Run All goes on).
    An unchecked exercise with no markdown answer has its last code cell graded by hand.
    Points: TEST_POINTS per test, MANUAL_POINTS per cell graded by hand."""
    grade_id = f"{exercise.label}-{cell.id}"
    if cell.cell_type == "markdown":
        cell.metadata["nbgrader"] = _nbgrader(grade_id, solution=True, grade=True,
                                              points=MANUAL_POINTS)
        return [cell]
    code = [i for i in exercise.solution_cells if i in exercise.code_cells]
    last = bool(code) and index == code[-1]
    lines = cell.source.rstrip().split("\n")
    checked = bool(exercise.check) and last
    body = lines[:-1] if checked else lines
    prefix = ["answer = None  # your answer"] if checked else []
    cell.source = "\n".join(prefix + ["### BEGIN SOLUTION"] + body + ["### END SOLUTION"])
    has_markdown = any(i not in exercise.code_cells for i in exercise.solution_cells)
    manual = last and not exercise.check and not has_markdown
    cell.metadata["nbgrader"] = _nbgrader(grade_id, solution=True, grade=manual,
                                          points=MANUAL_POINTS)
    if not checked:
        return [cell]
    source = TEST_CELL.format(check=exercise.check, number=exercise.number)
    test = _code(source, f"{exercise.label}-check",
                 nbgrader=_nbgrader(f"{exercise.label}-check", grade=True, points=TEST_POINTS,
                                    locked=True))
    return [cell, test]


# -- files ------------------------------------------------------------------------------
def chapters(root: Path = ROOT) -> list[Path]:
    """The chapter notebooks under book/ (not the copies, nor hidden or _ folders)."""
    book = root / "book"
    copies = root / COPIES_DIR
    return sorted(p for p in book.rglob("*.ipynb")
                  if copies not in p.parents
                  and not any(part.startswith((".", "_")) for part in p.relative_to(root).parts))


def toc_files(root: Path = ROOT) -> list[str]:
    """Every page _toc.yml names (the root and all nested file entries), in toc order,
    without extension."""
    import yaml

    toc = yaml.safe_load((root / "_toc.yml").read_text())
    found = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(node["file"])
            for key, value in node.items():
                if key != "root":
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({k: v for k, v in toc.items() if k != "root"})
    return found


def readable_path(chapter: Path, root: Path = ROOT) -> Path:
    return root / COPIES_DIR / chapter.name


def build(chapter: Path, variant: str, root: Path = ROOT, ctx: Context | None = None):
    nb = nbformat.read(chapter, as_version=4)
    return convert(nb, chapter.relative_to(root).as_posix(), variant, ctx or Context(root))


def write(nb, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def course_files() -> dict[str, str]:
    """The files of an instructor course folder besides source/ (path: text)."""
    return {"nbgrader_config.py": NBGRADER_CONFIG, "README.md": INSTRUCTOR_README}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="chapters to convert (default: every chapter under book/)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--student", type=Path, metavar="DIR",
                       help="write student copies into DIR instead")
    where.add_argument("--instructor", type=Path, metavar="DIR",
                       help="write an nbgrader course folder into DIR instead")
    args = parser.parse_args(argv)
    paths = [p.resolve() for p in args.notebooks] or chapters()
    ctx = Context()
    for path in paths:
        if args.student:
            target = args.student / path.name
            write(build(path, "student", ctx=ctx), target)
        elif args.instructor:
            target = args.instructor / "source" / path.stem / path.name
            write(build(path, "instructor", ctx=ctx), target)
        else:
            target = readable_path(path)
            write(build(path, "readable", ctx=ctx), target)
        print(f"wrote {target}")
    if args.instructor:
        args.instructor.mkdir(parents=True, exist_ok=True)
        for name, text in course_files().items():
            (args.instructor / name).write_text(text)
            print(f"wrote {args.instructor / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
