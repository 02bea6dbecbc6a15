"""SizeCalculator: how big is the KV cache of a zoo model (or a pasted config.json)?

The widget only wires controls to size_report (size_report.py), which computes every number
it shows, and to the formatting in size_calculator_view.py. Any exception during an update
becomes a message in the widget, and the next change updates it again.
"""
from __future__ import annotations

import dataclasses

import ipywidgets as widgets

from .. import validate, zoo
from . import size_calculator_view as view
from ._controls import NumberText, Quiet, problem_text
from .static_twin import size_calculator_html, twin_bundle
from .size_report import (CONTEXTS, GPU_MEMORY_GIB, MAX_COUNT, PRECISIONS, VARIANTS,
                          default_kv_heads, model_from_config_json, size_report)

PASTE = "paste a config.json"
MAX_KV_HEADS = 100_000       # far above any model's heads; larger is a typo (checked first)

__all__ = ["SizeCalculator", "PASTE", "CONTEXTS", "VARIANTS", "PRECISIONS"]


class SizeCalculator:
    """The size-calculator widget. Set the controls (or the constructor's arguments) and read
    .report (a SizeReport, None after a problem), .values (the report as a dict), .texts (its
    numbers as shown) and .message (a problem, or notes on the answer).

    gpu_memory_gib is the GPU's memory as the card reports it, in GiB (2^30 bytes; an A100
    80GB reports 80, an H100 80GB 79.6), from 0.01 to 10^6 GiB. batch is at most 10^9 sequences, kv_heads at most MAX_KV_HEADS
    (and a divisor of the model's query heads).
    """

    def __init__(self, model: str = "llama-3.1-8b", variant: str = "as built",
                 kv_heads: int | None = None, bytes_per_value=2, context: int = 8192,
                 batch: int = 16, gpu_memory_gib=80, config_json: str = ""):
        gpu = gpu_memory_gib
        if model != PASTE:
            zoo.get(model)                                    # KeyError for an unknown name
        validate.choice("variant", variant, [key for _, key in VARIANTS])
        validate.choice("bytes_per_value", bytes_per_value, [b for _, b in PRECISIONS])
        validate.choice("context", context, CONTEXTS)
        validate.count("batch", batch, 1, MAX_COUNT)
        validate.optional_count("kv_heads", kv_heads, 1, MAX_KV_HEADS)
        validate.number("gpu_memory_gib", gpu, GPU_MEMORY_GIB[0], allow_minimum=True,
                        maximum=GPU_MEMORY_GIB[1])
        if not isinstance(config_json, str):
            raise ValueError(f"config_json must be a string (a config.json's text), got "
                             f"{type(config_json).__name__}")
        self._quiet = Quiet()
        self.report, self.error, self.notes = None, "", []
        with self._quiet:
            self._build_controls(model, variant, bytes_per_value, context, batch, gpu,
                                 config_json)
            self.kv_heads.value = kv_heads if kv_heads is not None else self._default_kv_heads()
        self.update()

    # -- controls ---------------------------------------------------------------
    def _build_controls(self, model, variant, bytes_per_value, context, batch, gpu, text):
        wide = {"description_width": "initial"}
        options = [(name + ("" if zoo.get(name).verified else " (unverified)"), name)
                   for name in zoo.names()] + [(PASTE, PASTE)]
        self.model = widgets.Dropdown(options=options, value=model, description="model",
                                      style=wide)
        self.config_json = widgets.Textarea(
            value=text, placeholder='{"model_type": "llama", "hidden_size": 4096, ...}',
            description="config.json", style=wide, continuous_update=False,
            layout=widgets.Layout(width="95%", height="120px"))
        self.variant = widgets.Dropdown(options=VARIANTS, value=variant, description="attention",
                                        style=wide)
        self.kv_heads = NumberText(value=1, description="KV heads (GQA)", style=wide,
                                   layout=widgets.Layout(width="160px"))
        self.precision = widgets.Dropdown(options=PRECISIONS, value=bytes_per_value,
                                          description="KV precision", style=wide)
        self.context = widgets.SelectionSlider(
            options=[(f"{n:,}" + (" (10^6)" if n == 10 ** 6 else ""), n) for n in CONTEXTS],
            value=context, description="context (tokens per sequence)", style=wide,
            continuous_update=False, layout=widgets.Layout(width="95%"))
        self.batch = NumberText(value=batch, description="batch (sequences)", style=wide,
                                layout=widgets.Layout(width="200px"))
        self.gpu_memory_gib = NumberText(
            value=gpu, description="GPU memory (GiB)", style=wide,
            tooltip="GiB = 2^30 bytes, as the card reports it: an A100 80GB 80, an H100 "
                    "80GB 79.6",
            layout=widgets.Layout(width="200px"))
        self.message_box = widgets.HTML()
        self.numbers = widgets.HTML(layout=widgets.Layout(min_width="330px"))
        self.plot = widgets.HTML()
        self.variants_table = widgets.HTML()
        self.terms = widgets.HTML(view.terms_html())
        self.source = widgets.HTML()
        for control in (self.model, self.config_json, self.variant, self.kv_heads, self.precision,
                        self.context, self.batch, self.gpu_memory_gib):
            control.observe(self._on_change, names="value")
        self.widget = widgets.VBox([
            widgets.HBox([self.model, self.variant, self.kv_heads],
                         layout=widgets.Layout(flex_flow="row wrap")),
            self.config_json,
            widgets.HBox([self.precision, self.batch, self.gpu_memory_gib],
                         layout=widgets.Layout(flex_flow="row wrap")),
            self.context, self.message_box,
            widgets.HBox([self.numbers, self.plot], layout=widgets.Layout(flex_flow="row wrap")),
            self.variants_table, self.terms, self.source])

    def _on_change(self, change):
        if self._quiet:
            return
        try:
            if change["owner"] in (self.model, self.config_json) or (
                    change["owner"] is self.variant and change["new"] == "gqa"):
                with self._quiet:                   # a new model: its own GQA default
                    self.kv_heads.value = self._default_kv_heads()
        except Exception as err:                    # noqa: BLE001 - shown, never raised
            self._show_problem(problem_text(err))
            return
        self.update()

    def _default_kv_heads(self):
        """The model's own KV heads if it is GQA, else a divisor of n_heads near n_heads / 4;
        the current value while the model cannot be read."""
        try:
            return default_kv_heads(self._base_model().config)
        except ValueError:
            return self.kv_heads.value

    def _base_model(self) -> zoo.ZooModel:
        """The chosen zoo entry, or the pasted config.json read by toykv.hfconfig."""
        if self.model.value != PASTE:
            return zoo.get(self.model.value)
        return model_from_config_json(self.config_json.value)

    # -- computing and showing ---------------------------------------------------------
    def update(self):
        """Recompute everything from the controls and redraw; any problem shows a message."""
        try:
            self.config_json.layout.display = "" if self.model.value == PASTE else "none"
            self.kv_heads.layout.display = "" if self.variant.value == "gqa" else "none"
            base = self._base_model()
            report = size_report(base, self.variant.value, self.precision.value,
                                 self.context.value, self.batch.value, self.gpu_memory_gib.value,
                                 self.kv_heads.value)
            shown = (view.texts(report), view.notes(report), view.numbers_html(report),
                     view.variants_html(report),
                     view.source_html(base, pasted=self.model.value == PASTE),
                     view.plot_svg(report))
        except Exception as err:                    # noqa: BLE001 - shown, never raised
            self._show_problem(problem_text(err))
            return
        self.report, self.error = report, ""
        self.texts, self.notes = shown[0], shown[1]
        self.message_box.value = view.message_html("", self.notes)
        self.numbers.value, self.variants_table.value, self.source.value = shown[2:5]
        self.plot.value = shown[5]
        self.plot.layout.display = ""

    def _show_problem(self, text):
        self.report, self.error, self.notes, self.texts = None, text, [], {}
        self.message_box.value = view.message_html(text, [])
        self.numbers.value = self.variants_table.value = self.source.value = ""
        self.plot.layout.display = "none"

    @property
    def values(self) -> dict:
        """The report as a dict ({} after a problem)."""
        return dataclasses.asdict(self.report) if self.report else {}

    @property
    def message(self) -> str:
        """The text of the message area: a problem, or notes (empty when there is nothing)."""
        return "\n".join([self.error] if self.error else self.notes)

    def __repr__(self) -> str:
        if self.error:
            return f"SizeCalculator: {self.error}"
        r, t = self.report, self.texts
        return (f"SizeCalculator: {r.model}, {r.variant} ({r.attention}), "
                f"{r.bytes_per_value:g} bytes/value, {r.batch:,} x {r.context:,} tokens: "
                f"{t['bytes_per_token']} per token, whole batch {t['batch_bytes']}")

    def _repr_mimebundle_(self, **kwargs):
        """Display the widget (a bare SizeCalculator() at the end of a cell shows it), with a
        readable text form and, in the book build, its static twin."""
        return twin_bundle(self.widget, repr(self), lambda: size_calculator_html(self))
