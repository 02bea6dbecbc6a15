"""toykv's modules import one another without cycles, counting imports inside functions: a
module that needs another only inside a function still depends on it, and a cycle there is
one a reader must untangle by hand. The graph is read from the source with ast."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def modules(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under `package` (a package is its __init__)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict) -> set[str]:
    """The package's modules that module `name` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    top = next(iter(known)).split(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:                                   # from . import x, from ..y import z
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:                         # a submodule, or a name in base
                full = f"{base}.{alias.name}"
                targets.add(full if full in known else base)
    return {t for t in targets if t in known and t != name and t != top
            and not name.startswith(t + ".")}                # a package's own parents: not


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def import_graph(package: Path) -> dict[str, set[str]]:
    known = modules(package)
    return {name: imported(name, path, known) for name, path in known.items()}


def test_toykv_has_no_import_cycles():
    graph = import_graph(ROOT / "toykv")
    assert len(graph) > 40 and graph["toykv.model"] >= {"toykv.cache", "toykv.rope"}
    assert cycles(graph) == []


@pytest.mark.parametrize("names", [["model", "cache"], ["a", "b", "c"]])
def test_the_cycle_finder_finds_one_inside_a_function(tmp_path, names):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for i, name in enumerate(names):
        other = names[(i + 1) % len(names)]
        body = f"from . import {other}\n" if i else f"def f():\n    from .{other} import x\n"
        (package / f"{name}.py").write_text(body + "x = 1\n")
    (package / "free.py").write_text(f"from .{names[0]} import x\n")
    assert cycles(import_graph(package)) == [sorted(f"pkg.{n}" for n in names)]


def test_the_model_names_no_cache_kind():
    """model.py imports no kind (toykv.paged, toykv.policies, toykv.kinds.*) but the protocol's
    Seen; the attention it prints calls the cache once per layer."""
    graph = import_graph(ROOT / "toykv")
    assert not {m for m in graph["toykv.model"]
                if m in ("toykv.paged", "toykv.policies") or
                m.startswith("toykv.kinds.") and m != "toykv.kinds.base"}
    import inspect

    import toykv
    for form in (toykv.ToyTransformer.attention, toykv.ToyTransformer.mla_attention):
        source = inspect.getsource(form)
        assert source.count("cache.") == 1 and "attended" not in source
        assert "begin_step" not in inspect.getsource(toykv.ToyTransformer.forward)
