#!/usr/bin/env python3
"""Operate the built book's live widgets in headless Chromium, offline, and compare with toykv.

For every built page holding a widget's static twin ([data-live]): open it with the network
cut; check the controls are labelled; run the twin's checks (tests/twin_checks.py: the
page's arithmetic over full grids against size_report and sizing.kv_share, a reader's moves
on every control, Step/Reset/prompt length against a FillStepper run alongside, the
attention view's layer and head, every figure and weight against that stepper's, with how
long its script takes from a click to the figures, and every control by keyboard alone: Tab
order, focus ring, label as name, the status line); check each
twin adds at most 300 KB to its page; fail on any console error, uncaught exception, failed
request or request leaving the built site. Screenshots of each twin after its controls were
moved go to _build/screenshots/live-*.png.

Not collected by pytest; .ci/run runs it after the build.
    python tests/live_widgets_check.py [_build/html] [--chromium /usr/bin/chromium]
"""
from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import twin_checks                                    # noqa: E402
from browser_check import built_pages, run, watch   # noqa: E402

CHECKS = {   # kind -> what is run on it, in order; each returns a count or None
    "size-calculator": [("full grid", twin_checks.calculator_grid),
                        ("curves", twin_checks.calculator_curves),
                        ("GQA heads", twin_checks.calculator_gqa_heads),
                        ("bad input", twin_checks.calculator_bad_input),
                        ("controls", lambda root: twin_checks.calculator_controls(root, 24)),
                       ("keyboard", twin_checks.keyboard_size_calculator)],
    "share-explorer": [("full grid", twin_checks.share_grid),
                       ("controls", twin_checks.share_controls),
                       ("keyboard", twin_checks.keyboard_share_explorer)],
    "cache-fill": [("clicks", twin_checks.cache_fill_clicks),
                   ("attention view", twin_checks.attention_clicks),
                   ("attention input to figure", twin_checks.attention_latency),
                   ("keyboard", twin_checks.keyboard_cache_fill)],
    "block-pool": [("frames", twin_checks.block_pool_clicks),
                   ("keyboard", twin_checks.keyboard_block_pool)],
}


def check_page(context, path: Path, name: str, shots: Path, args=None) -> tuple[list[str], str]:
    problems: list[str] = []
    page = context.new_page()
    watch(page, problems)
    page.goto(path.as_uri(), wait_until="load", timeout=60_000)
    try:
        twin_checks.labelled_controls(page)
    except AssertionError as err:
        problems.append(f"controls: {err}")
    roots = page.locator("[data-live]")
    lines = []
    for k in range(roots.count()):
        root = roots.nth(k)
        kind = root.get_attribute("data-live")
        size = twin_checks.twin_bytes(root)
        line = [f"{kind} adds {size / 1000:.0f} kB"]
        if size > twin_checks.TWIN_LIMIT:
            problems.append(f"{kind} adds {size:,} bytes to the page (limit "
                            f"{twin_checks.TWIN_LIMIT:,})")
        if kind not in CHECKS:
            problems.append(f"no checks for a twin of kind {kind!r}")
        for label, check in CHECKS.get(kind, []):
            start = time.perf_counter()
            try:
                count = check(root)
            except Exception as err:                # noqa: BLE001 - reported, then go on
                problems.append(f"{kind}, {label}: {type(err).__name__}: {err}\n"
                                + traceback.format_exc(limit=3))
                continue
            extra = (f" ({count:,} cases)" if isinstance(count, int) else
                     f" ({count})" if isinstance(count, str) else "")
            line.append(f"{label} ok{extra} in {time.perf_counter() - start:.1f} s")
        root.scroll_into_view_if_needed()
        root.screenshot(path=str(shots / f"live-{name.replace('/', '__')[:-5]}-{kind}.png"))
        lines.append("; ".join(line))
    page.close()
    return problems, f"{path.stat().st_size:,} bytes; " + " | ".join(lines)


def pages_with_twins(html_dir: Path) -> list[Path]:
    return [p for p in built_pages(html_dir) if "data-live=" in p.read_text(errors="replace")]


def main(argv=None) -> int:
    return run("live widgets check", pages_with_twins, check_page, argv)


if __name__ == "__main__":
    sys.exit(main())
