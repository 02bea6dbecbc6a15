"""What .ci/emulate_binder and .ci/emulate_colab share: a fresh venv, a kernel that runs in
it, the repository as a clone would have it, and a notebook run as a reader's Run All.

The driver (nbclient, in whatever venv runs the script) stays outside the emulated venv, so
the venv holds only what a reader's machine would: the kernel is that venv's python.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL = "emulated"                     # the kernelspec name of the emulated venv


def python311() -> str:
    """The interpreter runtime.txt names (Binder's), else this one."""
    return shutil.which("python3.11") or sys.executable


def log(message: str) -> None:
    print(message, flush=True)


def run(cmd: list, **kwargs) -> float:
    """Run a command (failing loudly), return its wall time in seconds."""
    start = time.perf_counter()
    subprocess.run([str(c) for c in cmd], check=True, **kwargs)
    return time.perf_counter() - start


def pypi_only() -> None:
    """Let pip (here and in the kernels started from here) see PyPI only, as on Colab or
    Binder: no local pip configuration, wheel folders or constraints of this machine."""
    os.environ["PIP_CONFIG_FILE"] = os.devnull
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_CONSTRAINT",
                 "PIP_NO_INDEX", "PYTHONPATH"):
        os.environ.pop(name, None)


def make_venv(folder: Path) -> Path:
    """A fresh venv in folder; returns its python."""
    run([python311(), "-m", "venv", folder])
    return folder / "bin" / "python"


def packages(python: Path) -> set[str]:
    """The distributions installed in a venv, as name==version."""
    out = subprocess.run([python, "-m", "pip", "list", "--format=freeze",
                          "--disable-pip-version-check"], check=True, capture_output=True,
                         text=True).stdout
    return {line.strip() for line in out.splitlines() if line.strip()}


def use_kernel(python: Path, folder: Path, env: dict[str, str]) -> None:
    """Make the kernel KERNEL run python (with env added): a kernelspec in folder, which
    this process's nbclient finds through JUPYTER_PATH."""
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"Python 3 ({KERNEL})", "language": "python", "env": env}))
    os.environ["JUPYTER_PATH"] = str(folder)


def source(repo: Path, rev: str | None) -> tuple[str, str]:
    """(pip URL of the repository at rev, the commit) as a fresh clone would install it:
    git+file:// of the committed state when repo is a git work tree, else the folder."""
    try:
        commit = subprocess.run(["git", "-C", repo, "rev-parse", rev or "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        if rev:
            raise
        return repo.resolve().as_uri(), "working tree"
    dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    if dirty and not rev:
        log(f"note: {repo} has uncommitted changes; the emulation uses commit {commit[:10]}")
    # file://localhost/...: pip refuses git+file:///... in a name @ url requirement
    return f"git+file://localhost{repo.resolve().as_posix()}@{commit}", commit


def committed_file(repo: Path, commit: str, path: str) -> str:
    """A file of the repository as committed (or from disk when repo is no git tree)."""
    if commit == "working tree":
        return (repo / path).read_text()
    return subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


@dataclass
class Run:
    """One notebook's Run All: seconds per code cell, and what went wrong (none: [])."""

    name: str
    seconds: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    install_seconds: float | None = None
    install_output: str = ""

    @property
    def total(self) -> float:
        return sum(self.seconds)


def _cell_seconds(cell) -> float:
    timing = cell.metadata.get("execution", {})
    try:
        start = datetime.fromisoformat(timing["iopub.execute_input"])
        end = datetime.fromisoformat(timing["shell.execute_reply"])
    except KeyError:
        return 0.0
    return (end - start).total_seconds()


def run_notebook(nb, cwd: Path, name: str, timeout: int = 600) -> Run:
    """Execute nb top to bottom in the KERNEL kernel with cwd as its folder, as Run All in
    JupyterLab or Colab would (it stops at the first error)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    result = Run(name)
    client = NotebookClient(nb, timeout=timeout, kernel_name=KERNEL, record_timing=True,
                            resources={"metadata": {"path": str(cwd)}})
    try:
        client.execute()
    except CellExecutionError as err:
        result.problems.append(f"{name}: Run All stops with an error:\n{err}")
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        result.seconds.append(_cell_seconds(cell))
        if "colab-install" in cell.metadata.get("tags", []):
            result.install_seconds = result.seconds[-1]
            result.install_output = "".join(
                o.get("text", "") or json.dumps(o.get("data", {})) for o in cell.outputs)
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        if errors and not result.problems:
            result.problems.append(f"{name}: a cell shows an error: {errors[0].get('ename')}")
    return result


def report(runs: list[Run]) -> int:
    """Print each run's times and problems; the exit status (1 if any problem)."""
    for r in runs:
        install = (f", install cell {r.install_seconds:.1f} s" if r.install_seconds is not None
                   else "")
        log(f"{'FAILED' if r.problems else 'ran'} {r.name}: {r.total:.1f} s in cells{install}")
        for problem in r.problems:
            log(problem)
    return 1 if any(r.problems for r in runs) else 0
