#!/usr/bin/env python3
"""Open every page of the built book in headless Chromium, offline, and report what looks broken.

A page fails on: raw TeX left in its text ($$, \\(, \\[ or \\begin{ outside code: MathJax did
not typeset it), a widget view that stayed empty (the widget manager did not render the
saved state), a widget's static twin that shows no figures (its script did not run), an image
that did not load (naturalWidth 0), a console error or uncaught
exception, or a request to anything but the built site (the network is cut: such a page
depends on a CDN); and on accessibility: any violation of the WCAG 2.0/2.1 A and AA rules
that axe-core finds in light mode, or of its colour rules in dark mode (the theme follows the
reader's setting), and a figure (<img>) whose alternative text is missing, empty or a file
name (chapters still in tests/a11y.py's PENDING_ALT_CHAPTERS are excused, and fail once they
need not be). A screenshot of every page goes to _build/screenshots/ (dark mode:
_build/screenshots/dark/). axe-core comes from npm before the check (`python tests/a11y.py
install-axe`, into _build/axe-core/; .ci/run does it) and is injected from that file: nothing
is fetched.

Not collected by pytest (the name does not start with test_): .ci/run runs it after the
build. Uses the playwright package with Debian's Chromium; it never downloads a browser.
    python tests/browser_check.py [_build/html] [--chromium /usr/bin/chromium] [--axe DIR]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import a11y  # noqa: E402

CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync", "--disable-quic",
    "--disable-background-networking", "--disable-component-update",
    # belt and braces: anything that escapes the request filter meets a dead proxy
    "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
]
LOCAL_PREFIXES = ("file:", "data:", "blob:", "about:", "http://127.0.0.1", "http://localhost")
MAX_SCREENSHOT_HEIGHT = 8000  # px; long chapters are cut here
REDIRECT = re.compile(r'<meta http-equiv="refresh" content="\d+; ?url=([^"]+)"', re.I)

WAIT_MATHJAX_JS = """async () => {
  if (!window.MathJax) return "absent";
  for (let i = 0; i < 100 && !(MathJax.startup && MathJax.startup.promise); i++)
    await new Promise(r => setTimeout(r, 100));
  if (!(MathJax.startup && MathJax.startup.promise)) return "never started";
  await MathJax.startup.promise;
  return "typeset";
}"""

WIDGETS_RENDERED_JS = """() => [...document.querySelectorAll(
    'script[type="application/vnd.jupyter.widget-view+json"]')].every(view => {
  const area = view.parentElement.querySelector('.widget-subarea');
  return area && area.childElementCount > 0;
})"""

WAIT_IMAGES_JS = """async () => Promise.all([...document.images].map(img => img.complete ? 0 :
  new Promise(r => { img.onload = img.onerror = r; setTimeout(r, 10000); })))"""

INSPECT_JS = """() => {
  const rawTex = [/\\$\\$/, /\\\\\\(/, /\\\\\\[/, /\\\\begin\\{/];
  const skip = 'pre, code, script, style, textarea, kbd, samp, mjx-container, .highlight';
  const found = {rawTex: [], emptyWidgets: [], brokenImages: [], widgets: 0, live: 0, maths: 0,
                 images: document.images.length};
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const parent = node.parentElement;
    if (!parent || parent.closest(skip)) continue;
    const text = node.textContent;
    if (rawTex.some(re => re.test(text)))
      found.rawTex.push(text.trim().replace(/\\s+/g, ' ').slice(0, 80));
  }
  const views = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]');
  views.forEach((view, i) => {
    const area = view.parentElement.querySelector('.widget-subarea');
    if (!area || area.childElementCount === 0) found.emptyWidgets.push(i + 1);
  });
  found.widgets = views.length;
  const twins = document.querySelectorAll('[data-live]');   // the widgets' static twins
  found.live = twins.length;
  found.deadTwins = [...twins].filter(t => !t.querySelector('[data-quantity]'))
    .map(t => t.dataset.live);
  found.maths = document.querySelectorAll('mjx-container').length;
  for (const img of document.images)
    if (!img.complete || img.naturalWidth === 0)
      found.brokenImages.push(img.getAttribute('src') || '(no src)');
  found.alts = [...document.images].map(img => [img.getAttribute('src') || '(no src)',
                                                img.getAttribute('alt')]);
  return found;
}"""


@contextlib.contextmanager
def offline_context(chromium: str, viewport=(1280, 1000)):
    """A playwright browser context with the network cut: yields (context, blocked), blocked
    being the list of every non-local URL a page asked for (each request was aborted).
    new_offline_context(context, blocked, scheme) opens another in the same browser."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        blocked: list[str] = []
        context = _offline(browser, blocked, viewport, "light")
        try:
            yield context, blocked
        finally:
            browser.close()


def _offline(browser, blocked: list[str], viewport, color_scheme: str):
    context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                  offline=True, service_workers="block",
                                  color_scheme=color_scheme)
    context.route("**/*", lambda route: route.continue_()
                  if route.request.url.startswith(LOCAL_PREFIXES)
                  else (blocked.append(route.request.url), route.abort()))
    return context


def new_offline_context(context, blocked: list[str], color_scheme: str):
    """Another context of context's browser, offline alike, in the given colour scheme (its
    own renderer process: a page there runs beside one in context)."""
    size = context.pages[0].viewport_size if context.pages else {"width": 1280, "height": 1000}
    return _offline(context.browser, blocked, (size["width"], size["height"]), color_scheme)


def watch(page, problems: list[str]) -> None:
    """Record a page's console errors, uncaught exceptions and failed requests in problems."""
    page.on("console", lambda m: m.type == "error" and problems.append(
        f"console error: {m.text} ({m.location.get('url', '?')})"))
    page.on("pageerror", lambda e: problems.append(f"uncaught exception: {e}"))
    page.on("requestfailed", lambda r: problems.append(
        f"request failed: {r.url} ({r.failure})"))


def built_pages(html_dir: Path) -> list[Path]:
    """Every HTML page of the site, skipping Sphinx's asset folders (_static, _sources, ...)."""
    return sorted(p for p in html_dir.rglob("*.html")
                  if not any(part.startswith("_") for part in p.relative_to(html_dir).parts))


def check_redirect(page_path: Path) -> tuple[list[str], str] | None:
    """For a redirect-only page (index.html), check its target exists; None otherwise."""
    match = REDIRECT.search(page_path.read_text(encoding="utf-8", errors="replace"))
    if not match:
        return None
    target = (page_path.parent / match.group(1).split("#")[0]).resolve()
    problems = [] if target.is_file() else [f"redirects to a missing page: {match.group(1)}"]
    return problems, f"redirects to {match.group(1)}"


THEME_JS = """async () => {   // the theme sets data-theme from prefers-color-scheme (mode auto)
  for (let i = 0; i < 50 && !document.documentElement.dataset.theme; i++)
    await new Promise(r => setTimeout(r, 50));
  return document.documentElement.dataset.theme;
}"""

AXE_FOUND: Counter = Counter()     # (rule, mode) -> nodes, over every page checked


def open_dark(args, page_path: Path, problems: list[str]):
    """The page in the dark context, loading while the light one is checked (None without
    axe-core: the dark page is only audited)."""
    if not args.axe_script.is_file():
        return None
    if getattr(args, "dark_context", None) is None:
        args.dark_context = new_offline_context(args.context, args.blocked, "dark")
    dark: list[str] = []
    page = args.dark_context.new_page()
    watch(page, dark)
    page.dark_problems = dark
    page.goto(page_path.as_uri(), wait_until="commit", timeout=60_000)
    return page


def accessibility(page, dark, name: str, args) -> tuple[list[str], str]:
    """axe-core's WCAG A/AA violations on the page in light mode, and those of its colour rule
    on the page opened in dark mode, both audits running side by side (a dark screenshot too);
    each violation is one problem naming its rule, mode and nodes."""
    if dark is None:
        return [f"no axe-core at {args.axe_script}: run `python tests/a11y.py install-axe "
                f"{args.axe_script.parent}` first (needs npm once)"], "axe: not run"
    dark.wait_for_load_state("load", timeout=60_000)
    dark.evaluate(WAIT_MATHJAX_JS)
    problems = [] if dark.evaluate(THEME_JS) == "dark" else ["dark mode: the theme stayed light"]
    a11y.start_axe(page, args.axe_script)
    a11y.start_axe(dark, args.axe_script, a11y.COLOUR_RULES)
    counts = []
    for mode, audited in (("light", page), ("dark", dark)):
        violations = a11y.axe_violations(audited)
        counts.append(sum(len(v["nodes"]) for v in violations))
        for v in violations:
            AXE_FOUND[v["id"], mode] += len(v["nodes"])
            nodes = "".join(f"\n         {n['target']}: {n['html']}"
                            + (f"\n           ({n['summary'][:300]})" if n["summary"] else "")
                            for n in v["nodes"][:8])
            more = f"\n         ... and {len(v['nodes']) - 8} more" if len(v["nodes"]) > 8 else ""
            problems.append(f"axe {v['id']} ({v['impact']}, {mode} mode): {v['help']}; "
                            f"{len(v['nodes'])} nodes:{nodes}{more}")
    (args.screenshots / "dark").mkdir(parents=True, exist_ok=True)
    dark.screenshot(path=str(args.screenshots / "dark" / _shot_name(name)))   # its top
    problems += [f"dark mode: {p}" for p in dark.dark_problems]
    dark.close()
    return problems, f"axe: {counts[0]} light / {counts[1]} dark"


def alt_texts(alts: list, name: str) -> tuple[list[str], str]:
    """Problems with the page's images' alternative texts: a figure (an output image, under
    _images/) must say what it shows, any other image (the theme's icons) must not be named by
    its file. A pending chapter's figures are excused (and it fails once none needs to be)."""
    bad = [f"{src}: {why}" for src, alt in alts if "_images/" in src and (why := a11y.bad_alt(alt))]
    problems = [f"image named by its file: {src} (alt {alt!r})" for src, alt in alts
                if "_images/" not in src and alt and a11y.FILE_NAME.match(alt.strip())]
    chapter = a11y.chapter_of(name)
    if chapter in a11y.PENDING_ALT_CHAPTERS:
        if not bad:
            return problems + [f"{chapter} is in tests/a11y.py's PENDING_ALT_CHAPTERS but "
                               "every figure has its alternative text: take it out of the set"], ""
        return problems, f", {len(bad)} figures await alt text (pending)"
    return problems + [f"figure without alternative text: {b}" for b in bad], ""


def check_page(context, page_path: Path, name: str, shots: Path, args=None) -> tuple[list[str], str]:
    """Load one page offline; return its problems and a one-line summary."""
    redirect = check_redirect(page_path)
    if redirect is not None:
        return redirect
    problems: list[str] = []
    dark = open_dark(args, page_path, problems) if args is not None else None
    page = context.new_page()
    watch(page, problems)
    page.goto(page_path.as_uri(), wait_until="load", timeout=60_000)
    mathjax = page.evaluate(WAIT_MATHJAX_JS)
    try:
        page.wait_for_function(WIDGETS_RENDERED_JS, timeout=20_000)
    except Exception:  # reported below as empty widgets
        pass
    page.evaluate(WAIT_IMAGES_JS)
    found = page.evaluate(INSPECT_JS)
    if mathjax == "never started":
        problems.append("MathJax was loaded but never started (is its script missing?)")
    problems += [f"raw TeX left untypeset: {t!r}" for t in found["rawTex"]]
    problems += [f"widget {i} of {found['widgets']} stayed empty" for i in found["emptyWidgets"]]
    problems += [f"image did not load: {src}" for src in found["brokenImages"]]
    problems += [f"live widget {kind} shows no figures (its script did not run)"
                 for kind in found["deadTwins"]]
    _screenshot(page, shots / _shot_name(name))
    alt_problems, pending = alt_texts(found["alts"], name)
    problems += alt_problems
    axe_summary = ""
    if args is not None:
        axe_problems, axe_summary = accessibility(page, dark, name, args)
        problems += axe_problems
        axe_summary = "; " + axe_summary
    page.close()
    summary = (f"{found['maths']} maths typeset, {found['widgets']} widgets, "
               f"{found['live']} live widgets, "
               f"{found['images']} images{pending}, MathJax {mathjax}{axe_summary}")
    return problems, summary


def _shot_name(name: str) -> str:
    return name.replace("/", "__").removesuffix(".html") + ".png"


def _screenshot(page, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    height = page.evaluate("document.documentElement.scrollHeight")
    clip = {"x": 0, "y": 0, "width": page.viewport_size["width"],
            "height": min(height, MAX_SCREENSHOT_HEIGHT)}
    page.screenshot(path=str(path), full_page=True, clip=clip)


def run(what: str, pages_of, check_page, argv=None) -> int:
    """The command line of a page check: pages_of(html_dir) -> pages; check_page(context, path,
    name, shots, args) -> (problems, summary), for each page, offline; a report and an exit
    code."""
    parser = argparse.ArgumentParser(description=what)
    parser.add_argument("html_dir", nargs="?", default="_build/html", type=Path)
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
    parser.add_argument("--screenshots", type=Path, default=None,
                        help="folder for the screenshots (default: <html_dir>/../screenshots)")
    parser.add_argument("--axe", type=Path, default=None,
                        help="folder holding axe.min.js (default: <html_dir>/../axe-core; "
                             "python tests/a11y.py install-axe fills it)")
    args = parser.parse_args(argv)
    html_dir = args.html_dir.resolve()
    pages = pages_of(html_dir) if html_dir.is_dir() else []
    if not pages:
        print(f"{what}: no pages to check under {html_dir}; build the book first",
              file=sys.stderr)
        return 1
    if not Path(args.chromium).is_file():
        print(f"{what}: no Chromium at {args.chromium} (apt-get install chromium)",
              file=sys.stderr)
        return 1
    shots = args.screenshots = args.screenshots or html_dir.parent / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    args.axe_script = a11y.axe_script(args.axe or html_dir.parent / "axe-core")

    failures = 0
    with offline_context(args.chromium) as (context, blocked):
        args.context, args.blocked, args.dark_context = context, blocked, None
        for path in pages:
            name = path.relative_to(html_dir).as_posix()
            blocked.clear()
            problems, summary = check_page(context, path, name, shots, args)
            problems += [f"requested a network resource (blocked): {u}" for u in blocked]
            failures += bool(problems)
            print(f"{'FAIL' if problems else 'ok  '} {name}: {summary}")
            for problem in problems:
                print(f"     - {name}: {problem}")
    print(f"{what}: {len(pages)} pages, {failures} with problems; screenshots in {shots}")
    return 1 if failures else 0


def main(argv=None) -> int:
    start = time.perf_counter()
    status = run("browser check", built_pages, check_page, argv)
    if AXE_FOUND:
        print("axe-core violations, nodes per rule and mode:")
        for (rule, mode), nodes in sorted(AXE_FOUND.items()):
            print(f"  {rule:34s} {mode:5s} {nodes:5d}")
    print(f"browser check: {time.perf_counter() - start:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
