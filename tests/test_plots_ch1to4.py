"""The plot helpers of chapters 1-4 (toykv.plots): each returns a figure whose axes have a
title and labelled axes, and draws one line per series it was given."""
import inspect
import pathlib
import re

import numpy as np

from conftest import labelled


def test_attention_heatmaps_one_panel_per_head(plots):
    S = 5
    allowed = np.tril(np.ones((S, S), dtype=bool))
    fig = plots.attention_heatmaps(np.full((3, S, S), 0.2) * allowed, allowed, "weights")
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.images]
    assert len(panels) == 3 and all(ax.get_title() and ax.get_xlabel() for ax in panels)


def test_flops_per_step_two_scales_two_series(plots):
    x = np.arange(10)
    fig = plots.flops_per_step(x, {False: x * 2.0e6, True: x + 1.0e6}, "t")
    assert [ax.get_yscale() for ax in fig.axes] == ["linear", "log"]
    assert all(labelled(ax) and len(ax.lines) == 2 for ax in fig.axes)


def test_generation_times_both_panelslabelled(plots):
    x = np.arange(33, 129)
    fig = plots.generation_times(
        [64, 128], cumulative={c: (x, np.cumsum(np.ones(len(x)))) for c in (False, True)},
        per_step={c: (x, np.ones(len(x)) * 1e-3) for c in (False, True)},
        windows={c: ([48, 112], [1e-3, 2e-3]) for c in (False, True)},
        theirs={c: ([48, 112], [1e-3, 3e-3]) for c in (False, True)}, title="t")
    assert len(fig.axes) == 2 and all(labelled(ax) for ax in fig.axes)


def test_kv_change_map_marks_unchanged_cells(plots):
    change = np.array([[0.0, 1.0], [0.5, 0.0]])
    fig = plots.kv_change_map({"case": change}, ["a", "b"], "t")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts.count("0") == 2


def test_logit_gaps_one_line_per_backend_plus_spacing(plots):
    fig = plots.logit_gaps({"a": [0, 1e-6], "b": [0, 0]}, 4.8e-7, "t")
    ax = fig.axes[0]
    assert labelled(ax) and len(ax.lines) == 3 and ax.get_yscale() == "symlog"


def test_kv_against_context_lines_stop_at_their_last_context(plots):
    curves = {"a": (np.array([100, 1000]), [1e6, 1e7]), "b": (np.array([100, 10_000]),
                                                               [1e5, 1e7])}
    fig = plots.kv_against_context(curves, (8e10, "GPU"), "t")
    ax = fig.axes[0]
    ends = [line.get_xdata()[-1] for line in ax.lines if line.get_label() in curves]
    assert labelled(ax) and ends == [1000, 10_000]


def test_html_table_has_every_cell(plots):
    html = plots.html_table(["a", "b"], [[1, 2], [3, 4]], "<p>n</p>")
    assert html.count("<td>") == 4 and "<th>b</th>" in html and "<p>n</p>" in html


def test_one_section_per_chapter_in_order(plots):
    source = inspect.getsource(plots)
    chapters = [int(n) for n in re.findall(r"^# -- chapter (\d+):", source, re.M)]
    assert chapters == sorted(set(chapters)) and chapters[0] == 1, chapters   # in order, once
    book = pathlib.Path(__file__).resolve().parents[1] / "book"
    numbers = {int(p.name[:2]) for p in book.glob("[0-9][0-9]_*.ipynb")}
    assert set(chapters) <= numbers, set(chapters) - numbers    # each names a chapter there is
    first_section = source.index("# -- chapter 1:")
    for name in plots.__all__:       # every chapter's figure sits under a chapter heading
        if inspect.isfunction(getattr(plots, name)) and name not in (
                "series_style", "label_axes", "show", "figure"):
            assert source.index(f"def {name}(") > first_section, name


def test_html_table_marks_measured_columns_for_the_notebook_tests(plots):
    """Cells of a measured column carry class="measured", and the nbval sanitizer turns exactly
    those into MEASURED: the other columns stay compared digit for digit."""
    import configparser
    html = plots.html_table(["method", "bytes", "perplexity"],
                            [["int8", "12,240", "51.6"], ["4-bit", "9,000", "52.0"]],
                            measured=(2,))
    assert html.count('<td class="measured">') == 2 and "<td>12,240</td>" in html
    cfg = configparser.ConfigParser()
    cfg.read(pathlib.Path(__file__).with_name("nbval_sanitize.cfg"))
    rule = cfg["measured_table_cells"]
    cleaned = re.sub(rule["regex"], rule["replace"], html)
    assert "51.6" not in cleaned and "52.0" not in cleaned and "<td>12,240</td>" in cleaned
