"""The course around the chapters: plain notebooks, launch buttons, instructors' page, API.

- Launch and download buttons. sphinx-book-theme points Binder, Colab and the download
  button at the chapter's source (book/NN.ipynb), which shows raw MyST outside the book.
  This extension points them at the readable copy instead: book/notebooks/NN.ipynb in the
  repository (committed, see plain_copies.py) and notebooks/NN.ipynb in the built site.
- Downloads. After an HTML build, notebooks/ in the site holds every chapter's readable,
  student and instructor notebook, and two zips: the student notebooks, and the
  instructor notebooks as an nbgrader course folder.
- Directives for book/instructors.md: `course-map` (chapters, what they build on, their
  learning goals, read from the notebooks), `course-times` (reading estimate from word
  counts, run time measured by this build's execution), `course-downloads`.
- API reference: `toykv-toplevel` (the names toykv exports, linked to their documentation)
  and `toykv-other-modules` (automodule for every toykv module api.md does not document
  by name). A {py:...} reference to toykv.name resolves to wherever that object is
  documented (toykv.kv_cache_bytes is toykv.sizing.kv_cache_bytes); a reference to a
  toykv object the reference does not document is a build warning.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import posixpath
import re
import zipfile
from pathlib import Path

import yaml
from docutils import nodes
from docutils.statemachine import StringList
from sphinx.addnodes import pending_xref
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

import plain_copies

LOGGER = logging.getLogger(__name__)
SITE_DIR = "notebooks"                  # in the built site: readable copies and the zips
STUDENT_ZIP = "kv-cache-course-student.zip"
INSTRUCTOR_ZIP = "kv-cache-course-instructor.zip"
WORDS_PER_MINUTE = 200                  # prose, read with care
CODE_LINES_PER_MINUTE = 15              # code, read line by line


# -- chapters and their facts (pure functions; tests/test_course_pages.py uses them) ----
def toc_chapters(root: Path) -> list[str]:
    """Docnames of the toc's notebook pages, in toc order (book/01_attention, ...)."""
    return [f for f in plain_copies.toc_files(root) if (root / f"{f}.ipynb").is_file()]


def _prose(text: str) -> str:
    """Markdown with maths, code and role markup removed: what a reader reads as words."""
    text = re.sub(r"^ {0,3}(`{3,}|~{3,}).*?^ {0,3}\1\s*$", " ", text, flags=re.M | re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"\$[^$\n]+\$", " x ", text)
    text = re.sub(r"\{[\w:.-]+\}`([^`<]*?)(?:\s*<[^`]*>)?`", r"\1", text)
    return re.sub(r"[`*#>|_\[\]()]", " ", text)


def chapter_goals(markdown: str) -> list[str]:
    """The bullets under the chapter's 'What you will be able to do' heading (or bold line)."""
    match = re.search(r"^(?:#+\s*|\*\*)What you will be able to do\b.*$", markdown,
                      re.M | re.I)
    if not match:
        return []
    block = markdown[match.end():]
    items, lines = [], block.split("\n")
    for line in lines:
        if line.startswith("- "):
            items.append(line[2:])
        elif line.startswith("  ") and items:
            items[-1] += " " + line.strip()
        elif items or line.startswith("#"):
            if not line.strip() and items:
                break
            if line.startswith("#"):
                break
    return [re.sub(r"\s+", " ", item).strip() for item in items]


def chapter_facts(path: Path, root: Path) -> dict:
    """What the course map shows about one chapter, read from its notebook."""
    nb = plain_copies.nbformat.read(path, as_version=4)
    number = plain_copies.chapter_number(path)
    markdown = [c.source for c in nb.cells if c.cell_type == "markdown"]
    text = "\n".join(markdown)
    title = re.search(r"^#\s+(.+?)\s*$", text, re.M)
    goals = chapter_goals(text)
    mentioned = {int(n) for m in re.finditer(r"\b[Cc]hapters?((?:[\s,]+(?:and\s+|or\s+)?\d+)+)",
                                             _prose(text))
                 for n in re.findall(r"\d+", m[1])}
    mentioned |= {int(n) for n in re.findall(r"\{doc\}`(?:[^`<]*<)?(\d+)_", text)}
    visible_code = [c.source for c in nb.cells if c.cell_type == "code"
                    and not {"remove-cell", "remove-input", "hide-input"}
                    & set(c.metadata.get("tags", []))]
    _, exercises = plain_copies.parse_chapter(
        plain_copies.nbformat.from_dict({**nb, "cells": plain_copies.expand_cells(
            nb, str(path))}), str(path))
    words = len(_prose(text).split())
    code_lines = sum(len([line for line in s.split("\n") if line.strip()])
                     for s in visible_code)
    minutes = words / WORDS_PER_MINUTE + code_lines / CODE_LINES_PER_MINUTE
    return {
        "docname": path.relative_to(root).with_suffix("").as_posix(),
        "number": number, "title": title[1] if title else path.stem, "goals": goals,
        "builds_on": sorted(n for n in mentioned if number is not None and 0 < n < number),
        "words": words, "code_lines": code_lines, "reading_minutes": minutes,
        "exercises": len(exercises),
        "checked": sum(1 for e in exercises.values() if e.check),
    }


def glue_only(text: str, path: Path) -> str:
    """text with its {glue:text} roles filled in from the chapter's stored outputs (the
    other roles still work on any page of the book)."""
    nb = plain_copies.nbformat.read(path, as_version=4)
    cell = plain_copies.Cell(str(path), 0, plain_copies.glue_values(nb), plain_copies.Context())
    return plain_copies.ROLE.sub(
        lambda m: plain_copies.convert_role(m["name"], m["content"], cell)
        if m["name"] == "glue:text" else m[0], text)


def rounded_minutes(minutes: float) -> int:
    """Up to the next 5 minutes: an estimate, not a measurement."""
    return max(5, 5 * -(-int(round(minutes)) // 5))


# -- launch and download buttons --------------------------------------------------------
def readable_url(url: str, docname: str) -> str:
    """A launch URL that ends in the chapter's source path, pointed at its readable copy."""
    source = f"{docname}.ipynb"
    if not url.endswith(source):
        raise ValueError(f"launch URL {url!r} does not end with {source!r}")
    copy = f"{plain_copies.COPIES_DIR}/{posixpath.basename(source)}"
    return url[: -len(source)] + copy


def point_buttons_at_copies(app, pagename, templatename, context, doctree) -> None:
    """Binder, Colab and download buttons of a chapter open its readable copy."""
    if pagename not in _chapter_docnames(app):
        return
    root = Path(app.srcdir)
    copy = plain_copies.readable_path(root / f"{pagename}.ipynb", root)
    if not copy.is_file():
        LOGGER.warning(f"no plain copy {copy.relative_to(root)}: the Binder and Colab buttons "
                       "would open nothing; run python .ci/execute_notebooks on the chapter",
                       location=pagename, type="course", subtype="launch")
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []):
            if group.get("label") == "launch-buttons" and button.get("type") == "link":
                try:
                    button["url"] = readable_url(button["url"], pagename)
                except ValueError as err:
                    LOGGER.warning(f"{err}: the launch button would open raw MyST",
                                   location=pagename, type="course", subtype="launch")
            elif button.get("label") == "download-source-button":
                name = posixpath.basename(pagename) + ".ipynb"
                button["url"] = context["pathto"](f"{SITE_DIR}/{name}", 1)
                button["tooltip"] = "Download the notebook"


def _chapter_docnames(app) -> set[str]:
    root = Path(app.srcdir)
    return {p.relative_to(root).with_suffix("").as_posix()
            for p in plain_copies.chapters(root)} & set(app.env.found_docs)


# -- the downloads, written after an HTML build -----------------------------------------
STUDENT_README = """\
# The KV Cache, Built and Measured: student notebooks

One notebook per chapter, without the exercises' solutions. Run each top to bottom: where an
exercise has a self-check, set `answer` and run the cell; the check says whether your answer
is right, or gives a hint, and never prints the answer.

You need Python 3.11 and the course's toykv package. Each notebook's first code cell installs
it when it is missing (`pip install "{requirement}"`), or install it yourself with that
command, or clone the repository and `pip install -r requirements.txt`.
"""


def _zip(path: Path, files: dict[str, str]) -> None:
    """A zip with fixed timestamps, so identical content gives an identical file."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[name])


def write_downloads(root: Path, outdir: Path, docnames: list[str]) -> list[Path]:
    """Every chapter's readable, student and instructor notebook, and the two zips."""
    site = outdir / SITE_DIR
    ctx = plain_copies.Context(root)
    url, branch = _repository(root)
    requirement = plain_copies.INSTALL_REQUIREMENT.format(url=url, branch=branch)
    student = {"kv-cache-course-student/README.md": STUDENT_README.format(
        requirement=requirement)}
    instructor = {f"kv-cache-course-instructor/{name}": text
                  for name, text in plain_copies.course_files().items()}
    written = []
    for docname in docnames:
        chapter = root / f"{docname}.ipynb"
        name = chapter.name
        for variant, target in [("readable", site / name), ("student", site / "student" / name),
                                ("instructor", site / "instructor" / name)]:
            nb = plain_copies.build(chapter, variant, root, ctx)
            plain_copies.write(nb, target)
            written.append(target)
            text = plain_copies.nbformat.writes(nb)
            if variant == "student":
                student[f"kv-cache-course-student/{name}"] = text
            elif variant == "instructor":
                instructor[f"kv-cache-course-instructor/source/{chapter.stem}/{name}"] = text
    _zip(site / STUDENT_ZIP, student)
    _zip(site / INSTRUCTOR_ZIP, instructor)
    return written + [site / STUDENT_ZIP, site / INSTRUCTOR_ZIP]


def _repository(root: Path) -> tuple[str, str]:
    config = yaml.safe_load((root / "_config.yml").read_text())
    repo = config.get("repository") or {}
    return repo.get("url", "").rstrip("/"), repo.get("branch", "main")


def build_downloads(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    root = Path(app.srcdir)
    docnames = [d for d in toc_chapters(root) if d in _chapter_docnames(app)]
    try:
        written = write_downloads(root, Path(app.outdir), docnames)
    except plain_copies.ConversionError as err:
        LOGGER.warning(f"plain notebooks: {err}", type="course", subtype="copies")
        return
    LOGGER.info(f"[course] wrote {len(written)} notebooks and zips to {SITE_DIR}/")


# -- directives for the instructors' page -----------------------------------------------
def _relative(docname: str, target: str) -> str:
    return posixpath.relpath(target, posixpath.dirname(docname) or ".")


def _doc_link(docname: str, text: str | None = None) -> nodes.Node:
    """A link to a page, resolved by Sphinx (its title when text is None)."""
    ref = pending_xref("", refdomain="std", reftype="doc", reftarget="/" + docname,
                       refexplicit=text is not None, refwarn=True)
    ref += nodes.inline(text or docname, text or docname)
    return ref


def _table(headers: list[str], rows: list[list], widths: list[int] | None = None) -> nodes.table:
    """A docutils table; a cell is a string or a node."""
    table = nodes.table(classes=["colwidths-auto"])
    group = nodes.tgroup(cols=len(headers))
    table += group
    for width in widths or [1] * len(headers):
        group += nodes.colspec(colwidth=width)
    head, body = nodes.thead(), nodes.tbody()
    group += head
    group += body
    row = nodes.row()
    for header in headers:
        row += nodes.entry("", nodes.paragraph(text=header))
    head += row
    for cells in rows:
        row = nodes.row()
        for cell in cells:
            para = nodes.paragraph()
            para += nodes.Text(cell) if isinstance(cell, str) else cell
            row += nodes.entry("", para)
        body += row
    return table


class _CourseDirective(SphinxDirective):
    def chapters(self) -> list[tuple[Path, dict]]:
        root = Path(self.env.srcdir)
        found = []
        for docname in toc_chapters(root):
            path = root / f"{docname}.ipynb"
            self.env.note_dependency(str(path))
            try:
                found.append((path, chapter_facts(path, root)))
            except plain_copies.ConversionError as err:
                LOGGER.warning(f"course map: {err}", location=self.get_location(),
                               type="course", subtype="copies")
        return found


class CourseMap(_CourseDirective):
    """Each chapter of the toc: number, title, earlier chapters it uses, learning goals."""

    def run(self):
        lines = []
        for path, facts in self.chapters():
            builds_on = (", ".join(str(n) for n in facts["builds_on"]) if facts["builds_on"]
                         else "Python and numpy only")
            lines += [f"**{facts['number']}. {{doc}}`/{facts['docname']}`**. "
                      f"Builds on: {builds_on}. Exercises: {facts['exercises']} "
                      f"({facts['checked']} with a self-check).", ""]
            lines += [f"- {glue_only(goal, path)}" for goal in facts["goals"]] + [""]
        container = nodes.container(classes=["course-map"])
        self.state.nested_parse(StringList(lines, source=self.get_source_info()[0]),
                                self.content_offset, container)
        return [container]


class course_times(nodes.General, nodes.Element):
    """Placeholder: the time table is made once every chapter has run (post-transform)."""


class CourseTimes(_CourseDirective):
    def run(self):
        node = course_times()
        node["facts"] = [facts for _, facts in self.chapters()]
        return [node]


class CourseTimesTable(SphinxPostTransform):
    """Fill in the run time each chapter took in this build (myst-nb's execution data)."""

    default_priority = 8  # before the references resolver, which resolves our doc links

    def run(self, **kwargs) -> None:
        from myst_nb.sphinx_ import NbMetadataCollector

        data = NbMetadataCollector.get_doc_data(self.env)
        for node in list(self.document.findall(course_times)):
            rows = []
            for facts in node["facts"]:
                runtime = (data.get(facts["docname"], {}).get("exec_data") or {}).get("runtime")
                rows.append([f"{facts['number']}", _doc_link(facts["docname"]),
                             f"{facts['words']:,}", f"{facts['code_lines']:,}",
                             f"{rounded_minutes(facts['reading_minutes'])} min",
                             f"{runtime:.0f} s" if runtime is not None else "not run"])
            node.replace_self(_table(["#", "Chapter", "Prose words", "Code lines",
                                      "Reading (estimate)", "Run time (this build)"],
                                     rows, [1, 6, 2, 2, 2, 2]))


def _rerun_pages_with_times(app, env):
    """A re-executed chapter changes the times: rewrite the pages that show them."""
    from myst_nb.sphinx_ import NbMetadataCollector

    if not NbMetadataCollector.new_exec_data(env):
        return []
    return [d for d in env.found_docs if d.endswith("instructors")]


class CourseDownloads(_CourseDirective):
    """Links to every chapter's readable, student and instructor notebook and the zips."""

    def run(self):
        here = self.env.docname
        link = lambda text, target: nodes.reference(  # noqa: E731
            "", text, refuri=_relative(here, f"{SITE_DIR}/{target}"))
        rows = [[f"{facts['number']}", _doc_link(facts["docname"]),
                 link("readable", path.name), link("student", f"student/{path.name}"),
                 link("instructor", f"instructor/{path.name}")]
                for path, facts in self.chapters()]
        zips = nodes.paragraph()
        zips += nodes.Text("All chapters at once: ")
        zips += link("student notebooks (zip)", STUDENT_ZIP)
        zips += nodes.Text(" and ")
        zips += link("instructor notebooks, an nbgrader course folder (zip)", INSTRUCTOR_ZIP)
        zips += nodes.Text(".")
        return [zips, _table(["#", "Chapter", "Solutions shown", "Solutions removed",
                              "Marked for nbgrader"], rows, [1, 6, 2, 2, 2])]


# -- the API reference ------------------------------------------------------------------
def public_modules() -> list[str]:
    """toykv's modules one level down whose names do not start with '_'."""
    import toykv

    return sorted(f"toykv.{m.name}" for m in pkgutil.iter_modules(toykv.__path__)
                  if not m.name.startswith("_"))


def summary(obj) -> str:
    """The first paragraph of obj's docstring; for data, its type (and size)."""
    if not (inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj)):
        size = f" of {len(obj)}" if hasattr(obj, "__len__") else ""
        return f"a {type(obj).__name__}{size}"
    doc = inspect.getdoc(obj) or ""
    return doc.split("\n\n")[0].replace("\n", " ")


def _with_code(text: str) -> list[nodes.Node]:
    """Text with `x` and ``x`` shown as code, as the docstrings mean them."""
    parts = re.split(r"``?([^`]+)``?", text)
    return [nodes.literal(p, p) if i % 2 else nodes.Text(p) for i, p in enumerate(parts) if p]


class ToykvToplevel(SphinxDirective):
    """A table of the names `import toykv` gives, each linked to its documentation."""

    def run(self):
        import toykv

        rows = []
        for name in toykv.__all__:
            obj = getattr(toykv, name)
            ref = pending_xref("", refdomain="py", reftype="obj", reftarget=f"toykv.{name}",
                               refexplicit=True, toykv_quiet=True)  # data has no entry
            ref += nodes.literal(f"toykv.{name}", f"toykv.{name}")
            text = nodes.inline()
            text.extend(_with_code(summary(obj)))
            rows.append([ref, text])
        return [_table(["Name", "What it is"], rows, [3, 7])]


class ToykvOtherModules(SphinxDirective):
    """automodule for every public toykv module the page has not documented above."""

    def run(self):
        documented = {name for name, entry in self.env.get_domain("py").modules.items()
                      if entry.docname == self.env.docname}
        lines = []
        for module in public_modules():
            if module not in documented:
                lines += [f"```{{rubric}} {module}", "```",
                          "```{eval-rst}", f".. automodule:: {module}", "   :members:", "```",
                          ""]
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source=self.get_source_info()[0]),
                                self.content_offset, container)
        return container.children


_DOCUMENTED: dict[int, str] = {}   # filled once per build, when writing starts


LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s")
CODE_SPAN = re.compile(r"(?<![:\w])``?([^`]+?)``?(?!\w)")


def _escape(text: str) -> str:
    """Plain text as reStructuredText: `x` and ``x`` as code, |, * and a word-final _
    as themselves (toykv's docstrings are plain text: |V| is a size, not a substitution)."""
    out, last = [], 0
    for match in CODE_SPAN.finditer(text):
        out.append(_escape_plain(text[last:match.start()]))
        out.append(f"``{match[1]}``")
        last = match.end()
    out.append(_escape_plain(text[last:]))
    return "".join(out)


def _escape_plain(text: str) -> str:
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("*", "\\*")
    return re.sub(r"(\w)_(?=\W|$)", r"\1\\_", text)


def plain_docstring(lines: list[str]) -> list[str]:
    """A docstring written as plain text, as rST that shows it the way it reads: prose
    paragraphs flow; a paragraph with list items or indented lines keeps its line breaks
    and indentation (a line block), so it never trips the build's -W."""
    out, paragraph = [], []

    def flush():
        if not paragraph:
            return
        first = len(paragraph[0]) - len(paragraph[0].lstrip())
        structured = any(LIST_ITEM.match(line) or len(line) - len(line.lstrip()) > first
                         for line in paragraph[1:]) or (
            LIST_ITEM.match(paragraph[0]) and len(paragraph) > 1)
        if structured:
            out.extend(f"| {_escape(line[first:])}" for line in paragraph)
        else:
            out.extend(_escape(line) for line in paragraph)
        out.append("")
        paragraph.clear()

    for line in lines:
        if line.strip():
            paragraph.append(line.rstrip())
        else:
            flush()
    flush()
    return out


def plain_docstrings(app, what, name, obj, options, lines) -> None:
    """autodoc-process-docstring: toykv's docstrings are plain text (see plain_docstring)."""
    if name == "toykv" or name.startswith("toykv."):
        lines[:] = plain_docstring(lines)


def _documented_objects(env) -> dict[int, str]:
    """id(object) -> its documented name, for every toykv object the py domain knows."""
    if not _DOCUMENTED:
        for fullname in sorted(env.get_domain("py").objects):
            if fullname.startswith("toykv") and (obj := _resolve(fullname)) is not None:
                _DOCUMENTED.setdefault(id(obj), fullname)
    return _DOCUMENTED


def _resolve(name: str):
    parts = name.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for part in parts[split:]:
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj
    return None


def resolve_toykv_alias(app, env, node, contnode):
    """toykv.name -> wherever that object is documented; warn when it is nowhere."""
    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not (target == "toykv" or target.startswith("toykv.")):
        return None
    obj = _resolve(target)
    documented = _documented_objects(env).get(id(obj)) if obj is not None else None
    if documented and documented != target:
        return env.get_domain("py").resolve_xref(
            env, node.get("refdoc", env.docname), app.builder, "obj", documented, node,
            contnode)
    if not node.get("toykv_quiet"):
        LOGGER.warning(f"{target} is not in the API reference (book/api.md): document it "
                       "there, or link a documented name", location=node, type="course",
                       subtype="api")
    return None


def _reset_documented(app, env, *args):
    _DOCUMENTED.clear()


def setup(app):
    app.connect("html-page-context", point_buttons_at_copies, priority=600)
    app.connect("build-finished", build_downloads)
    app.add_directive("course-map", CourseMap)
    app.add_node(course_times)
    app.add_directive("course-times", CourseTimes)
    app.add_post_transform(CourseTimesTable)
    app.connect("env-updated", _rerun_pages_with_times)
    app.add_directive("course-downloads", CourseDownloads)
    app.add_directive("toykv-toplevel", ToykvToplevel)
    app.add_directive("toykv-other-modules", ToykvOtherModules)
    app.connect("missing-reference", resolve_toykv_alias)
    app.connect("autodoc-process-docstring", plain_docstrings)
    app.connect("env-check-consistency", _reset_documented)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
