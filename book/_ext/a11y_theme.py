"""The course's accessibility fixes to the theme and the generated pages, without forking
the theme: tests/browser_check.py runs axe-core (WCAG 2.0/2.1 A and AA) over every built
page, light and dark, and each fix below answers one of its findings.

- a11y/templates/: two of pydata-sphinx-theme's components, overridden by name (Sphinx looks
  in templates_path before the theme): the search field button and the colour-mode button,
  whose accessible names did not contain their visible text (label-content-name-mismatch).
- a11y/static/a11y.css: a link blue that keeps 4.5:1 on the tinted note boxes
  (color-contrast), and the search button's text kept for screen readers where the theme
  hides it.
- each page's body: myst-nb's folded code cells ("Show code cell source") lose the
  aria-label "Toggle hidden content", so their name is the text they show; docutils'
  citation list (the bibliography) gets list items instead of the deprecated
  role="doc-biblioentry" (aria-deprecated-role, and aria-required-children: a role="list"
  needs listitem children).
"""
from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).with_name("a11y")
CSS = "a11y.css"

# (what the generators write, what the page gets instead)
BODY_FIXES = (
    ('<summary aria-label="Toggle hidden content">', "<summary>"),       # myst-nb hide-input
    ('role="doc-biblioentry"', 'role="listitem"'),                      # docutils citations
)


def on_config_inited(app, config) -> None:
    # first, so these components win over the themes' (which append their own folders)
    config.templates_path = [str(HERE / "templates"), *config.templates_path]
    config.html_static_path = [*config.html_static_path, str(HERE / "static")]


def fix_body(app, pagename, templatename, context, doctree) -> None:
    """Rewrite the generated markup listed in BODY_FIXES in this page's body."""
    body = context.get("body")
    if not body:
        return
    for old, new in BODY_FIXES:
        body = body.replace(old, new)
    context["body"] = body


def setup(app):
    app.connect("config-inited", on_config_inited, priority=400)
    app.connect("html-page-context", fix_body)
    app.add_css_file(CSS, priority=900)          # after the theme's stylesheets
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
