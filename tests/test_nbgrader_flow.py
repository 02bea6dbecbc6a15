"""The instructor flow from the README's commands: a whole nbgrader course run of a chapter.

README.md's block of instructor commands runs line by line, as written, in a copy of what a
fresh clone has (book/, references.bib, the config files): student notebooks, the instructor
course folder, then generate, release, collect, autograde and export. Between release and
collect two students work with the commands of book/instructors.md (one fetch for both, to
save an nbgrader start; each submits): the first runs the release copy top to bottom
unanswered (every check says "Not answered yet" and the run goes on), then fills in the
official solutions; the second gets exercise 1 wrong. Then
grades.csv must give the first full marks and the second one point less, under the names
nbgrader gives them (the OS user name; --student for the second).

Two things differ from a real course: `pip install` lines are skipped (this venv has
nbgrader), and nbgrader's exchange and cache are temporary folders (set through
JUPYTER_CONFIG_DIR) rather than /srv/nbgrader/exchange. One chapter is enough for the
whole flow (about a minute of CPU time, much of it nbgrader starting once per command);
tests/test_plain_copies.py checks every chapter's instructor copy and nbgrader release
cheaply.
"""
from __future__ import annotations

import csv
import importlib.util
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import plain_copies as PC  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("nbgrader") is None,
                                reason="nbgrader is in the [test] extra")


def bash_block(path: Path, marker: str) -> list[str]:
    """The command lines (comments dropped) of the ```bash block of path holding marker."""
    blocks = [b for b in re.findall(r"^```bash\n(.*?)^```", path.read_text(), re.M | re.S)
              if marker in b]
    assert len(blocks) == 1, f"{path.name}: expected one bash block with {marker!r}"
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in blocks[0].splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def fresh_clone(target: Path) -> Path:
    """What `python book/_ext/plain_copies.py` needs of a clone, copied."""
    shutil.copytree(ROOT / "book", target / "book",
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    for name in ("references.bib", "_config.yml", "_toc.yml"):
        shutil.copy(ROOT / name, target / name)
    return target


class Shell:
    """Runs command lines as a terminal would (cd and && included), in one environment."""

    def __init__(self, cwd: Path, env: dict):
        self.cwd, self.env = cwd, env

    def run(self, line: str) -> str:
        printed = ""
        for cmd in (c.strip() for c in line.split("&&")):
            if cmd.startswith("cd "):
                self.cwd = (self.cwd / cmd[3:].strip()).resolve()
                continue
            if cmd.startswith("pip install"):
                continue                       # this venv has what the line installs
            result = subprocess.run(cmd, shell=True, cwd=self.cwd, env=self.env,
                                    capture_output=True, text=True, timeout=900)
            printed += result.stdout + result.stderr
            assert result.returncode == 0, f"`{cmd}` in {self.cwd} failed:\n{printed[-3000:]}"
        return printed


def nbgrader_env(tmp: Path) -> dict:
    """This venv's python and nbgrader first on PATH; the exchange and cache in tmp."""
    config = tmp / "jupyter-config"
    config.mkdir()
    (config / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.Exchange.root = {str(tmp / 'exchange')!r}\n"
        f"c.Exchange.cache = {str(tmp / 'nbgrader-cache')!r}\n")
    (tmp / "exchange").mkdir(mode=0o777)
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("JUPYTERHUB_USER", None)
    return env


def os_user_name() -> str:
    """The name nbgrader's submit uses: the account's (jovyan: the hub user, here unset)."""
    return pwd.getpwuid(os.getuid()).pw_name


def run_all(path: Path):
    """Run a notebook top to bottom in a fresh kernel, in its folder; returns it executed."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def graded_tests(nb) -> list:
    return [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
            and not c.metadata["nbgrader"]["solution"]]


def answer(release, source, wrong: str | None = None):
    """The release copy with every solution cell filled in from the instructor's source (its
    marker lines dropped); the answer of the exercise whose test cell is `wrong` made wrong."""
    solutions = {c.metadata["nbgrader"]["grade_id"]: c.source for c in source.cells
                 if c.metadata.get("nbgrader", {}).get("solution")}
    cells = release.cells
    for index, cell in enumerate(cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in solutions:
            cell.source = "\n".join(line for line in solutions[grade_id].split("\n")
                                    if line.strip() not in ("### BEGIN SOLUTION",
                                                            "### END SOLUTION"))
            following = cells[index + 1] if index + 1 < len(cells) else None
            if wrong and following is not None and following.metadata.get(
                    "nbgrader", {}).get("grade_id") == wrong:
                cell.source += "\nanswer = -1  # a wrong answer"
    return release


def test_a_course_run_from_the_readme(tmp_path):
    from nbgrader.api import Gradebook
    from toykv.check import NOT_ANSWERED

    clone = fresh_clone(tmp_path / "clone")
    shell = Shell(clone, nbgrader_env(tmp_path))
    commands = bash_block(ROOT / "README.md", "--instructor")
    students_do = bash_block(ROOT / "book" / "instructors.md", "fetch_assignment")
    collect = next(i for i, c in enumerate(commands) if c.startswith("nbgrader collect"))
    chapter = re.search(r"generate_assignment (\S+)", " ".join(commands))[1]

    for line in commands[:collect]:                    # up to release_assignment
        printed = shell.run(line)
        assert "No nbgrader_config.py" not in printed, f"`{line}` found no config"
    course = shell.cwd
    assert sorted(p.name for p in (clone / "students").glob("*.ipynb")) == sorted(
        p.name for p in PC.chapters(clone))
    assert (course / "nbgrader_config.py").read_text() == PC.NBGRADER_CONFIG
    source = nbformat.read(course / "source" / chapter / f"{chapter}.ipynb", as_version=4)
    tests = graded_tests(source)
    assert tests, f"{chapter} has no autograded cell: pick a chapter with self-checks"

    # a student fetches the release (a second one gets the same files: one nbgrader start
    # less) and runs it all before answering anything
    students = tmp_path / "students"
    shell.cwd = students / "first"
    shell.cwd.mkdir(parents=True)
    shell.run(next(c for c in students_do if "fetch_assignment" in c))
    shutil.copytree(students / "first", students / "second")
    work = {s: students / s / chapter / f"{chapter}.ipynb" for s in ("first", "second")}
    unanswered = run_all(work["first"])                # raises if Run All stops
    for cell in graded_tests(unanswered):
        shown = {}                 # a print may reach the notebook in several pieces
        for out in cell.outputs:   # (its text, then its newline) on a busy machine
            shown[out.get("name")] = shown.get(out.get("name"), "") + out.get("text", "")
        assert shown.get("stdout", "").strip() == NOT_ANSWERED and shown.get("stderr"), (
            cell.metadata["nbgrader"]["grade_id"], shown)
    wrong = tests[0].metadata["nbgrader"]["grade_id"]
    for student, mistake in (("first", None), ("second", wrong)):
        nbformat.write(answer(nbformat.read(work[student], as_version=4), source, mistake),
                       work[student])
        shell.cwd = work[student].parent.parent
        submit = next(c for c in students_do if c.startswith("nbgrader submit"))
        shell.run(submit if student == "first" else f"{submit} --student=second-student")

    shell.cwd = course
    for line in commands[collect:]:                    # collect, autograde, export
        shell.run(line)
    with open(course / "grades.csv", newline="") as f:
        grades = {row["student_id"]: row for row in csv.DictReader(f)}
    full = PC.TEST_POINTS * len(tests)
    assert set(grades) == {os_user_name(), "second-student"}
    right, wrong_row = grades[os_user_name()], grades["second-student"]
    assert (float(right["score"]), float(right["max_score"])) == (full, full)
    assert (float(wrong_row["score"]), float(wrong_row["max_score"])) == (
        full - PC.TEST_POINTS, full)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission_notebook(chapter, chapter, "second-student")
        lost = [g.cell.name for g in submission.grades
                if g.auto_score is not None and g.auto_score < g.max_score]
    assert lost == [wrong], f"the wrong submission lost points on {lost}, not on {wrong}"
