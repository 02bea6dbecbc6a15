"""Every public toykv function and class has a docstring: the API reference (book/api.md) is
generated from them. Public: listed in toykv.__all__ or in the __all__ of any toykv module.
Also: every toykv name a chapter links with {py:func}/{py:class}/{py:mod} exists.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import types
from pathlib import Path

import nbformat
import pytest

import toykv

ROOT = Path(__file__).resolve().parent.parent


def toykv_modules() -> list[types.ModuleType]:
    names = ["toykv"] + [m.name for m in pkgutil.walk_packages(toykv.__path__, "toykv.")]
    return [importlib.import_module(name) for name in names]


def undocumented(module: types.ModuleType) -> list[str]:
    """Public functions and classes of module (its __all__) that have no docstring of their
    own (a class does not inherit one from its base here)."""
    missing = []
    for name in getattr(module, "__all__", []):
        obj = getattr(module, name, None)
        if obj is None:
            missing.append(f"{module.__name__}.{name} (in __all__ but not defined)")
        elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
            if not (obj.__doc__ or "").strip():
                missing.append(f"{module.__name__}.{name}")
        elif inspect.isclass(obj):
            if not (obj.__dict__.get("__doc__") or "").strip():
                missing.append(f"{module.__name__}.{name}")
    return missing


@pytest.mark.parametrize("module", toykv_modules(), ids=lambda m: m.__name__)
def test_public_functions_and_classes_have_docstrings(module):
    missing = undocumented(module)
    assert not missing, (f"no docstring (book/api.md shows them; one or two lines saying what "
                         f"and why): {missing}")


def test_the_docstring_test_can_fail():
    fake = types.ModuleType("toykv.fake")

    def documented():
        """Says what."""

    def bare():
        pass

    class Bare:
        pass

    fake.documented, fake.bare, fake.Bare = documented, bare, Bare
    fake.__all__ = ["documented", "bare", "Bare", "gone"]
    assert undocumented(fake) == ["toykv.fake.bare", "toykv.fake.Bare",
                                  "toykv.fake.gone (in __all__ but not defined)"]


def _py_targets():
    found = []
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                for role, content in re.findall(r"\{py:(\w+)\}`([^`]+)`", cell.source):
                    target = re.sub(r"^.*<(.+)>$", r"\1", content).lstrip("~")
                    found.append((path.name, role, target))
    return found


@pytest.mark.parametrize("page, role, target", _py_targets() or [("none", "mod", "toykv")])
def test_chapter_api_links_name_real_objects(page, role, target):
    module_name, _, rest = target.partition(".")
    obj = importlib.import_module(module_name)
    for part in rest.split(".") if rest else []:
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(f"{obj.__name__}.{part}")
    kinds = {"func": callable, "meth": callable, "class": inspect.isclass,
             "mod": inspect.ismodule}
    assert kinds.get(role, lambda o: True)(obj), f"{page}: {{py:{role}}}`{target}` is a {type(obj)}"
