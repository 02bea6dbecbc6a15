"""The book's frame: every chapter listed and stored executed, one repository URL, pins.

Checks on the repository's files, not on toykv. They fail when a notebook is added but
not listed in _toc.yml, committed without running top to bottom, left without the Colab
install cell, excused from nbval without being a widget cell, or when a copy of the
repository URL disagrees with _config.yml. Most fixes: `python .ci/execute_notebooks`.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import nbformat
import pytest

import ci_scripts

ROOT = Path(__file__).resolve().parent.parent
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
EXCUSE_TAGS = {"nbval-ignore-output", "nbval-skip", "nbval-check-output", "raises-exception"}
TOOL = ci_scripts.load("execute_notebooks")   # the install cell and the notebook list
NOTEBOOKS = TOOL.book_notebooks()


def _ids(paths):
    return [p.relative_to(ROOT).as_posix() for p in paths]


def toc_files() -> list[str]:
    """Every page named in _toc.yml (root and all nested file entries), without extension."""
    return TOOL.plain_copies().toc_files(ROOT)


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]


def test_book_has_notebooks():
    assert NOTEBOOKS, "no notebooks under book/: the tests below would check nothing"


def test_toc_pages_exist():
    missing = [f for f in toc_files()
               if not any((ROOT / f"{f}{ext}").is_file() for ext in (".md", ".ipynb"))]
    assert not missing, f"_toc.yml lists pages with no .md or .ipynb file: {missing}"


def test_every_notebook_is_in_the_toc():
    listed = set(toc_files())
    unlisted = [n for n, p in zip(_ids(NOTEBOOKS), NOTEBOOKS)
                if p.relative_to(ROOT).with_suffix("").as_posix() not in listed]
    assert not unlisted, f"notebooks not in _toc.yml (the book would not show them): {unlisted}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_stored_executed_top_to_bottom(path):
    nb = nbformat.read(path, as_version=4)
    counts = [c.execution_count for c in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..{len(counts)}: store it run top "
        f"to bottom in a fresh kernel (python .ci/execute_notebooks {path.relative_to(ROOT)})")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_kernel_is_python3(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", (
        f"{path.name}: kernelspec {nb.metadata.get('kernelspec')!r}, expected name 'python3'")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_first_code_cell_installs_toykv_on_colab(path):
    nb = nbformat.read(path, as_version=4)
    cells = code_cells(nb)
    assert cells, f"{path.name} has no code cells"
    first = cells[0]
    assert first.source == TOOL.install_cell_source(), (
        f"{path.name}: the first code cell is not the Colab install cell for the repository "
        f"in _config.yml; run python .ci/execute_notebooks {path.relative_to(ROOT)}")
    assert "remove-cell" in first.metadata.get("tags", []), (
        f"{path.name}: the install cell must be tagged remove-cell (hidden in the book)")
    assert not first.outputs, f"{path.name}: the install cell printed {first.outputs!r}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_only_widget_cells_are_excused_from_nbval(path):
    nb = nbformat.read(path, as_version=4)
    for index, cell in enumerate(code_cells(nb)):
        assert "NBVAL_" not in cell.source, (
            f"{path.name}, code cell {index + 1}: use the cell tag nbval-ignore-output, "
            "not an # NBVAL_ comment (comments show in the book)")
        excuses = EXCUSE_TAGS & set(cell.metadata.get("tags", []))
        if not excuses:
            continue
        assert excuses == {"nbval-ignore-output"}, (
            f"{path.name}, code cell {index + 1}: tags {sorted(excuses)}; only "
            "nbval-ignore-output is allowed, and only on widget cells")
        shows_widget = any(WIDGET_VIEW in out.get("data", {}) for out in cell.outputs)
        assert shows_widget, (
            f"{path.name}, code cell {index + 1} is tagged nbval-ignore-output but shows no "
            "widget: its output must match exactly (sanitize timings instead)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_widget_state_is_saved(path):
    nb = nbformat.read(path, as_version=4)
    shown = {out["data"][WIDGET_VIEW]["model_id"] for cell in code_cells(nb)
             for out in cell.outputs if WIDGET_VIEW in out.get("data", {})}
    saved = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    missing = sorted(shown - set(saved))
    assert not missing, (
        f"{path.name}: widgets {missing} have no saved state, so the book shows them blank; "
        f"run python .ci/execute_notebooks {path.relative_to(ROOT)}")


def test_requirements_are_pinned():
    lines = [line.split("#")[0].strip()
             for line in (ROOT / "requirements.txt").read_text().splitlines()]
    loose = [line for line in lines
             if line and not line.startswith("-e ") and not re.fullmatch(r"[\w.\-\[\],]+==[\w.]+", line)]
    assert not loose, f"requirements.txt lines not pinned with ==: {loose}"
    assert "-e .[book]" in lines, "requirements.txt must install toykv itself (-e .[book])"


def test_test_extra_is_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    loose = [req for req in project["optional-dependencies"]["test"] if "==" not in req]
    assert not loose, f"pyproject.toml [test] extra not pinned with ==: {loose}"
    assert project["dependencies"] == ["numpy>=1.24"], (
        f"toykv's hard dependencies must stay numpy only, got {project['dependencies']}")


def test_readme_binder_badge_matches_config():
    url, branch = TOOL.repository()
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", url)
    assert match, f"_config.yml repository.url {url!r} is not a GitHub repository URL"
    binder = f"https://mybinder.org/v2/gh/{match[1]}/{match[2]}/{branch}"
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"https://mybinder\.org/v2/gh/[^\s)\"'>]+", readme)
    assert links, f"README.md has no Binder link; expected {binder}"
    wrong = [link for link in links if not link.startswith(binder)]
    assert not wrong, f"README.md Binder links {wrong} do not match _config.yml: {binder}"
    assert f"git clone {url}" in readme, f"README.md must show `git clone {url}`"


def test_readme_binder_badge_opens_the_plain_notebooks():
    """The badge lands readers in book/notebooks/, the chapters without MyST syntax."""
    readme = (ROOT / "README.md").read_text()
    paths = re.findall(r"https://mybinder\.org/v2/gh/[^\s)\"'>]*\?urlpath=lab/tree/([^\s)\"'>]+)",
                       readme)
    assert paths, "README.md: the Binder badge should open a folder (?urlpath=lab/tree/...)"
    for path in paths:
        assert path.rstrip("/") == "book/notebooks" and (ROOT / path).is_dir(), (
            f"README.md Binder link opens {path!r}; expected book/notebooks")


# The book's code and output boxes show about 80 characters before a reader has to scroll
# sideways (checked in headless Chromium at 1280 px); Colab and JupyterLab wrap or scroll too.
PAGE_WIDTH = 79


def shown_text(cell) -> list[tuple[str, str]]:
    """(what, line) for every line the book shows of a code cell: its source unless hidden,
    and its text outputs (widgets show their view, not their text)."""
    tags = set(cell.metadata.get("tags", []))
    if "remove-cell" in tags:
        return []
    lines = [] if "remove-input" in tags else [("code", s) for s in cell.source.splitlines()]
    if "remove-output" in tags:
        return lines
    for out in cell.outputs:
        if out.get("output_type") == "stream":
            text = out.get("text", "")
        elif WIDGET_VIEW in out.get("data", {}):
            continue
        else:
            text = out.get("data", {}).get("text/plain", "")
        lines += [("output", s) for s in "".join(text).splitlines()]
    return lines


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_shown_lines_fit_the_page(path):
    nb = nbformat.read(path, as_version=4)
    long = [f"code cell {index + 1} {what}: {line!r}"
            for index, cell in enumerate(code_cells(nb))
            for what, line in shown_text(cell) if len(line) > PAGE_WIDTH]
    assert not long, (f"{path.name}: lines wider than {PAGE_WIDTH} characters are cut off in "
                      "the book:\n" + "\n".join(long))


# A visible code cell shows one idea: about 25 lines at most. Longer plotting or setup code goes
# into toykv (toykv.plots) or a cell tagged hide-input.
MAX_SHOWN_LINES = 26


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_shown_code_cells_are_short(path):
    nb = nbformat.read(path, as_version=4)
    hidden = {"remove-cell", "remove-input", "hide-input"}
    long = [f"code cell {index + 1}: {len(cell.source.splitlines())} lines"
            for index, cell in enumerate(code_cells(nb))
            if not hidden & set(cell.metadata.get("tags", []))
            and len(cell.source.splitlines()) > MAX_SHOWN_LINES]
    assert not long, (f"{path.name}: code cells longer than {MAX_SHOWN_LINES} lines in the "
                      "reading path (split them, or move plotting into toykv.plots):\n"
                      + "\n".join(long))
