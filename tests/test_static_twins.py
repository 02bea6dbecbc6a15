"""The widgets' static twins (toykv.widgets.static_twin): the data toykv writes into the page,
and the page's own JavaScript run in headless Chromium with the network cut, compared with
toykv over full grids.

- size calculator: the page's arithmetic for every zoo model x attention variant x KV
  precision x context x batch, against toykv's size_report; a reader's moves on the controls
  (keyboard on the context slider, Enter in the number boxes) against size_report too;
- KV share explorer: the page's share for every zoo model at every context, against
  toykv.sizing.kv_share;
- cache fill: the replayed grid and figures, after each click, against a FillStepper run
  alongside, and its FLOPs against toykv.flops.

The browser part skips when Chromium or playwright is missing (.ci/run installs Chromium
first); tests/live_widgets_check.py drives the built book's pages the same way.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from toykv import flops, sizing, zoo
from toykv.widgets import CacheFill, FillStepper, ShareExplorer, SizeCalculator, size_report
from toykv.widgets import static_twin
from toykv.widgets.share_explorer import SHARE_CONTEXTS
from toykv.widgets.size_report import CONTEXTS, PRECISIONS, VARIANTS

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FIELDS = ("values_per_token", "bytes_per_token", "sequence_bytes", "batch_bytes", "gpu_bytes",
          "gpus_of_kv", "weight_bytes", "active_weight_bytes", "sequences_fit", "weights_fit",
          "kv_share", "relative_decode_speed", "bytes_per_token_at_context")
BATCHES = (1, 16, 10 ** 9)
GPUS = (80, 24, 0.01, 141.5, 10 ** 6)
GiB = 2 ** 30
TWIN_LIMIT = 300_000          # bytes a twin may add to its page


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
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
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


def _calc_root(page):
    return page.locator("[data-live=size-calculator]")


def test_calculator_arithmetic_over_the_full_grid(browser_page):
    """Every zoo model x variant x precision x context x batch (GPU sizes in turn)."""
    grid = []
    for m, name in enumerate(zoo.names()):
        for v, (_, variant) in enumerate(VARIANTS):
            for b, (_, precision) in enumerate(PRECISIONS):
                for c, context in enumerate(CONTEXTS):
                    for batch in BATCHES:
                        gpu = GPUS[(m + v + b + c + batch) % len(GPUS)]
                        grid.append((name, variant, precision, context, batch, gpu))
    got = browser_page.evaluate("""(grid) => {
      const root = document.querySelector('[data-live=size-calculator]');
      const data = window.toykvLive.data(root);
      return grid.map(([model, variant, precision, context, batch, gpu]) => {
        const m = data.models.find(e => e.key === model);
        const r = window.toykvLive.sizeCalculatorReport(data, {model, variant,
          kvHeads: m.gqa_default, precision: String(precision), context: BigInt(context),
          batch: BigInt(batch), gpu});
        const out = {};
        for (const [k, v] of Object.entries(r)) if (typeof v !== 'object' || v === null)
          out[k] = typeof v === 'bigint' ? v.toString() : v;
        out.variants = r.variants.map(row => row.fits ? [row.key, String(row.batch_bytes),
          String(row.bytes_per_token), row.share_of_mha] : [row.key, null, null, null]);
        out.curve = [r.curve_bytes[0], r.curve_bytes[40]].map(String);
        return out;
      });
    }""", [list(g) for g in grid])
    assert len(got) == len(grid) == 24 * 5 * 4 * 14 * 3
    for (name, variant, precision, context, batch, gpu), page in zip(grid, got):
        r = size_report(zoo.get(name), variant, precision, context, batch, gpu,
                        curve_contexts=(1024, 40_000))
        for field in FIELDS:
            expected = getattr(r, field)
            shown = page[field]
            assert (int(shown) if isinstance(expected, int) and not isinstance(expected, bool)
                    else shown) == expected, (name, variant, precision, context, batch, field)
        rows = [[row.key, None if row.batch_bytes is None else str(row.batch_bytes),
                 None if row.bytes_per_token is None else str(row.bytes_per_token),
                 row.share_of_mha] for row in r.variants]
        assert page["variants"] == rows


def test_calculator_curve_is_the_report_curve(browser_page):
    got = browser_page.evaluate("""() => {
      const root = document.querySelector('[data-live=size-calculator]');
      const data = window.toykvLive.data(root);
      return ['gemma-3-27b', 'qwen3-next-80b-a3b', 'mistral-7b-v0.1'].map(model => {
        const r = window.toykvLive.sizeCalculatorReport(data, {model, variant: 'mqa', kvHeads: 1,
          precision: '1', context: 8192n, batch: 3n, gpu: 80});
        return [r.curve_bytes.map(String), r.curve_bytes_as_built.map(String)];
      });
    }""")
    for name, (curve, built) in zip(["gemma-3-27b", "qwen3-next-80b-a3b", "mistral-7b-v0.1"], got):
        r = size_report(zoo.get(name), "mqa", 1, 8192, 3, 80)
        assert list(map(int, curve)) == list(r.curve_bytes)
        assert list(map(int, built)) == list(r.curve_bytes_as_built)


def test_gqa_kv_heads_of_every_model(browser_page):
    choices = {m["key"]: sorted(map(int, m["gqa"])) for m in static_twin.zoo_data()}
    grid = [(name, k) for name, ks in choices.items() for k in ks]
    got = browser_page.evaluate("""(grid) => {
      const root = document.querySelector('[data-live=size-calculator]');
      const data = window.toykvLive.data(root);
      return grid.map(([model, kvHeads]) => String(window.toykvLive.sizeCalculatorReport(data,
        {model, variant: 'gqa', kvHeads, precision: '2', context: 32768n, batch: 7n, gpu: 80})
        .batch_bytes));
    }""", [list(g) for g in grid])
    for (name, k), batch_bytes in zip(grid, got):
        assert int(batch_bytes) == size_report(zoo.get(name), "gqa", 2, 32768, 7, 80,
                                               kv_heads=k).batch_bytes


def _figures(root) -> dict:
    return root.evaluate("""root => Object.fromEntries([...root.querySelectorAll(
      '[data-part=numbers] [data-quantity]')].map(e => [e.dataset.quantity, e.dataset.value]))""")


def _check_figures(figures, report):
    assert figures, "no figures shown"
    for field, value in figures.items():
        expected = getattr(report, field)
        if isinstance(expected, bool):
            assert value == str(expected).lower()
        elif isinstance(expected, int):
            assert int(value) == expected, field
        else:
            assert float(value) == expected, field


def test_calculator_controls_as_a_reader_moves_them(browser_page):
    root = _calc_root(browser_page)
    c = lambda name: root.locator(f"[data-control={name}]")      # noqa: E731
    _check_figures(_figures(root), size_report(zoo.get("llama-3.1-8b")))
    slider = c("context")
    slider.focus()
    slider.press("Home")
    assert slider.get_attribute("data-value") == "1024"
    for _ in range(3):
        slider.press("ArrowRight")
    assert slider.get_attribute("data-value") == "8192"
    slider.press("End")
    assert slider.get_attribute("data-value") == str(CONTEXTS[-1])
    moves = [("deepseek-v3", "as built", "1", 1, 80), ("gemma-3-27b", "mla", "0.5", 9, 24),
             ("qwen3-next-80b-a3b", "mha", "4", 12, 141.5), ("llama-2-7b", "mqa", "2", 13, 0.01)]
    for model, variant, precision, index, gpu in moves:
        c("model").select_option(model)
        c("attention").select_option(variant)
        c("precision").select_option(precision)
        slider.focus()
        slider.press("Home")
        for _ in range(index):
            slider.press("ArrowRight")
        c("batch").fill("1000000000")
        c("batch").press("Enter")
        c("gpu_memory_gib").fill(str(gpu))
        c("gpu_memory_gib").press("Enter")
        report = size_report(zoo.get(model), variant, float(precision) if precision == "0.5"
                             else int(precision), CONTEXTS[index], 10 ** 9, gpu)
        _check_figures(_figures(root), report)
        shown = root.locator("[data-quantity=batch_bytes]").inner_text()
        from toykv.widgets import size_calculator_view
        assert shown == size_calculator_view.texts(report)["batch_bytes"]


def test_calculator_bad_input_shows_a_message_and_recovers(browser_page):
    root = _calc_root(browser_page)
    c = lambda name: root.locator(f"[data-control={name}]")      # noqa: E731
    for box, text, words in [("batch", "2.5", "batch must be a whole number"),
                             ("batch", "0", "from 1 to 1,000,000,000"),
                             ("batch", "1000000001", "batch"),
                             ("gpu_memory_gib", "0.001", "gpu_memory_gib must be a number >= 0.01"),
                             ("gpu_memory_gib", "", "gpu_memory_gib")]:
        c(box).fill(text)
        c(box).press("Enter")
        assert words in root.locator("[data-part=message]").inner_text()
        assert root.get_attribute("data-state") == "problem" and not _figures(root)
        c("batch").fill("16")
        c("gpu_memory_gib").fill("80")
        c("gpu_memory_gib").press("Enter")
        assert root.get_attribute("data-state") == "ok"


def test_share_explorer_over_every_model_and_context(browser_page):
    contexts = list(SHARE_CONTEXTS) + [1, 4095, 4096, 4097, 10 ** 9, 2 ** 62]
    got = browser_page.evaluate("""(contexts) => {
      const root = document.querySelector('[data-live=share-explorer]');
      const data = window.toykvLive.data(root);
      return data.models.map(m => [m.key, contexts.map(n => window.toykvLive.kvShare(m,
        BigInt(n)))]);
    }""", contexts)
    assert [name for name, _ in got] == zoo.names()
    for name, shares in got:
        assert shares == [sizing.kv_share(zoo.get(name), n) for n in contexts], name


def test_share_explorer_controls(browser_page):
    root = browser_page.locator("[data-live=share-explorer]")
    slider = root.locator("[data-control=context]")
    slider.focus()
    slider.press("End")
    assert slider.get_attribute("data-value") == "1000000"
    root.locator("[data-control=models]").select_option(["kimi-k2", "gpt-oss-120b"])
    readings = root.evaluate("""root => [...root.querySelectorAll('[data-quantity]')].map(e =>
      [e.dataset.model, e.dataset.quantity, Number(e.dataset.value)])""")
    expected = []
    for name in ("kimi-k2", "gpt-oss-120b"):
        share = sizing.kv_share(zoo.get(name), 10 ** 6)
        expected += [[name, "kv_share", share], [name, "relative_decode_speed", 1 - share]]
    assert sorted(readings) == sorted(expected)
    slider.press("ArrowLeft")
    assert slider.get_attribute("data-value") == str(SHARE_CONTEXTS[-2])
    root.locator("[data-control=models]").select_option(zoo.names()[:7])
    assert "choose 1 to 6 models" in root.locator("[data-part=message]").inner_text()
    root.locator("[data-control=models]").select_option(["qwen3-0.6b"])
    assert root.get_attribute("data-state") == "ok"
    assert len(root.locator("[data-quantity=kv_share]").all()) == 1


def _fill_state(root) -> tuple[list, dict]:
    cells = root.evaluate("""root => [...root.querySelectorAll('[data-part=grid] tr')].slice(1)
      .map(tr => [...tr.querySelectorAll('td')].map(td => td.dataset.state))""")
    figures = root.evaluate("""root => Object.fromEntries([...root.querySelectorAll(
      '[data-quantity]')].map(e => [e.dataset.quantity, e.dataset.value]))""")
    return cells, figures


def _same_as(stepper, cells, figures):
    assert cells == stepper.cells
    assert int(figures["cached_positions"]) == stepper.positions
    assert int(figures["flops_cached"]) == stepper.flops_cached
    assert int(figures["flops_uncached"]) == stepper.flops_uncached
    assert float(figures["max_abs_logit_diff"]) == stepper.max_abs_diff


def test_cache_fill_replays_the_steppers_states(browser_page):
    root = browser_page.locator("[data-live=cache-fill]")
    step, reset = root.locator("[data-control=step]"), root.locator("[data-control=reset]")
    stepper = FillStepper(prompt_len=6, steps=3)
    _same_as(stepper, *_fill_state(root))
    for prompt_len in (2, 16, 6):
        root.locator("[data-control=prompt_length]").select_option(str(prompt_len))
        stepper.reset(prompt_len)
        _same_as(stepper, *_fill_state(root))
        while not stepper.at_limit:
            step.press("Enter") if prompt_len == 16 else step.click()   # keyboard or mouse
            stepper.step()
            _same_as(stepper, *_fill_state(root))
        assert step.is_disabled() and "fills all 24 positions" in root.inner_text()
        reset.click()
        stepper.reset()
        _same_as(stepper, *_fill_state(root))
        assert not step.is_disabled()


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
    root = page.locator("[data-live=cache-fill]")
    stepper = FillStepper(model, prompt_len=2, steps=1)
    for _ in range(6):
        root.locator("[data-control=step]").click()
        stepper.step()
    cells, figures = _fill_state(root)
    _same_as(stepper, cells, figures)
    assert "evicted" in cells[0] and "dropped by a sliding window" in root.inner_text()
    page.close()
    assert not errors


def test_controls_are_labelled(browser_page):
    unlabelled = browser_page.evaluate("""() => [...document.querySelectorAll('[data-control]')]
      .filter(e => e.tagName !== 'BUTTON' && !(e.labels && e.labels.length))
      .map(e => e.dataset.control)""")
    assert unlabelled == []
    ids = browser_page.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)")
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"toykv-[a-z-]+-[0-9a-f]{10}(-[a-z_]+)?", i) for i in ids)
