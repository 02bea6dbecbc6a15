"""Find the asserts in a chapter whose operands come from a measured time.

A chapter may order two measured times only where toykv's counted bytes or FLOPs put them at
least 3x apart, and then by at most 1.5x (README, "A busy machine"). This module finds every
assert that reads a measurement, statically: a name is measured when it is assigned from a
call that times something (toykv.timing.best_seconds, toykv.steptime's curves, the machine
measurements of toykv.roofline, time.perf_counter, ...), from a Step's `.seconds`, from a
`"...seconds"` entry, or from any expression that reads a measured name (to a fixed point,
through loops, comprehensions, subscript assignments and appends, and through functions the
notebook defines that measure). tests/test_timing_claims.py compares what it finds with the
list of allowed timing asserts, each with the counted ratio that justifies it.

Run as a script to print every chapter's timing asserts: python tests/timing_claims.py
"""
from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# calls whose result is a measurement (matched on the name called, or its dotted tail)
MEASURING_CALLS = {
    "best_seconds", "step_time_curve", "prefill_time_curve", "steptime.measure_step_seconds",
    "measure_bandwidth", "measure_matmul_peak", "this_machine", "measure_decode",
    "measure_prefill", "timed_runs", "perf_counter", "process_time", "time.time", "monotonic",
    "update_latency", "measure_step", "measure_verify", "measured_point",
    "measure_steps", "measure_speedup",
}
# attributes and dictionary keys that hold a measured time
MEASURED_ATTRS = {"seconds", "propose_seconds", "copy_seconds"}
MEASURED_KEY = re.compile(r"seconds|first_token|tok_per_s|measured")


def _strip_magics(source: str) -> str:
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())


def _dotted(node: ast.AST) -> str:
    """'a.b.c' for a Name/Attribute chain, '' otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _is_measuring_call(call: ast.Call, local_measurers: set) -> bool:
    name = _dotted(call.func)
    if not name:
        return False
    tail = name.split(".")
    return (tail[-1] in MEASURING_CALLS or ".".join(tail[-2:]) in MEASURING_CALLS
            or name in local_measurers)


def _reads_measurement(node: ast.AST, measured: set, local_measurers: set) -> bool:
    """True when the expression reads a measured name or makes a measurement. x[key] holds
    what x holds, whatever the key (labels and contexts index measured tables); a
    comprehension's or lambda's own names hold what they are bound to, not what an outer name
    of the same spelling holds."""
    if isinstance(node, ast.Name):
        return node.id in measured and isinstance(node.ctx, ast.Load)
    if isinstance(node, ast.Call) and _is_measuring_call(node, local_measurers):
        return True
    if isinstance(node, ast.Attribute) and node.attr in MEASURED_ATTRS:
        return True
    if isinstance(node, ast.Subscript):
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) \
                and MEASURED_KEY.search(key.value):
            return True
        return _reads_measurement(node.value, measured, local_measurers)
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        inner = set(measured)
        for gen in node.generators:
            names = set(_targets(gen.target))
            if _reads_measurement(gen.iter, inner, local_measurers):
                inner |= names
            else:
                inner -= names
            if any(_reads_measurement(cond, inner, local_measurers) for cond in gen.ifs):
                return True
        parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
        return any(_reads_measurement(part, inner, local_measurers) for part in parts)
    if isinstance(node, ast.Lambda):
        own = {a.arg for a in node.args.args + node.args.kwonlyargs}
        return _reads_measurement(node.body, measured - own, local_measurers)
    return any(_reads_measurement(child, measured, local_measurers)
               for child in ast.iter_child_nodes(node))


def _targets(node: ast.AST) -> list[str]:
    """Names bound or mutated by an assignment target (x, x[i], x.attr, tuples of these)."""
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [name for elt in node.elts for name in _targets(elt)]
    if isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        return _targets(node.value)
    return []


def _measuring_functions(tree: ast.AST) -> set:
    """Names of the functions and lambdas the code defines whose body measures."""
    found, changed = set(), True
    while changed:
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                name, body = node.name, node
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
                names = _targets(node.targets[0])
                name, body = (names[0] if names else None), node.value
            else:
                continue
            if name and name not in found and any(
                    isinstance(sub, ast.Call) and _is_measuring_call(sub, found)
                    for sub in ast.walk(body)):
                found.add(name)
                changed = True
    return found


def _bind(targets: list, value: ast.AST, state: dict, plain: bool):
    """Record an assignment: the targets hold a measurement when the value reads one; a plain
    name assigned a value that reads none holds none from here on (a chapter often reuses a
    name for another quantity further down)."""
    tainted = _reads_measurement(value, state["measured"], state["local"])
    for name in targets:
        if tainted:
            state["measured"].add(name)
        elif plain:
            state["measured"].discard(name)


def _bind_loop(target: ast.AST, iterable: ast.AST, state: dict):
    """A for loop's target: in `for k, v in d.items()` and `for i, x in enumerate(xs)` only
    the value holds what the iterable holds, not the key or the index; in
    `for a, b in zip(xs, ys)` each holds what its own sequence holds."""
    pair = isinstance(target, ast.Tuple) and len(target.elts) == 2
    if pair and isinstance(iterable, ast.Call) and not iterable.args and isinstance(
            iterable.func, ast.Attribute) and iterable.func.attr == "items":
        _bind(_targets(target.elts[0]), ast.Constant(0), state, True)
        _bind_loop(target.elts[1], iterable.func.value, state)
    elif pair and isinstance(iterable, ast.Call) and _dotted(iterable.func) == "enumerate" \
            and iterable.args:
        _bind(_targets(target.elts[0]), ast.Constant(0), state, True)
        _bind_loop(target.elts[1], iterable.args[0], state)
    elif isinstance(target, ast.Tuple) and isinstance(iterable, ast.Call) \
            and _dotted(iterable.func) == "zip" and len(iterable.args) == len(target.elts):
        for part, source in zip(target.elts, iterable.args):
            _bind_loop(part, source, state)
    else:
        _bind(_targets(target), iterable, state, True)


def _mutations(node: ast.AST):
    """(names mutated, the call) for calls such as x.append(value) inside a statement."""
    for sub in ast.walk(node):
        if (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
                and sub.func.attr in ("append", "extend", "update", "add", "insert",
                                      "setdefault")):
            yield _targets(sub.func.value), sub


def _run(statements: list, state: dict, asserts: list):
    """Walk statements in order, as the notebook runs them, tracking measured names and
    collecting the asserts that read one."""
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue                                      # bodies run where they are called
        for names, call in _mutations(node):
            if _reads_measurement(call, state["measured"], state["local"]):
                state["measured"].update(names)
        for sub in ast.walk(node):                        # x := value, anywhere
            if isinstance(sub, ast.NamedExpr):
                _bind(_targets(sub.target), sub.value, state, True)
        if isinstance(node, ast.Assign):
            for target in node.targets:
                _bind(_targets(target), node.value, state, isinstance(target, ast.Name))
        elif isinstance(node, ast.AugAssign):
            _bind(_targets(node.target), node.value, state, False)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            _bind(_targets(node.target), node.value, state, isinstance(node.target, ast.Name))
        elif isinstance(node, ast.Assert):
            if _reads_measurement(node.test, state["measured"], state["local"]):
                asserts.append(node)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            for second in (False, True):                  # twice: a loop feeds itself
                _bind_loop(node.target, node.iter, state)
                _run(node.body, state, asserts if second else [])
            _run(node.orelse, state, asserts)
        elif isinstance(node, ast.While):
            for second in (False, True):
                _run(node.body, state, asserts if second else [])
            _run(node.orelse, state, asserts)
        elif isinstance(node, ast.If):
            _run(node.body, state, asserts)
            _run(node.orelse, state, asserts)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                if item.optional_vars is not None:
                    _bind(_targets(item.optional_vars), item.context_expr, state, True)
            _run(node.body, state, asserts)
        elif isinstance(node, ast.Try):
            for block in (node.body, *[h.body for h in node.handlers], node.orelse,
                          node.finalbody):
                _run(block, state, asserts)


def chapter_code(path: Path) -> str:
    """The notebook's code cells, magics removed, as one module."""
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join(_strip_magics("".join(c["source"])) for c in cells
                       if c["cell_type"] == "code")


def normalized(node: ast.AST) -> str:
    """An assert's test as one canonical line (ast.unparse), for the allow-list."""
    return ast.unparse(node)


def timing_asserts(path: Path) -> list[str]:
    """Every assert of the chapter whose test reads a measurement, as normalized source, in
    the order the chapter runs them (once each). toykv.check calls (the self-checks) are
    answers, not claims: left out."""
    tree = ast.parse(chapter_code(path))
    state = {"measured": set(), "local": _measuring_functions(tree)}
    asserts = []
    _run(tree.body, state, asserts)
    found = []
    for node in asserts:
        text = normalized(node.test)
        if not text.startswith("toykv.check.") and text not in found:
            found.append(text)
    return found


def chapters() -> list[Path]:
    return sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))


if __name__ == "__main__":
    for path in chapters() if len(sys.argv) < 2 else map(Path, sys.argv[1:]):
        for text in timing_asserts(path):
            print(f"{path.name[:2]}  {text}")
