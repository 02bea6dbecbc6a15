"""BlockPoolView: replay a block pool filling and freeing as toykv's scheduler serves requests.

record_pool runs toykv.scheduler.run_real on a model's BlockPool with every iteration's block
owners recorded (the allocator's own state, toykv.paged), for two pool sizes: the one asked
for, and a small one (SMALL_POOL blocks, or fewer) where requests are preempted. frame_html
draws one recorded state. The widget is a slider and buttons over the recording; in the
rendered book its static twin (static/block_pool.js) draws the same states from the same data.
"""
from __future__ import annotations

import ipywidgets as widgets

from .. import scheduler, validate
from ..model import check_model
from . import _style as s
from .static_twin import page, twin_bundle

SMALL_POOL = 12                     # blocks of the second recorded run
MAX_REQUESTS = 16                   # requests a view replays, at most
OWNER_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000",
                 "#F0E442")        # Okabe-Ito; each block also shows its request's number
LIGHT_TEXT = (0, 6)                # white numbers on blue and black; black on the rest (AA)
FREE, FREE_BORDER = "#E8E8E8", "#767676"   # free blocks: grey, outlined 4.5:1 on white
MAX_BLOCKS = 256                    # blocks a view draws, at most
FRAME_KEYS = ("iteration", "kind", "owners", "used", "free", "running", "waiting", "held")


def record_pool(model, prompts, output_lens, num_blocks: int, block_size: int = 4,
                max_batch: int = 4, batching: str = "continuous") -> dict:
    """One run of run_real with the pool's block owners after every iteration:
    {'num_blocks', 'block_size', 'batching', 'preemptions', 'tokens': generated ids per
    request, 'frames': [{'iteration', 'kind', 'owners', 'used', 'free', 'running',
    'waiting', 'held'}]}; frame 0 is the empty pool."""
    check_model(model)
    if isinstance(prompts, (str, bytes, dict)) or not hasattr(prompts, "__len__"):
        raise ValueError(f"prompts must be a list of prompts (token ids), got "
                         f"{type(prompts).__name__}")
    if not 1 <= len(prompts) <= MAX_REQUESTS:
        raise ValueError(f"prompts: give 1 to {MAX_REQUESTS} prompts, got {len(prompts)}")
    num_blocks = validate.count("num_blocks", num_blocks, 1, MAX_BLOCKS)
    pool = model.new_paged_cache(num_blocks, block_size)
    out = scheduler.run_real(model, pool, prompts, output_lens, max_batch, batching,
                             record_blocks=True)
    frames = [{"iteration": 0, "kind": "start", "owners": [-1] * num_blocks, "used": 0,
               "free": num_blocks, "running": 0, "waiting": len(prompts), "held": 0}]
    for i, row in enumerate(out.trace, 1):
        used = sum(owner >= 0 for owner in row["owners"])
        frames.append({"iteration": i, "kind": row["kind"], "owners": row["owners"],
                       "used": used, "free": num_blocks - used, "running": row["batch"],
                       "waiting": row["waiting"], "held": row["held"]})
    return {"num_blocks": num_blocks, "block_size": pool.block_size, "batching": batching,
            "preemptions": out.preemptions,
            "tokens": [out.tokens[i] for i in range(len(prompts))], "frames": frames}


def frame_html(run: dict, i: int) -> str:
    """The pool in frame i of a recorded run: a square per block (its request's number and
    colour, grey when free) and the frame's figures; the twin's script draws the same."""
    frames = _check_run(run)
    i = validate.count("i", i, 0, len(frames) - 1)
    frame = frames[i]
    if not isinstance(frame, dict) or any(key not in frame for key in FRAME_KEYS):
        raise ValueError(f"run's frame {i} must be a dict with {FRAME_KEYS} (record_pool makes "
                         "them)")
    n = len(OWNER_COLOURS)
    cells = "".join(
        f"<div data-block='{b}' data-owner='{o}' title='block {b}: "
        f"{'free' if o < 0 else f'request {o}'}' style='width:26px;height:26px;display:flex;"
        f"align-items:center;justify-content:center;font-size:11px;border-radius:3px;"
        f"box-sizing:border-box;{f'border:1px dashed {FREE_BORDER};' if o < 0 else ''}"
        f"background:{FREE if o < 0 else OWNER_COLOURS[o % n]};"
        f"color:{'#FFFFFF' if o >= 0 and o % n in LIGHT_TEXT else '#000000'}'>"
        f"{'' if o < 0 else o}</div>" for b, o in enumerate(frame["owners"]))
    what = {"start": "the empty pool", "prefill": "a prefill of newly admitted requests",
            "decode": "one decode step of every running request"}[frame["kind"]]
    rows = [("iteration", f"<b data-quantity='iteration' data-value='{frame['iteration']}'>"
                          f"{frame['iteration']}</b> of {len(run['frames']) - 1}: {what}"),
            ("blocks used", _figure("used", frame["used"]) + f" of {run['num_blocks']}"),
            ("blocks free", _figure("free", frame["free"])),
            ("requests running", _figure("running", frame["running"])),
            ("requests waiting", _figure("waiting", frame["waiting"])),
            ("tokens held", _figure("held", frame["held"]) +
             f" in {frame['used'] * run['block_size']} slots")]
    return (f"<div style='display:grid;grid-template-columns:repeat(12,26px);gap:3px;"
            f"margin:4px 0' data-part='blocks' role='img' aria-label='{pool_words(run, i)}'>"
            f"{cells}</div>" + s.table(rows, "font-size:13px"))


def pool_words(run: dict, i: int) -> str:
    """The pool of frame i in words (the squares' label for screen readers), as the twin's
    script says it."""
    frame = run["frames"][i]
    owners = sorted({o for o in frame["owners"] if o >= 0})
    by = f" (by request{'s' if len(owners) > 1 else ''} {', '.join(map(str, owners))})" \
        if owners else ""
    return f"the pool's {run['num_blocks']} blocks: {frame['used']} used{by}, {frame['free']} free"


def _check_run(run) -> list:
    """The frames of a recording record_pool made; else a ValueError naming run."""
    if not isinstance(run, dict) or not isinstance(run.get("frames"), list) or \
            not run["frames"] or any(key not in run for key in ("num_blocks", "block_size")):
        raise ValueError(f"run must be a recording from record_pool (a dict with 'frames', "
                         f"'num_blocks' and 'block_size'), got {type(run).__name__}")
    return run["frames"]


def _figure(name, value) -> str:
    return f"<b data-quantity='{name}' data-value='{value}'>{value:,}</b>"


class BlockPoolView:
    """The block pool of a small run, replayed: Step, Reset, a slider over the iterations, and
    a choice of two pool sizes (num_blocks and a small one where requests are preempted)."""

    def __init__(self, model, prompts, output_lens, num_blocks: int = 24, block_size: int = 4,
                 max_batch: int = 4):
        num_blocks = validate.count("num_blocks", num_blocks, 1, MAX_BLOCKS)
        sizes = sorted({min(SMALL_POOL, num_blocks), num_blocks}, reverse=True)
        self.runs = {n: record_pool(model, prompts, output_lens, n, block_size, max_batch)
                     for n in sizes}
        self.pool_size = sizes[0]
        self.step_button = widgets.Button(description="Step", button_style="primary")
        self.reset_button = widgets.Button(description="Reset")
        self.slider = widgets.IntSlider(0, 0, len(self.run["frames"]) - 1,
                                        description="iteration")
        self.size = widgets.Dropdown(options=[(f"{n} blocks", n) for n in sizes],
                                     value=self.pool_size, description="pool")
        self.view = widgets.HTML()
        self.step_button.on_click(lambda _: self._go(self.slider.value + 1))
        self.reset_button.on_click(lambda _: self._go(0))
        self.slider.observe(lambda change: self._show(), names="value")
        self.size.observe(self._on_size, names="value")
        self.widget = widgets.VBox([widgets.HBox([self.step_button, self.reset_button,
                                                  self.size]), self.slider, self.view])
        self._show()

    @property
    def run(self) -> dict:
        return self.runs[self.pool_size]

    def _go(self, i: int):
        self.slider.value = max(0, min(i, len(self.run["frames"]) - 1))

    def _on_size(self, change):
        self.pool_size = change["new"]
        self.slider.max = len(self.run["frames"]) - 1
        self.slider.value = 0
        self._show()

    def _show(self):
        i = min(self.slider.value, len(self.run["frames"]) - 1)
        self.step_button.disabled = i == len(self.run["frames"]) - 1
        self.view.value = frame_html(self.run, i) + _note(self.run)

    def __repr__(self) -> str:
        return "BlockPoolView: " + ", ".join(
            f"{n} blocks: {len(r['frames']) - 1} iterations, {r['preemptions']} preemptions"
            for n, r in self.runs.items())

    def _repr_mimebundle_(self, **kwargs):
        """The widget, a text form, and in the book build its static twin."""
        return twin_bundle(self.widget, repr(self), lambda: block_pool_html(self))


def _note(run) -> str:
    return (f"<div class='toykv-hint' style='font-size:11px;color:#444'>{run['num_blocks']} "
            f"blocks of {run['block_size']} tokens, {run['batching']} batching; "
            f"{run['preemptions']} preemptions in this run. Recorded from toykv's allocator; "
            "every request's tokens equal its tokens alone.</div>")


def _check_view(view) -> BlockPoolView:
    if not isinstance(view, BlockPoolView):
        raise ValueError(f"view must be a BlockPoolView, got {type(view).__name__}")
    return view


def block_pool_data(view: BlockPoolView) -> dict:
    """What the twin replays: both recorded runs (without their tokens) and the colours."""
    _check_view(view)
    runs = {str(n): {k: v for k, v in r.items() if k != "tokens"} for n, r in view.runs.items()}
    return {"runs": runs, "sizes": [str(n) for n in view.runs], "colours": list(OWNER_COLOURS),
            "light_text": list(LIGHT_TEXT), "free": FREE, "free_border": FREE_BORDER, "state": {"size": str(view.pool_size), "iteration": view.slider.value}}


def block_pool_html(view: BlockPoolView) -> str:
    """The static twin: the controls, the recording and static/block_pool.js, one <div>."""
    data = block_pool_data(_check_view(view))
    options = "".join(f"<option value='{n}'{' selected' if n == data['state']['size'] else ''}>"
                      f"{n} blocks</option>" for n in data["sizes"])
    frames = len(view.run["frames"])
    body = ("<div class='toykv-controls'><button type='button' class='toykv-primary' "
            "data-control='step'>Step</button><button type='button' data-control='reset'>"
            "Reset</button><span><label for='{id}-size'>pool</label><select id='{id}-size' "
            f"data-control='size'>{options}</select></span></div><div class='toykv-controls'>"
            "<span style='flex:1 1 100%'><label for='{id}-iteration'>iteration</label>"
            "<input type='range' id='{id}-iteration' data-control='iteration' min='0' "
            f"max='{frames - 1}' step='1' value='0'></span></div><div data-part='view'></div>")
    return page("block-pool", "blockPool", data, body, "block pool")


__all__ = ["BlockPoolView", "record_pool", "frame_html", "pool_words", "block_pool_data",
           "block_pool_html"]
