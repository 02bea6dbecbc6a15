"""A figure's alternative text from its output's metadata.

myst-nb gives an image output the alt text of its cell's `mystnb` image options, which
is the same for every figure of a cell and cannot depend on the numbers; from the output's
own metadata it takes only width and height. toykv.plots.show stores each figure's alt text
in that metadata ({"image/png": {"alt": ...}}), computed beside the code that draws it; this
extension hands it to the image node, so the page's <img alt> says what the figure shows
instead of its file name.
"""
from __future__ import annotations

from myst_nb.core.render import NbElementRenderer

_render_image = NbElementRenderer.render_image


def render_image(self, data):
    """myst-nb's image, with the alt text its output's metadata carries (if any)."""
    nodes = _render_image(self, data)
    alt = data.output_metadata.get(data.mime_type, {}).get("alt")
    if alt and nodes:
        nodes[0]["alt"] = str(alt)
    return nodes


def setup(app):
    NbElementRenderer.render_image = render_image
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
