"""The widgets respond in the static book: each shows its static twin (toykv.widgets.static_twin).

A widget's display carries its ipywidgets view and, when TOYKV_STATIC_TWINS=1, a text/html
twin that responds with no kernel. This extension sets that variable for the kernels the
build starts (they inherit the build's environment). _config.yml's nb_mime_priority_overrides
makes the HTML build prefer text/html to a widget view (myst-nb ranks widget views 10; 5 ranks
first), so the page shows the twin; the extension stops the build if that line is missing.
Jupyter, Binder and Colab never set the variable: there the real ipywidgets run, and the
stored notebooks carry no twin. Outputs without a widget view are unaffected (text/html
already ranks above everything else they hold).
"""
from __future__ import annotations

import os

from sphinx.errors import ExtensionError

STATIC_ENV = "TOYKV_STATIC_TWINS"       # toykv.widgets.static_twin.STATIC_ENV
TWIN_PRIORITY = ("html", "text/html", 5)


def on_config_inited(app, config) -> None:
    overrides = {tuple(o) for o in (config.nb_mime_priority_overrides or [])}
    if TWIN_PRIORITY not in overrides:
        raise ExtensionError(
            "live_widgets: _config.yml must set nb_mime_priority_overrides: "
            f"[{list(TWIN_PRIORITY)}] (sphinx: config:), or the book shows the widgets' "
            "frozen views instead of their live twins")
    os.environ[STATIC_ENV] = "1"


def setup(app):
    app.connect("config-inited", on_config_inited)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
