"""Checks of the widgets' static twins in a browser page, shared by tests/test_static_twins.py
(a page made from the twins alone) and tests/live_widgets_check.py (the built book's pages).

Each check takes the twin's root element (a playwright Locator of [data-live=...]), operates
it as a reader would (select options, arrow keys on the sliders, Enter in number boxes,
clicks) or calls the page's own arithmetic over a full grid, and compares what the page
shows (data-value) with toykv: size_report, sizing.kv_share, a FillStepper run alongside and
toykv.flops. A mismatch raises AssertionError naming the case.
"""
from __future__ import annotations

import random
from fractions import Fraction

import numpy as np

from toykv import flops, sizing, zoo
from toykv.widgets import FillStepper, size_report
from toykv.widgets import size_calculator_view
from toykv.widgets.share_explorer import SHARE_CONTEXTS
from toykv.widgets.size_report import CONTEXTS, PRECISIONS, VARIANTS, variant_model

FIELDS = ("values_per_token", "bytes_per_token", "sequence_bytes", "batch_bytes", "gpu_bytes",
          "gpus_of_kv", "weight_bytes", "active_weight_bytes", "sequences_fit", "weights_fit",
          "kv_share", "relative_decode_speed", "bytes_per_token_at_context")
BATCHES = (1, 16, 10 ** 9)
GPUS = (80, 24, 0.01, 141.5, 10 ** 6)
TWIN_LIMIT = 300_000          # bytes a twin may add to its page


def _same(expected, shown) -> bool:
    if isinstance(expected, bool):
        return shown in (expected, str(expected).lower())
    if isinstance(expected, int):
        return int(shown) == expected
    return float(shown) == expected


def twin_bytes(root) -> int:
    """Bytes of the twin's HTML in the page: what it adds to the page's weight."""
    return root.evaluate("root => new TextEncoder().encode(root.outerHTML).length")


# -- size calculator -------------------------------------------------------------------------
def calculator_grid(root) -> int:
    """The page's arithmetic for every zoo model x variant x precision x context x batch (GPU
    memory in turn): bytes, share and fit against toykv.sizing for every case, and every
    field of size_report (the variant rows too) where the batch is 16. Returns the cases."""
    grid = []
    for m, name in enumerate(zoo.names()):
        for v, (_, variant) in enumerate(VARIANTS):
            for b, (_, precision) in enumerate(PRECISIONS):
                for c, context in enumerate(CONTEXTS):
                    for batch in BATCHES:
                        gpu = GPUS[(m + v + b + c + batch) % len(GPUS)]
                        grid.append((name, variant, precision, context, batch, gpu))
    got = root.evaluate("""(root, [grid, fields]) => {
      const data = window.toykvLive.data(root);
      return grid.map(([model, variant, precision, context, batch, gpu]) => {
        const m = data.models.find(e => e.key === model);
        const r = window.toykvLive.sizeCalculatorReport(data, {model, variant,
          kvHeads: m.gqa_default, precision: String(precision), context: BigInt(context),
          batch: BigInt(batch), gpu}, {curves: false});
        const out = fields.map(k => typeof r[k] === 'bigint' ? r[k].toString() : r[k]);
        if (batch === 16) out.push(r.variants.map(row => row.fits ? [row.key,
          String(row.batch_bytes), String(row.bytes_per_token), row.share_of_mha]
          : [row.key, null, null, null]));
        return out;
      });
    }""", [[list(g) for g in grid], list(FIELDS)])
    assert len(got) == len(grid)
    sized = {(name, variant): variant_model(zoo.get(name), variant)
             for name in zoo.names() for _, variant in VARIANTS}
    for case, page in zip(grid, got):
        name, variant, b, S, B, gpu = case
        shown = dict(zip(FIELDS, page))
        model, config = sized[name, variant], sized[name, variant].config
        gpu_bytes = int(Fraction(gpu) * 2 ** 30)
        expected = {"values_per_token": sizing.kv_values_per_token(config),
                    "bytes_per_token": sizing.kv_bytes_per_token(config, b),
                    "sequence_bytes": sizing.kv_cache_bytes(config, S, 1, b),
                    "batch_bytes": sizing.kv_cache_bytes(config, S, B, b),
                    "gpu_bytes": gpu_bytes,
                    "weight_bytes": sizing.weight_bytes(model.total_params, 2),
                    "active_weight_bytes": sizing.weight_bytes(model.active_params, 2),
                    "sequences_fit": sizing.sequences_that_fit(model, S, gpu_bytes, b, 2),
                    "kv_share": sizing.kv_share(model, S, B, b, 2),
                    "relative_decode_speed": sizing.relative_decode_speed(model, S, B, b, 2)}
        for field, value in expected.items():
            assert _same(value, shown[field]), (case, field, shown[field])
        if B != 16:
            continue
        r = size_report(zoo.get(name), variant, b, S, B, gpu, curve_contexts=(1024,))
        for field in FIELDS:
            assert _same(getattr(r, field), shown[field]), (case, field, shown[field])
        rows = [[row.key, None if row.batch_bytes is None else str(row.batch_bytes),
                 None if row.bytes_per_token is None else str(row.bytes_per_token),
                 row.share_of_mha] for row in r.variants]
        assert page[-1] == rows, case
    return len(grid)


def calculator_curves(root) -> None:
    """The plotted curves (the model as built and a variant) equal size_report's."""
    names = ["gemma-3-27b", "qwen3-next-80b-a3b", "mistral-7b-v0.1", "deepseek-v3"]
    got = root.evaluate("""(root, names) => {
      const data = window.toykvLive.data(root);
      return names.map(model => {
        const r = window.toykvLive.sizeCalculatorReport(data, {model, variant: 'mqa', kvHeads: 1,
          precision: '1', context: 8192n, batch: 3n, gpu: 80});
        return [r.curve_bytes.map(String), r.curve_bytes_as_built.map(String)];
      });
    }""", names)
    for name, (curve, built) in zip(names, got):
        r = size_report(zoo.get(name), "mqa", 1, 8192, 3, 80)
        assert list(map(int, curve)) == list(r.curve_bytes), name
        assert list(map(int, built)) == list(r.curve_bytes_as_built), name


def calculator_gqa_heads(root) -> None:
    """GQA with every KV-head count the page offers, for every model."""
    got = root.evaluate("""(root) => {
      const data = window.toykvLive.data(root);
      return data.models.flatMap(m => Object.keys(m.gqa).map(k => [m.key, Number(k),
        String(window.toykvLive.sizeCalculatorReport(data, {model: m.key, variant: 'gqa',
          kvHeads: Number(k), precision: '2', context: 32768n, batch: 7n, gpu: 80})
          .batch_bytes)]));
    }""")
    assert len(got) > len(zoo.names())
    for name, k, batch_bytes in got:
        expected = size_report(zoo.get(name), "gqa", 2, 32768, 7, 80, kv_heads=k).batch_bytes
        assert int(batch_bytes) == expected, (name, k)


def figures(root) -> dict:
    """{quantity: data-value} of the calculator's figures."""
    return root.evaluate("""root => Object.fromEntries([...root.querySelectorAll(
      '[data-part=numbers] [data-quantity]')].map(e => [e.dataset.quantity, e.dataset.value]))""")


def check_figures(shown: dict, report) -> None:
    assert shown, "no figures shown"
    for field, value in shown.items():
        assert _same(getattr(report, field), value), (report.model, field, value)
    assert "values_per_token" in shown and "relative_decode_speed" in shown


def _slide_to(slider, index) -> None:
    """Arrow keys from where the slider stands to `index`: one position per press, as a
    reader moves it."""
    slider.focus()
    here = int(slider.input_value())
    for _ in range(abs(index - here)):
        slider.press("ArrowRight" if index > here else "ArrowLeft")
    assert int(slider.input_value()) == index


def calculator_controls(root, cases: int = 12, seed: int = 0) -> int:
    """Moves of every control as a reader makes them, each checked against size_report
    (and the whole batch's text against the kernel widget's format)."""
    c = lambda name: root.locator(f"[data-control={name}]")      # noqa: E731
    slider = c("context")
    slider.focus()
    slider.press("Home")
    assert slider.get_attribute("data-value") == str(CONTEXTS[0])
    slider.press("ArrowRight")
    assert slider.get_attribute("data-value") == str(CONTEXTS[1])
    slider.press("End")
    assert slider.get_attribute("data-value") == str(CONTEXTS[-1])
    slider.press("ArrowLeft")
    assert slider.get_attribute("data-value") == str(CONTEXTS[-2])
    rng = random.Random(seed)
    for _ in range(cases):
        model = rng.choice(zoo.names())
        variant = rng.choice([key for _, key in VARIANTS])
        label, precision = rng.choice(PRECISIONS)
        index = rng.randrange(len(CONTEXTS))
        batch = rng.choice([1, 3, 16, 1000, 10 ** 9])
        gpu = rng.choice([80, 24, 141.5, 0.5, 10 ** 6])
        c("model").select_option(model)
        c("attention").select_option(variant)
        kv_heads = None
        if variant == "gqa":
            options = c("kv_heads").evaluate("s => [...s.options].map(o => o.value)")
            kv_heads = int(rng.choice(options))
            c("kv_heads").select_option(str(kv_heads))
        c("precision").select_option(str(precision))
        _slide_to(slider, index)
        c("batch").fill(str(batch))
        c("batch").press("Enter")
        c("gpu_memory_gib").fill(str(gpu))
        c("gpu_memory_gib").press("Enter")
        report = size_report(zoo.get(model), variant, precision, CONTEXTS[index], batch, gpu,
                             kv_heads=kv_heads)
        check_figures(figures(root), report)
        shown = root.locator("[data-part=numbers] [data-quantity=batch_bytes]").inner_text()
        texts = size_calculator_view.texts(report)
        assert shown == texts["batch_bytes"], (model, shown, texts["batch_bytes"])
        assert root.locator("[data-quantity=kv_share]").inner_text() == texts["kv_share"]
    return cases


def calculator_bad_input(root) -> None:
    """Bad numbers show a message and no figures; a good number brings them back."""
    c = lambda name: root.locator(f"[data-control={name}]")      # noqa: E731
    for box, text, words in [("batch", "2.5", "batch must be a whole number"),
                             ("batch", "0", "from 1 to 1,000,000,000"),
                             ("batch", "1000000001", "batch"),
                             ("gpu_memory_gib", "0.001", "gpu_memory_gib must be a number >= 0.01"),
                             ("gpu_memory_gib", "", "gpu_memory_gib")]:
        c(box).fill(text)
        c(box).press("Enter")
        assert words in root.locator("[data-part=message]").inner_text(), (box, text)
        assert root.get_attribute("data-state") == "problem" and not figures(root)
        c("batch").fill("16")
        c("gpu_memory_gib").fill("80")
        c("gpu_memory_gib").press("Enter")
        assert root.get_attribute("data-state") == "ok" and figures(root)


# -- share explorer --------------------------------------------------------------------------
def share_grid(root) -> int:
    """The page's share for every zoo model at every context (and some far beyond)."""
    contexts = list(SHARE_CONTEXTS) + [1, 4095, 4096, 4097, 10 ** 9, 2 ** 62]
    got = root.evaluate("""(root, contexts) => {
      const data = window.toykvLive.data(root);
      return data.models.map(m => [m.key, contexts.map(n => window.toykvLive.kvShare(m,
        BigInt(n)))]);
    }""", contexts)
    assert [name for name, _ in got] == zoo.names()
    for name, shares in got:
        assert shares == [sizing.kv_share(zoo.get(name), n) for n in contexts], name
    return len(got) * len(contexts)


def _readings(root) -> list:
    return root.evaluate("""root => [...root.querySelectorAll('[data-quantity]')].map(e =>
      [e.dataset.model, e.dataset.quantity, Number(e.dataset.value)])""")


def share_controls(root) -> None:
    slider, models = root.locator("[data-control=context]"), root.locator("[data-control=models]")
    slider.focus()
    slider.press("End")
    assert slider.get_attribute("data-value") == str(SHARE_CONTEXTS[-1])
    for chosen, index in [(["kimi-k2", "gpt-oss-120b"], len(SHARE_CONTEXTS) - 1),
                          (["llama-2-7b", "mistral-7b-v0.1", "qwen3-next-80b-a3b"], 20),
                          (zoo.names()[:6], 0)]:
        models.select_option(chosen)
        _slide_to(slider, index)
        context = SHARE_CONTEXTS[index]
        assert slider.get_attribute("data-value") == str(context)
        expected = []
        for name in chosen:
            share = sizing.kv_share(zoo.get(name), context)
            expected += [[name, "kv_share", share], [name, "relative_decode_speed", 1 - share]]
        assert sorted(_readings(root)) == sorted(expected), (chosen, context)
    models.select_option(zoo.names()[:7])
    assert "choose 1 to 6 models" in root.locator("[data-part=message]").inner_text()
    models.select_option(["qwen3-0.6b"])
    assert root.get_attribute("data-state") == "ok" and len(_readings(root)) == 2


# -- cache fill --------------------------------------------------------------------------
def fill_state(root) -> tuple[list, dict]:
    cells = root.evaluate("""root => [...root.querySelectorAll('[data-part=grid] tr')].slice(1)
      .map(tr => [...tr.querySelectorAll('td')].map(td => td.dataset.state))""")
    shown = root.evaluate("""root => Object.fromEntries([...root.querySelectorAll(
      '[data-part=stats] [data-quantity]')].map(e => [e.dataset.quantity, e.dataset.value]))""")
    return cells, shown


def same_as(stepper, root) -> None:
    cells, shown = fill_state(root)
    where = (stepper.prompt_len, stepper.positions)
    assert cells == stepper.cells, where
    assert int(shown["cached_positions"]) == stepper.positions, where
    assert int(shown["flops_cached"]) == stepper.flops_cached, where
    assert int(shown["flops_uncached"]) == stepper.flops_uncached, where
    assert float(shown["max_abs_logit_diff"]) == stepper.max_abs_diff, where
    config, n = stepper.model.config, stepper.positions
    if stepper.phase == "decode":
        assert stepper.flops_cached == flops.cached_step_flops(config, n, stepper.model.absorb)
    assert stepper.flops_uncached == flops.full_pass_flops(config, n, stepper.model.absorb)


def _stepper_of(data) -> FillStepper:
    """A FillStepper in the state the twin opened in (its model must be the default one)."""
    assert data["default_model"], "the twin's model is not the default: pass a stepper"
    return FillStepper(prompt_len=data["state"]["prompt_len"], max_positions=data["limit"],
                       seed=data["seed"], steps=data["state"]["step"],
                       kv_dtype=data["kv_dtype"])


def cache_fill_clicks(root, stepper: FillStepper | None = None, lengths=None) -> int:
    """Step to the last position and Reset, for every recorded prompt length (or those in
    `lengths`), by mouse and by keyboard, each state against a FillStepper run alongside;
    returns the states checked."""
    data = root.evaluate("root => window.toykvLive.data(root)")
    stepper = stepper or _stepper_of(data)
    step, reset = root.locator("[data-control=step]"), root.locator("[data-control=reset]")
    same_as(stepper, root)
    checked = 1
    runs = [r for r in data["runs"] if lengths is None or r["prompt_len"] in lengths]
    for k, run in enumerate(runs):
        root.locator("[data-control=prompt_length]").select_option(str(run["prompt_len"]))
        stepper.reset(run["prompt_len"])
        same_as(stepper, root)
        while not stepper.at_limit:
            if k % 2:
                step.focus()
                step.press("Enter")
            else:
                step.click()
            stepper.step()
            same_as(stepper, root)
            checked += 1
        assert step.is_disabled() and f"fills all {stepper.limit} positions" in root.inner_text()
        reset.click()
        stepper.reset()
        same_as(stepper, root)
        assert not step.is_disabled()
    return checked


# -- the attention view, inside the cache fill (chapter 3) -------------------------------------
ATTENTION_COUNTS = ("rows_computed", "weights_computed", "cached_columns", "new_columns",
                    "cells_shown", "recompute_rows", "recompute_weights")

ATTENTION_STATE_JS = """root => {
  const q = (sel) => [...root.querySelectorAll(sel)];
  const L = window.toykvLive, data = L.data(root);
  const run = data.runs.find(r => r.prompt_len === Number(
    root.querySelector('[data-control=prompt_length]').value));
  const i = run.frames.findIndex(f => f.positions === Number(root.dataset.positions));
  const layer = Number(root.querySelector('[data-control=layer]').value);
  const head = Number(root.querySelector('[data-control=head]').value);
  const f = L.attentionFrame(data, run, i, layer, head);
  const weights = [];
  for (let r = 0; r < f.n; r++) {
    const row = [];
    for (let j = 0; j < f.n; j++) { const w = f.weight(r, j); row.push(Number.isNaN(w) ? null : w); }
    weights.push(row);
  }
  return {layer, head, weights,
    figures: Object.fromEntries(q('[data-part=attention_figures] [data-quantity]')
      .map(e => [e.dataset.quantity, e.dataset.value])),
    newRow: q('[data-part=attention_view] [data-quantity=new_row_weight]')
      .map(e => [Number(e.dataset.key), e.dataset.value]),
    cells: q('[data-part=heatmap] rect:not([data-column])').filter(e =>
      e.getAttribute('fill') !== 'none').map(e => {
        const a = data.attention, at = (name) => Number(e.getAttribute(name));
        return [`${(at('y') - a.top) / a.cell},${(at('x') - a.left) / a.cell}`,
          e.getAttribute('fill')]; }),
    columns: q('[data-part=heatmap] [data-column]').map(e => [Number(e.dataset.column),
      e.dataset.source]),
    caption: root.querySelector('[data-part=attention_caption]').textContent,
    live: root.querySelector('[data-part=attention_caption]').getAttribute('aria-live')};
}"""


def attention_same_as(stepper: FillStepper, root) -> tuple[int, int]:
    """The attention view as the page shows it (its layer and head) against the stepper's
    AttentionFrame: every figure, the newest row's weights and every weight of the matrix
    exactly, each cell's colour, the column marks and the caption; returns (layer, head)."""
    from toykv.widgets.attention_view import weight_colour

    shown = root.evaluate(ATTENTION_STATE_JS)
    layer, head = shown["layer"], shown["head"]
    frame = stepper.attention_frame(layer, head)
    where = (stepper.prompt_len, stepper.positions, layer, head)
    figures = shown["figures"]
    for name in ATTENTION_COUNTS:
        assert int(figures.pop(name)) == getattr(frame, name), (where, name)
    assert float(figures.pop("new_rows_max_diff")) == frame.new_rows_max_diff, where
    if frame.past_rows_max_diff is not None:
        assert float(figures.pop("past_rows_max_diff")) == frame.past_rows_max_diff, where
    assert figures == {}, (where, figures)
    assert [(j, float(w)) for j, w in shown["newRow"]] == \
        [(j, float(w)) for j, w in zip(frame.new_row_keys, frame.new_row)], where
    expected = [[None if np.isnan(w) else float(w) for w in row] for row in frame.weights]
    assert shown["weights"] == expected, where                   # every weight, exactly
    cells = dict(shown["cells"])
    assert len(cells) == frame.cells_shown, where
    for key, fill in cells.items():
        i, j = map(int, key.split(","))
        assert fill == weight_colour(float(frame.weights[i, j])), (where, key)
    assert shown["columns"] == [[j, "new" if j >= frame.n_cached else "cache"]
                                for j in range(frame.key_first, frame.positions)], where
    assert shown["caption"] == frame.caption and shown["live"] == "polite", where
    return layer, head


def attention_clicks(root, stepper: FillStepper | None = None, lengths=None,
                     initial: bool = False) -> int:
    """Step to the last position and Reset for every recorded prompt length (or those in
    `lengths`), changing the layer and head as a reader would (by mouse, and by the arrow
    keys on the focused menu), each state against a FillStepper run alongside; every layer
    and head at the prefill and the third decode step. initial: first check the state the
    page opened in (a page no one has touched). Returns the views checked."""
    data = root.evaluate("root => window.toykvLive.data(root)")
    stepper = stepper or _stepper_of(data)
    if "attention" not in data:                     # a cache fill made with attention=False
        return 0
    att = data["attention"]
    control = lambda name: root.locator(f"[data-control={name}]")      # noqa: E731
    step, reset, layer, head = (control(n) for n in ("step", "reset", "layer", "head"))
    checked = 0
    if initial:
        assert attention_same_as(stepper, root) == (att["state"]["layer"], att["state"]["head"])
        checked += 1

    def every_layer_and_head():
        nonlocal checked
        for l in range(att["layers"]):
            for h in range(att["heads"]):
                layer.select_option(str(l))
                head.select_option(str(h))
                assert attention_same_as(stepper, root) == (l, h)
                checked += 1

    runs = [r for r in data["runs"] if lengths is None or r["prompt_len"] in lengths]
    for run in runs:
        control("prompt_length").select_option(str(run["prompt_len"]))
        reset.click()                               # the first state, wherever the page was
        stepper.reset(run["prompt_len"])
        every_layer_and_head()
        while not stepper.at_limit:
            step.click()
            stepper.step()
            decode_step = stepper.positions - stepper.prompt_len
            if decode_step == 3:
                every_layer_and_head()
                continue
            menu = head if decode_step % 2 else layer                 # the keyboard moves one
            menu.focus()
            before = int(menu.input_value())
            last = att["heads" if menu is head else "layers"] - 1
            menu.press("ArrowUp" if before == last else "ArrowDown")
            assert int(menu.input_value()) == before + (-1 if before == last else 1)
            attention_same_as(stepper, root)
            checked += 1
        reset.click()
        stepper.reset()
        attention_same_as(stepper, root)
        checked += 1
    return checked


def attention_latency(root, repeats: int = 20) -> str:
    """Median milliseconds from a Step click, and from a head change, to the figures being in
    the page (the script's whole update, measured in the page; painting comes after)."""
    if not root.locator("[data-control=head]").count():
        return "no attention view"
    got = root.evaluate("""(root, repeats) => {
      const c = (name) => root.querySelector(`[data-control=${name}]`);
      const median = (xs) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];
      const time = (act) => { const t = performance.now(); act();
        return performance.now() - t; };
      const steps = [], heads = [];
      for (let k = 0; k < repeats; k++) {
        if (c('step').disabled) c('reset').click();
        steps.push(time(() => c('step').click()));
        const head = c('head');
        heads.push(time(() => { head.selectedIndex = (head.selectedIndex + 1) %
          head.options.length; head.dispatchEvent(new Event('change')); }));
      }
      c('reset').click();
      return {step: median(steps), head: median(heads)};
    }""", repeats)
    return (f"measured in the page, median of {repeats}: Step {got['step']:.1f} ms, head "
            f"change {got['head']:.1f} ms")


# -- block pool (chapter 10) ------------------------------------------------------------------
def pool_state(root) -> tuple[list, dict]:
    owners = root.evaluate("""root => [...root.querySelectorAll('[data-block]')]
      .map(e => Number(e.dataset.owner))""")
    shown = root.evaluate("""root => Object.fromEntries([...root.querySelectorAll(
      '[data-quantity]')].map(e => [e.dataset.quantity, Number(e.dataset.value)]))""")
    return owners, shown


def block_pool_clicks(root) -> int:
    """Every recorded frame of every pool size, reached by Step (mouse and keyboard) and the
    slider's arrow keys, against the recording toykv wrote into the page; returns frames."""
    data = root.evaluate("root => window.toykvLive.data(root)")
    step, reset = root.locator("[data-control=step]"), root.locator("[data-control=reset]")
    slider = root.locator("[data-control=iteration]")
    checked = 0
    for k, size in enumerate(data["sizes"]):
        root.locator("[data-control=size]").select_option(size)
        frames = data["runs"][size]["frames"]
        for i, frame in enumerate(frames):
            owners, shown = pool_state(root)
            assert owners == frame["owners"], (size, i)
            for name in ("iteration", "used", "free", "running", "waiting", "held"):
                assert shown[name] == frame[name], (size, i, name)
            checked += 1
            if i < len(frames) - 1:
                if k % 2:
                    step.focus()
                    step.press("Enter")
                else:
                    step.click()
        assert step.is_disabled()
        reset.click()
        assert pool_state(root)[1]["iteration"] == 0
        slider.focus()
        slider.press("ArrowRight")
        assert pool_state(root)[0] == frames[1]["owners"]
    return checked


def labelled_controls(page) -> None:
    """Every control has a label (buttons their text), and ids are unique."""
    unlabelled = page.evaluate("""() => [...document.querySelectorAll('.toykv-live [data-control]')]
      .filter(e => e.tagName !== 'BUTTON' && !(e.labels && e.labels.length))
      .map(e => e.dataset.control)""")
    assert unlabelled == [], unlabelled
    ids = page.evaluate("""() => [...document.querySelectorAll('[id^=toykv-]')]
      .map(e => e.id).filter(id => document.querySelectorAll('[id="' + id + '"]').length > 1)""")
    assert ids == [], f"ids used more than once: {ids}"


# -- keyboard alone -----------------------------------------------------------------------------
# A reader without a mouse: Tab reaches every control in order, each shows a focus ring and is
# named by the label it shows; arrows, Enter and Space operate it; the status line
# (data-part=status, role=status) then says what changed. No click, no fill, no focus() on a
# control: only key presses from the twin's start.
FOCUS_JS = """root => {
  const el = document.activeElement;
  if (!el || !root.contains(el) || el === root) return null;
  const shown = (e) => e && e.getClientRects().length > 0 && getComputedStyle(e).visibility !== 'hidden';
  const label = el.tagName === 'BUTTON' ? el : (el.labels && el.labels[0]);
  const style = getComputedStyle(el);
  return {control: el.dataset.control || el.tagName, label: shown(label) ? label.innerText.trim() : '',
          ring: el.matches(':focus-visible') && style.outlineStyle !== 'none' &&
                parseFloat(style.outlineWidth) >= 2,
          ariaLabel: el.getAttribute('aria-label')};
}"""


def tab_through(root) -> list[str]:
    """Tab from the twin's start until focus leaves it; the controls reached, in order. Each
    must show a focus ring and a visible label that is its accessible name."""
    page = root.page
    root.evaluate("r => { r.tabIndex = -1; r.focus(); }")        # the twin's start, as a reader
    reached = []                                                  # arriving from the text above
    for _ in range(40):
        page.keyboard.press("Tab")
        info = root.evaluate(FOCUS_JS)
        if info is None:
            break
        name = _accessible_name(page)
        where = f"{root.get_attribute('data-live')}: {info['control']}"
        assert info["ring"], f"{where}: no visible focus ring"
        assert info["label"], f"{where}: no visible label"
        assert " ".join(info["label"].split()) in name, (where, info["label"], name)
        reached.append(info["control"])
    root.evaluate("r => r.removeAttribute('tabindex')")
    return reached


def _accessible_name(page) -> str:
    """The focused element's name as the accessibility tree has it (playwright's snapshot)."""
    first = page.locator(":focus").aria_snapshot().splitlines()[0]
    quoted = first.split('"')
    return quoted[1] if len(quoted) > 2 else ""


def _visible_controls(root) -> list[str]:
    return root.evaluate("""root => [...root.querySelectorAll('[data-control]')]
      .filter(e => !e.disabled && e.getClientRects().length > 0).map(e => e.dataset.control)""")


def _tab_to(root, control: str) -> None:
    """Tab (only) from the twin's start to the control."""
    page = root.page
    root.evaluate("r => { r.tabIndex = -1; r.focus(); }")
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.dataset.control") == control:
            root.evaluate("r => r.removeAttribute('tabindex')")
            return
    raise AssertionError(f"Tab never reached {control}")


def status(root) -> str:
    return root.locator("[data-part=status]").inner_text()


def _keys(root, control: str, *keys: str) -> str:
    """Tab to a control, press the keys, return what the status line says."""
    _tab_to(root, control)
    for key in keys:
        root.page.keyboard.press(key)
    return status(root)


def _a_change(root, control: str) -> tuple[str, ...]:
    """Keys that change a control from wherever it stands: the next option or position (the
    previous at the end), or a number other than the box holds, then Enter."""
    kind, index, last, value = root.locator(f"[data-control={control}]").evaluate(
        """e => e.tagName === 'SELECT' ? ['select', e.selectedIndex, e.options.length - 1, '']
           : e.type === 'range' ? ['range', Number(e.value), Number(e.max), '']
           : ['number', 0, 0, e.value]""")
    if kind == "number":
        return ("Control+A", *("5" if value == "3" else "3"), "Enter")
    forward = "ArrowDown" if kind == "select" else "ArrowRight"
    backward = "ArrowUp" if kind == "select" else "ArrowLeft"
    return (forward,) if index < last else (backward,)


def keyboard_cache_fill(root) -> int:
    """Step by Enter and by Space, Reset, a new prompt length by the arrow keys, and Step to
    the end (focus then moves to Reset): each move told on the status line as the
    figures show it; returns the moves made."""
    controls = tab_through(root)
    assert controls == _visible_controls(root), controls
    assert controls[:3] == ["step", "reset", "prompt_length"], controls
    moves = 0
    if "layer" in controls:                     # the attention view's menus (chapter 3)
        assert controls[3:] == ["layer", "head"], controls
        for menu in ("layer", "head"):
            said = _keys(root, menu, *_a_change(root, menu))
            layer, head = (root.locator(f"[data-control={m}]").input_value()
                           for m in ("layer", "head"))
            assert said.startswith(f"Layer {layer}, head {head}, "), said
            assert said == root.locator("[data-part=attention_caption]").inner_text(), said
            moves += 1
    lengths = [int(o) for o in root.evaluate(
        "r => [...r.querySelector('[data-control=prompt_length]').options].map(o => o.value)")]
    said = _keys(root, "prompt_length", "ArrowDown", "Home")      # a change wherever it stood
    p = lengths[0]
    assert said.startswith(f"Prefill of the {p}-token prompt; {p} of "), said
    said = _keys(root, "step", "Enter")
    assert said.startswith("Decode step 1: ") and f"at position {p};" in said, said
    root.page.keyboard.press("Space")
    assert status(root).startswith("Decode step 2: "), status(root)
    _, shown = fill_state(root)
    assert f"; {shown['cached_positions']} of " in status(root)
    assert f"{int(shown['flops_cached']):,} FLOPs with the cache" in status(root)
    said = _keys(root, "reset", "Space")
    assert said.startswith(f"Prefill of the {p}-token prompt"), said
    said = _keys(root, "prompt_length", "ArrowDown")
    assert said.startswith(f"Prefill of the {lengths[1]}-token prompt"), said
    limit = root.evaluate("r => window.toykvLive.data(r).limit")
    _tab_to(root, "step")
    for _ in range(limit - lengths[1]):
        root.page.keyboard.press("Enter")
    assert root.page.evaluate("() => document.activeElement.dataset.control") == "reset"
    assert "The cache is full" in status(root)
    return 6 + moves + limit - lengths[1]


def keyboard_block_pool(root) -> int:
    """Step by Enter and Space, the iteration slider by arrows and End, Reset, and the other
    pool size by the arrow keys, each told on the status line as the recording has it."""
    data = root.evaluate("root => window.toykvLive.data(root)")
    assert tab_through(root) == _visible_controls(root) == ["step", "reset", "size", "iteration"]
    size = root.locator("[data-control=size]").input_value()
    run = data["runs"][size]
    said = _keys(root, "reset", "Enter")
    assert said.startswith("Iteration 0 of ") and f", {run['num_blocks']} free" in said, said
    said = _keys(root, "step", "Enter", "Space")
    frame = run["frames"][2]
    assert said.startswith(f"Iteration 2 of {len(run['frames']) - 1}") and \
        f"{frame['used']} used" in said and f"{frame['held']} tokens held" in said, said
    said = _keys(root, "iteration", "End")
    last = run["frames"][-1]
    assert said.startswith(f"Iteration {last['iteration']} of ") and f"{last['free']} free" in said
    said = _keys(root, "iteration", "ArrowLeft")
    assert said.startswith(f"Iteration {last['iteration'] - 1} of "), said
    other = [s for s in data["sizes"] if s != size]
    if other:
        index = data["sizes"].index(other[0]) - data["sizes"].index(size)
        said = _keys(root, "size", "ArrowDown" if index > 0 else "ArrowUp")
        assert f"the pool's {other[0]} blocks" in said, said
    return 6


def keyboard_size_calculator(root) -> int:
    """Every control by keys alone (arrows in the lists and on the slider, digits and Enter
    in the number boxes); after each, the status line names the batch's cache as the
    kernel widget formats it (size_report and size_calculator_view.texts)."""
    reached = tab_through(root)
    assert reached == _visible_controls(root), reached
    assert set(reached) >= {"model", "attention", "precision", "batch", "gpu_memory_gib", "context"}

    def settings():
        return root.evaluate("""root => { const c = n => root.querySelector(`[data-control=${n}]`);
          return [c('model').value, c('attention').value, Number(c('kv_heads').value),
                  Number(c('precision').value), Number(c('context').dataset.value),
                  Number(c('batch').value), Number(c('gpu_memory_gib').value)]; }""")

    def check(said):
        model, variant, kv_heads, precision, context, batch, gpu = settings()
        report = size_report(zoo.get(model), variant, precision, context, batch, gpu,
                             kv_heads=kv_heads if variant == "gqa" else None)
        texts = size_calculator_view.texts(report)
        assert said.startswith(model + ", ") and f"holds {texts['batch_bytes']};" in said, \
            (said, texts["batch_bytes"])
        assert f"{batch:,} x {context:,} tokens" in said, said

    moves = ["model", "attention", "precision", "context", "batch", "gpu_memory_gib",
             "attention", "context", "model"]
    for control in moves:
        before = status(root)
        said = _keys(root, control, *_a_change(root, control))
        assert said != before, (control, said)
        check(said)
    return len(moves)


def keyboard_share_explorer(root) -> int:
    """The model list by arrows (one model, then Shift+arrow for two) and the context slider
    by arrows and Home/End; the status line gives each model's share as toykv computes it."""
    assert tab_through(root) == _visible_controls(root) == ["models", "context"]
    names = zoo.names()

    def check(said, chosen, context):
        assert said.startswith(f"At {context:,} tokens: "), said
        for name in chosen:
            share = sizing.kv_share(zoo.get(name), context)
            assert f"{name}, KV share {100 * share:.1f}%, decode speed {1 - share:.3f}" in said, \
                (name, said)
        assert said.count("KV share") == len(chosen), said

    said = _keys(root, "models", "Home")
    context = int(root.locator("[data-control=context]").get_attribute("data-value"))
    check(said, [names[0]], context)
    root.page.keyboard.press("Shift+ArrowDown")
    check(status(root), names[:2], context)
    said = _keys(root, "context", "Home")
    check(said, names[:2], SHARE_CONTEXTS[0])
    root.page.keyboard.press("ArrowRight")
    check(status(root), names[:2], SHARE_CONTEXTS[1])
    root.page.keyboard.press("End")
    check(status(root), names[:2], SHARE_CONTEXTS[-1])
    return 5
