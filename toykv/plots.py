"""Plot helpers for the chapters: one palette, one look, so a chapter's cell shows the idea.

Colours are the Okabe-Ito palette (distinct for the common colour-vision deficiencies);
every series also gets its own line style or marker, so plots survive greyscale printing.
Each chapter's figures are small functions below, under a heading per chapter; they take
the numbers the chapter computed and return the matplotlib Figure (the notebook shows it).
"""
from __future__ import annotations

import matplotlib.pyplot as plt

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


__all__ = ["BLUE", "ORANGE", "GREEN", "VERMILLION", "SKY", "PURPLE", "YELLOW", "BLACK", "GREY",
           "COLORS", "LINESTYLES", "MARKERS", "series_style", "label_axes", "figure"]


# -- chapter 7 --------------------------------------------------------------------------
def variant_steps(contexts, step_bytes: dict, step_seconds: dict):
    """Two stacked panels against context, log y: bytes a decode step moves (counted) and its
    measured time. step_bytes / step_seconds: {variant label: [len(contexts)] values}."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.0, 7.6), sharex=True,
                                      constrained_layout=True)
    for i, (label, values) in enumerate(step_bytes.items()):
        top.semilogy(contexts, [b / 1e6 for b in values], label=label, **series_style(i))
    for i, (label, values) in enumerate(step_seconds.items()):
        bottom.semilogy(contexts, [t * 1e3 for t in values], label=label, **series_style(i))
    label_axes(top, "Bytes a decode step moves (counted)", "",
               "MB per step (10$^6$ bytes, log scale)")
    label_axes(bottom, "Decode step time (measured, median)", "context (tokens)",
               "ms per step (log scale)")
    for ax in (top, bottom):
        ax.legend(fontsize=9, loc="upper left")
    fig.suptitle("One toy, four attention variants (float32, 4 layers, d_model 768)")
    return fig


def cache_growth(contexts, nbytes: dict, window: int):
    """cache.nbytes against context for several layer patterns, with the window marked."""
    fig, (ax,) = figure(width=7.0, height=4.0)
    for i, (label, values) in enumerate(nbytes.items()):
        style = series_style(i)
        ax.plot(contexts, [b / 1e3 for b in values], label=label, color=style["color"],
                linestyle=style["linestyle"], marker=style["marker"], markevery=32)
    ax.axvline(window, color=GREY, linestyle=":", linewidth=1.5)
    ax.text(window, ax.get_ylim()[1] * 0.95, f" window = {window} tokens", color="#555555",
            va="top")
    label_axes(ax, "A sliding window stops the cache from growing", "context (tokens)",
               "cache.nbytes (kB, 10$^3$ bytes)")
    return fig


def window_logit_gap(positions, gaps, window: int):
    """Largest |logit difference| with and without a window, per position (exact zeros at 0)."""
    fig, (ax,) = figure(width=7.0, height=3.6)
    ax.plot(positions, gaps, color=VERMILLION, marker="o", markersize=3, linestyle="-",
            label="max |logit with window - logit without|")
    ax.axvline(window - 0.5, color=GREY, linestyle=":", linewidth=1.5,
               label=f"window = {window}: positions >= {window} lose their oldest keys")
    ax.set_yscale("symlog", linthresh=1e-6)      # linear near 0, so exact zeros are drawn
    ax.set_ylim(bottom=-1e-7)
    label_axes(ax, "Inside the window nothing changes; past it the logits do",
               "position in the sequence", "max |logit difference| (unitless)")
    ax.legend(loc="center right", fontsize=9)
    return fig


def cache_errors(steps, errors: dict):
    """Per-step max |logit error| of lower-precision caches against float32 (log scale)."""
    fig, (ax,) = figure(width=7.0, height=3.6)
    for i, (label, values) in enumerate(errors.items()):
        style = series_style(i)
        ax.semilogy(steps, values, label=label, color=style["color"],
                    linestyle=style["linestyle"], marker=style["marker"], markevery=40)
    label_axes(ax, "Logit error of a smaller cache, along the same tokens",
               "generation step (0 = prefill)", "max |logit - float32 logit| (unitless)")
    return fig


__all__ += ["variant_steps", "cache_growth", "window_logit_gap", "cache_errors"]
# -- chapter 8 --------------------------------------------------------------------------
def share_curves(ax, contexts, curves, title: str):
    """KV share (%) against context (log x) on ax: solid up to each model's published maximum
    context (marked), dashed and thin beyond it. curves: [(label, shares [n], within [n])]."""
    for i, (label, shares, within) in enumerate(curves):
        style = series_style(i)
        pct = [100 * s for s in shares]
        last = max((j for j, ok in enumerate(within) if ok), default=-1)
        if last >= 0:
            ax.semilogx(contexts[:last + 1], pct[:last + 1], color=style["color"],
                        linestyle=style["linestyle"], linewidth=2, label=label)
            ax.plot(contexts[last], pct[last], color=style["color"], marker=style["marker"],
                    linestyle="none", markersize=7)
        if last + 1 < len(contexts):
            start = max(last, 0)
            ax.semilogx(contexts[start:], pct[start:], color=style["color"], linestyle="--",
                        linewidth=1, label=None if last >= 0 else label)
    ax.axhline(50, color=GREY, linestyle=":", linewidth=1)
    ax.set_ylim(0, 100)
    label_axes(ax, title, "context (tokens, log scale)", "KV share of bytes per step (%)",
               legend=False)
    ax.legend(fontsize=8, loc="upper left")
    return ax


def share_panels(contexts, panels: dict):
    """One share_curves panel per entry of panels ({title: curves}), stacked."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.0, 3.9 * len(panels)),
                             constrained_layout=True, squeeze=False)
    for ax, (title, curves) in zip(axes[:, 0], panels.items()):
        share_curves(ax, contexts, curves, title)
    fig.suptitle("KV share of a decode step against context (bf16, batch 1)\n"
                 "solid: up to the published maximum context (marker); "
                 "dashed: beyond it, hypothetical")
    return fig


def relative_speed_check(contexts, predicted, measured, fitted):
    """Relative decode speed against context: 1 - share, measured, and the two-bandwidth fit."""
    fig, (ax,) = figure(width=7.0, height=4.2)
    ax.plot(contexts, predicted, label="predicted: 1 - KV share (one bandwidth)",
            **series_style(0))
    ax.plot(contexts, measured, label="measured: shortest-context step time / step time",
            **series_style(1))
    ax.plot(contexts, fitted, label="fit: weights and cache at their own bandwidths",
            color=GREEN, linestyle=":", marker="^")
    ax.set_ylim(0, 1.05)
    label_axes(ax, "Relative decode speed of the toy (MHA, float32)", "context (tokens)",
               "relative decode speed (1 = empty cache)")
    return fig


__all__ += ["share_curves", "share_panels", "relative_speed_check"]
