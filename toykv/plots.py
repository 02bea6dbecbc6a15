"""Plot helpers for the chapters: one palette, one look, so a chapter's cell shows the idea.

Colours are the Okabe-Ito palette (distinct for the common colour-vision deficiencies);
every series also gets its own line style or marker, so plots survive greyscale printing.
Each chapter's figures are small functions below, under a heading per chapter; they take
the numbers the chapter computed and return the matplotlib Figure (the notebook shows it).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

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


def show(fig, alt: str) -> None:
    """Show fig with its alternative text: what it shows and what to take from it, for a
    reader who cannot see it (a screen reader announces it). The text rides in the image
    output's metadata ({"image/png": {"alt": ...}}), where the book (book/_ext/figure_alt.py)
    and Jupyter read it; the figure is then closed, so it is shown once."""
    if not hasattr(fig, "savefig"):
        raise ValueError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    if not isinstance(alt, str) or len(alt.split()) < 4:
        raise ValueError(f"alt must say what the figure shows, in words (a sentence at "
                         f"least), got {alt!r}")
    from IPython.display import display

    display(fig, metadata={"image/png": {"alt": " ".join(alt.split())}})
    plt.close(fig)


def figure(ncols: int = 1, width: float = 6.4, height: float = 4.0):
    """A figure with ncols side-by-side axes (constrained layout); returns (fig, axes)."""
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols if ncols > 1 else width, height),
                             constrained_layout=True, squeeze=False)
    return fig, list(axes[0])


# -- chapter 1: attention -----------------------------------------------------------------
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


# -- chapter 2: the cost of recomputing ---------------------------------------------------
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


# -- chapter 3: why the cache is exact ----------------------------------------------------
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


# -- chapter 4: how big is the cache ------------------------------------------------------
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


def html_table(header, rows, notes: str = "", font_size: str = "0.8em",
               measured=()) -> str:
    """A small HTML table (strings are shown as given: escape them first) with notes below.
    measured: indices of columns whose figures depend on the machine (a real model's quality
    after a lossy change); their cells carry class="measured", which the notebook tests
    excuse as they excuse a line that starts with "measured"."""
    head = "".join(f"<th>{h}</th>" for h in header)
    cell = lambda j, value: (f'<td class="measured">{value}</td>' if j in measured
                             else f"<td>{value}</td>")
    body = "".join("<tr>" + "".join(cell(j, value) for j, value in enumerate(row)) + "</tr>"
                   for row in rows)
    return (f"<div style='font-size:{font_size}'><table><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{notes}</div>")


# -- chapter 5: the roofline --------------------------------------------------------------
def rooflines(machines: dict, points=(), marks: dict | None = None, title: str = "",
              intensity_range=(0.1, 2000.0)):
    """Log-log rooflines min(peak, bandwidth x I) of each machine ({label: Hardware}), its
    ridge point marked with an open circle; points [(label, intensity, FLOP/s)] as filled
    markers; marks {label: intensity} as dotted vertical lines."""
    fig, (ax,) = figure(width=7.6, height=5.0)
    intensity = np.geomspace(*intensity_range, 400)
    for i, (label, hw) in enumerate(machines.items()):
        style = series_style(i)
        ax.loglog(intensity, hw.attainable_flops(intensity), color=style["color"],
                  linestyle=style["linestyle"], linewidth=2,
                  label=f"{label}: ridge {hw.ridge_point:,.0f} FLOP/byte"
                  if hw.ridge_point >= 10 else f"{label}: ridge {hw.ridge_point:.1f} FLOP/byte")
        ax.plot(hw.ridge_point, hw.peak_flops, marker="o", markerfacecolor="none",
                color=style["color"], markersize=9, linestyle="none")
    for j, (label, x) in enumerate((marks or {}).items()):
        ax.axvline(x, color=GREY, linestyle=(0, (1, 2 + 2 * j)), linewidth=1.5)
        ax.text(x * 1.1, ax.get_ylim()[1] / 1.5, label, rotation=90, color="#444444",
                va="top", fontsize=8, backgroundcolor="white")
    for j, (label, x, y) in enumerate(points):
        style = series_style(len(machines) + j)
        ax.plot(x, y, marker=style["marker"], color=style["color"], markersize=9,
                linestyle="none", markeredgecolor=BLACK, label=label)
    label_axes(ax, title, "arithmetic intensity (FLOPs per byte moved, log scale)",
               "attainable FLOP/s (log scale)", legend=False)
    ax.grid(False, which="minor")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def batch_intensity(batches, curves: dict, ridge: tuple, title: str):
    """Arithmetic intensity of a decode step against batch size (log-log), one line per
    curve ({label: intensities}), with a ridge point (value, label) drawn as a line."""
    fig, (ax,) = figure(width=8.4, height=4.4)
    for i, (label, values) in enumerate(curves.items()):
        ax.loglog(batches, values, label=label, **series_style(i))
    ax.axhline(ridge[0], color=GREY, linestyle=(0, (1, 3)), linewidth=2)
    ax.text(batches[0], ridge[0] * 1.15, ridge[1], color="#444444", fontsize=9)
    label_axes(ax, title, "batch (sequences decoded together, log scale)",
               "FLOPs per byte read (log scale)", legend=False)
    ax.grid(False, which="minor")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


# -- chapter 6: prefill and decode --------------------------------------------------------
def prefill_decode_times(prompt_lens, ttft, contexts, tpot, tpot_bound):
    """Left: time to first token (prefill, measured) against prompt length. Right: time per
    output token (decode step, measured) against context, with its bandwidth bound."""
    fig, (left, right) = figure(ncols=2, width=5.4, height=4.2)
    left.plot(prompt_lens, np.asarray(ttft) * 1e3, label="prefill (measured, median)",
              **series_style(0))
    right.plot(contexts, np.asarray(tpot) * 1e3, label="decode step (measured, median)",
               **series_style(1))
    right.plot(contexts, np.asarray(tpot_bound) * 1e3, label="bytes / measured bandwidth",
               **series_style(2))
    right.set_ylim(bottom=0)
    left.set_ylim(bottom=0)
    label_axes(left, "Time to first token", "prompt length (tokens)", "prefill time (ms)")
    label_axes(right, "Time per output token", "context (tokens)", "decode step time (ms)")
    right.legend(fontsize=8, loc="lower right")
    return fig


def batch_throughput(batches: dict, throughput: dict, latency: dict, bound: dict):
    """Left: tokens per second summed over the batch; right: time per step (each sequence's
    wait per token), against batch size, log x. Every dict is {label: values}; bound holds
    roofline predictions, drawn as thin lines in their series' colours."""
    fig, (left, right) = figure(ncols=2, width=5.4, height=4.4)
    for i, label in enumerate(throughput):
        style = series_style(i)
        left.semilogx(batches[label], throughput[label], label=f"{label} (measured)",
                      base=2, **style)
        left.semilogx(batches[label], bound[label], color=style["color"], linestyle=":",
                      linewidth=1, base=2, label=f"{label} (roofline bound)")
        right.semilogx(batches[label], np.asarray(latency[label]) * 1e3, label=label,
                       base=2, **style)
    left.set_ylim(bottom=0)
    right.set_ylim(bottom=0)
    label_axes(left, "Throughput", "batch (sequences, log scale)",
               "tokens per second, whole batch")
    label_axes(right, "Latency", "batch (sequences, log scale)",
               "time per decode step (ms)")
    left.legend(fontsize=7, loc="upper left")
    return fig


def throughput_bounds(batches, curves: dict, title: str):
    """Bound on decode throughput (tokens/s) against batch (log-log), one line per context
    ({label: (batches, tokens/s)}), each ending where memory runs out (a bar)."""
    fig, (ax,) = figure(width=7.2, height=4.4)
    for i, (label, (b, tps)) in enumerate(curves.items()):
        style = series_style(i)
        ax.loglog(b, tps, label=label, **style, markevery=max(1, len(b) // 8))
        ax.plot(b[-1], tps[-1], marker="|", markersize=16, color=style["color"])
    label_axes(ax, title, "batch (sequences, log scale)",
               "tokens per second, whole batch (log scale)", legend=False)
    ax.grid(False, which="minor")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def memory_plans(plans: dict, room: float, title: str):
    """Histograms of the KV memory each simulated batch needs, one per plan ({label: bytes
    [n]}), against the memory left beside the weights (a vertical line). GB = 10^9 bytes."""
    fig, (ax,) = figure(width=7.2, height=4.2)
    hatches = ("", "//", "xx", "..")
    for i, (label, need) in enumerate(plans.items()):
        ax.hist(np.asarray(need) / 1e9, bins=30, color=COLORS[i], alpha=0.6,
                hatch=hatches[i % len(hatches)], edgecolor=BLACK, linewidth=0.5, label=label)
    ax.axvline(room / 1e9, color=BLACK, linestyle="--", linewidth=2,
               label=f"memory beside the weights: {room / 1e9:.1f} GB")
    label_axes(ax, title, "KV cache a batch needs at its peak (GB, 10$^9$ bytes)",
               "batches (count)", legend=False)
    ax.legend(fontsize=8, loc="upper center")
    return fig


# -- chapter 7: shrinking the cache -------------------------------------------------------
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


# -- chapter 8: long context: the KV share ------------------------------------------------
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


# -- chapter 9: a real model --------------------------------------------------------------
def measured_roofline(hardware, points: dict, title: str):
    """A machine's roofline, min(peak, bandwidth x intensity), log-log, with measured runs on
    it. points: {label: Hardware.measured_point(...) dict}; each is labelled with the share of
    the roof it attained."""
    fig, (ax,) = figure(width=7.0, height=4.6)
    found = [p["intensity"] for p in points.values()] + [hardware.ridge_point]
    grid = np.logspace(np.log10(min(found) / 4), np.log10(max(found) * 4), 200)
    ax.loglog(grid, hardware.attainable_flops(grid) / 1e9, color=BLACK, linewidth=2,
              label=f"roof: min({hardware.peak_flops / 1e9:.0f} GFLOP/s, "
                    f"{hardware.bandwidth / 1e9:.1f} GB/s x intensity)")
    ax.axvline(hardware.ridge_point, color=GREY, linestyle=":", linewidth=1.5,
               label=f"ridge point: {hardware.ridge_point:.1f} FLOP/byte")
    for i, (label, p) in enumerate(points.items()):
        style = series_style(i + 1)
        ax.loglog(p["intensity"], p["flops_per_s"] / 1e9, linestyle="none", markersize=9,
                  color=style["color"], marker=style["marker"],
                  label=f"{label}: {p['fraction']:.0%} of the roof")
        ax.vlines(p["intensity"], p["flops_per_s"] / 1e9, p["roof"] / 1e9,
                  color=style["color"], linestyle=style["linestyle"], linewidth=1)
    label_axes(ax, title, "arithmetic intensity (FLOP per byte, log scale)",
               "attained GFLOP/s (log scale)", legend=False)
    low, high = ax.get_ylim()                          # whole decades: labels 1, 10, 100
    ax.set_ylim(10 ** np.floor(np.log10(low)), 10 ** np.ceil(np.log10(high)))
    plain = FuncFormatter(lambda v, _: f"{v:g}")       # 0.1, 10 rather than 10^-1, 10^1
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_formatter(plain)
    ax.legend(fontsize=8, loc="lower right")
    return fig


# -- chapter 10: serving many requests ----------------------------------------------------
def generating_over_time(runs: dict, title: str):
    """How many requests generate at each step, one panel per scheduler: runs maps
    (batching, memory) to a toykv.scheduler.Outcome (its trace's 't' and 'generating': a static
    batch's finished rows are held but not generating, so its line drains)."""
    batchings = list(dict.fromkeys(batching for batching, _ in runs))
    memories = list(dict.fromkeys(memory for _, memory in runs))
    fig, axes = figure(ncols=len(batchings), width=4.2, height=3.4)
    top = max(row["generating"] for o in runs.values() for row in o.trace)
    for ax, batching in zip(axes, batchings):
        for i, memory in enumerate(memories):
            trace = runs[batching, memory].trace
            ax.step([row["t"] for row in trace], [row["generating"] for row in trace],
                    where="post", label=memory, color=COLORS[i], linestyle=LINESTYLES[i])
        ax.set_ylim(0, 1.06 * top)
        label_axes(ax, f"{batching.capitalize()} batching", "time (s, step-time model)",
                   "requests generating")
    fig.suptitle(title)
    return fig


def load_sweep(clients, runs: dict, measured_tput: dict, measured_ttft: dict, fits: int):
    """Throughput and mean time to first token against requests in flight, one line per
    scheduling rule (runs: {(rule, clients): Outcome}), someone's measurements as black squares
    ({clients: value}) and the requests that fit as a dotted line."""
    rules = list(dict.fromkeys(rule for rule, _ in runs))
    fig, (left, right) = figure(ncols=2, width=4.2, height=3.6)
    for i, rule in enumerate(rules):
        left.plot(clients, [runs[rule, n].throughput for n in clients], label=rule,
                  **series_style(i))
        right.plot(clients, [runs[rule, n].mean_ttft for n in clients], label=rule,
                   **series_style(i))
    for ax, measured in ((left, measured_tput), (right, measured_ttft)):
        ax.plot(list(measured), list(measured.values()), "s", color=BLACK,
                label="blog (theirs)")
        ax.axvline(fits, color=GREY, linestyle=":", label=f"{fits} fit")
    label_axes(left, "Throughput (model)", "requests in flight", "output tokens per second")
    label_axes(right, "Time to first token (model)", "requests in flight",
               "mean time to first token (s)")
    return fig


def latency_percentiles(clients, latency: dict, title: str):
    """Time to first token (left, log scale) and time per output token with the tail of the
    inter-token latency (right, ms) against requests in flight. latency: {(clients, q):
    Outcome.latency(q)} for q in 50 and 99."""
    fig, (left, right) = figure(ncols=2, width=4.2, height=3.4)
    for i, q in enumerate((50, 99)):
        left.plot(clients, [latency[n, q]["ttft"] for n in clients], label=f"TTFT p{q}",
                  **series_style(i))
        right.plot(clients, [1e3 * latency[n, q]["tpot"] for n in clients],
                   label=f"TPOT p{q}", **series_style(i))
    right.plot(clients, [1e3 * latency[n, 99]["itl"] for n in clients], label="ITL p99",
               **series_style(2))
    left.set_yscale("log")
    label_axes(left, f"First token ({title})", "requests in flight", "time to first token (s)")
    label_axes(right, f"Later tokens ({title})", "requests in flight", "time per token (ms)")
    return fig


def block_size_costs(sizes, waste, table, step_sizes, ratio, title: str):
    """Three panels against the block size: mean wasted slots and mean table entries per
    sequence (log scales), and a measured paged / contiguous step time (from 0, 1 dotted)."""
    fig, axes = figure(ncols=3, width=3.0, height=3.4)
    panels = [(sizes, waste, "Wasted slots", "slots per sequence (mean)"),
              (sizes, table, "Block table", "entries per sequence (mean)"),
              (step_sizes, ratio, "Decode step (measured)", "paged / contiguous time")]
    for i, (ax, (x, y, name, ylabel)) in enumerate(zip(axes, panels)):
        ax.plot(x, y, **series_style(i))
        ax.set_xscale("log", base=2)
        if i < 2:
            ax.set_yscale("log")
        label_axes(ax, name, "block size (tokens)", ylabel)
    axes[2].axhline(1, color=GREY, linestyle=":")
    axes[2].set_ylim(0, 1.1 * max(list(ratio) + [1]))
    fig.suptitle(title)
    return fig


# -- chapter 13: what shrinking the cache costs ---------------------------------------------
def cost_curves(curves: dict, original: tuple, title: str, xlabel: str, ylabel: str,
                offsets: dict | None = None):
    """Quality lost against cache bytes per token, both axes log scale. Every way of shrinking
    is a curve through its points (or one point), named next to its last point in its own
    colour, with its own marker and line style (no legend to look up); the original model is a
    black star. x ticks at 1,000 x powers of two.

    curves: {name: (bytes per token, values)}; original: (bytes per token, value, name);
    offsets: {name: (dx, dy) in points} to move a name off a crowded spot (dx < 0: to the
    left of the point)."""
    fig, (ax,) = figure(width=7.6, height=5.4)
    for i, (name, (xs, ys)) in enumerate(curves.items()):
        style = series_style(i)
        ax.plot(xs, ys, **style, markersize=7)
        dx, dy = (offsets or {}).get(name, (7, 0))
        ax.annotate(name, (xs[-1], ys[-1]), xytext=(dx, dy), textcoords="offset points",
                    color=style["color"], fontsize=8.5, va="center",
                    ha="left" if dx >= 0 else "right")
    x0, y0, name = original
    ax.plot([x0], [y0], marker="*", color=BLACK, markersize=16, linestyle="none", zorder=5)
    ax.annotate(name, (x0, y0), xytext=(-10, 0), textcoords="offset points", fontsize=8.5,
                ha="right", va="center")
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = [x for xs, _ in curves.values() for x in xs] + [x0]
    ticks = [1000 * 2 ** k for k in range(-4, 12) if min(xs) / 1.5 <= 1000 * 2 ** k
             <= max(xs) * 1.5]
    ax.set_xticks(ticks, [f"{t:,.0f}" for t in ticks])
    ax.xaxis.set_minor_formatter(NullFormatter())
    label_axes(ax, title, xlabel, ylabel, legend=False)
    return fig


__all__ = ["BLUE", "ORANGE", "GREEN", "VERMILLION", "SKY", "PURPLE", "YELLOW", "BLACK", "GREY",
           "COLORS", "LINESTYLES", "MARKERS", "series_style", "label_axes", "show", "figure",
           "attention_heatmaps", "flops_per_step", "generation_times", "kv_change_map",
           "logit_gaps", "kv_against_context", "html_table", "rooflines", "batch_intensity",
           "prefill_decode_times", "batch_throughput", "throughput_bounds", "memory_plans",
           "variant_steps", "cache_growth", "window_logit_gap", "cache_errors", "share_curves",
           "share_panels", "relative_speed_check", "measured_roofline", "generating_over_time",
           "load_sweep", "latency_percentiles", "block_size_costs", "cost_curves"]
