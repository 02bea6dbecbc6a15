"""HTML for the cache-fill widget: the grid of cache cells with its legend, and the numbers.

Plain HTML with inline styles, so the saved widget state shows the same picture in the
static book. Colours: sky blue (prefill, outlined in a darker blue that stands 3.9:1 on
white, as WCAG 1.4.11 asks of a graphic's parts) and blue (decode) differ in lightness; this step's
cells are orange with black hatching; empty cells are white with a dashed outline; cells a
sliding window dropped are white with thin grey stripes the other way. Prefill, decode, this
step's orange and empty stay at least 20 CIELAB units apart under simulated protanopia,
deuteranopia and tritanopia (tests/test_widgets.py); the two patterned states differ by their
texture as well, which survives greyscale.
"""
from __future__ import annotations

from . import _style as s

STATES = ("prefill", "decode", "this", "empty", "evicted")

_HATCH = f"repeating-linear-gradient(135deg, {s.ORANGE} 0 3px, {s.BLACK} 3px 4.5px)"
_STRIPES = "repeating-linear-gradient(45deg, #FFFFFF 0 3px, #999999 3px 4px)"   # evicted
CELL_CSS = {                     # state -> (background, border)
    "prefill": (s.SKY_BLUE, "1px solid #2F89BD"),
    "decode": (s.BLUE, f"1px solid {s.BLUE}"),
    "this": (_HATCH, f"1px solid {s.BLACK}"),
    "empty": ("#FFFFFF", "1px dashed #888888"),
    "evicted": (_STRIPES, "1px dotted #555555"),
}
LEGEND = {
    "prefill": "written by prefill",
    "decode": "written by earlier decode steps",
    "this": "written this step",
    "empty": "empty (not yet written)",
    "evicted": "dropped by a sliding window",
}
_LABEL = "font-weight:normal;text-align:right;padding-right:6px;white-space:nowrap"
_CELL = "width:14px;height:14px;padding:0;box-sizing:border-box"


def _swatch(state, size=14) -> str:
    background, border = CELL_CSS[state]
    return f"width:{size}px;height:{size}px;box-sizing:border-box;background:{background};" \
           f"border:{border}"


def grid_html(row_labels, cells, what_rows, show_evicted) -> str:
    """The grid: a header of positions, then one row of cells per label; a legend below."""
    n = len(cells[0])
    head = "".join(f"<th style='font-weight:normal;text-align:center'>{p}</th>" for p in range(n))
    rows = []
    for label, row in zip(row_labels, cells):
        tds = "".join(f"<td title='{s.esc(label)}, position {p}: {LEGEND[state]}' "
                      f"style='{_CELL};{_swatch(state)}'></td>" for p, state in enumerate(row))
        rows.append(f"<tr><th style='{_LABEL}'>{s.esc(label)}</th>{tds}</tr>")
    table = (f"<table style='border-collapse:separate;border-spacing:2px;font-size:10px;"
             f"font-family:monospace;line-height:1;margin:4px 0'>"
             f"<tr><th style='{_LABEL}'>pos</th>{head}</tr>{''.join(rows)}</table>")
    shown = [st for st in STATES if st != "evicted" or show_evicted]
    legend = "".join(
        f"<span style='display:inline-block;margin-right:12px;white-space:nowrap'>"
        f"<span style='display:inline-block;vertical-align:middle;{_swatch(st, 12)}'></span> "
        f"{LEGEND[st]}</span>" for st in shown)
    return (f"<div style='font-size:12px'><b>KV cache</b>: one row per layer and {what_rows}, "
            f"one column per position{table}<div style='line-height:1.6;max-width:560px'>"
            f"{legend}</div></div>")


def stats_html(fill) -> str:
    """The numbers beside the grid, read from a CacheFill."""
    n = len(fill.tokens)
    if fill.phase == "prefill":
        what, cached_label = f"prefill of the {n}-token prompt", "FLOPs, prefill (empty cache)"
    else:
        what = f"decode step {n - fill.prompt_len}: token {fill.tokens[-1]} at position {n - 1}"
        cached_label = "FLOPs, this step with the cache"
    check = ("equal the toykv.flops formulas" if fill.flops_match_formulas else
             f"<b>differ from toykv.flops</b> ({s.integer(fill.flops_cached_formula)} and "
             f"{s.integer(fill.flops_uncached_formula)})")
    ratio = fill.flops_uncached / fill.flops_cached
    diff = "0 (identical bits)" if fill.max_abs_diff == 0 else f"{fill.max_abs_diff:.2e}"
    rows = [("cached positions", f"<b>{fill.positions}</b> of {fill.limit}"),
            ("this step", s.esc(what)),
            (cached_label, f"<b>{s.integer(fill.flops_cached)}</b>"),
            (f"FLOPs, full pass over all {n} tokens",
             f"<b>{s.integer(fill.flops_uncached)}</b> ({ratio:.1f}x)"),
            ("FLOP counts", check),
            ("max |logit difference|", f"<b>{diff}</b>")]
    return (f"<div style='font-size:13px;line-height:1.35'>{s.table(rows)}"
            f"<div style='font-size:11px;color:#444;margin-top:4px;max-width:360px'>FLOPs: "
            f"matrix-product FLOPs counted by the model as it runs (2 per multiply-add). The "
            f"logit difference compares this step's cached logits with those of a full "
            f"recomputation of the whole sequence without a cache.</div></div>")
