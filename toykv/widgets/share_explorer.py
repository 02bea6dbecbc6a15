"""ShareExplorer: the KV share and the relative decode speed against context, for zoo models.

Pick up to six models and a context; the widget draws the share of a decode step's bytes
that is cache, and 1 - share, the decode speed against an empty cache when memory
bandwidth is the limit (chapter 8), from 1,000 to 1,000,000 tokens, and reads both at the
chosen context. Every number is toykv.sizing.kv_share's (bf16 cache and weights, batch 1).
Lines are solid up to the model's published maximum context and dotted beyond it.
"""
from __future__ import annotations

import itertools

import ipywidgets as widgets
import numpy as np

from .. import sizing, validate, zoo
from . import _style as s
from ._controls import Quiet, problem_text
from ._svg_plot import Marker, Series, loglog_svg
from .share_explorer_view import (BEYOND_DASH, DEFAULT_MODELS, MAX_MODELS, MODEL_STYLES,
                                  PERCENT_TICKS, SHARE_CONTEXTS)
from .static_twin import share_explorer_html, twin_bundle



def readings(models, context: int) -> list[dict]:
    """The share and relative decode speed of each model at `context` (bf16, batch 1):
    1 to MAX_MODELS distinct zoo names, and one of SHARE_CONTEXTS."""
    models = check_models(models)
    context = check_context(context)
    rows = []
    for name in models:
        model = zoo.get(name)
        share = sizing.kv_share(model, context)
        rows.append({"model": name, "kv_share": share, "relative_decode_speed": 1 - share,
                     "within": context <= model.config.max_seq_len,
                     "max_seq_len": model.config.max_seq_len})
    return rows


def check_context(context) -> int:
    """context, if it is one of SHARE_CONTEXTS given as an integer (not 100000.0)."""
    return validate.choice("context", validate.count("context", context, 1), SHARE_CONTEXTS)


def check_models(models) -> tuple[str, ...]:
    """1 to MAX_MODELS distinct zoo names, in the order given."""
    if isinstance(models, (str, bytes, dict)) or not hasattr(models, "__iter__"):
        raise ValueError(f"models must be a list of zoo names, got {models!r}")
    models = tuple(itertools.islice(models, MAX_MODELS + 1))
    if not all(isinstance(m, str) for m in models):
        raise ValueError(f"models must be a list of zoo names (str), got {models!r:.80}")
    models = tuple(str(m) for m in models)                  # numpy's str_ as a str
    if not 1 <= len(models) <= MAX_MODELS:
        given = len(models) if len(models) <= MAX_MODELS else f"more than {MAX_MODELS}"
        raise ValueError(f"choose 1 to {MAX_MODELS} models (the plot tells at most "
                         f"{MAX_MODELS} apart), got {given}")
    if len(set(models)) != len(models):
        raise ValueError(f"models must be different, got {models}")
    for name in models:
        zoo.get(name)                                 # KeyError with close matches
    return models


def plots_svg(models, context: int) -> str:
    """Two panels, share and relative speed against context, with the reading marked."""
    panels = []
    for key, title, label in (("kv_share", "KV share of a decode step", "KV share"),
                              ("relative_decode_speed", "relative decode speed (1 - share)",
                               "speed vs empty cache")):
        series, markers = [], []
        for (colour, shape), name, reading in zip(MODEL_STYLES, models,
                                                  readings(models, context)):
            shares, within = _curve(name)
            ys = shares if key == "kv_share" else 1 - shares
            inside = [i for i, ok in enumerate(within) if ok]
            beyond = [i for i, ok in enumerate(within) if not ok]
            if inside and beyond:                     # the dotted part starts where solid ends
                beyond = [inside[-1]] + beyond
            label = f"{name} ({zoo.get(name).config.attention.upper()})"
            for part, dash in ((inside, ""), (beyond, BEYOND_DASH)):
                if part:                              # the legend names the first part only
                    series.append(Series(label, colour, dash, 2.0,
                                         tuple(SHARE_CONTEXTS[i] for i in part),
                                         tuple(float(ys[i]) for i in part), shape=shape))
                    label = ""
            markers.append(Marker("", context, reading[key], colour, shape))
        series.append(Series(f"{context:,} tokens", s.BLACK, "4 2", 1.0, x=context))
        panels.append(loglog_svg(series, markers, title, "context (tokens)", label,
                                 width=600, height=330, ylinear=(0, 1), yticks=PERCENT_TICKS))
    return "<div>" + "<br>".join(panels) + "</div>"


def _curve(name):
    """The share at every SHARE_CONTEXTS context, and whether each is within the model's
    maximum context."""
    model = zoo.get(name)
    contexts = np.array(SHARE_CONTEXTS)
    return sizing.kv_share(model, contexts), contexts <= model.config.max_seq_len


def readings_html(models, context: int) -> str:
    rows = "".join(
        f"<tr><td style='padding:1px 10px 1px 0'>{s.esc(r['model'])}</td>"
        f"<td style='padding:1px 10px'><b>{100 * r['kv_share']:.1f}%</b></td>"
        f"<td style='padding:1px 10px'><b>{r['relative_decode_speed']:.3f}</b></td>"
        f"<td style='padding:1px 10px'>{r['max_seq_len']:,}"
        f"{'' if r['within'] else ' (beyond it)'}</td></tr>" for r in readings(models, context))
    return (f"<div style='font-size:13px'><b>At {context:,} tokens</b> (bf16 cache and weights, "
            f"batch 1)<table style='border-collapse:collapse'><tr><th style='text-align:left'>"
            f"model</th><th>KV share</th><th>relative decode speed</th><th>maximum context"
            f"</th></tr>{rows}</table></div>")


class ShareExplorer:
    """The KV share explorer (chapter 8). models: 1 to 6 zoo names; context: one of
    SHARE_CONTEXTS (1,000 to 1,000,000 tokens, 61 steps). Read .readings for the numbers."""

    def __init__(self, models=DEFAULT_MODELS, context: int = 100_000):
        self.models_chosen = check_models(models)
        self.context_chosen = check_context(context)
        self._quiet = Quiet()
        self.error = ""
        wide = {"description_width": "initial"}
        self.models = widgets.SelectMultiple(options=zoo.names(), value=self.models_chosen,
                                             rows=8, description="models", style=wide)
        self.context = widgets.SelectionSlider(
            options=[(f"{n:,}", n) for n in SHARE_CONTEXTS], value=self.context_chosen,
            description="context (tokens)", style=wide, continuous_update=False,
            layout=widgets.Layout(width="95%"))
        self.message_box = widgets.HTML()
        self.table = widgets.HTML()
        self.plot = widgets.HTML()
        hint = widgets.HTML("<span style='font-size:11px'>Ctrl- or Shift-click to choose "
                            f"several models (at most {MAX_MODELS}).</span>")
        for control in (self.models, self.context):
            control.observe(self._on_change, names="value")
        self.widget = widgets.VBox([widgets.HBox([self.models, hint]), self.context,
                                    self.message_box, self.table, self.plot])
        self.update()

    def _on_change(self, change):
        if not self._quiet:
            self.update()

    def update(self):
        """Recompute from the controls; a problem (no model, too many) shows a message."""
        try:
            models = check_models(self.models.value)
            context = check_context(self.context.value)
            shown = readings_html(models, context), plots_svg(models, context)
        except Exception as err:                    # noqa: BLE001 - shown, never raised
            self.error = problem_text(err)
            self.message_box.value = s.problem_html(self.error)
            return
        self.models_chosen, self.context_chosen, self.error = models, context, ""
        self.message_box.value = ""
        self.table.value, self.plot.value = shown

    @property
    def readings(self) -> list[dict]:
        """The numbers at the chosen context, one dict per model (those of the last update
        that worked)."""
        return readings(self.models_chosen, self.context_chosen)

    @property
    def message(self) -> str:
        return self.error

    def __repr__(self) -> str:
        parts = ", ".join(f"{r['model']} {100 * r['kv_share']:.1f}%" for r in self.readings)
        return f"ShareExplorer: KV share at {self.context_chosen:,} tokens (bf16, batch 1): {parts}"

    def _repr_mimebundle_(self, **kwargs):
        """Display the widget, with a readable text form and, in the book build, its static
        twin."""
        return twin_bundle(self.widget, repr(self), lambda: share_explorer_html(self))
