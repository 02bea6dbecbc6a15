"""The block pool view (toykv.widgets.block_pool, chapter 10): the recording is the allocator's
state, and its static twin replays it in Chromium with the network cut."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import make_model, token_ids

from toykv import scheduler
from toykv.widgets import BlockPoolView, static_twin
from toykv.widgets.block_pool import frame_html, record_pool
from twin_checks import TWIN_LIMIT, block_pool_clicks, keyboard_block_pool

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def small_run():
    model = make_model("gqa", exact=True)
    rng = np.random.default_rng(0)
    prompts = [token_ids(int(n), seed=i) for i, n in enumerate(rng.integers(3, 14, 6))]
    outs = [int(n) for n in rng.integers(2, 10, 6)]
    return model, prompts, outs


def test_the_recording_is_the_allocators_state_and_the_tokens_are_right():
    model, prompts, outs = small_run()
    run = record_pool(model, prompts, outs, num_blocks=10, block_size=4)
    assert run["frames"][0]["used"] == 0 and run["frames"][-1]["used"] == 0
    assert run["preemptions"] > 0
    for frame in run["frames"]:
        assert frame["used"] + frame["free"] == 10
        assert frame["used"] == sum(o >= 0 for o in frame["owners"])
        assert frame["held"] <= frame["used"] * 4
    assert run["tokens"] == [scheduler.alone_tokens(model, p, n) for p, n in zip(prompts, outs)]
    html = frame_html(run, 3)
    assert html.count("data-block=") == 10 and "data-quantity='used'" in html


def test_the_view_steps_and_its_twin_is_light_and_deterministic(monkeypatch):
    monkeypatch.setenv(static_twin.STATIC_ENV, "1")
    model, prompts, outs = small_run()
    view = BlockPoolView(model, prompts, outs, num_blocks=24)
    assert sorted(view.runs) == [12, 24]
    view.step_button.click()
    assert view.slider.value == 1
    view.size.value = 12
    assert view.slider.value == 0 and view.slider.max == len(view.runs[12]["frames"]) - 1
    bundle = view._repr_mimebundle_()
    assert bundle["text/plain"].startswith("BlockPoolView:")
    html = bundle["text/html"]
    again = BlockPoolView(model, prompts, outs, num_blocks=24)
    again.size.value = 12
    assert html == again._repr_mimebundle_()["text/html"]     # the same page, every time
    assert len(html.encode()) < TWIN_LIMIT
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", html)
    assert html.count("<script") == 2 and "data-control='step'" in html


def test_bad_input_is_refused():
    model, prompts, outs = small_run()
    with pytest.raises(ValueError, match="1 to 16 prompts"):
        record_pool(model, prompts * 3, outs * 3, 10)
    with pytest.raises(ValueError, match="num_blocks"):
        record_pool(model, prompts, outs, 0)


def test_the_twin_replays_every_recorded_state_in_chromium(tmp_path, monkeypatch):
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    pytest.importorskip("playwright")
    from browser_check import offline_context, watch

    monkeypatch.setenv(static_twin.STATIC_ENV, "1")
    model, prompts, outs = small_run()
    html = BlockPoolView(model, prompts, outs, num_blocks=24)._repr_mimebundle_()["text/html"]
    path = tmp_path / "pool.html"
    path.write_text("<!doctype html><html><head><meta charset='utf-8'><title>pool</title>"
                    f"</head><body>{html}</body></html>", encoding="utf-8")
    problems: list[str] = []
    with offline_context(CHROMIUM) as (context, blocked):
        page = context.new_page()
        watch(page, problems)
        page.goto(path.as_uri())
        checked = block_pool_clicks(page.locator("[data-live=block-pool]"))
        page.goto(path.as_uri())
        assert keyboard_block_pool(page.locator("[data-live=block-pool]")) == 6
        assert not problems and not blocked, problems + blocked
    assert checked > 20
