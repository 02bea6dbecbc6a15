#!/usr/bin/env python3
"""Open every page of the built book in headless Chromium, offline, and report what looks broken.

A page fails on: raw TeX left in its text ($$, \\(, \\[ or \\begin{ outside code: MathJax did
not typeset it), a widget view that stayed empty (the widget manager did not render the
saved state), a widget's static twin that shows no figures (its script did not run), an image
that did not load (naturalWidth 0), a console error or uncaught
exception, or a request to anything but the built site (the network is cut: such a page
depends on a CDN). A screenshot of every page goes to _build/screenshots/.

Not collected by pytest (the name does not start with test_): .ci/run runs it after the
build. Uses the playwright package with Debian's Chromium; it never downloads a browser.
    python tests/browser_check.py [_build/html] [--chromium /usr/bin/chromium]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from pathlib import Path

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
  return found;
}"""


@contextlib.contextmanager
def offline_context(chromium: str, viewport=(1280, 1000)):
    """A playwright browser context with the network cut: yields (context, blocked), blocked
    being the list of every non-local URL a page asked for (each request was aborted)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": viewport[0], "height": viewport[1]},
                                      offline=True, service_workers="block")
        blocked: list[str] = []
        context.route("**/*", lambda route: route.continue_()
                      if route.request.url.startswith(LOCAL_PREFIXES)
                      else (blocked.append(route.request.url), route.abort()))
        try:
            yield context, blocked
        finally:
            browser.close()


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


def check_page(context, page_path: Path, name: str, shots: Path) -> tuple[list[str], str]:
    """Load one page offline; return its problems and a one-line summary."""
    redirect = check_redirect(page_path)
    if redirect is not None:
        return redirect
    problems: list[str] = []
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
    _screenshot(page, shots / (name.replace("/", "__").removesuffix(".html") + ".png"))
    page.close()
    summary = (f"{found['maths']} maths typeset, {found['widgets']} widgets, "
               f"{found['live']} live widgets, "
               f"{found['images']} images, MathJax {mathjax}")
    return problems, summary


def _screenshot(page, path: Path) -> None:
    height = page.evaluate("document.documentElement.scrollHeight")
    clip = {"x": 0, "y": 0, "width": page.viewport_size["width"],
            "height": min(height, MAX_SCREENSHOT_HEIGHT)}
    page.screenshot(path=str(path), full_page=True, clip=clip)


def run(what: str, pages_of, check_page, argv=None) -> int:
    """The command line of a page check: pages_of(html_dir) -> pages; check_page(context, path,
    name, shots) -> (problems, summary), for each page, offline; a report and an exit code."""
    parser = argparse.ArgumentParser(description=what)
    parser.add_argument("html_dir", nargs="?", default="_build/html", type=Path)
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
    parser.add_argument("--screenshots", type=Path, default=None,
                        help="folder for the screenshots (default: <html_dir>/../screenshots)")
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
    shots = args.screenshots or html_dir.parent / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)

    failures = 0
    with offline_context(args.chromium) as (context, blocked):
        for path in pages:
            name = path.relative_to(html_dir).as_posix()
            blocked.clear()
            problems, summary = check_page(context, path, name, shots)
            problems += [f"requested a network resource (blocked): {u}" for u in blocked]
            failures += bool(problems)
            print(f"{'FAIL' if problems else 'ok  '} {name}: {summary}")
            for problem in problems:
                print(f"     - {name}: {problem}")
    print(f"{what}: {len(pages)} pages, {failures} with problems; screenshots in {shots}")
    return 1 if failures else 0


def main(argv=None) -> int:
    return run("browser check", built_pages, check_page, argv)


if __name__ == "__main__":
    sys.exit(main())
