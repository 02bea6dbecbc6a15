"""toykv.plots, chapter 13: every way of shrinking is a curve named in its own colour at its
last point, the original model a star, on log axes with plain x ticks."""
import matplotlib.colors as mcolors
from conftest import labelled


def test_cost_curves_name_each_curve_and_mark_the_original(plots):
    curves = {"bits": ([12000, 8000], [0.001, 0.2]), "tokens": ([6000], [0.3])}
    fig = plots.cost_curves(curves, (24000, 1e-6, "original"), "title", "bytes", "KL",
                            offsets={"tokens": (-6, 4)})
    (ax,) = fig.axes
    assert labelled(ax) and ax.get_xscale() == ax.get_yscale() == "log"
    bits, tokens, star = ax.get_lines()
    assert list(bits.get_xdata()) == [12000, 8000] and list(tokens.get_ydata()) == [0.3]
    assert (star.get_xdata()[0], star.get_ydata()[0], star.get_marker()) == (24000, 1e-6, "*")
    names = {t.get_text(): t for t in ax.texts}
    assert set(names) == {"bits", "tokens", "original"}
    assert names["bits"].xy == (8000, 0.2) and names["tokens"].xy == (6000, 0.3)
    assert names["tokens"].get_ha() == "right" and names["bits"].get_ha() == "left"
    for name, line in (("bits", bits), ("tokens", tokens)):       # its curve's colour
        assert mcolors.same_color(names[name].get_color(), line.get_color())
    assert {(b.get_color(), b.get_marker()) for b in (bits, tokens)} != {(bits.get_color(),
                                                                           bits.get_marker())}
    assert ax.get_legend() is None
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["4,000", "8,000", "16,000", "32,000"]       # within the data, plain
