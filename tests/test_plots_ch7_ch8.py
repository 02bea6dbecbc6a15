"""toykv.plots, chapters 7 and 8: each figure draws its series with titles and labelled axes."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from toykv import plots  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _labelled(ax):
    return ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def test_variant_steps_two_labelled_panels():
    fig = plots.variant_steps([1, 2], {"A": [1e8, 2e8], "B": [1e8, 1.5e8]},
                              {"A": [0.01, 0.02], "B": [0.01, 0.015]})
    top, bottom = fig.axes
    assert top.get_title() and top.get_ylabel() and _labelled(bottom)
    assert [len(ax.get_lines()) for ax in fig.axes] == [2, 2]
    assert top.get_yscale() == "log"


def test_chapter7_single_panels():
    for fig, lines in [(plots.cache_growth([1, 2, 3], {"a": [1, 2, 3], "b": [1, 2, 2]}, 2), 3),
                       (plots.window_logit_gap(np.arange(4), np.array([0, 0, 1, 2.]), 2), 2),
                       (plots.cache_errors(np.arange(3), {"x": [1e-3, 2e-3, 1e-3]}), 1)]:
        (ax,) = fig.axes
        assert _labelled(ax) and len(ax.get_lines()) == lines


def test_share_panels_solid_then_dashed():
    contexts = [10, 100, 1000]
    curves = [("m", [0.1, 0.5, 0.9], [True, True, False])]
    fig = plots.share_panels(contexts, {"panel": curves})
    (ax,) = fig.axes
    solid, marker, dashed = ax.get_lines()[:3]
    assert list(solid.get_xdata()) == [10, 100] and solid.get_linestyle() == "-"
    assert list(dashed.get_xdata()) == [100, 1000] and dashed.get_linestyle() == "--"
    assert _labelled(ax)


def test_relative_speed_check_three_series():
    fig = plots.relative_speed_check([1, 2], [1, 0.5], [1, 0.4], [1, 0.45])
    (ax,) = fig.axes
    assert _labelled(ax) and len(ax.get_lines()) == 3
