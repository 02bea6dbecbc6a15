"""The static twin of each widget: an HTML view that responds in the rendered book, where no
kernel runs, with every number written by toykv at execution time.

A widget's display carries its ipywidgets view and, in the book build, this twin as
text/html; the build prefers the twin (_config.yml: nb_mime_priority_overrides), Jupyter,
Binder and Colab show the widget. The book build says so by setting TOYKV_STATIC_TWINS=1
for the kernels it starts (book/_ext/live_widgets.py); elsewhere no twin is made, so a
kernel reader pays nothing for it and stored notebooks stay small.

A twin is one self-contained <div>: its controls (data-control), a JSON block of data from
toykv (per-model constants, or recorded cache states), a scoped stylesheet, the scripts in
toykv/widgets/static/ and a status line (data-part=status, role=status) that tells a screen
reader what each move of a control changed. The scripts only repeat sums of toykv.sizing (checked against it
by tests/test_static_twins.py) and replay recorded states. Ids are derived from the data,
so the same notebook gives the same page.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from functools import cache
from pathlib import Path

import numpy as np

from .. import sizing, zoo
from ..layers import attention_kind
from . import _style as s
from . import attention_view
from .cache_fill_view import CELL_CSS, LEGEND, STATES
from .size_calculator_view import TERMS, UNITS_NOTE
from .size_report import (CONTEXTS, CURVE_CONTEXTS, GPU_MEMORY_GIB, MAX_COUNT, PRECISIONS,
                          VARIANTS, default_kv_heads, variant_model)

STATIC_ENV = "TOYKV_STATIC_TWINS"
STATIC_DIR = Path(__file__).with_name("static")
SAFE_INTEGER = 2 ** 53 - 1     # JSON numbers the page reads exactly (larger: strings)
RECORDED_PROMPT_LENGTHS = (2, 4, 6, 8, 12, 16)   # the cache fill's static runs (and its own)


def twin_bundle(widget, text: str, make_html) -> dict:
    """A widget's display: its view, `text` as text/plain, and in the book build the twin."""
    bundle = widget._repr_mimebundle_()
    bundle["text/plain"] = text
    if os.environ.get(STATIC_ENV) == "1":
        bundle["text/html"] = make_html()
    return bundle


# -- per-model constants -------------------------------------------------------------------
def layout(config, base_config=None) -> dict:
    """What the page needs to size a config's cache as toykv.sizing does: layer counts by
    kind, values per token and layer, the window and a linear layer's state."""
    kinds = config.layer_kinds
    growing = kinds.count("full") + kinds.count("sliding")
    per_token = sizing.kv_values_per_token(config)
    if growing and per_token % growing:
        raise AssertionError(f"{per_token} values per token do not split over {growing} layers")
    mla = attention_kind(config).latent
    return {"attention": config.attention, "latent": mla,
            "n_kv_heads": None if mla else config.n_kv_heads,
            "kv_lora_rank": config.kv_lora_rank if mla else None,
            "rope_head_dim": config.rope_head_dim if mla else None,
            "full": kinds.count("full"), "sliding": kinds.count("sliding"),
            "linear": kinds.count("linear"), "window": config.sliding_window,
            "values_per_token": per_token, "values_per_layer": per_token // growing if growing
            else 0, "state_values": config.linear_state_values or 0,
            "same_as_built": base_config is not None and config == base_config}


def _variant_layout(model, variant, kv_heads=None) -> dict:
    try:
        return layout(variant_model(model, variant, kv_heads).config, model.config)
    except ValueError as err:
        return {"error": str(err)}


def _model_data(model) -> dict:
    n_heads = model.config.n_heads
    gqa = {str(k): _variant_layout(model, "gqa", k) for k in range(1, n_heads + 1)
           if n_heads % k == 0}
    return {"key": model.name, "verified": model.verified, "sources": list(model.sources),
            "notes": model.notes, "max_seq_len": model.config.max_seq_len,
            "total_params": model.total_params, "active_params": model.active_params,
            "weight_bytes": sizing.weight_bytes(model.total_params, 2),
            "active_weight_bytes": sizing.weight_bytes(model.active_params, 2),
            # a decode step's weights (the course's rule): read_weight_bytes at batch 1, and
            # one more embedding row per further sequence when the embedding is untied
            "read_weight_bytes": sizing.weight_bytes_read(model, 2),
            "embedding_row_bytes": 0 if model.config.tie_embeddings else 2 * model.config.d_model,
            "vocab_size": model.config.vocab_size,
            "gqa_default": default_kv_heads(model.config), "n_heads": n_heads,
            "variants": {key: _variant_layout(model, key) for _, key in VARIANTS if key != "gqa"},
            "gqa": {k: v for k, v in gqa.items() if "error" not in v}}


@cache
def zoo_data() -> tuple:
    """_model_data of every zoo model, in table order (computed once per process)."""
    return tuple(_model_data(zoo.get(name)) for name in zoo.names())


# -- the three twins -------------------------------------------------------------------------
def size_calculator_data(calc) -> dict:
    """The calculator's data: every zoo model, the options and the widget's current state."""
    model = calc.model.value if calc.model.value in zoo.names() else "llama-3.1-8b"
    gqa = next(m["gqa"] for m in zoo_data() if m["key"] == model)
    kv_heads = calc.kv_heads.value if str(calc.kv_heads.value) in gqa else \
        default_kv_heads(zoo.get(model).config)
    return {"models": list(zoo_data()), "variants": [list(v) for v in VARIANTS],
            "precisions": [list(p) for p in PRECISIONS], "contexts": list(CONTEXTS),
            "curve_contexts": list(CURVE_CONTEXTS), "max_count": MAX_COUNT,
            "gpu_memory_gib": list(GPU_MEMORY_GIB), "terms": [list(t) for t in TERMS],
            "units_note": UNITS_NOTE, "colours": _colours(),
            "state": {"model": model, "variant": calc.variant.value, "kv_heads": kv_heads,
                      "precision": calc.precision.value, "context": calc.context.value,
                      "batch": calc.batch.value, "gpu_memory_gib": calc.gpu_memory_gib.value}}


def size_calculator_html(calc) -> str:
    data = size_calculator_data(calc)
    st = data["state"]
    models = [(m["key"] + ("" if m["verified"] else " (unverified)"), m["key"])
              for m in data["models"]]
    precision = [(label, str(b)) for label, b in PRECISIONS]
    index = CONTEXTS.index(st["context"]) if st["context"] in CONTEXTS else CONTEXTS.index(8192)
    controls = (
        f"<div class='toykv-controls'>{_select('model', 'model', models, st['model'])}"
        f"{_select('attention', 'attention', VARIANTS, st['variant'])}"
        f"<span data-part='kv_heads_box'>{_select('kv_heads', 'KV heads (GQA)', [], '')}</span>"
        f"</div><div class='toykv-controls'>"
        f"{_select('precision', 'KV precision', precision, str(st['precision']))}"
        f"{_number('batch', 'batch (sequences)', st['batch'], 1, MAX_COUNT, '1')}"
        f"{_number('gpu_memory_gib', 'GPU memory (GiB)', st['gpu_memory_gib'], *GPU_MEMORY_GIB, 'any')}"
        f"</div><div class='toykv-controls'>"
        f"{_range('context', 'context (tokens per sequence)', index, len(CONTEXTS))}</div>"
        "<div class='toykv-hint'>The batch and GPU memory apply on Enter. GiB = 2^30 bytes, "
        "as the card reports it: an A100 80GB 80, an H100 80GB 79.6.</div>")
    terms = "".join(f"<li><b>{s.esc(t)}</b>: {s.esc(x)}</li>" for t, x in TERMS)
    body = (controls + "<div data-part='message' role='status' aria-live='polite'></div>"
            "<div class='toykv-row'><div data-part='numbers' style='min-width:330px'></div>"
            "<div data-part='plot'></div></div><div data-part='variants'></div>"
            "<div style='font-size:11px;line-height:1.35;color:#333;margin-top:6px;"
            f"max-width:900px'><b>Terms</b><ul style='margin:0;padding-left:18px'>{terms}</ul>"
            "</div><div data-part='source'></div>")
    return page("size-calculator", "sizeCalculator", data, body, "size calculator")


def cache_fill_data(fill) -> dict:
    """The cache fill's data: one recorded run per prompt length, and the widget's state."""
    from .fill_stepper import record_frames

    lengths = sorted({p for p in RECORDED_PROMPT_LENGTHS if p < fill.limit} | {fill.prompt_len})
    runs = [record_frames(fill.model, p, fill.limit, fill.seed, fill.kv_dtype,
                          fill.show_attention) for p in lengths]
    for run in runs:
        for frame in run["frames"]:
            assert all(abs(v) <= SAFE_INTEGER for k, v in frame.items() if k.startswith("flops"))
    data = {"limit": fill.limit, "limited_by": fill.limited_by, "row_labels": fill.row_labels,
            "arrays_per_layer": len(fill.row_labels) // fill.model.config.n_layers,
            "what_rows": attention_kind(fill.model.config).cached,
            "show_evicted": "sliding" in fill.model.config.layer_kinds,
            "states": list(STATES), "legend": LEGEND, "cell_css": CELL_CSS, "runs": runs,
            "seed": fill.seed, "kv_dtype": fill.kv_dtype, "default_model": fill.default_model,
            "state": {"prompt_len": fill.prompt_len, "step": fill.positions - fill.prompt_len}}
    if fill.show_attention:
        data["attention"] = attention_data(fill)
        share_prompt_rows(runs, fill.model.config.n_heads)
    return data


def _unpack(rows: dict, n_heads: int) -> list:
    """A run's packed rows (FillStepper.attention_rows) as [layer][head][row] float32 arrays
    (None for the rows another run holds)."""
    weights = np.frombuffer(base64.b64decode(rows["weights"]), "<f4")
    out, k = [], 0
    for first in rows["row_first"]:
        heads = []
        for _ in range(n_heads):
            row = []
            for i, lo in enumerate(first):
                row.append(None if i < rows["shared"] else weights[k:k + i - lo + 1])
                k += 0 if i < rows["shared"] else i - lo + 1
            heads.append(row)
        out.append(heads)
    assert k == len(weights)
    return out


def share_prompt_rows(runs: list, n_heads: int) -> None:
    """Keep the prompt's rows once: the rows each run's prefill computed that are, bit for bit
    in every layer and head, the longest prompt's run's (the prompts are prefixes of one
    another) are dropped from its 'rows'; the page reads them from that run ('shared': how
    many, 'from': which run)."""
    donor = max(range(len(runs)), key=lambda r: runs[r]["prompt_len"])
    theirs = _unpack(runs[donor]["rows"], n_heads)
    for r, run in enumerate(runs):
        if r == donor:
            continue
        mine, shared = _unpack(run["rows"], n_heads), 0
        while shared < run["prompt_len"] and all(
                mine[l][h][shared].tobytes() == theirs[l][h][shared].tobytes()
                for l in range(len(mine)) for h in range(n_heads)):
            shared += 1
        kept = [row for heads in mine for rows in heads for row in rows[shared:]]
        run["rows"] = {**run["rows"], "shared": shared, "from": donor,
                       "weights": base64.b64encode(np.concatenate(kept).tobytes()).decode()}


def attention_data(fill) -> dict:
    """What the attention view's script needs besides the runs (each run's frames carry its
    figures and the run its rows): the shape, the drawing's constants and the state."""
    v = attention_view
    return {"layers": fill.model.config.n_layers, "heads": fill.model.config.n_heads,
            "cell": v.cell_size(fill.limit), "every": v.label_every(fill.limit),
            "left": v.LEFT, "top": v.TOP, "right": v.RIGHT, "cividis": list(v.CIVIDIS),
            "scale_ticks": list(v.SCALE_TICKS), "legend": v.LEGEND,
            "colours": {"cached": s.BLUE, "new": s.ORANGE, "black": s.BLACK},
            "state": {"layer": fill.layer_select.value, "head": fill.head_select.value}}


def cache_fill_html(fill) -> str:
    data = cache_fill_data(fill)
    lengths = [(str(r["prompt_len"]), str(r["prompt_len"])) for r in data["runs"]]
    body = ("<div class='toykv-controls'><button type='button' class='toykv-primary' "
            "data-control='step' title='one greedy decode step with the cache'>Step</button>"
            "<button type='button' data-control='reset' title='prefill the prompt again'>Reset"
            f"</button>{_select('prompt_length', 'prompt length', lengths, str(fill.prompt_len))}"
            "</div><div class='toykv-hint'>The page replays the states toykv's model went "
            "through for these prompt lengths; in Jupyter every length runs live.</div>"
            "<div class='toykv-row'><div data-part='grid'></div>"
            "<div data-part='stats' style='min-width:300px'></div></div><div data-part='note'>"
            "</div>")
    if "attention" in data:
        att = data["attention"]
        layers = [(str(i), str(i)) for i in range(att["layers"])]
        heads = [(str(h), str(h)) for h in range(att["heads"])]
        body += ("<div class='toykv-controls' style='margin-top:8px'>"
                 f"{_select('layer', 'layer', layers, str(att['state']['layer']))}"
                 f"{_select('head', 'head', heads, str(att['state']['head']))}</div>"
                 "<div data-part='attention_caption' role='status' aria-live='polite' "
                 "style='font-size:13px;max-width:760px;margin:4px 0'></div>"
                 "<div data-part='attention_view'></div>")
    return page("cache-fill", "cacheFill", data, body, "cache fill",
                ("attention_view.js",) if "attention" in data else ())


def share_explorer_data(explorer) -> dict:
    from .share_explorer_view import (BEYOND_DASH, MAX_MODELS, MODEL_STYLES, PERCENT_TICKS,
                                      SHARE_CONTEXTS)

    models = [{"key": m["key"], "max_seq_len": m["max_seq_len"], "verified": m["verified"],
               "read_weight_bytes": m["read_weight_bytes"],
               "layout": m["variants"]["as built"]} for m in zoo_data()]
    return {"models": models, "contexts": list(SHARE_CONTEXTS), "max_models": MAX_MODELS,
            "styles": [list(x) for x in MODEL_STYLES], "beyond_dash": BEYOND_DASH,
            "percent_ticks": [list(t) for t in PERCENT_TICKS],
            "state": {"models": list(explorer.models_chosen),
                      "context": explorer.context_chosen}}


def share_explorer_html(explorer) -> str:
    data = share_explorer_data(explorer)
    chosen = set(data["state"]["models"])
    options = "".join(f"<option value='{s.esc(m['key'])}'{' selected' if m['key'] in chosen else ''}>"
                      f"{s.esc(m['key'])}{'' if m['verified'] else ' (unverified)'}</option>"
                      for m in data["models"])
    index = data["contexts"].index(data["state"]["context"])
    body = ("<div class='toykv-controls'><label for='{id}-models'>models</label>"
            f"<select multiple size='8' id='{{id}}-models' data-control='models'>{options}"
            f"</select><span class='toykv-hint'>Ctrl- or Shift-click (or Shift and the arrow "
            f"keys) to choose up to {data['max_models']} models.</span></div>"
            "<div class='toykv-controls'>"
            f"{_range('context', 'context (tokens)', index, len(data['contexts']))}</div>"
            "<div data-part='message' role='status' aria-live='polite'></div>"
            "<div data-part='readings'></div><div data-part='plot'></div>"
            "<div class='toykv-hint'>Solid: up to the model's published maximum context; "
            "dotted: beyond it, arithmetic only.</div>")
    return page("share-explorer", "shareExplorer", data, body, "KV share explorer")


# -- assembling a page fragment ----------------------------------------------------------------
def page(kind: str, starter: str, data: dict, body: str, title: str, helpers=()) -> str:
    """One self-contained twin: a <div> with its style, controls, data and scripts (helpers:
    further scripts in static/ that its own uses). `{id}` in body is replaced by the twin's
    id (derived from the data: deterministic)."""
    text = json.dumps(data, separators=(",", ":"), sort_keys=True)
    uid = f"toykv-{kind}-{hashlib.sha1(text.encode()).hexdigest()[:10]}"
    scripts = "".join(_script(name) for name in ("live_common.js", *helpers,
                                                 f"{kind.replace('-', '_')}.js"))
    safe_json = text.replace("</", "<\\/")          # a string in the data cannot end the script
    return (f"<div class='toykv-live tex2jax_ignore mathjax_ignore' id='{uid}' "
            f"data-live='{kind}' role='group' aria-label='{s.esc(title)}'>"
            f"<style>{_asset('live.css')}</style>{body.replace('{id}', uid)}"
            # what a reader's move changed, for screen readers (live_common.js: L.announce)
            "<div data-part='status' class='toykv-sr-only' role='status' aria-live='polite'>"
            "</div><noscript>This view needs JavaScript; the notebook version runs in Jupyter."
            "</noscript><script type='application/json' data-part='data'>"
            f"{safe_json}</script><script>{scripts}"
            f"window.toykvLive.{starter}(document.getElementById('{uid}'));</script></div>")


@cache
def _asset(name: str) -> str:
    return (STATIC_DIR / name).read_text(encoding="utf-8")


def _script(name: str) -> str:
    text = _asset(name)
    if "</script" in text.lower():
        raise AssertionError(f"{name} must not contain '</script'")
    return text + "\n"


def _colours() -> dict:
    return {"blue": s.BLUE, "sky_blue": s.SKY_BLUE, "orange": s.ORANGE,
            "vermillion": s.VERMILLION, "vermillion_text": s.VERMILLION_TEXT, "black": s.BLACK,
            "grey": s.GREY}


def _select(control, label, options, value) -> str:
    opts = "".join(f"<option value='{s.esc(v)}'{' selected' if str(v) == str(value) else ''}>"
                   f"{s.esc(text)}</option>" for text, v in options)
    return (f"<span><label for='{{id}}-{control}'>{s.esc(label)}</label>"
            f"<select id='{{id}}-{control}' data-control='{control}'>{opts}</select></span>")


def _number(control, label, value, low, high, step) -> str:
    return (f"<span><label for='{{id}}-{control}'>{s.esc(label)}</label><input type='number' "
            f"id='{{id}}-{control}' data-control='{control}' value='{s.esc(value)}' min='{low}' "
            f"max='{high}' step='{step}' style='width:9em'></span>")


def _range(control, label, index, count) -> str:
    return (f"<span style='flex:1 1 100%'><label for='{{id}}-{control}'>{s.esc(label)}</label>"
            f"<input type='range' id='{{id}}-{control}' data-control='{control}' min='0' "
            f"max='{count - 1}' step='1' value='{index}'> <output for='{{id}}-{control}'>"
            "</output></span>")
