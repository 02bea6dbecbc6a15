"""The size calculator's plot: KV memory of the whole batch against context, as PNG bytes.

One matplotlib Figure (not pyplot, so nothing piles up in a notebook) is drawn once and
updated in place: each update sets new data and renders to PNG for an ipywidgets.Image.
"""
from __future__ import annotations

import io

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

from . import _style as s

GB = 1e9


class KVPlot:
    """KV cache GB vs context (log-log), with the weights, the GPU memory and a marker."""

    def __init__(self, width_in: float = 6.4, height_in: float = 3.6, dpi: int = 100):
        self.figure = Figure(figsize=(width_in, height_in), dpi=dpi)
        self.figure.subplots_adjust(left=0.12, right=0.97, bottom=0.14, top=0.91)
        ax = self.ax = self.figure.add_subplot()
        ax.set_xscale("log")
        ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):            # decades only: fast to draw, easy to read
            axis.set_major_locator(LogLocator(base=10, numticks=12))
            axis.set_minor_locator(NullLocator())
            axis.set_major_formatter(FuncFormatter(_plain))
        ax.set_xlabel("context per sequence (tokens)")
        ax.set_ylabel("memory (GB = 10$^9$ bytes)")
        ax.grid(True, which="major", color="#DDDDDD", linewidth=0.6)
        self.kv_line, = ax.plot([], [], color=s.BLUE, linewidth=2.2, label="KV cache")
        self.built_line, = ax.plot([], [], color=s.GREY, linewidth=1.5, linestyle=":",
                                   label="KV cache, as built")
        self.weights_line = ax.axhline(1, color=s.ORANGE, linewidth=2, linestyle="--",
                                       label="weights")
        self.gpu_line = ax.axhline(1, color=s.BLACK, linewidth=1, linestyle="-.",
                                   label="one GPU's memory")
        self.marker, = ax.plot([], [], "o", color=s.VERMILLION, markersize=8,
                               markeredgecolor=s.BLACK, label="chosen context")

    def render(self, contexts, kv_bytes, built_bytes, weight_bytes, gpu_bytes, chosen,
               chosen_bytes, title, labels) -> bytes:
        """Update the lines (bytes; built_bytes None hides the as-built line); return PNG bytes."""
        x = np.asarray(contexts, dtype=float)
        self.kv_line.set_data(x, np.asarray(kv_bytes, dtype=float) / GB)
        self.kv_line.set_label(labels["kv"])
        show_built = built_bytes is not None
        self.built_line.set_visible(show_built)
        self.built_line.set_label(labels["built"] if show_built else "_hidden")
        if show_built:
            self.built_line.set_data(x, np.asarray(built_bytes, dtype=float) / GB)
        self.weights_line.set_ydata([weight_bytes / GB] * 2)
        self.weights_line.set_label(labels["weights"])
        self.gpu_line.set_ydata([gpu_bytes / GB] * 2)
        self.gpu_line.set_label(labels["gpu"])
        self.marker.set_data([chosen], [chosen_bytes / GB])
        self.marker.set_label(labels["marker"])
        ax = self.ax
        ax.set_xlim(x[0], x[-1])
        ys = [v for v in (np.min(kv_bytes), np.max(kv_bytes), weight_bytes, gpu_bytes) if v > 0]
        if show_built:
            ys += [b for b in (np.min(built_bytes), np.max(built_bytes)) if b > 0]
        ax.set_ylim(min(ys) / GB / 2, max(ys) / GB * 2)
        ax.set_title(title, fontsize=10)
        ax.legend(loc="best", fontsize=8, framealpha=0.9)
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
        return buffer.getvalue()


def _plain(value, _position) -> str:
    """Tick labels as plain numbers: 1,000,000 rather than 10^6; 0.1 stays 0.1."""
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"
