"""toykv.plots, chapter 10: each figure draws the numbers it is given, in the panels it names."""
import numpy as np

from toykv import scheduler
from toykv.roofline import Hardware
from toykv.zoo import get


def outcome(times, generating, ttft=1.0, tokens=10):
    """An Outcome by hand: a trace of (t, generating) rows, one request's first token."""
    o = scheduler.Outcome(output_tokens=tokens)
    o.trace = [{"t": t, "generating": g} for t, g in zip(times, generating)]
    o.finish, o.ttft = {0: times[-1]}, {0: ttft}
    return o


def test_generating_over_time_draws_each_run_in_its_schedulers_panel(plots):
    runs = {("static", "reserved"): outcome([1, 2, 3], [4, 2, 1]),
            ("static", "paged"): outcome([1, 2], [8, 3]),
            ("continuous", "reserved"): outcome([1, 2], [4, 4]),
            ("continuous", "paged"): outcome([1, 2, 3, 4], [8, 8, 8, 2])}
    fig = plots.generating_over_time(runs, "title")
    static, continuous = fig.axes
    assert static.get_title() == "Static batching" and continuous.get_xlabel()
    reserved, paged = static.get_lines()
    assert list(reserved.get_ydata()) == [4, 2, 1] and list(paged.get_xdata()) == [1, 2]
    assert list(continuous.get_lines()[1].get_ydata()) == [8, 8, 8, 2]
    assert static.get_ylim()[1] >= 8
    assert [t.get_text() for t in static.get_legend().get_texts()] == ["reserved", "paged"]


def test_load_sweep_draws_throughput_ttft_and_the_measurements(plots):
    clients = (1, 2)
    runs = {("a", 1): outcome([1, 2], [1, 1], ttft=0.5, tokens=10),
            ("a", 2): outcome([1, 4], [2, 2], ttft=2.0, tokens=20),
            ("b", 1): outcome([1, 5], [1, 1], ttft=0.7, tokens=10),
            ("b", 2): outcome([1, 10], [2, 2], ttft=3.0, tokens=20)}
    fig = plots.load_sweep(clients, runs, {1: 4.0}, {2: 2.5}, fits=2)
    left, right = fig.axes
    a, b, blog, fit = left.get_lines()
    assert list(a.get_ydata()) == [5.0, 5.0] and list(b.get_ydata()) == [2.0, 2.0]
    assert (blog.get_xdata()[0], blog.get_ydata()[0]) == (1, 4.0)
    assert list(fit.get_xdata()) == [2, 2]
    assert list(right.get_lines()[1].get_ydata()) == [0.7, 3.0]
    assert (right.get_lines()[2].get_xdata()[0], right.get_lines()[2].get_ydata()[0]) == (2, 2.5)


def test_latency_percentiles_draw_seconds_and_milliseconds(plots):
    latency = {(n, q): {"ttft": n * q / 100, "tpot": 0.01 * n, "itl": 0.02 * n * q / 99}
               for n in (1, 4) for q in (50, 99)}
    fig = plots.latency_percentiles((1, 4), latency, "model")
    left, right = fig.axes
    assert left.get_yscale() == "log" and "model" in left.get_title()
    p50, p99 = left.get_lines()
    np.testing.assert_allclose(p99.get_ydata(), [0.99, 3.96])
    tpot50, tpot99, itl99 = right.get_lines()
    np.testing.assert_allclose(tpot50.get_ydata(), [10, 40])          # ms
    np.testing.assert_allclose(itl99.get_ydata(), [20, 80])


def test_block_size_costs_three_panels_ratio_from_zero(plots):
    fig = plots.block_size_costs([1, 4, 16], [0.5, 1.5, 7.5], [100, 25, 7], [4, 16],
                                 [1.2, 1.1], "title")
    waste, table, ratio = fig.axes
    assert waste.get_yscale() == table.get_yscale() == "log" and ratio.get_yscale() == "linear"
    assert list(table.get_lines()[0].get_ydata()) == [100, 25, 7]
    assert list(ratio.get_lines()[0].get_ydata()) == [1.2, 1.1]
    assert ratio.get_ylim()[0] == 0 and ratio.get_ylim()[1] >= 1.2
    assert list(ratio.get_lines()[1].get_ydata()) == [1, 1]             # as fast as contiguous


def test_a_simulated_run_plots(plots):
    """The functions take what simulate returns, not only hand-made outcomes."""
    chip = Hardware("hand", peak_flops=100e12, bandwidth=1e12)
    steps = scheduler.StepModel(get("qwen3-1.7b").config, chip)
    mix = scheduler.request_mix(6, seed=0, prompt=(16, 64), output=(4, 8))
    runs = {(b, m): scheduler.simulate(mix, steps, 64, max_batch=4, batching=b,
                                       reserve_tokens=r)
            for b in ("static", "continuous") for m, r in (("reserved", 80), ("paged", None))}
    fig = plots.generating_over_time(runs, "title")
    assert len(fig.axes) == 2 and all(len(ax.get_lines()) == 2 for ax in fig.axes)
