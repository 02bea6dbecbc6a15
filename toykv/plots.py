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
    cmap = plt.get_cmap("cividis").with_extremes(bad=(0, 0, 0, 0))   # masked: hatching
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


# -- chapter 2 --
CACHE_LABELS = {False: "no cache", True: "cache"}


def flops_per_step(context, per_step: dict, title: str):
    """FLOPs of each decode step against the context, linear and log scale side by side.
    per_step: {use_cache (bool): FLOPs of each step, same length as context}."""
    fig, axes = figure(ncols=2, width=5.2, height=4.0)
    for ax, scale in zip(axes, ("linear", "log")):
        for index, use_cache in enumerate((False, True)):
            style = series_style(index)
            style.pop("marker")
            ax.plot(context, np.asarray(per_step[use_cache]) / 1e6, **style,
                    label=("cache: one new token" if use_cache else "no cache: whole sequence"))
        ax.set_yscale(scale)
        label_axes(ax, f"{scale} scale", "tokens in the sequence at this step",
                   f"matmul FLOPs per step (millions, {scale} scale)")
    fig.suptitle(title)
    return fig


def generation_times(lengths, cumulative: dict, per_step: dict, windows: dict, theirs: dict,
                     title: str):
    """Left: total time against the length reached; right: time per step (dots), its median per
    window (line) and another machine's medians (open symbols, theirs).
    cumulative, per_step: {use_cache: (x, seconds)}; windows: {use_cache: (centres, medians)};
    theirs: {use_cache: (centres, seconds)}."""
    fig, (left, right) = figure(ncols=2, width=5.6, height=4.4)
    for index, use_cache in enumerate((False, True)):
        style, name = series_style(index), CACHE_LABELS[use_cache]
        x, total = cumulative[use_cache]
        left.plot(x, total, color=style["color"], linestyle=style["linestyle"],
                  label=f"{name} (this machine)")
        left.plot(lengths, [total[list(x).index(n)] for n in lengths], color=style["color"],
                  marker=style["marker"], linestyle="none")
        x, seconds = per_step[use_cache]
        right.plot(x, np.asarray(seconds) * 1e3, color=style["color"], marker=".",
                   linestyle="none", alpha=0.25, markersize=3)
        centres, medians = windows[use_cache]
        right.plot(centres, np.asarray(medians) * 1e3, **style,
                   label=f"{name} (this machine, window median)")
        centres, seconds = theirs[use_cache]
        right.plot(centres, np.asarray(seconds) * 1e3, color=style["color"],
                   marker=style["marker"], markerfacecolor="none", markersize=10,
                   linestyle="none", label=f"{name} (the source's laptop)")
    right.set_yscale("log")
    label_axes(left, "Total time: quadratic vs linear", "sequence length reached (tokens)",
               "total generation time (s)")
    label_axes(right, "Time per step: rising vs flat", "tokens in the sequence at this step",
               "time per step (ms, log scale)")
    right.legend(fontsize=8)
    fig.suptitle(title)
    return fig



# -- chapter 3 --
def kv_change_map(changes: dict, row_labels, title: str):
    """One panel per case: the largest |change| of the cached K and V [rows, positions] on a
    log colour scale; cells that did not change at all are white and marked 0."""
    fig, grid = plt.subplots(len(changes), 1, figsize=(8, 2.6 * len(changes)),
                             constrained_layout=True, squeeze=False)
    axes = list(grid[:, 0])
    nonzero = np.concatenate([c[c > 0] for c in changes.values()])
    low, high = np.floor(np.log10(nonzero.min())), np.log10(nonzero.max())
    for ax, (case, change) in zip(axes, changes.items()):
        shown = np.ma.log10(np.ma.masked_equal(change, 0.0))
        image = ax.imshow(shown, cmap="viridis", vmin=low, vmax=high, aspect="auto")
        for r, c in zip(*np.nonzero(change == 0)):
            ax.text(c, r, "0", ha="center", va="center", fontsize=9, color="#444444")
        ax.set_xticks(range(change.shape[1]))
        ax.set_yticks(range(len(row_labels)), row_labels)
        label_axes(ax, case, "position in the sequence", "layer, K or V", legend=False,
                   grid=False)
    fig.colorbar(image, ax=axes, label="log10 of the largest |change|")
    fig.suptitle(title)
    return fig


def logit_gaps(gaps: dict, spacing: float, title: str):
    """Largest |cached - recomputed logit| at every step, one series per backend, on a
    symmetric-log axis (linear below 1e-8) so that exact zeros can be drawn at 0.
    gaps: {label: [gap per step]}; spacing: a float32 spacing to draw for scale."""
    fig, (ax,) = figure(width=8, height=3.8)
    for index, (label, gap) in enumerate(gaps.items()):
        ax.plot(np.arange(len(gap)), gap, **series_style(index), label=label)
    ax.axhline(spacing, color=BLACK, linestyle=":", linewidth=1,
               label="float32 spacing at the largest |logit|")
    ax.set_yscale("symlog", linthresh=1e-8)
    ax.set_ylim(-3e-9, 1e-4)
    label_axes(ax, title, "generation step (0 = prefill)",
               "max |cached - recomputed logit|")
    ax.legend(loc="upper left", fontsize=8)
    return fig



# -- chapter 4 --
def kv_against_context(curves: dict, limit: tuple, title: str):
    """Bytes of KV cache against context on log-log axes, one line per model, each stopping at
    its own maximum context. curves: {label: (contexts, bytes)}; limit: (bytes, label) drawn as
    a horizontal line (e.g. one GPU's memory). The y axis is in GB (10^9 bytes)."""
    fig, (ax,) = figure(width=8, height=5)
    for index, (label, (contexts, n_bytes)) in enumerate(curves.items()):
        style = series_style(index)
        ax.loglog(contexts, np.asarray(n_bytes) / 1e9, **style, markevery=6, label=label)
        ax.plot(contexts[-1], n_bytes[-1] / 1e9, marker="|", markersize=14,
                color=style["color"])                   # the end: its max context
    ax.axhline(limit[0] / 1e9, color=GREY, linestyle=(0, (1, 3)), linewidth=2)
    ax.text(ax.get_xlim()[0] * 1.3, limit[0] / 1e9 * 1.2, limit[1], color="#555555")
    label_axes(ax, title, "context per sequence (tokens)",
               "KV cache of one sequence (GB, 10$^9$ bytes)")
    ax.grid(False, which="minor")
    ax.legend(loc="lower right", fontsize=8)
    return fig


def html_table(header, rows, notes: str = "", font_size: str = "0.8em") -> str:
    """A small HTML table (strings are shown as given: escape them first) with notes below."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    return (f"<div style='font-size:{font_size}'><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{notes}</div>")


__all__ = ["BLUE", "ORANGE", "GREEN", "VERMILLION", "SKY", "PURPLE", "YELLOW", "BLACK", "GREY",
           "COLORS", "LINESTYLES", "MARKERS", "series_style", "label_axes", "figure",
           "attention_heatmaps", "flops_per_step", "generation_times", "kv_change_map",
           "logit_gaps", "kv_against_context", "html_table"]
