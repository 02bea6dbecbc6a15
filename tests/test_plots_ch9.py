"""toykv.plots, chapter 9: the measured roofline draws the roof, the ridge and each point."""
import numpy as np

from toykv.roofline import Hardware


def test_measured_roofline_roof_ridge_and_points(plots):
    chip = Hardware("hand", peak_flops=100e9, bandwidth=10e9)          # ridge 10 FLOP/byte
    points = {"decode": chip.measured_point(1e9, 2e9, 0.4),           # 0.5 FLOP/byte, 2.5 G
              "prefill": chip.measured_point(100e9, 1e9, 2.0)}        # 100 FLOP/byte, 50 G
    fig = plots.measured_roofline(chip, points, "title")
    (ax,) = fig.axes
    assert ax.get_title() == "title" and ax.get_xlabel() and ax.get_ylabel()
    assert ax.get_xscale() == ax.get_yscale() == "log"
    roof, ridge, decode, prefill = ax.get_lines()
    x, y = roof.get_xdata(), roof.get_ydata()
    assert x[0] < 0.5 and x[-1] > 100                      # spans every point
    np.testing.assert_allclose(y, np.minimum(100, 10 * x))  # GFLOP/s
    assert list(ridge.get_xdata()) == [10, 10]
    assert (decode.get_xdata()[0], decode.get_ydata()[0]) == (0.5, 2.5)
    assert (prefill.get_xdata()[0], prefill.get_ydata()[0]) == (100, 50)
    labels = ax.get_legend_handles_labels()[1]
    assert "decode: 50% of the roof" in labels and "prefill: 50% of the roof" in labels
