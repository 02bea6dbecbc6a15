"""Figures carry alternative text: toykv.plots.show puts it in the image output's metadata,
and the book's extension (book/_ext/figure_alt.py) hands it to the page's <img alt>."""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from toykv import plots  # noqa: E402


def test_show_puts_the_alt_text_in_the_image_metadata(monkeypatch):
    shown = []
    import IPython.display
    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, metadata=None: shown.append((obj, metadata)))
    fig, (ax,) = plots.figure()
    ax.plot([1, 2], [3, 4])
    plots.show(fig, "A line rising\n   from 3 at x = 1 to 4 at x = 2.")
    assert shown == [(fig, {"image/png": {"alt": "A line rising from 3 at x = 1 to 4 at x = 2."}})]
    assert not plt.fignum_exists(fig.number)            # closed: shown once


@pytest.mark.parametrize("alt", ["", "plot", "fig.png", None, 3])
def test_show_refuses_an_alt_text_that_says_nothing(alt):
    fig, _ = plots.figure()
    with pytest.raises(ValueError, match="alt"):
        plots.show(fig, alt)
    plt.close(fig)


def test_show_refuses_what_is_not_a_figure():
    with pytest.raises(ValueError, match="Figure"):
        plots.show([1, 2, 3], "A list of three numbers, not a figure at all.")


def test_the_extension_reads_the_alt_text_from_the_output_metadata(monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "book" / "_ext"))
    import figure_alt
    from docutils import nodes

    class Data:
        mime_type = "image/png"
        output_metadata = {"image/png": {"alt": "Two bars, the second twice the first."}}

    monkeypatch.setattr(figure_alt, "_render_image",
                        lambda self, data: [nodes.image(uri="x.png", alt="x.png")])
    assert figure_alt.render_image(None, Data())[0]["alt"] == (
        "Two bars, the second twice the first.")
    Data.output_metadata = {}
    assert figure_alt.render_image(None, Data())[0]["alt"] == "x.png"   # left as it was
