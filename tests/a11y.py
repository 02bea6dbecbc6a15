#!/usr/bin/env python3
"""What the accessibility checks share: axe-core (fetched from npm once, run offline), the
chapters whose figures still await their alternative text, and the rule for a bad one.

- axe-core is the accessibility engine most checkers use. `python tests/a11y.py install-axe
  [_build/axe-core]` fetches the pinned version with the npm client (`npm pack`, as
  book/_ext/offline_assets.py does) into a folder outside the site; tests/browser_check.py
  injects that file into every built page with the network cut and fails on any violation
  of the WCAG 2.0 and 2.1 A and AA rules (AXE_TAGS). .ci/run installs it before the
  browser stage.
- A figure's alternative text says what it shows (toykv.plots.show); bad_alt() names what
  is wrong with one. tests/test_figure_alt_texts.py reads it from the notebooks' stored
  outputs, tests/browser_check.py from the built pages' <img alt>; both excuse the chapters
  in PENDING_ALT_CHAPTERS, and both fail once a chapter there has no bad figure left, so
  converting a chapter forces taking it out of the set.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

AXE_PACKAGE = "axe-core@4.14.1"
AXE_FILES = ("axe.min.js", "LICENSE")           # what is kept of the package
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
# The rule a colour scheme changes: a page's dark mode is audited with it only (its structure,
# names and roles are the light mode's, audited with every rule; links are underlined in both,
# so link-in-text-block does not depend on the colours).
COLOUR_RULES = ["color-contrast"]

# Chapters (file stems under book/) whose figures are still shown without alternative text:
# each is being rewritten on its own branch, which converts its figures to
# toykv.plots.show(fig, alt). Take a chapter out when its figures all say what they show
# (the checks fail until you do). Empty: every figure is converted, nothing is excused.
PENDING_ALT_CHAPTERS: frozenset = frozenset()       # every chapter shows its figures with alt text

IMAGE_SUFFIX = r"\.(png|jpe?g|gif|svg|webp|pdf)"
FILE_NAME = re.compile(rf"^\S*{IMAGE_SUFFIX}$|^[0-9a-f]{{16,}}$|^\S*[/\\]\S*$", re.I)
MIN_WORDS = 4                                  # as toykv.plots.show asks


def bad_alt(alt) -> str | None:
    """What is wrong with an image's alternative text (None: nothing). Missing, empty, a
    file name, a path or a hash, or too short to say what a figure shows."""
    if alt is None:
        return "no alternative text"
    text = " ".join(str(alt).split())
    if not text:
        return "empty alternative text"
    if FILE_NAME.match(text):
        return f"alternative text is a file name: {text!r}"
    if len(text.split()) < MIN_WORDS:
        return f"alternative text too short to say what the figure shows: {text!r}"
    return None


def contrast(foreground: str, background: str) -> float:
    """WCAG 2 contrast ratio of two #RRGGBB colours (1 to 21; AA asks 4.5 of text, 3 of large
    text and of a graphic's parts)."""
    def luminance(colour):
        channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        r, g, b = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    high, low = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def chapter_of(name: str) -> str | None:
    """The chapter stem of a built page or notebook path (book/05_roofline.html ->
    '05_roofline'), or None for a page that is not a chapter."""
    match = re.search(r"(?:^|/)(\d\d_[A-Za-z0-9_]+)\.(?:html|ipynb)$", name)
    return match.group(1) if match else None


# -- axe-core ---------------------------------------------------------------------------------
def axe_script(folder: Path) -> Path:
    return Path(folder) / "axe.min.js"


def install_axe(folder: Path) -> Path:
    """Fetch AXE_PACKAGE with `npm pack` into folder (unless it holds it); returns the
    script's path. Needs the npm registry once; the checks then run offline."""
    folder = Path(folder)
    stamp = folder / "package.txt"
    if axe_script(folder).is_file() and stamp.is_file() and stamp.read_text() == AXE_PACKAGE:
        return axe_script(folder)
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit(f"install-axe: no `npm` on PATH; Node.js is needed to fetch {AXE_PACKAGE}")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [npm, "pack", AXE_PACKAGE, "--json", "--pack-destination", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
        if proc.returncode != 0:
            raise SystemExit(f"install-axe: `{' '.join(cmd[1:])}` failed:\n{proc.stderr[-2000:]}")
        tarball = Path(tmp) / json.loads(proc.stdout)[0]["filename"]
        folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as tar:
            for name in AXE_FILES:
                (folder / name).write_bytes(tar.extractfile(f"package/{name}").read())
    stamp.write_text(AXE_PACKAGE)
    return axe_script(folder)


# axe.run over the whole page, WCAG A and AA rules (or the rules named), started and left to
# run (two pages audit side by side); violations with their nodes. preload: false, or axe
# fetches the page's stylesheets again (a file:// page refuses).
START_AXE_JS = """([tags, rules]) => {
  const only = rules ? {type: 'rule', values: rules} : {type: 'tag', values: tags};
  window.toykvAxe = axe.run(document, {runOnly: only, resultTypes: ['violations'],
                                       preload: false}).then(result => result.violations.map(
    v => ({id: v.id, impact: v.impact, help: v.help,
           nodes: v.nodes.map(n => ({target: n.target.join(' '), html: n.html.slice(0, 160),
                                     summary: (n.failureSummary || '').replace(/\\s+/g, ' ')}))})));
  return axe.version;
}"""


def start_axe(page, script: Path, rules: list[str] | None = None) -> None:
    """Start axe-core's WCAG A/AA audit (only `rules`, if given) on a loaded playwright page;
    the script is injected from a local file: nothing is fetched."""
    if not page.evaluate("() => !!window.axe"):
        page.add_script_tag(path=str(script))
    page.evaluate(START_AXE_JS, [AXE_TAGS, rules])


def axe_violations(page) -> list[dict]:
    """The violations of the audit start_axe started (waits for it to end)."""
    return page.evaluate("async () => await window.toykvAxe")


def run_axe(page, script: Path, rules: list[str] | None = None) -> list[dict]:
    start_axe(page, script, rules)
    return axe_violations(page)


def main(argv=None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "install-axe" or len(args) > 2:
        print("usage: python tests/a11y.py install-axe [FOLDER (default _build/axe-core)]",
              file=sys.stderr)
        return 2
    path = install_axe(Path(args[1] if len(args) > 1 else "_build/axe-core"))
    print(f"{AXE_PACKAGE}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
