"""Plot helpers for the chapters: one palette, one look, so a chapter's cell shows the idea.

Colours are the Okabe-Ito palette (distinct for the common colour-vision deficiencies);
every series also gets its own line style or marker, so plots survive greyscale printing.
Each chapter's figures are small functions below, under a heading per chapter; they take
the numbers the chapter computed and return the matplotlib Figure (the notebook shows it).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

# Okabe & Ito, "Color Universal Design" (2008)
BLUE, ORANGE, GREEN, VERMILLION = "#0072B2", "#E69F00", "#009E73", "#D55E00"
SKY, PURPLE, YELLOW, BLACK, GREY = "#56B4E9", "#CC79A7", "#F0E442", "#000000", "#999999"
COLORS = (BLUE, VERMILLION, GREEN, ORANGE, PURPLE, SKY, BLACK, GREY)
LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def series_style(index: int) -> dict:
    """Colour, line style and marker of the index-th series, all three distinct."""
    return dict(color=COLORS[index % len(COLORS)], linestyle=LINESTYLES[index % len(LINESTYLES)],
                marker=MARKERS[index % len(MARKERS)])


def label_axes(ax, title: str, xlabel: str, ylabel: str, legend: bool = True, grid: bool = True):
    """Title, axis labels (say the units), light grid and a legend if any series is labelled."""
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if grid:
        ax.grid(True, which="both", alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend()
    return ax


def figure(ncols: int = 1, width: float = 6.4, height: float = 4.0):
    """A figure with ncols side-by-side axes (constrained layout); returns (fig, axes)."""
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols if ncols > 1 else width, height),
                             constrained_layout=True, squeeze=False)
    return fig, list(axes[0])


# -- chapter 1 --
def attention_heatmaps(weights, allowed, title: str):
    """One heatmap per head of attention weights [H, S, S], two per row; cells where allowed
    [S, S] is False (the masked future) are hatched instead of coloured."""
    n_heads, S = weights.shape[0], weights.shape[-1]
    cmap = plt.get_cmap("cividis").copy()
    cmap.set_bad(alpha=0)                              # masked cells show the hatching
    nrows = (n_heads + 1) // 2
    fig, grid = plt.subplots(nrows, 2, figsize=(7.2, 3.2 * nrows), constrained_layout=True,
                             squeeze=False)
    axes = list(grid.ravel())
    for head, ax in enumerate(axes[:n_heads]):
        image = ax.imshow(np.ma.masked_array(weights[head], ~allowed), cmap=cmap, vmin=0, vmax=1)
        ax.set_facecolor("white")
        ax.patch.set_hatch("///")
        ax.patch.set_edgecolor(GREY)
        ticks = range(0, S, max(1, S // 5))
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        label_axes(ax, f"head {head}", "key position $j$", "query position $i$",
                   legend=False, grid=False)
    for ax in axes[n_heads:]:
        ax.set_visible(False)
    fig.colorbar(image, ax=axes, label="attention weight (0 to 1)", shrink=0.8)
    fig.suptitle(title)
    return fig

__all__ = ["BLUE", "ORANGE", "GREEN", "VERMILLION", "SKY", "PURPLE", "YELLOW", "BLACK", "GREY",
           "COLORS", "LINESTYLES", "MARKERS", "series_style", "label_axes", "figure",
           "attention_heatmaps"]
