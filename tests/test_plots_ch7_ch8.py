"""toykv.plots, chapters 7 and 8: each figure draws its series with titles and labelled axes."""
import numpy as np

from conftest import labelled


def test_variant_steps_two_labelled_panels(plots):
    fig = plots.variant_steps([1, 2], {"A": [1e8, 2e8], "B": [1e8, 1.5e8]},
                              {"A": [0.01, 0.02], "B": [0.01, 0.015]})
    top, bottom = fig.axes
    assert top.get_title() and top.get_ylabel() and labelled(bottom)
    assert [len(ax.get_lines()) for ax in fig.axes] == [2, 2]
    assert top.get_yscale() == "log"


def test_chapter7_single_panels(plots):
    for fig, lines in [(plots.cache_growth([1, 2, 3], {"a": [1, 2, 3], "b": [1, 2, 2]}, 2), 3),
                       (plots.window_logit_gap(np.arange(4), np.array([0, 0, 1, 2.]), 2), 2),
                       (plots.cache_errors(np.arange(3), {"x": [1e-3, 2e-3, 1e-3]}), 1)]:
        (ax,) = fig.axes
        assert labelled(ax) and len(ax.get_lines()) == lines


def test_share_panels_solid_then_dashed(plots):
    contexts = [10, 100, 1000]
    curves = [("m", [0.1, 0.5, 0.9], [True, True, False])]
    fig = plots.share_panels(contexts, {"panel": curves})
    (ax,) = fig.axes
    solid, marker, dashed = ax.get_lines()[:3]
    assert list(solid.get_xdata()) == [10, 100] and solid.get_linestyle() == "-"
    assert list(dashed.get_xdata()) == [100, 1000] and dashed.get_linestyle() == "--"
    assert labelled(ax)


def test_relative_speed_check_three_series(plots):
    fig = plots.relative_speed_check([1, 2], [1, 0.5], [1, 0.4], [1, 0.45])
    (ax,) = fig.axes
    assert labelled(ax) and len(ax.get_lines()) == 3
