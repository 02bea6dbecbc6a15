"""`.ci/run_with`: a chapter run with one setting changed (chapter 13 on more of its text)."""
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import ci_scripts

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "run_with"
CHAPTER_13 = ROOT / "book" / "13_what_shrinking_costs.ipynb"


def run_with():
    return ci_scripts.load("run_with")


def notebook(*sources):
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])


def test_chapter_13_sets_its_length_on_one_line():
    nb = nbformat.read(CHAPTER_13, as_version=4)
    before = [cell.source for cell in nb.cells]
    old = run_with().set_value(nb, "N", "2048")
    assert old.startswith("N = 384")
    changed = [(a, b.source) for a, b in zip(before, nb.cells) if a != b.source]
    assert len(changed) == 1
    a, b = changed[0]
    assert b == a.replace("N = 384 ", "N = 2048", 1)     # the comment stays in its column
    assert "\nN = 2048" in b and "max_seq_len=N" in b


def test_a_value_and_its_comment():
    nb = notebook("import numpy as np\nN = 10    # tokens\nM = 3\nprint(N + M)")
    assert run_with().set_value(nb, "N", "20") == "N = 10    # tokens"
    assert nb.cells[0].source == "import numpy as np\nN = 20    # tokens\nM = 3\nprint(N + M)"
    nb = notebook("x = [1, 2]")
    run_with().set_value(nb, "x", "[3]")
    assert nb.cells[0].source == "x = [3]"


@pytest.mark.parametrize("sources, name", [
    (("N = 1", "N = 2"), "N"),                 # twice: which one?
    (("N = 1\nN = 2",), "N"),
    (("M = 1", "NN = 2", " N = 3", "N == 4"), "N"),   # none is `N = ...` at a line's start
    (("N = 1",), "1N"),                        # not a name
])
def test_refuses_unless_exactly_one_line_sets_the_name(sources, name):
    nb = notebook(*sources)
    with pytest.raises(ValueError):
        run_with().set_value(nb, name, "5")
    assert [cell.source for cell in nb.cells] == list(sources)     # nothing changed


def test_runs_the_notebook_and_fails_with_its_asserts(tmp_path):
    path = tmp_path / "tiny.ipynb"
    nbformat.write(notebook("from myst_nb import glue\nN = 3\nprint('sum', sum(range(N)))",
                            "glue('twice', 2 * N, display=False)",
                            "assert N < 10, 'too long'"), path)
    run = lambda value: subprocess.run(
        [sys.executable, str(SCRIPT), str(path), f"N={value}"],
        capture_output=True, text=True, timeout=300)
    held = run(5)
    assert held.returncode == 0, held.stderr
    assert "sum 10" in held.stdout and "every assert held" in held.stdout
    assert "glue twice = 10" in held.stdout                 # what the page would show
    failed = run(12)
    assert failed.returncode == 1 and "too long" in failed.stderr
    assert "sum 66" in failed.stdout                        # what ran before the failure
    assert "\nN = 3\n" in nbformat.read(path, as_version=4).cells[0].source  # untouched


@pytest.mark.parametrize("setting, message", [
    ("N", "setting must be NAME=VALUE"), ("N=", "setting must be NAME=VALUE"),
    ("M=3", "must set M on exactly one line")])
def test_a_bad_setting_is_refused_before_a_kernel_starts(setting, message):
    done = subprocess.run([sys.executable, str(SCRIPT), str(CHAPTER_13), setting],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr
    assert "every assert held" not in done.stdout
