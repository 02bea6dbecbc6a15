"""SizeCalculator: how big is the KV cache of a zoo model (or a pasted config.json)?

Every number comes from toykv.sizing on a ModelConfig; the widget only picks the config
(the model as built, or a counterfactual attention variant with the same layers, heads and
head_dim), the bytes per value, the context and the batch, and formats the answers.
"""
from __future__ import annotations

import dataclasses
import json
import os

import ipywidgets as widgets
import numpy as np

from .. import hfconfig, sizing, zoo
from . import _style as s
from ._plot import KVPlot
from .size_calculator_view import message_html, numbers_html, source_html, variants_html

PASTE = "paste a config.json"
PASTED_NAME = "pasted config.json"
VARIANTS = (("as built", "as built"), ("MHA", "mha"), ("GQA", "gqa"), ("MQA", "mqa"),
            ("MLA (DeepSeek-V2 latent 512 + 64)", "mla"))
MLA_LATENT = dict(kv_lora_rank=512, rope_head_dim=64)     # DeepSeek-V2, arXiv:2405.04434 Table 1
PRECISIONS = (("fp32 (4 bytes)", 4), ("bf16 (2 bytes)", 2), ("fp8 (1 byte)", 1),
              ("int4 (0.5 bytes)", 0.5))
CONTEXTS = tuple(sorted([2 ** k for k in range(10, 23)] + [10 ** 6]))   # 1,024 ... 4,194,304
GPU_PRESETS_GB = (24, 40, 48, 80, 94, 141, 192)
BYTES_PER_PARAM = 2                                           # weights at bf16
PLOT_CONTEXTS = np.unique(np.geomspace(CONTEXTS[0], CONTEXTS[-1], 64).round().astype(int))


class SizeCalculator:
    """The size-calculator widget. Set the controls (or the constructor's arguments) and read
    .values (numbers), .texts (the strings shown) and .message (problems and notes)."""

    def __init__(self, model: str = "llama-3.1-8b", variant: str = "as built",
                 kv_heads: int | None = None, bytes_per_value=2, context: int = 8192,
                 batch: int = 16, gpu_gb=80, config_json: str = ""):
        if model != PASTE:
            zoo.get(model)                                    # KeyError for an unknown name
        _check_choice("variant", variant, [v for _, v in VARIANTS])
        _check_choice("bytes_per_value", bytes_per_value, [v for _, v in PRECISIONS])
        _check_choice("context", context, CONTEXTS)
        if isinstance(gpu_gb, bool) or not isinstance(gpu_gb, (int, float)) or not gpu_gb > 0:
            raise ValueError(f"gpu_gb must be a number > 0, got {gpu_gb!r}")
        self._plot = KVPlot()
        self._quiet = True
        self._build_controls(model, variant, bytes_per_value, context, batch, gpu_gb, config_json)
        self.kv_heads.value = kv_heads if kv_heads is not None else self._default_kv_heads()
        self._quiet = False
        self.update()

    # -- controls ---------------------------------------------------------------
    def _build_controls(self, model, variant, bytes_per_value, context, batch, gpu_gb, text):
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
        self.kv_heads = widgets.IntText(value=1, description="KV heads (GQA)", style=wide,
                                        layout=widgets.Layout(width="160px"))
        self.precision = widgets.Dropdown(options=PRECISIONS, value=bytes_per_value,
                                          description="KV precision", style=wide)
        self.context = widgets.SelectionSlider(
            options=[(f"{n:,}" + (" (10^6)" if n == 10 ** 6 else ""), n) for n in CONTEXTS],
            value=context, description="context (tokens per sequence)", style=wide,
            continuous_update=False, layout=widgets.Layout(width="95%"))
        self.batch = widgets.IntText(value=batch, description="batch (sequences)", style=wide,
                                     layout=widgets.Layout(width="200px"))
        gpus = sorted(set(GPU_PRESETS_GB) | {gpu_gb})
        self.gpu_gb = widgets.Dropdown(options=[(f"{g:g} GB", g) for g in gpus], value=gpu_gb,
                                       description="GPU memory", style=wide)
        self.message_box = widgets.HTML()
        self.numbers = widgets.HTML(layout=widgets.Layout(min_width="330px"))
        self.image = widgets.Image(format="png", layout=widgets.Layout(width="640px"))
        self.variants_table = widgets.HTML()
        self.source = widgets.HTML()
        for control in (self.model, self.config_json, self.variant, self.kv_heads, self.precision,
                        self.context, self.batch, self.gpu_gb):
            control.observe(self._on_change, names="value")
        self.widget = widgets.VBox([
            widgets.HBox([self.model, self.variant, self.kv_heads],
                         layout=widgets.Layout(flex_flow="row wrap")),
            self.config_json,
            widgets.HBox([self.precision, self.batch, self.gpu_gb],
                         layout=widgets.Layout(flex_flow="row wrap")),
            self.context, self.message_box,
            widgets.HBox([self.numbers, self.image], layout=widgets.Layout(flex_flow="row wrap")),
            self.variants_table, self.source])

    def _on_change(self, change):
        if self._quiet:
            return
        if change["owner"] in (self.model, self.config_json) or (
                change["owner"] is self.variant and change["new"] == "gqa"):
            self._quiet = True                      # a new model: its own GQA default
            self.kv_heads.value = self._default_kv_heads()
            self._quiet = False
        self.update()

    def _default_kv_heads(self) -> int:
        """The model's own KV heads if it is GQA, else a divisor of n_heads near n_heads / 4."""
        try:
            config = self._base_model().config
        except (ValueError, KeyError, TypeError, AttributeError):
            return 8
        if config.attention == "gqa":
            return config.n_kv_heads
        divisors = [d for d in range(2, config.n_heads) if config.n_heads % d == 0]
        return min(divisors, key=lambda d: abs(d - config.n_heads / 4)) if divisors else 1

    # -- the model and its variant -----------------------------------------------
    def _base_model(self) -> zoo.ZooModel:
        """The chosen zoo entry, or the pasted config.json read by toykv.hfconfig."""
        if self.model.value != PASTE:
            return zoo.get(self.model.value)
        text = self.config_json.value.strip()
        if not text:
            raise ValueError("Paste the contents of a config.json into the box above.")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"The pasted text is not valid JSON: {err}") from None
        if not isinstance(data, dict):
            raise ValueError(f"config.json must hold a JSON object {{...}}, got a "
                             f"{type(data).__name__}")
        name = os.path.basename(str(data.get("_name_or_path", ""))) or PASTED_NAME
        try:
            return hfconfig.from_hf_config(data, name)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"Could not read the pasted config.json: {_text(err)}") from None

    def _variant(self, base: zoo.ZooModel, variant: str) -> zoo.ZooModel:
        """base with its attention replaced by `variant` (same layers, heads and head_dim)."""
        if variant == "as built":
            return base
        heads = base.config.n_heads
        kv_heads = {"mha": heads, "gqa": self.kv_heads.value, "mqa": 1, "mla": None}[variant]
        latent = MLA_LATENT if variant == "mla" else dict(kv_lora_rank=None, rope_head_dim=None)
        try:
            config = dataclasses.replace(base.config, attention=variant, n_kv_heads=kv_heads,
                                         **latent)
        except ValueError as err:
            label = dict((v, k) for k, v in VARIANTS)[variant]
            extra = f" with {self.kv_heads.value} KV heads" if variant == "gqa" else ""
            raise ValueError(f"{label}{extra} does not fit {base.name} ({base.config.n_heads} "
                             f"query heads): {err}") from None
        return dataclasses.replace(base, config=config)

    # -- computing and showing ---------------------------------------------------------
    def update(self):
        """Recompute everything from the controls and redraw; bad input shows a message."""
        self.config_json.layout.display = "" if self.model.value == PASTE else "none"
        self.kv_heads.layout.display = "" if self.variant.value == "gqa" else "none"
        try:
            base = self._base_model()
            model = self._variant(base, self.variant.value)
            if self.batch.value < 1:
                raise ValueError(f"batch must be an integer >= 1 (sequences), got "
                                 f"{self.batch.value}")
            values = self._compute(base, model)
        except (ValueError, KeyError) as err:
            self._show_problem(_text(err))
            return
        self.values, self.texts = values, self._texts(values)
        self.notes = self._notes(model, values)
        self._show(base, model)

    def _compute(self, base, model) -> dict:
        config, bpv = model.config, self.precision.value
        context, batch, gpu_gb = self.context.value, self.batch.value, self.gpu_gb.value
        gpu_bytes = int(gpu_gb * 10 ** 9)
        per_sequence = sizing.kv_cache_bytes(config, context, 1, bpv)
        batch_bytes = sizing.kv_cache_bytes(config, context, batch, bpv)
        weights = sizing.weight_bytes(model.total_params, BYTES_PER_PARAM)
        fit = (gpu_bytes - weights) // per_sequence if weights <= gpu_bytes else 0
        return {
            "model": base.name, "variant": self.variant.value, "attention": config.attention,
            "n_kv_heads": config.n_kv_heads, "bytes_per_value": bpv, "context": context,
            "batch": batch, "gpu_gb": gpu_gb, "gpu_bytes": gpu_bytes,
            "values_per_token": sizing.kv_values_per_token(config),
            "bytes_per_token": sizing.kv_bytes_per_token(config, bpv),
            "sequence_bytes": per_sequence, "batch_bytes": batch_bytes,
            "gpus_of_kv": batch_bytes / gpu_bytes,
            "total_params": model.total_params, "active_params": model.active_params,
            "weight_bytes": weights, "weights_fit": weights <= gpu_bytes,
            "sequences_fit": int(fit),
            "kv_share": sizing.kv_share(model, context, batch, bpv, BYTES_PER_PARAM),
            "relative_decode_speed": sizing.relative_decode_speed(model, context, batch, bpv,
                                                                  BYTES_PER_PARAM),
            "verified": base.verified, "sources": list(base.sources),
        }

    def _texts(self, v) -> dict:
        return {
            "values_per_token": s.integer(v["values_per_token"]),
            "bytes_per_token": f"{s.integer(v['bytes_per_token'])} B "
                               f"({s.binary_bytes(v['bytes_per_token'], 1)})",
            "batch_bytes": s.both_bytes(v["batch_bytes"]),
            "batch_bytes_exact": f"{s.integer(v['batch_bytes'])} B",
            "gpus_of_kv": f"{v['gpus_of_kv']:,.2f}",
            "weight_bytes": s.decimal_bytes(v["weight_bytes"]),
            "sequences_fit": s.integer(v["sequences_fit"]),
            "kv_share": f"{100 * v['kv_share']:.1f}%",
            "relative_decode_speed": f"{v['relative_decode_speed']:.3f}",
        }

    def _notes(self, model, v) -> list[str]:
        config, notes = model.config, []
        gpu = f"{v['gpu_gb']:g} GB"
        if not v["weights_fit"]:
            notes.append(f"The weights alone ({self.texts['weight_bytes']} at bf16) do not fit "
                         f"in one {gpu} GPU, so no sequence fits beside them.")
        elif v["sequences_fit"] == 0:
            notes.append(f"Not even one sequence of {v['context']:,} tokens fits beside the "
                         f"weights on one {gpu} GPU.")
        kinds = config.layer_kinds
        if "sliding" in kinds and v["context"] > config.sliding_window:
            notes.append(f"{kinds.count('sliding')} of {config.n_layers} layers slide over "
                         f"{config.sliding_window:,} tokens and stop growing there: the batch "
                         "figure counts that; bytes/token is the rate below the window.")
        if "linear" in kinds:
            notes.append(f"{kinds.count('linear')} linear-attention layers keep a fixed state "
                         f"({config.linear_state_values:,} values each per sequence): counted in "
                         "the batch figure, not in bytes/token.")
        if v["context"] > config.max_seq_len:
            notes.append(f"{v['context']:,} tokens is beyond this model's max_seq_len "
                         f"({config.max_seq_len:,}): the figures are what the cache would hold.")
        if v["variant"] != "as built":
            notes.append("Weights and active params are the model's own: the variant's "
                         "different K/V projection sizes are not counted in them.")
        if v["bytes_per_value"] == 0.5:
            notes.append("int4: 0.5 bytes per value; the quantization scales are not counted.")
        return notes

    @property
    def message(self) -> str:
        """The text of the message area: a problem, or notes (empty when there is nothing)."""
        return "\n".join([self.error] if self.error else self.notes)

    def variant_rows(self, base: zoo.ZooModel | None = None) -> list[dict]:
        """Every attention variant of the chosen model at the chosen precision, context and
        batch: key, label, kv_heads, bytes_per_token and batch_bytes (None if it does not fit)."""
        base, bpv = base or self._base_model(), self.precision.value
        rows = []
        for label, key in VARIANTS:
            row = {"key": key, "label": label, "kv_heads": "", "bytes_per_token": None,
                   "batch_bytes": None}
            try:
                config = self._variant(base, key).config
            except ValueError:
                rows.append(row)
                continue
            mla = config.attention == "mla"
            row.update(
                label=f"as built ({config.attention.upper()})" if key == "as built" else label,
                kv_heads=f"latent {config.kv_lora_rank}+{config.rope_head_dim}" if mla
                else str(config.n_kv_heads),
                bytes_per_token=sizing.kv_bytes_per_token(config, bpv),
                batch_bytes=sizing.kv_cache_bytes(config, self.context.value, self.batch.value,
                                                  bpv))
            rows.append(row)
        return rows

    def _show_problem(self, text):
        self.error, self.notes, self.values, self.texts = text, [], {}, {}
        self.message_box.value = message_html(text, [])
        self.numbers.value = self.variants_table.value = self.source.value = ""
        self.image.layout.display = "none"

    def _show(self, base, model):
        self.error = ""
        self.message_box.value = message_html("", self.notes)
        self.numbers.value = numbers_html(self.values, self.texts)
        self.variants_table.value = variants_html(self.variant_rows(base), base.name,
                                                  self.context.value, self.batch.value,
                                                  self.variant.value)
        self.source.value = source_html(base, pasted=self.model.value == PASTE)
        self.image.layout.display = ""
        self.image.value = self._plot_png(base, model)

    def _plot_png(self, base, model) -> bytes:
        """KV memory of the whole batch against context, for the variant and the model as built."""
        v, bpv, batch = self.values, self.precision.value, self.batch.value
        contexts = [int(n) for n in PLOT_CONTEXTS]
        kv = [sizing.kv_cache_bytes(model.config, n, batch, bpv) for n in contexts]
        built = None
        if model.config != base.config:
            built = [sizing.kv_cache_bytes(base.config, n, batch, bpv) for n in contexts]
        precision = dict((b, label.split()[0]) for label, b in PRECISIONS)[bpv]
        variant = dict((k, label) for label, k in VARIANTS)[self.variant.value].split(" (")[0]
        if variant == "as built":
            variant = f"as built ({model.config.attention.upper()})"
        labels = {"kv": f"KV cache, {variant}, {precision}",
                  "built": f"KV cache, as built ({base.config.attention.upper()})",
                  "weights": f"weights, bf16 ({self.texts['weight_bytes']})",
                  "gpu": f"one GPU ({v['gpu_gb']:g} GB)",
                  "marker": f"{v['context']:,} tokens: {s.decimal_bytes(v['batch_bytes'])}"}
        title = f"KV cache of {batch:,} sequence{'s' if batch != 1 else ''}: {base.name}"
        return self._plot.render(contexts, kv, built, v["weight_bytes"], v["gpu_bytes"],
                                 v["context"], v["batch_bytes"], title, labels)

    def __repr__(self) -> str:
        if self.error:
            return f"SizeCalculator: {self.error}"
        v, t = self.values, self.texts
        return (f"SizeCalculator: {v['model']}, {v['variant']} ({v['attention']}), "
                f"{v['bytes_per_value']:g} bytes/value, {v['batch']:,} x {v['context']:,} tokens: "
                f"{t['bytes_per_token']} per token, whole batch {t['batch_bytes']}")

    def _repr_mimebundle_(self, **kwargs):
        """Display the widget (a bare SizeCalculator() at the end of a cell shows it)."""
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        return bundle


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")


def _text(err) -> str:
    """An exception's message without KeyError's quotes."""
    return str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
