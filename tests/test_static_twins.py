"""The widgets' static twins (toykv.widgets.static_twin): the data toykv writes into the page,
and the page's own JavaScript run in headless Chromium with the network cut, compared with
toykv over full grids.

- size calculator: the page's arithmetic for every zoo model x attention variant x KV
  precision x context x batch, against toykv's size_report; a reader's moves on the controls
  (keyboard on the context slider, Enter in the number boxes) against size_report too;
- KV share explorer: the page's share for every zoo model at every context, against
  toykv.sizing.kv_share;
- cache fill: the replayed grid and figures, after each click, against a FillStepper run
  alongside, and its FLOPs against toykv.flops;
- attention view (inside the cache fill): every figure, every weight and the caption, after
  each Step, Reset and change of layer or head, against that FillStepper's AttentionFrame.

The browser checks are in tests/twin_checks.py; they skip here when Chromium or playwright is
missing (.ci/run installs Chromium first), and tests/live_widgets_check.py runs them on the
built book's pages.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

import twin_checks
from toykv import flops, zoo
from toykv.widgets import CacheFill, FillStepper, ShareExplorer, SizeCalculator, size_report
from toykv.widgets import static_twin
from twin_checks import TWIN_LIMIT

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(autouse=True)
def book_build(monkeypatch):
    """Widgets make their twins as in the book build."""
    monkeypatch.setenv(static_twin.STATIC_ENV, "1")


# -- without a browser ---------------------------------------------------------------------
def test_the_twin_is_made_only_in_the_book_build(monkeypatch):
    calc = SizeCalculator()
    assert "text/html" in calc._repr_mimebundle_()
    monkeypatch.delenv(static_twin.STATIC_ENV)
    bundle = calc._repr_mimebundle_()
    assert "text/html" not in bundle
    assert set(bundle) == {"application/vnd.jupyter.widget-view+json", "text/plain"}


@pytest.mark.parametrize("make", [SizeCalculator, lambda: CacheFill(steps=3), ShareExplorer])
def test_each_widget_has_a_readable_text_form_and_a_light_deterministic_twin(make):
    first, second = make()._repr_mimebundle_(), make()._repr_mimebundle_()
    assert not first["text/plain"].startswith(("VBox", "HBox"))
    assert first["text/plain"].split(":")[0] in ("SizeCalculator", "CacheFill", "ShareExplorer")
    html = first["text/html"]
    assert html == second["text/html"]                 # the same notebook gives the same page
    assert len(html.encode()) < TWIN_LIMIT
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", html)   # nothing fetched
    assert "fetch(" not in html and "XMLHttpRequest" not in html
    assert html.count("<script") == 2 and "data-control=" in html


def test_layouts_are_the_models_shapes():
    layouts = {m["key"]: m for m in static_twin.zoo_data()}
    llama = layouts["llama-3.1-8b"]["variants"]["as built"]
    assert (llama["full"], llama["sliding"], llama["linear"]) == (32, 0, 0)
    assert llama["values_per_layer"] == 2 * 8 * 128 and llama["same_as_built"]
    gemma = layouts["gemma-3-27b"]["variants"]["as built"]
    assert (gemma["full"], gemma["sliding"], gemma["window"]) == (10, 52, 1024)
    nxt = layouts["qwen3-next-80b-a3b"]["variants"]["as built"]
    assert (nxt["full"], nxt["linear"]) == (12, 36)
    assert nxt["state_values"] == 32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3
    ds = layouts["deepseek-v2"]["variants"]["as built"]
    assert ds["values_per_layer"] == 512 + 64 and ds["n_kv_heads"] is None
    mqa = layouts["llama-3.1-8b"]["variants"]["mqa"]
    assert mqa["values_per_layer"] == 2 * 128 and not mqa["same_as_built"]
    assert sorted(map(int, layouts["smollm2-135m"]["gqa"])) == [3]   # of 9: 1 is MQA, 9 MHA
    assert sorted(map(int, layouts["llama-3.1-8b"]["gqa"])) == [2, 4, 8, 16]
    assert layouts["llama-3.1-8b"]["weight_bytes"] == 2 * 8_030_000_000


def test_data_cannot_end_the_script_that_holds_it():
    html = static_twin.page("cache-fill", "cacheFill", {"text": "</script><b>"}, "", "t")
    assert "</script><b>" not in html and "<\\/script><b>" in html


def test_recorded_runs_cover_every_state_with_the_formula_flops():
    fill = CacheFill(prompt_len=6, steps=3)
    data = static_twin.cache_fill_data(fill)
    lengths = [run["prompt_len"] for run in data["runs"]]
    assert lengths == [2, 4, 6, 8, 12, 16] and data["state"] == {"prompt_len": 6, "step": 3}
    config = fill.model.config
    for run in data["runs"]:
        p = run["prompt_len"]
        assert [f["positions"] for f in run["frames"]] == list(range(p, 24 + 1))
        assert run["frames"][0]["flops_cached"] == flops.full_pass_flops(config, p)
        for frame in run["frames"][1:]:
            n = frame["positions"]
            assert frame["flops_cached"] == flops.cached_step_flops(config, n)
            assert frame["flops_uncached"] == flops.full_pass_flops(config, n)
            assert frame["max_abs_diff"] == 0.0         # the exact backend
    assert data["runs"][2]["tokens"][:9] == fill.tokens       # the widget's own run


def test_recorded_rows_are_every_weight_the_run_computed():
    import base64

    import numpy as np

    fill = CacheFill(prompt_len=6, steps=3)
    data = static_twin.cache_fill_data(fill)
    assert data["attention"]["layers"] == 2 and data["attention"]["heads"] == 8
    run, donor = data["runs"][1], data["runs"][5]              # prompt lengths 4 and 16
    assert (run["rows"]["shared"], run["rows"]["from"], donor["rows"]["shared"]) == (4, 5, 0)
    stepper = FillStepper(prompt_len=4, max_positions=24, seed=0, steps=20)
    weights = np.frombuffer(base64.b64decode(run["rows"]["weights"]), "<f4")
    expected = [stepper.attention_frame(layer, head).weights[i, :i + 1]
                for layer in range(2) for head in range(8) for i in range(4, 24)]
    assert run["rows"]["row_first"] == [[0] * 24] * 2          # causal: every row from key 0
    assert np.array_equal(weights, np.concatenate(expected))   # bit for bit, in order
    prompt = FillStepper(prompt_len=16, max_positions=24, seed=0)   # its prompt's rows
    theirs = np.frombuffer(base64.b64decode(donor["rows"]["weights"]), "<f4")
    first = [prompt.attention_frame(0, 0).weights[i, :i + 1] for i in range(4)]
    assert np.array_equal(theirs[:10], np.concatenate(first))  # layer 0, head 0, rows 0-3
    assert np.array_equal(np.concatenate(first), stepper.attention_frame(0, 0).weights[
        np.tril_indices(4)])                                   # = the 4-token prefill's
    third = run["frames"][3]["attention"]
    assert third["cells"] == [28, 28] and third["recompute_weights"] == [28, 28]
    assert third["key_first"] == [0, 0] and third["past_diff"] == [[0.0] * 8] * 2
    assert run["frames"][0]["attention"]["past_diff"] is None
    without = static_twin.cache_fill_data(CacheFill(prompt_len=6, attention=False))
    assert "attention" not in without and "rows" not in without["runs"][0]


def test_recording_creates_no_widget():
    from ipywidgets.widgets.widget import _instances

    fill = CacheFill(steps=1)
    before = len(_instances)
    static_twin.cache_fill_data(fill)
    assert len(_instances) == before


# -- in the browser --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser_page(tmp_path_factory):
    """One offline page holding the three twins, as the book shows them; fails the test on
    any console error, uncaught exception or request that leaves file://."""
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"no Chromium at {CHROMIUM}")
    pytest.importorskip("playwright")
    from browser_check import offline_context, watch

    os.environ[static_twin.STATIC_ENV] = "1"
    try:
        parts = [SizeCalculator()._repr_mimebundle_()["text/html"],
                 CacheFill(prompt_len=6, steps=3)._repr_mimebundle_()["text/html"],
                 ShareExplorer()._repr_mimebundle_()["text/html"]]
    finally:
        del os.environ[static_twin.STATIC_ENV]
    path = tmp_path_factory.mktemp("twins") / "twins.html"
    path.write_text("<!doctype html><html><head><meta charset='utf-8'><title>twins</title>"
                    "</head><body>" + "".join(parts) + "</body></html>", encoding="utf-8")
    problems: list[str] = []
    with offline_context(CHROMIUM) as (context, blocked):
        page = context.new_page()
        watch(page, problems)
        page.goto(path.as_uri())
        yield page
        assert not problems and not blocked, problems + blocked


def _root(page, kind):
    return page.locator(f"[data-live={kind}]")


def test_calculator_arithmetic_over_the_full_grid(browser_page):
    """Every zoo model x variant x precision x context x batch (GPU sizes in turn)."""
    assert twin_checks.calculator_grid(_root(browser_page, "size-calculator")) == 24 * 5 * 4 * 14 * 3


def test_calculator_curves_and_every_gqa_choice(browser_page):
    root = _root(browser_page, "size-calculator")
    twin_checks.calculator_curves(root)
    twin_checks.calculator_gqa_heads(root)


def test_calculator_controls_as_a_reader_moves_them(browser_page):
    root = _root(browser_page, "size-calculator")
    twin_checks.check_figures(twin_checks.figures(root), size_report(zoo.get("llama-3.1-8b")))
    assert twin_checks.calculator_controls(root, cases=6) == 6


def test_calculator_bad_input_shows_a_message_and_recovers(browser_page):
    twin_checks.calculator_bad_input(_root(browser_page, "size-calculator"))


def test_share_explorer_over_every_model_and_context(browser_page):
    assert twin_checks.share_grid(_root(browser_page, "share-explorer")) == 24 * 67


def test_share_explorer_controls(browser_page):
    twin_checks.share_controls(_root(browser_page, "share-explorer"))


def test_cache_fill_replays_the_steppers_states(browser_page):
    root = _root(browser_page, "cache-fill")
    assert twin_checks.cache_fill_clicks(root, lengths=(6, 16)) == 1 + (24 - 6) + (24 - 16)


def test_cache_fill_with_a_sliding_window_shows_evicted_cells(browser_page, tmp_path):
    import toykv

    model = toykv.ToyTransformer(toykv.source_toy(sliding_window=4, max_seq_len=12), exact=True)
    os.environ[static_twin.STATIC_ENV] = "1"
    try:
        html = CacheFill(model, prompt_len=2, steps=1)._repr_mimebundle_()["text/html"]
    finally:
        del os.environ[static_twin.STATIC_ENV]
    page = browser_page.context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    path = tmp_path / "sliding.html"
    path.write_text(f"<!doctype html><meta charset='utf-8'><body>{html}</body>", encoding="utf-8")
    page.goto(path.as_uri())
    root = _root(page, "cache-fill")
    twin_checks.cache_fill_clicks(root, FillStepper(model, prompt_len=2, steps=1))
    twin_checks.attention_clicks(root, FillStepper(model, prompt_len=2, steps=1))
    root.locator("[data-control=prompt_length]").select_option("2")
    for _ in range(7):
        root.locator("[data-control=step]").click()
    cells, _ = twin_checks.fill_state(root)
    assert "evicted" in cells[0] and "dropped by a sliding window" in root.inner_text()
    page.close()
    assert not errors


def _fresh_page(browser_page, tmp_path, widget):
    """A new page of the offline context holding one widget's twin; its errors in a list."""
    os.environ[static_twin.STATIC_ENV] = "1"
    try:
        html = widget._repr_mimebundle_()["text/html"]
    finally:
        del os.environ[static_twin.STATIC_ENV]
    page = browser_page.context.new_page()
    problems = []
    from browser_check import watch
    watch(page, problems)
    path = tmp_path / "one.html"
    path.write_text(f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>t"
                    f"</title></head><body>{html}</body></html>", encoding="utf-8")
    page.goto(path.as_uri())
    return page, problems


def test_attention_view_replays_the_steppers_attention(browser_page, tmp_path):
    """The chapter's view as it opens (decode step 3), then prompt lengths 6 and 16 stepped to
    the end, every layer and head at the prefill and at step 3, against a FillStepper."""
    page, problems = _fresh_page(browser_page, tmp_path, CacheFill(prompt_len=6, steps=3))
    root = _root(page, "cache-fill")
    assert twin_checks.attention_clicks(root, lengths=(6, 16), initial=True) == \
        1 + 2 * (16 + 16 + 1) + (24 - 6 - 1) + (24 - 16 - 1)
    for _ in range(24 - 16):                           # the largest view: the last position
        root.locator("[data-control=step]").click()
    assert root.get_attribute("data-positions") == "24"
    assert twin_checks.twin_bytes(root) < TWIN_LIMIT
    assert "measured in the page" in twin_checks.attention_latency(root, repeats=3)
    page.close()
    assert not problems, problems


def test_attention_view_of_a_gqa_model_with_mla_rows(browser_page, tmp_path):
    """Heads that share KV heads (GQA), and MLA's latent cache, replayed as toykv has them."""
    import toykv

    for config in (toykv.source_toy(n_kv_heads=2, max_seq_len=10),
                   toykv.source_toy(attention="mla", kv_lora_rank=32, rope_head_dim=8,
                                    max_seq_len=10)):
        model = toykv.ToyTransformer(config, exact=True, absorb=config.attention == "mla")
        page, problems = _fresh_page(browser_page, tmp_path, CacheFill(model, prompt_len=3))
        root = _root(page, "cache-fill")
        assert twin_checks.attention_clicks(root, FillStepper(model, prompt_len=3),
                                            lengths=(2, 3), initial=True) > 60
        page.close()
        assert not problems, problems


def test_controls_are_labelled_and_ids_deterministic(browser_page):
    twin_checks.labelled_controls(browser_page)
    ids = browser_page.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)")
    assert all(re.fullmatch(r"toykv-[a-z-]+-[0-9a-f]{10}(-[a-z_]+)?", i) for i in ids)


@pytest.mark.parametrize("kind, check", [
    ("size-calculator", twin_checks.keyboard_size_calculator),
    ("cache-fill", twin_checks.keyboard_cache_fill),
    ("share-explorer", twin_checks.keyboard_share_explorer)])
def test_each_twin_by_keyboard_alone(browser_page, kind, check):
    """Tab reaches every control (focus ring, visible label as its name); arrows, Enter and
    Space operate it; the status line says what changed. On a page of its own."""
    page = browser_page.context.new_page()
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(browser_page.url)
    assert check(_root(page, kind)) >= 5
    page.close()
    assert not errors


def test_the_keyboard_checks_fail_on_a_twin_that_keys_cannot_reach(browser_page):
    """A control taken out of the Tab order, or a status line that says nothing, is caught."""
    page = browser_page.context.new_page()
    page.goto(browser_page.url)
    root = _root(page, "cache-fill")
    root.locator("[data-control=reset]").evaluate("b => b.tabIndex = -1")
    with pytest.raises(AssertionError):
        twin_checks.keyboard_cache_fill(root)
    page.goto(browser_page.url)
    root = _root(page, "share-explorer")
    root.locator("[data-part=status]").evaluate("s => s.remove()")
    with pytest.raises(Exception):
        twin_checks.keyboard_share_explorer(root)
    page.goto(browser_page.url)
    root = _root(page, "size-calculator")
    root.locator("label[for$=-precision]").evaluate("l => l.remove()")   # no visible label
    with pytest.raises(AssertionError, match="no visible label"):
        twin_checks.tab_through(root)
    page.close()


def test_each_twin_stays_within_its_page_weight(browser_page):
    for kind in ("size-calculator", "cache-fill", "share-explorer"):
        assert twin_checks.twin_bytes(_root(browser_page, kind)) < TWIN_LIMIT
