"""HTML for the attention view: one layer's and head's attention matrix as a heat map, its
figures and the newest row's weights, drawn from an AttentionFrame (attention_rows.py).

Rows are query positions, columns key positions. A cell's colour is matplotlib's cividis at
sqrt(weight) (sqrt spreads the many small weights of a long row); cividis is sequential and
grows lighter with the weight, so it reads in greyscale and for colour-blind readers. Masked
cells (a later key, or one outside a sliding window) stay blank inside a dark outline of the
cells attended. The rows this step computed carry a black and white frame; the strip above
the columns marks the keys read from the cache (blue) and those computed this step (orange,
lighter, outlined). static/attention_view.js draws the same picture in the static book.
"""
from __future__ import annotations

import math
from functools import cache

import numpy as np

from .. import validate
from . import _style as s
from .attention_rows import AttentionFrame, check_frame, difference_text

# matplotlib's cividis at 0, 1/8, ..., 1 (tests/test_attention_view.py checks them)
CIVIDIS = ("#00224e", "#1a386f", "#434e6c", "#61656f", "#7d7c78", "#9b9476", "#bcae6c",
           "#dec958", "#fee838")
SCALE_TICKS = (0, 0.01, 0.1, 0.25, 0.5, 1)       # labelled on the colour bar
LEGEND = {"cached": "keys and values read from the cache",
          "new": "keys and values computed this step",
          "rows": "rows computed this step",
          "masked": "blank: masked (a later key, or outside a sliding window)"}
LEFT, TOP, RIGHT = 30, 28, 74                   # px around the cells: labels, strip, marker


def cell_size(limit: int) -> int:
    """Pixels per cell: 14 up to 24 positions, smaller (at least 6) for more."""
    limit = validate.count("limit", limit, 1)
    return 14 if limit <= 24 else max(6, 336 // limit)


def label_every(limit: int) -> int:
    """Label every position up to 24, else every k-th (at most about 16 labels)."""
    limit = validate.count("limit", limit, 1)
    return 1 if limit <= 24 else math.ceil(limit / 16)


def weight_colour(weight: float) -> str:
    """cividis at sqrt(weight), interpolated between the nine stops in sRGB. weight: an
    attention weight, a number in [0, 1]."""
    weight = validate.number("weight", weight, 0.0, allow_minimum=True, maximum=1.0)
    t = math.sqrt(weight) * (len(CIVIDIS) - 1)
    k = min(int(t), len(CIVIDIS) - 2)
    f = t - k
    a, b = CIVIDIS[k], CIVIDIS[k + 1]
    rgb = [int(int(a[i:i + 2], 16) + (int(b[i:i + 2], 16) - int(a[i:i + 2], 16)) * f + 0.5)
           for i in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def _outline(frame: AttentionFrame, cell: int) -> str:
    """The path around the attended cells: down their right edges, up their left ones."""
    first = [int(np.argmax(row)) for row in ~np.isnan(frame.weights)]   # first attended key
    x = lambda j: LEFT + j * cell                    # noqa: E731
    y = lambda i: TOP + i * cell                     # noqa: E731
    path = [f"M{x(first[0])} {y(0)}"]
    for i in range(frame.positions):
        path.append(f"H{x(i + 1)}V{y(i + 1)}")
    for i in reversed(range(frame.positions)):
        path.append(f"H{x(first[i])}V{y(i)}")
    return f"<path d='{''.join(path)}Z' fill='none' stroke='#222222' stroke-width='1'/>"


def heatmap_svg(frame: AttentionFrame, limit: int) -> str:
    """The matrix (limit x limit positions, the first n filled) with its labels and marks."""
    limit = _check_limit(check_frame(frame), limit)
    cell, every, n = cell_size(limit), label_every(limit), frame.positions
    width, height = LEFT + limit * cell + RIGHT, TOP + limit * cell + 4
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
           f"viewBox='0 0 {width} {height}' role='img' aria-label='{s.esc(_summary(frame))}' "
           "style='background:#FFFFFF;max-width:100%;height:auto' font-family='sans-serif' "
           "data-part='heatmap'>"]
    for p in range(0, limit, every):
        colour = "#222222" if p < n else "#767676"
        out.append(f"<text x='{LEFT + p * cell + cell / 2}' y='10' font-size='9' "
                   f"text-anchor='middle' fill='{colour}'>{p}</text>"
                   f"<text x='{LEFT - 4}' y='{TOP + p * cell + cell / 2 + 3}' font-size='9' "
                   f"text-anchor='end' fill='{colour}'>{p}</text>")
    for j in range(frame.key_first, n):            # the strip: read from the cache, or new
        new = j >= frame.n_cached
        out.append(f"<rect x='{LEFT + j * cell}' y='14' width='{cell - 1}' height='9' "
                   f"fill='{s.ORANGE if new else s.BLUE}' stroke='{s.BLACK if new else s.BLUE}' "
                   f"stroke-width='1' data-column='{j}' data-source='{'new' if new else 'cache'}'/>")
    for i in range(n):
        for j in range(i + 1):
            w = frame.weights[i, j]
            if np.isnan(w):                          # not attended
                continue
            out.append(f"<rect x='{LEFT + j * cell}' y='{TOP + i * cell}' width='{cell - 1}' "
                       f"height='{cell - 1}' fill='{weight_colour(float(w))}'/>")
    out.append(_outline(frame, cell))
    y0, rows = TOP + frame.first_row * cell, frame.rows_computed * cell
    box = f"x='{LEFT - 1}' y='{y0 - 1}' width='{n * cell + 1}' height='{rows + 1}' fill='none'"
    out.append(f"<rect {box} stroke='#000000' stroke-width='3'/>"
               f"<rect {box} stroke='#FFFFFF' stroke-width='1'/>")
    out.append(f"<text x='{LEFT + n * cell + 6}' y='{y0 + rows / 2 + 4}' font-size='11' "
               f"fill='#222222'>&#9664; this step</text></svg>")
    return "".join(out)


def _check_limit(frame: AttentionFrame, limit) -> int:
    """limit: the positions the view has room for, at least the frame's."""
    return validate.count("limit", limit, frame.positions)


def _summary(frame: AttentionFrame) -> str:
    """The heat map's accessible name: what it shows, in words."""
    first, n = frame.first_row, frame.positions
    rows = f"row {first}" if frame.rows_computed == 1 else f"rows {first} to {n - 1}"
    return (f"Attention weights of layer {frame.layer}, head {frame.head}: {n} query rows by "
            f"{n} key columns; {rows} computed this step")


def _figure(name, value, shown) -> str:
    return f"<b data-quantity='{name}' data-value='{value!r}'>{shown}</b>"


def figures_html(frame: AttentionFrame) -> str:
    """The view's figures, each with data-quantity and its exact data-value."""
    f = check_frame(frame)
    rows = [("this step", "prefill" if f.phase == "prefill" else f"decode step {f.step}"),
            ("rows computed", _figure("rows_computed", f.rows_computed, f"{f.rows_computed:,}")
             + f" of {f.positions:,}"),
            ("weights computed", _figure("weights_computed", f.weights_computed,
                                         f"{f.weights_computed:,}")),
            ("keys read from the cache", _figure("cached_columns", f.cached_columns,
                                                 f"{f.cached_columns:,}")),
            ("keys computed this step", _figure("new_columns", f.new_columns,
                                                f"{f.new_columns:,}")),
            ("weights shown", _figure("cells_shown", f.cells_shown, f"{f.cells_shown:,}")),
            ("a recomputation computes",
             _figure("recompute_rows", f.recompute_rows, f"{f.recompute_rows:,}") + " rows, "
             + _figure("recompute_weights", f.recompute_weights, f"{f.recompute_weights:,}")
             + " weights"),
            ("max |difference|, this step's rows",
             _figure("new_rows_max_diff", f.new_rows_max_diff,
                     difference_text(f.new_rows_max_diff)))]
    if f.past_rows_max_diff is not None:
        rows.append(("max |difference|, earlier rows",
                     _figure("past_rows_max_diff", f.past_rows_max_diff,
                             difference_text(f.past_rows_max_diff))))
    return (s.table(rows, "font-size:13px") + "<div class='toykv-hint' style='font-size:11px;"
            "color:#444444;max-width:340px;margin-top:4px'>Differences compare the weights "
            "shown with those of a recomputation of the whole sequence without the cache."
            "</div>")


def new_row_html(frame: AttentionFrame) -> str:
    """The newest query's weights, key by key, as text (what the last row's colours show)."""
    check_frame(frame)
    items = "".join(
        f"<span style='display:inline-block;margin-right:10px;white-space:nowrap'>key {j}: "
        f"<span data-quantity='new_row_weight' data-key='{j}' data-value='{float(w)!r}'>"
        f"{float(w):.3f}</span></span>" for j, w in zip(frame.new_row_keys, frame.new_row))
    return (f"<div style='font-size:12px;max-width:760px;line-height:1.6;margin-top:6px'>"
            f"Weights of the "
            f"newest query (row {frame.positions - 1}): {items}</div>")


@cache
def legend_html() -> str:
    """The colour bar (weight on a square-root scale) and the marks, with their meanings
    (the same for every view: made once)."""
    bar_width, steps = 160, 32
    stripes = "".join(
        f"<rect x='{k * bar_width / steps}' y='0' width='{bar_width / steps + 0.5}' "
        f"height='10' fill='{weight_colour(((k + 0.5) / steps) ** 2)}'/>" for k in range(steps))
    ticks = "".join(
        f"<line x1='{math.sqrt(w) * bar_width}' y1='10' x2='{math.sqrt(w) * bar_width}' "
        f"y2='13' stroke='#222222'/><text x='{math.sqrt(w) * bar_width}' y='23' font-size='9' "
        f"text-anchor='middle' fill='#222222'>{w:g}</text>" for w in SCALE_TICKS)
    bar = (f"<svg xmlns='http://www.w3.org/2000/svg' width='{bar_width + 12}' height='25' "
           f"viewBox='-6 0 {bar_width + 12} 25' role='img' aria-label='colour scale: dark "
           f"blue for weight 0 to light yellow for weight 1, on a square-root scale' "
           f"style='vertical-align:middle' font-family='sans-serif'>{stripes}{ticks}</svg>")
    swatch = ("display:inline-block;vertical-align:middle;width:12px;height:9px;"
              "box-sizing:border-box;margin-right:4px")
    marks = [(f"background:{s.BLUE};border:1px solid {s.BLUE}", LEGEND["cached"]),
             (f"background:{s.ORANGE};border:1px solid {s.BLACK}", LEGEND["new"]),
             ("background:#FFFFFF;border:3px solid #000000;width:16px;height:12px",
              LEGEND["rows"]),
             ("background:#FFFFFF;border:1px solid #222222", LEGEND["masked"])]
    spans = "".join(f"<span style='display:inline-block;margin-right:12px;white-space:nowrap'>"
                    f"<span style='{swatch};{style}'></span>{s.esc(text)}</span>"
                    for style, text in marks)
    return (f"<div style='font-size:11px;line-height:1.7;max-width:760px'>attention weight "
            f"(colour: square root of the weight) {bar}<br>{spans}</div>")


def view_html(frame: AttentionFrame, limit: int) -> str:
    """Everything but the controls and the caption: heading, heat map, figures, newest row,
    legend."""
    _check_limit(check_frame(frame), limit)
    return (f"<div style='font-size:12px'><b>Attention</b>, layer {frame.layer}, head "
            f"{frame.head}: rows are queries, columns keys (positions)</div>"
            f"<div class='toykv-row' style='display:flex;flex-wrap:wrap;gap:12px 24px;"
            f"align-items:flex-start'><div>{heatmap_svg(frame, limit)}</div>"
            f"<div data-part='attention_figures'>{figures_html(frame)}</div></div>"
            f"{new_row_html(frame)}{legend_html()}")


def caption_html(frame: AttentionFrame) -> str:
    """The caption, in a live region: a screen reader announces what a step changed."""
    check_frame(frame)
    return (f"<div role='status' aria-live='polite' data-part='attention_caption' "
            f"style='font-size:13px;max-width:760px;margin:4px 0'>{s.esc(frame.caption)}</div>")
