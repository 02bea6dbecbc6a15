"""The attention view (chapter 3): attention_rows, the pure side, and the view in CacheFill.

The weights are checked against an independent float64 reference written without toykv's code
paths (conftest's helpers, every layer and head) and against a recomputation by the model
itself: the rows a cached step computes equal the same rows of a full recomputation, bit for
bit with exact=True and to float32 rounding with BLAS. Counts are checked against hand
formulas (n(n + 1)/2 weights in a causal triangle, min(i + 1, w) in a sliding window).
"""
import math
import re

import numpy as np
import pytest
from conftest import make_model, ref_mask, ref_norm, ref_rope, token_ids

import toykv
from toykv.widgets import CacheFill, FillStepper
from toykv.widgets import attention_view
from toykv.widgets.attention_rows import (MAX_VIEW_POSITIONS, StepAttention,
                                          _attention_weights, attention_frame, attention_run)


def ref_weights(model, ids) -> list[np.ndarray]:
    """Every layer's attention weights [H, T, T] (MHA/GQA/MQA), float64, one head at a time."""
    c = model.config
    f64 = lambda a: np.asarray(a, dtype=np.float64)          # noqa: E731
    x, pos, hd = f64(model.embed)[np.asarray(ids)], np.arange(len(ids)), c.head_dim
    group, out = c.n_heads // c.n_kv_heads, []
    for kind, layer in zip(c.layer_kinds, model.layers):
        W = {name: f64(a) for name, a in layer.items()}
        h = ref_norm(x, W["attn_norm"], c.norm_eps)
        q, k, v = h @ W["wq"], h @ W["wk"], h @ W["wv"]
        mask = ref_mask(len(ids), kind, c.sliding_window)
        weights, heads = [], []
        for head in range(c.n_heads):
            kv = head // group
            qh = ref_rope(q[:, head * hd:(head + 1) * hd], pos, c.rope_theta)
            kh = ref_rope(k[:, kv * hd:(kv + 1) * hd], pos, c.rope_theta)
            scores = np.where(mask, qh @ kh.T / np.sqrt(hd), -np.inf)
            p = np.exp(scores - scores.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            weights.append(p)
            heads.append(p @ v[:, kv * hd:(kv + 1) * hd])
        out.append(np.array(weights))
        x = x + np.concatenate(heads, axis=1) @ W["wo"]
        h = ref_norm(x, W["mlp_norm"], c.norm_eps)
        gate = h @ W["w_gate"]
        x = x + (gate / (1 + np.exp(-gate)) * (h @ W["w_up"])) @ W["w_down"]
    return out


def same_bits(a, b) -> bool:
    """Identical float32 arrays, NaN where the other has NaN, every other value bit for bit."""
    return (a.shape == b.shape and np.array_equal(np.isnan(a), np.isnan(b))
            and np.array_equal(a[~np.isnan(a)].view(np.uint32), b[~np.isnan(b)].view(np.uint32)))


@pytest.fixture(scope="module")
def chapter_run():
    """The chapter's toy (exact) and a 6-token prompt with 5 more tokens, every step."""
    model = toykv.ToyTransformer(toykv.source_toy(max_seq_len=24), seed=0, exact=True)
    return model, attention_run(model, token_ids(11, vocab=512), prompt_len=6)


# -- the weights are the model's ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["mha", "gqa", "mqa", "sliding"])
def test_observed_weights_equal_an_independent_reference(name):
    model, ids = make_model(name), token_ids(9)
    logits, weights = _attention_weights(model, ids)
    assert np.array_equal(logits, model.forward(ids))          # the same pass, nothing added
    for observed, ref in zip(weights, ref_weights(model, ids)):
        assert observed.shape == ref.shape == (model.config.n_heads, 9, 9)
        assert np.abs(observed - ref).max() < 1e-5


def test_a_cached_pass_is_observed_over_the_keys_it_read():
    model, ids = make_model("gqa"), token_ids(9)
    cache = model.new_cache()
    model.forward(ids[:8], cache)
    logits, weights = _attention_weights(model, ids[8:], cache)
    assert len(cache) == 9 and logits.shape == (1, model.config.vocab_size)
    ref = ref_weights(model, ids)
    for observed, full in zip(weights, ref):
        assert observed.shape == (model.config.n_heads, 1, 9)
        assert np.abs(observed[:, 0] - full[:, 8]).max() < 1e-5
    assert "attended" not in vars(cache)                       # the hook is the cache's again


def test_a_failed_pass_leaves_the_cache_and_its_hook_as_they_were(monkeypatch):
    model = make_model()
    cache = model.new_cache()
    model.forward(token_ids(4), cache)

    def fail(*args):
        raise RuntimeError("simulated")
    monkeypatch.setattr(model, "mlp", fail)
    with pytest.raises(RuntimeError):
        _attention_weights(model, [1], cache)
    assert len(cache) == 4 and "attended" not in vars(cache)


# -- cached rows against a recomputation ---------------------------------------------------------
def test_cached_rows_equal_a_recomputation_bit_for_bit_with_exact(chapter_run):
    _, steps = chapter_run
    for step in steps:
        c, n = step.n_cached, step.positions
        for rows, full in zip(step.rows, step.recomputed):
            assert same_bits(rows, full[:, c:n])               # [H, T, n] both


@pytest.mark.parametrize("name", ["mha", "gqa", "mla_absorbed", "mla_expanded", "mixed"])
def test_every_variant_computes_the_recomputations_rows(name):
    steps = attention_run(make_model(name, exact=True), token_ids(10), prompt_len=3)
    for step in steps:
        for rows, full in zip(step.rows, step.recomputed):
            assert same_bits(rows, full[:, step.n_cached:])
    frame = attention_frame(steps, 1, 0)
    assert frame.new_rows_max_diff == 0.0 and frame.past_rows_max_diff == 0.0


def test_blas_rows_equal_a_recomputation_to_float32_rounding():
    model = toykv.ToyTransformer(toykv.source_toy(max_seq_len=24), seed=0, exact=False)
    steps = attention_run(model, token_ids(16, vocab=512), prompt_len=4)
    worst = 0.0
    for k in range(len(steps)):
        for layer in range(2):
            for head in range(8):
                f = attention_frame(steps[:k + 1], layer, head)
                worst = max(worst, f.new_rows_max_diff, f.past_rows_max_diff or 0.0)
    assert worst < 1e-6                              # weights <= 1: a few float32 ulps


def test_past_rows_are_the_earlier_steps_own_and_a_recomputation_gives_them_back(chapter_run):
    _, steps = chapter_run
    before = attention_frame(steps[:4], 1, 5)
    after = attention_frame(steps, 1, 5)
    assert same_bits(after.weights[:9, :9], before.weights)    # nothing moved
    assert after.past_rows_max_diff == 0.0
    assert same_bits(after.weights[:10], steps[-1].recomputed[1][5][:10])


def test_rows_are_distributions_over_the_keys_they_attend(chapter_run):
    frame = attention_frame(chapter_run[1], 0, 2)
    w = frame.weights
    assert np.isnan(w[np.triu_indices(11, 1)]).all()           # no query sees a later key
    assert np.allclose(np.nansum(w, axis=1), 1, atol=1e-6) and np.nanmin(w) >= 0


# -- what the view shows -------------------------------------------------------------------------
def test_prefill_and_decode_counts_by_hand(chapter_run):
    _, steps = chapter_run
    prefill = attention_frame(steps[:1], 0, 0)
    assert (prefill.phase, prefill.step, prefill.positions) == ("prefill", 0, 6)
    assert (prefill.rows_computed, prefill.weights_computed) == (6, 6 * 7 // 2)
    assert (prefill.cached_columns, prefill.new_columns) == (0, 6)
    assert (prefill.recompute_rows, prefill.recompute_weights) == (6, 21)
    assert prefill.past_rows_max_diff is None
    third = attention_frame(steps[:4], 1, 7)
    assert (third.phase, third.step, third.positions, third.first_row) == ("decode", 3, 9, 8)
    assert (third.rows_computed, third.weights_computed, third.cells_shown) == (1, 9, 45)
    assert (third.cached_columns, third.new_columns, third.key_first) == (8, 1, 0)
    assert (third.recompute_rows, third.recompute_weights) == (9, 9 * 10 // 2)
    assert third.new_row_keys == list(range(9)) and third.new_row.dtype == np.float32


def test_the_caption_is_computed_from_the_numbers(chapter_run):
    _, steps = chapter_run
    assert attention_frame(steps[:4], 1, 7).caption == (
        "Layer 1, head 7, decode step 3: 1 row of 9 weights computed (the query at position 8 "
        "against 8 cached keys and its own); a recomputation would compute 9 rows, 45 weights. "
        "The 8 rows above are the earlier steps' own, unchanged; the recomputation gives them "
        "back with max |difference| 0 (identical bits).")
    assert attention_frame(steps[:1], 0, 0).caption == (
        "Layer 0, head 0, prefill: 6 rows, 21 weights computed (6 queries against 6 new keys); "
        "a recomputation computes the same 6 rows, 21 weights.")


def test_a_sliding_window_reads_the_ring_and_attends_the_window():
    w = 4
    model = toykv.ToyTransformer(toykv.source_toy(sliding_window=w, max_seq_len=16), exact=True)
    steps = attention_run(model, token_ids(12, vocab=512), prompt_len=3)
    frame = attention_frame(steps, 0, 1)
    n = 12
    assert frame.cells_shown == sum(min(i + 1, w) for i in range(n))
    assert frame.new_row_keys == list(range(n - w, n))
    assert frame.cached_columns == w and frame.key_first == n - 1 - w   # the whole ring read
    assert frame.caption.startswith("Layer 0, head 1, decode step 9: 1 row of 4 weights "
                                    "computed (the query at position 11 against 3 cached keys")
    assert frame.past_rows_max_diff == 0.0


def test_bad_input_names_the_argument(chapter_run):
    model, steps = chapter_run
    for kwargs, words in [(dict(layer=2), "layer"), (dict(layer=-1), "layer"),
                          (dict(head=8), "head"), (dict(head=1.0), "head")]:
        with pytest.raises(ValueError, match=words):
            attention_frame(steps, **{"layer": 0, "head": 0, **kwargs})
    with pytest.raises(ValueError, match="steps"):
        attention_frame([], 0, 0)
    with pytest.raises(ValueError, match="recomputation"):
        attention_frame([steps[0].without_recomputation()], 0, 0)
    for tokens, prompt_len, words in [("abc", 1, "tokens"), ([1, 2, 512], 1, "tokens"),
                                      ([1, 2], 3, "prompt_len"), ([1, 2], 0, "prompt_len"),
                                      (list(range(25)), 1, "tokens")]:
        before = model.flops
        with pytest.raises(ValueError, match=words):
            attention_run(model, tokens, prompt_len)
        assert model.flops == before                        # refused before any work
    assert MAX_VIEW_POSITIONS == 64


# -- the view's drawing --------------------------------------------------------------------------
def test_the_colour_scale_is_matplotlibs_cividis():
    colormaps = pytest.importorskip("matplotlib").colormaps
    from matplotlib.colors import to_hex

    stops = len(attention_view.CIVIDIS) - 1
    assert list(attention_view.CIVIDIS) == [to_hex(colormaps["cividis"](k / stops))
                                            for k in range(stops + 1)]


def _lightness(hex_colour, matrix=None):
    from test_widgets import CVD, _lab
    return _lab(hex_colour, matrix or CVD["normal vision"])[0]


def test_heavier_weights_are_lighter_in_greyscale_and_for_colour_blind_readers():
    from test_widgets import CVD

    weights = np.linspace(0, 1, 101)
    for vision, matrix in CVD.items():
        light = [_lightness(attention_view.weight_colour(w), matrix) for w in weights]
        assert all(b > a for a, b in zip(light, light[1:])), vision
    assert _lightness(attention_view.weight_colour(1)) - _lightness(
        attention_view.weight_colour(0)) > 60


def _contrast(a, b):
    def lum(h):
        c = [int(h[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        c = [x / 12.92 if x <= 0.04045 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_text_colours_keep_aa_contrast_on_white(chapter_run):
    html = attention_view.view_html(attention_frame(chapter_run[1], 0, 0), 24)
    colours = set(re.findall(r"fill='(#[0-9A-Fa-f]{6})'>[^<]", html)) | set(
        re.findall(r"color:(#[0-9A-Fa-f]{6})", html))
    assert colours and all(_contrast(c, "#FFFFFF") >= 4.5 for c in colours), colours


def test_the_heat_map_shows_every_weight_and_marks_rows_and_columns(chapter_run):
    frame = attention_frame(chapter_run[1][:4], 1, 3)
    svg = attention_view.heatmap_svg(frame, 24)
    left, top, cell = attention_view.LEFT, attention_view.TOP, attention_view.cell_size(24)
    cells = re.findall(r"<rect x='(\d+)' y='(\d+)' width='13' height='13' "
                       r"fill='(#[0-9a-f]{6})'/>", svg)
    assert len(cells) == 45
    for x, y, fill in cells:
        i, j = (int(y) - top) // cell, (int(x) - left) // cell
        assert fill == attention_view.weight_colour(float(frame.weights[i, j])), (i, j)
    assert re.findall(r"data-source='(\w+)'", svg) == ["cache"] * 8 + ["new"]
    assert "this step" in svg and "aria-label='Attention weights of layer 1, head 3: 9 query" \
        in svg
    figures = dict(re.findall(r"data-quantity='(\w+)' data-value='([^']+)'",
                              attention_view.figures_html(frame)))
    assert figures == {"rows_computed": "1", "weights_computed": "9", "cached_columns": "8",
                       "new_columns": "1", "cells_shown": "45", "recompute_rows": "9",
                       "recompute_weights": "45", "new_rows_max_diff": "0.0",
                       "past_rows_max_diff": "0.0"}
    row = re.findall(r"data-key='(\d+)' data-value='([^']+)'", attention_view.new_row_html(frame))
    assert [(int(j), float(v)) for j, v in row] == [(j, float(frame.weights[8, j]))
                                                    for j in range(9)]


# -- in the widget -------------------------------------------------------------------------------
def test_the_widget_steps_both_views_with_one_button():
    fill = CacheFill(prompt_len=6, steps=3)
    assert "decode step 3: 1 row of 9 weights" in fill.attention_caption.value
    assert "aria-live='polite'" in fill.attention_caption.value
    fill.step_button.click()
    assert fill.positions == 10 and "decode step 4: 1 row of 10 weights" in \
        fill.attention_caption.value
    fill.reset_button.click()
    assert "prefill: 6 rows, 21 weights" in fill.attention_caption.value
    assert fill.attention_view.value.count("height='13' fill='#") == 21


def test_layer_and_head_menus_choose_the_matrix():
    fill = CacheFill(prompt_len=4, steps=2)
    fill.layer_select.value, fill.head_select.value = 1, 6
    assert fill.attention_caption.value.count("Layer 1, head 6") == 1
    frame = fill.attention_frame(1, 6)
    assert f"data-value='{float(frame.new_row[0])!r}'" in fill.attention_view.value
    assert fill.message == ""


def test_the_widgets_weights_are_those_of_a_separate_run():
    fill = CacheFill(prompt_len=5, steps=4)
    steps = attention_run(fill.model, fill.tokens, 5)
    for layer in range(2):
        for head in range(8):
            a, b = fill.attention_frame(layer, head), attention_frame(steps, layer, head)
            assert same_bits(a.weights, b.weights)


def test_the_stepper_keeps_only_the_newest_recomputation():
    stepper = FillStepper(prompt_len=3, steps=5)
    assert [s.recomputed is None for s in stepper.attention] == [True] * 5 + [False]
    assert all(isinstance(s, StepAttention) for s in stepper.attention)


def test_attention_is_shown_up_to_64_positions_and_refused_beyond():
    assert not CacheFill(max_positions=65).show_attention
    assert CacheFill(max_positions=64, prompt_len=60).show_attention
    assert not hasattr(CacheFill(attention=False), "layer_select")
    for kwargs, words in [(dict(attention=True, max_positions=100), "at most 64"),
                          (dict(attention="yes"), "attention")]:
        with pytest.raises(ValueError, match=words):
            CacheFill(**kwargs)


def test_a_failing_attention_render_is_shown_and_the_next_change_works(monkeypatch):
    fill = CacheFill(prompt_len=5)
    monkeypatch.setattr(fill, "_render_attention", lambda: 1 / 0)
    fill.head_select.value = 2
    assert "ZeroDivisionError" in fill.message
    monkeypatch.undo()
    fill.head_select.value = 3
    assert fill.message == "" and "head 3" in fill.attention_caption.value


def test_a_long_run_stays_small():
    fill = FillStepper(prompt_len=2, max_positions=64, steps=61)
    held = sum(a.nbytes for s in fill.attention for a in s.rows) + sum(
        a.nbytes for a in fill.attention[-1].recomputed)
    assert held < 2 * 2 * 8 * 64 * 64 * 4 * 1.1      # rows once, one recomputation
    assert math.isfinite(fill.attention_frame(1, 7).new_rows_max_diff)
