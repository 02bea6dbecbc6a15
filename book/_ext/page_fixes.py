"""Small fixes to the generated pages, each for a console error a reader's browser would log.

Sphinx 7.4 emits an inline script twice when an extension adds it after the builder
started (the copy taken from the registry has filename '' where the original has None, so
they do not compare equal). sphinx-thebe adds its settings that way, as `const`
declarations, and the second copy fails with "Identifier 'THEBE_JS_URL' has already been
declared". This extension keeps the first copy of every script.
"""
from __future__ import annotations


def _key(script) -> tuple:
    return (script.filename or "", script.priority, tuple(sorted(script.attributes.items())))


def drop_duplicate_scripts(app, pagename, templatename, context, doctree) -> None:
    """Remove repeated scripts from this page's script list, keeping the first of each."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple] = set()
    unique = []
    for script in scripts:
        key = _key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique  # in place: the builder and the template share this list


def setup(app):
    # Late, after the extensions that add per-page scripts in html-page-context.
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
