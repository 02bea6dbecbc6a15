"""toykv.plots, chapters 5 and 6: each figure draws its series with titles and labelled axes."""
import numpy as np

from conftest import labelled
from toykv import hardware


def test_rooflines_slope_then_ceiling_and_points(plots):
    hw = hardware("lecture")
    fig = plots.rooflines({"lecture": hw}, points=[("decode", 1.0, 1e12)],
                          marks={"decode": 1.0}, title="t")
    (ax,) = fig.axes
    roof = ax.get_lines()[0]
    x, y = roof.get_xdata(), roof.get_ydata()
    assert np.allclose(y, np.minimum(hw.peak_flops, hw.bandwidth * x))   # min(pi, beta I)
    assert ax.get_xscale() == ax.get_yscale() == "log" and labelled(ax)
    labels = ax.get_legend_handles_labels()[1]
    assert any("ridge 200" in label for label in labels) and "decode" in labels


def test_batch_intensity_one_line_per_curve_and_the_ridge(plots):
    fig = plots.batch_intensity([1, 2, 4], {"a": [1, 2, 4], "b": [1, 1, 1]}, (200, "ridge"), "t")
    (ax,) = fig.axes
    assert len(ax.get_lines()) == 3 and labelled(ax)


def test_prefill_decode_times_two_panels(plots):
    fig = plots.prefill_decode_times([1, 2], [0.1, 0.2], [10, 20], [0.01, 0.02],
                                     [0.005, 0.006])
    left, right = fig.axes
    assert labelled(left) and labelled(right)
    assert [len(ax.get_lines()) for ax in fig.axes] == [1, 2]
    assert list(right.get_lines()[0].get_ydata()) == [10.0, 20.0]        # in ms


def test_batch_throughput_measured_and_bound_per_context(plots):
    batches = {"S = 256": [1, 2], "S = 2,048": [1, 2]}
    fig = plots.batch_throughput(batches, {k: [10, 18] for k in batches},
                                 {k: [0.1, 0.11] for k in batches},
                                 {k: [12, 24] for k in batches})
    left, right = fig.axes
    assert len(left.get_lines()) == 4 and len(right.get_lines()) == 2
    assert labelled(left) and labelled(right)


def test_throughput_bounds_and_memory_plans(plots):
    fig = plots.throughput_bounds([1, 2, 4], {"a": ([1, 2, 4], [1, 2, 3])}, "t")
    (ax,) = fig.axes
    assert labelled(ax) and len(ax.get_lines()) == 2            # the line and its end bar
    fig = plots.memory_plans({"avg": np.array([1e9, 2e9]), "worst": np.array([5e8])}, 1.5e9,
                             "t")
    (ax,) = fig.axes
    assert labelled(ax) and len(ax.patches) == 60 and len(ax.get_lines()) == 1
