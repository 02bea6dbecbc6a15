"""The scripts under .ci/ (Python files without a .py suffix) as modules, for the tests."""
import importlib.machinery
import importlib.util
from pathlib import Path

CI = Path(__file__).resolve().parent.parent / ".ci"


def load(name: str):
    """.ci/<name> imported as a module named name."""
    loader = importlib.machinery.SourceFileLoader(name, str(CI / name))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module
