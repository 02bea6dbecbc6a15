"""How long one widget update takes: the median over several updates, for a benchmark to call."""
from __future__ import annotations

import statistics
import time

from .. import validate
from .cache_fill import CacheFill
from .size_calculator import CONTEXTS, PASTE, VARIANTS, SizeCalculator


MAX_REPEATS = 1000


def _seconds(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def update_latency(repeats: int = 10) -> dict[str, float]:
    """Median seconds of `repeats` updates each: a CacheFill Step click (the cache grid and
    the attention view, from the two forward passes of the step), a CacheFill Reset click, a
    change of the attention view's layer or head (in turn), and a SizeCalculator control
    change (context, attention variant and model in turn).

    Widgets are built first (not timed): this is what a reader waits for after a click.
    repeats is at most MAX_REPEATS (1,000: about a minute).
    """
    repeats = validate.count("repeats", repeats, 1, MAX_REPEATS)
    fill = CacheFill()
    steps = []
    for _ in range(repeats):                         # steps at growing context, wrapping round
        if fill.at_limit:
            fill.reset()
        steps.append(_seconds(fill.step_button.click))
    resets = [_seconds(fill.reset_button.click) for _ in range(repeats)]
    for _ in range(3):                               # a decode step's view, not the prefill's
        fill.step_button.click()
    views = []
    for i in range(repeats):
        menu = fill.head_select if i % 2 else fill.layer_select
        new = (menu.index + 1) % len(menu.options)
        views.append(_seconds(lambda: setattr(menu, "index", new)))
    calc = SizeCalculator()
    changes = []
    turns = [(calc.context, CONTEXTS), (calc.variant, [v for _, v in VARIANTS]),
             (calc.model, [name for _, name in calc.model.options if name != PASTE])]
    for i in range(repeats):
        control, options = turns[i % len(turns)]
        new = options[(options.index(control.value) + 1) % len(options)]
        changes.append(_seconds(lambda: setattr(control, "value", new)))
    return {"cache_fill_step": statistics.median(steps),
            "cache_fill_reset": statistics.median(resets),
            "attention_layer_head": statistics.median(views),
            "size_calculator_change": statistics.median(changes)}
