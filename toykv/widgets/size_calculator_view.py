"""What the size calculator shows, as text and HTML: functions of a SizeReport.

Nothing here computes a size: every number comes from the report (size_report.py); this
module only formats it, writes the notes and draws the curve.
"""
from __future__ import annotations

from ..layers import ATTENTION
from . import _style as s
from ._svg_plot import Marker, Series, loglog_svg
from .size_report import PRECISIONS, VARIANTS, GiB

UNITS_NOTE = ("Units: GiB = 2^30 bytes, KiB = 2^10; GB = 10^9 bytes (in brackets). GPU memory "
              "is in GiB, as the card reports it (nvidia-smi's total), which its name does not "
              "give: an A100 80GB reports 80 GiB, an H100 80GB 79.6 GiB, an H200 (\"141 GB\") "
              "140.4 GiB. Bandwidths (GB/s, TB/s) are decimal.")

# One line per term the calculator shows; chapter 4 meets them before the chapters that
# develop them (chapter 7: MLA, sliding windows; chapter 8: KV share, MoE, hybrids).
TERMS = (
    ("MHA, GQA, MQA", "a K and V head per query head; groups of query heads sharing one K and V "
     "head; one K and V head for all query heads."),
    ("MLA", "multi-head latent attention (DeepSeek-V2): caches one latent of 512 values and a "
     "64-value rotary key per token and layer, and rebuilds K and V from them (chapter 7)."),
    ("sliding layers", "attend to the last w tokens only, so their cache stops growing at w "
     "tokens (chapter 7)."),
    ("linear layers", "linear attention keeps a fixed-size state per sequence instead of a cache "
     "that grows (chapter 8)."),
    ("active parameters", "the parameters one token uses: a mixture-of-experts (MoE) model sends "
     "each token through a few of its experts, so a decode step reads fewer weights than it has."),
    ("KV share", "the cache's part of the bytes one decode step reads: every sequence's cache "
     "plus the weights it reads, once for the batch: the active weights, of an untied input "
     "embedding only the rows looked up (chapter 8)."),
    ("relative decode speed", "1 - KV share: the speed of a decode step against one with an "
     "empty cache, when reading memory is the limit (chapter 5 shows it is)."),
)


def texts(r) -> dict:
    """The numbers of a SizeReport as the calculator shows them."""
    return {
        "values_per_token": s.integer(r.values_per_token),
        "bytes_per_token": f"{s.integer(r.bytes_per_token)} B "
                           f"({s.binary_bytes(r.bytes_per_token, 1)})",
        "bytes_per_token_at_context": f"{s.integer(round(r.bytes_per_token_at_context))} B "
                                      f"({s.binary_bytes(r.bytes_per_token_at_context, 1)})",
        "sequence_bytes": s.both_bytes(r.sequence_bytes),
        "batch_bytes": s.both_bytes(r.batch_bytes),
        "batch_bytes_exact": f"{s.integer(r.batch_bytes)} B",
        "gpu_memory": f"{r.gpu_memory_gib:,g} GiB",
        "gpus_of_kv": f"{r.gpus_of_kv:,.2f}",
        "weight_bytes": s.both_bytes(r.weight_bytes),
        "sequences_fit": s.integer(r.sequences_fit),
        "kv_share": f"{100 * r.kv_share:.1f}%",
        "relative_decode_speed": f"{r.relative_decode_speed:.3f}",
    }


def notes(r) -> list[str]:
    """Remarks on a report: what does not fit, windows and states, the model's max context."""
    t, out = texts(r), []
    gpu = f"one {t['gpu_memory']} GPU"
    if not r.weights_fit:
        out.append(f"The weights alone ({t['weight_bytes']} at bf16) do not fit in {gpu}, "
                   "so no sequence fits beside them.")
    elif r.sequences_fit == 0:
        out.append(f"Not even one sequence of {r.context:,} tokens fits beside the weights "
                   f"on {gpu}.")
    if r.sliding_layers:
        grows = ("stop growing there" if r.context > r.sliding_window
                 else "would stop growing past it")
        out.append(f"{r.sliding_layers} of {_layers(r)} layers slide over {r.sliding_window:,} "
                   f"tokens and {grows}: bytes/token is the rate inside the window, the whole "
                   "batch counts the window.")
    if r.linear_layers:
        out.append(f"{r.linear_layers} linear-attention layers keep a fixed state per sequence: "
                   "counted in the whole batch, not in bytes/token.")
    if r.context > r.max_seq_len:
        out.append(f"{r.context:,} tokens is beyond this model's maximum context "
                   f"({r.max_seq_len:,}): the figures are what the cache would hold.")
    if r.variant != "as built":
        out.append("Weights and active parameters are the model's own: the variant's "
                   "different K/V projection sizes are not counted in them.")
    if r.bytes_per_value == 0.5:
        out.append("int4: 0.5 bytes per value; the quantization scales are not counted.")
    return out


def _layers(r) -> int:
    return r.full_layers + r.sliding_layers + r.linear_layers


def numbers_html(r) -> str:
    """The answers, each label with a tooltip, then the units."""
    t = texts(r)
    per_token = "bytes / token, inside the window" if r.windowed else "bytes / token"
    rows = [
        ("values / token", "values one more token adds to the cache, summed over the layers",
         f"<b>{t['values_per_token']}</b>"),
        (per_token, "values / token x bytes per value" + (
            "; sliding layers add this only until their window is full" if r.windowed else ""),
         f"<b>{t['bytes_per_token']}</b>"),
    ]
    if r.windowed:
        rows.append((f"bytes / token at {r.context:,} tokens", "one sequence's cache divided by "
                     "its tokens: windows and fixed states counted",
                     f"<b>{t['bytes_per_token_at_context']}</b>"))
    rows += [
        (f"whole batch ({r.batch:,} x {r.context:,} tokens)", "the cache of every sequence",
         f"<b>{t['batch_bytes']}</b><br><span style='font-size:11px'>"
         f"{t['batch_bytes_exact']}</span>"),
        (f"GPUs of KV ({t['gpu_memory']} each)", "whole batch / one GPU's memory: the cache "
         "alone, without the weights", f"<b>{t['gpus_of_kv']}</b>"),
        ("weights (bf16, all parameters)", "what must sit in memory beside the cache",
         f"{t['weight_bytes']}<br><span style='font-size:11px'>{r.total_params / 1e9:,.2f}B "
         f"parameters, {r.active_params / 1e9:,.2f}B active</span>"),
        ("sequences that fit beside them on one GPU", "(GPU memory - weights) // one "
         "sequence's cache", f"<b>{t['sequences_fit']}</b>"),
        ("KV share of a decode step", dict(TERMS)["KV share"], f"<b>{t['kv_share']}</b>"),
        ("relative decode speed (1 - share)", dict(TERMS)["relative decode speed"],
         f"<b>{t['relative_decode_speed']}</b>"),
    ]
    cells = "".join(f"<tr title='{s.esc(tip)}'><td style='padding:1px 10px 1px 0;color:#333'>"
                    f"{s.esc(label)}</td><td style='padding:1px 0'>{value}</td></tr>"
                    for label, tip, value in rows)
    return (f"<div style='font-size:13px;line-height:1.35'><table style='border-collapse:"
            f"collapse'>{cells}</table><div style='font-size:11px;color:#444;max-width:400px;"
            f"margin-top:4px'>{s.esc(UNITS_NOTE)}</div></div>")


def terms_html() -> str:
    """A one-line explanation of each term the calculator shows."""
    items = "".join(f"<li><b>{s.esc(term)}</b>: {s.esc(text)}</li>" for term, text in TERMS)
    return (f"<div style='font-size:11px;line-height:1.35;color:#333;margin-top:6px;"
            f"max-width:900px'><b>Terms</b><ul style='margin:0;padding-left:18px'>{items}</ul>"
            f"</div>")


def variants_html(r) -> str:
    """A row per attention variant; the chosen one in bold."""
    head = ("variant", "KV heads", "bytes / token", "whole batch", "vs MHA")
    cells = "".join(f"<th style='padding:1px 8px;text-align:left'>{h}</th>" for h in head)
    body = ""
    for row in r.variants:
        if row.batch_bytes is None:
            shown = (row.label, "does not fit", "", "", "")
        else:
            label = f"as built ({row.attention.upper()})" if row.key == "as built" else row.label
            heads = ATTENTION[row.attention].heads_text(row)      # KV heads, or the latent
            share = "" if row.share_of_mha is None else f"{100 * row.share_of_mha:.1f}%"
            shown = (label, heads, s.binary_bytes(row.bytes_per_token, 1),
                     s.binary_bytes(row.batch_bytes), share)
        bold = " style='font-weight:bold'" if row.key == r.variant else ""
        body += (f"<tr{bold}>" + "".join(f"<td style='padding:1px 8px'>{s.esc(c)}</td>"
                                         for c in shown) + "</tr>")
    window = ", inside the window" if r.windowed else ""
    return (f"<div style='font-size:12px;line-height:1.35;margin-top:6px'><b>Every attention "
            f"variant for {s.esc(r.model)}</b> at {r.batch:,} x {r.context:,} tokens (same "
            f"layers, heads and head_dim; MLA with DeepSeek-V2's latent of 512 plus a rotary key "
            f"of 64; bytes / token{window}; the chosen one in bold)<table style='border-collapse:"
            f"collapse'><tr>{cells}</tr>{body}</table></div>")


def source_html(model, pasted: bool = False) -> str:
    """Where the zoo entry's numbers come from; unverified entries are marked."""
    if pasted:
        flag = (f"<b style='color:{s.VERMILLION_TEXT}'>UNVERIFIED:</b> parameter counts computed from "
                "the pasted shapes, not checked against a published count. ")
    elif not model.verified:
        flag = (f"<b style='color:{s.VERMILLION_TEXT}'>UNVERIFIED:</b> some numbers of this entry "
                "are not confirmed by its sources (see the notes). ")
    else:
        flag = ""
    sources = "".join(f"<li>{s.esc(src)}</li>" for src in model.sources)
    extra = f"<div>{s.esc(model.notes)}</div>" if model.notes else ""
    return (f"<div style='font-size:11px;line-height:1.35;color:#333;margin-top:6px'>{flag}"
            f"<b>Sources for {s.esc(model.name)}:</b><ul style='margin:0'>{sources}</ul>"
            f"{extra}</div>")


def message_html(error: str, remarks: list[str]) -> str:
    """A problem (the input cannot be sized) or notes on the answer."""
    if error:
        return s.problem_html(error)
    return "".join(f"<div style='border-left:4px solid {s.SKY_BLUE};padding:2px 8px;"
                   f"margin:2px 0'><b>Note:</b> {s.esc(note)}</div>" for note in remarks)


def plot_svg(r) -> str:
    """The whole batch's KV memory against context (GiB, log-log), with the weights, one GPU's
    memory, the model's maximum context and the chosen context."""
    t = texts(r)
    precision = dict((b, label.split()[0]) for label, b in PRECISIONS).get(
        r.bytes_per_value, f"{r.bytes_per_value:g} bytes per value")
    variant = dict((key, label) for label, key in VARIANTS)[r.variant].split(" (")[0]
    built = f"as built ({r.variants[0].attention.upper()})"
    if variant == "as built":
        variant = built
    elif r.variant == "gqa":
        variant = f"GQA with {r.n_kv_heads} KV heads"
    xs = r.curve_contexts
    series = [Series(f"KV cache, {variant}, {precision}", s.BLUE, "", 2.4, xs,
                     tuple(b / GiB for b in r.curve_bytes))]
    if r.curve_bytes_as_built is not None:
        series.append(Series(f"KV cache, {built}", s.GREY, "2 3", 1.6, xs,
                             tuple(b / GiB for b in r.curve_bytes_as_built)))
    series += [Series(f"weights, bf16 ({s.binary_bytes(r.weight_bytes)})", s.ORANGE, "8 4", 2,
                      y=r.weight_bytes / GiB),
               Series(f"one GPU ({t['gpu_memory']})", s.BLACK, "10 3 2 3", 1.2,
                      y=r.gpu_bytes / GiB)]
    if xs[0] < r.max_seq_len < xs[-1]:
        series.append(Series(f"model's maximum context ({r.max_seq_len:,})", s.SKY_BLUE, "6 3", 1.5,
                             x=r.max_seq_len))
    marker = None
    if xs[0] <= r.context <= xs[-1]:
        marker = Marker(f"{r.context:,} tokens: {s.binary_bytes(r.batch_bytes)}", r.context,
                        r.batch_bytes / GiB, s.VERMILLION)
    title = f"KV cache of {r.batch:,} sequence{'s' if r.batch != 1 else ''}: {r.model}"
    return loglog_svg(series, marker, title, "context per sequence (tokens)",
                      "memory (GiB = 2^30 bytes)")
