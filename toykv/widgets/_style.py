"""Colours and number formats shared by the widgets.

Colours are from the Okabe-Ito palette, picked so that each pair also differs in lightness
(they stay apart in greyscale); the cache-fill 'this step' cells carry a hatch as well.
Byte sizes: GB/MB/kB are powers of 10 (1 GB = 10^9 B), GiB/MiB/KiB powers of 2 (2^30 B);
GPU memory is counted in GiB, as the card reports it (an A100 80GB: 80 GiB; an H100 80GB:
79.6 GiB), bandwidths in GB/s.
"""
from __future__ import annotations

import html

# Okabe-Ito colours, with their CIE L* lightness (greyscale value) in the comment.
BLUE = "#0072B2"        # L* 46
SKY_BLUE = "#56B4E9"    # L* 70
ORANGE = "#E69F00"      # L* 71
VERMILLION = "#D55E00"  # L* 54
VERMILLION_TEXT = "#AD4C00"   # vermillion darkened for words: 5.5:1 on white (AA asks 4.5)
BLACK = "#000000"
GREY = "#999999"        # L* 63

DECIMAL_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))
BINARY_UNITS = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def _scaled(n_bytes, units, digits):
    for size, name in units:
        if n_bytes >= size:
            return f"{n_bytes / size:,.{digits}f} {name}"
    return f"{n_bytes:,.{digits if n_bytes != int(n_bytes) else 0}f} B"


def decimal_bytes(n_bytes, digits: int = 2) -> str:
    """e.g. 17179869184 -> '17.18 GB' (powers of 10)."""
    return _scaled(n_bytes, DECIMAL_UNITS, digits)


def binary_bytes(n_bytes, digits: int = 2) -> str:
    """e.g. 131072 -> '128.00 KiB' (powers of 2)."""
    return _scaled(n_bytes, BINARY_UNITS, digits)


def both_bytes(n_bytes, digits: int = 2) -> str:
    """'16.00 GiB (17.18 GB)': the binary size (GPU memory's unit), then the decimal one."""
    return f"{binary_bytes(n_bytes, digits)} ({decimal_bytes(n_bytes, digits)})"


def integer(n) -> str:
    """12345678 -> '12,345,678'."""
    return f"{int(n):,}"


def esc(text) -> str:
    return html.escape(str(text))


def table(rows, style="") -> str:
    """A two-column HTML table of (label, value-html) rows; labels are escaped, values not."""
    cells = "".join(f"<tr><td style='padding:1px 10px 1px 0;color:#333'>{esc(label)}</td>"
                    f"<td style='padding:1px 0'>{value}</td></tr>" for label, value in rows)
    return f"<table style='border-collapse:collapse;{style}'>{cells}</table>"


def problem_html(text) -> str:
    """A problem the widget met (bad input, or a failure it survived), in a vermillion box."""
    return (f"<div style='border-left:4px solid {VERMILLION};padding:4px 8px;"
            f"background:#FFF4EC'><b>Problem:</b> {esc(text)}</div>")
