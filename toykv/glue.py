"""myst-nb's glue for the plain notebooks, which run without the book's tools.

A chapter glues a computed value into its text with `glue(name, value)` from myst-nb. In
the plain notebooks (Jupyter, Binder, Colab) the text already shows every glued value, so
their code imports this glue instead: it shows the value when asked (display=True, as
myst-nb does) and stores nothing, so those notebooks need neither myst-nb nor Sphinx.
"""
from __future__ import annotations

__all__ = ["glue"]


def glue(name: str, variable, display: bool = True) -> None:
    """Show variable when display is true, as myst-nb's glue does; name is not used (the
    plain notebook's text has the value filled in already)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"glue needs a non-empty name, got {name!r}")
    if display:
        from IPython.display import display as show

        show(variable)
