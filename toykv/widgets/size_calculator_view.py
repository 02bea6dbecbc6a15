"""HTML for the size calculator: the numbers, the variant table, the sources and messages.

Functions of what the calculator computed; nothing here computes a size.
"""
from __future__ import annotations

from . import _style as s


def numbers_html(v: dict, t: dict) -> str:
    """The answers: v holds the numbers, t the same numbers as shown."""
    gpu = f"{v['gpu_gb']:g} GB"
    rows = [
        ("values / token", f"<b>{t['values_per_token']}</b> (summed over layers)"),
        ("bytes / token", f"<b>{t['bytes_per_token']}</b>"),
        (f"whole batch ({v['batch']:,} x {v['context']:,} tokens)",
         f"<b>{t['batch_bytes']}</b><br><span style='font-size:11px'>"
         f"{t['batch_bytes_exact']}</span>"),
        (f"{gpu} GPUs of KV", f"<b>{t['gpus_of_kv']}</b> (the cache alone)"),
        ("weights (bf16, total params)",
         f"{t['weight_bytes']} ({v['total_params'] / 1e9:,.2f}B params)"),
        (f"sequences that fit beside them on one {gpu} GPU", f"<b>{t['sequences_fit']}</b>"),
        ("KV share of a decode step", f"<b>{t['kv_share']}</b>"),
        ("relative decode speed (1 - share)", f"<b>{t['relative_decode_speed']}</b>"),
    ]
    return (f"<div style='font-size:13px;line-height:1.35'>{s.table(rows)}"
            f"<div style='font-size:11px;color:#444;max-width:380px;margin-top:4px'>KV share: the "
            f"cache's part of the bytes one decode step reads (all {v['batch']:,} caches plus the "
            f"active weights, {v['active_params'] / 1e9:,.2f}B params at bf16). Relative decode "
            f"speed: against an empty cache, when reading memory is the limit. "
            f"{s.UNITS_NOTE}</div></div>")


def variants_html(rows: list[dict], name: str, context: int, batch: int, chosen: str) -> str:
    """A row per attention variant (dicts from SizeCalculator.variant_rows); chosen in bold."""
    head = ("variant", "KV heads", "bytes / token", "whole batch", "vs MHA")
    cells = "".join(f"<th style='padding:1px 8px;text-align:left'>{h}</th>" for h in head)
    mha = next((r["batch_bytes"] for r in rows if r["key"] == "mha"), None)
    body = ""
    for r in rows:
        if r["batch_bytes"] is None:
            shown = (r["label"], "does not fit", "", "", "")
        else:
            share = f"{100 * r['batch_bytes'] / mha:.1f}%" if mha else ""
            shown = (r["label"], r["kv_heads"], s.binary_bytes(r["bytes_per_token"], 1),
                     s.decimal_bytes(r["batch_bytes"]), share)
        bold = " style='font-weight:bold'" if r["key"] == chosen else ""
        body += (f"<tr{bold}>" + "".join(f"<td style='padding:1px 8px'>{s.esc(c)}</td>"
                                         for c in shown) + "</tr>")
    return (f"<div style='font-size:12px;line-height:1.35;margin-top:6px'><b>Every attention "
            f"variant for {s.esc(name)}</b> at {batch:,} x {context:,} tokens (same layers, heads "
            f"and head_dim; MLA with DeepSeek-V2's latent of 512 plus a rotary key of 64; the "
            f"chosen one in bold)<table style='border-collapse:collapse'><tr>{cells}</tr>{body}"
            f"</table></div>")


def source_html(model, pasted: bool = False) -> str:
    """Where the zoo entry's numbers come from; unverified entries are marked."""
    if pasted:
        flag = (f"<b style='color:{s.VERMILLION}'>UNVERIFIED:</b> parameter counts computed from "
                "the pasted shapes, not checked against a published count. ")
    elif not model.verified:
        flag = (f"<b style='color:{s.VERMILLION}'>UNVERIFIED:</b> some numbers of this entry "
                "are not confirmed by its sources (see the notes). ")
    else:
        flag = ""
    sources = "".join(f"<li>{s.esc(src)}</li>" for src in model.sources)
    notes = f"<div>{s.esc(model.notes)}</div>" if model.notes else ""
    return (f"<div style='font-size:11px;line-height:1.35;color:#333;margin-top:6px'>{flag}"
            f"<b>Sources for {s.esc(model.name)}:</b><ul style='margin:0'>{sources}</ul>"
            f"{notes}</div>")


def message_html(error: str, notes: list[str]) -> str:
    """A problem (the input cannot be sized) or notes on the answer."""
    if error:
        return (f"<div style='border-left:4px solid {s.VERMILLION};padding:4px 8px;"
                f"background:#FFF4EC'><b>Problem:</b> {s.esc(error)}</div>")
    return "".join(f"<div style='border-left:4px solid {s.SKY_BLUE};padding:2px 8px;"
                   f"margin:2px 0'><b>Note:</b> {s.esc(note)}</div>" for note in notes)
