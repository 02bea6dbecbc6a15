"""Tests of toykv.widgets: size_report (the pure function behind the size calculator) against
independent computations, and both widgets driven headlessly (set controls, click buttons,
read what is shown), bad input and failures included.

Expected numbers come from hand formulas (2 x L x H_kv x d_h x S x b x B), toykv's model and
flops functions, or published figures checked against the zoo's sources (Llama 3.1 8B:
131,072 B/token, 8.03B params; DeepSeek-V2 69,120 B/token; Llama 3.3 70B at 10^6 tokens
305.18 GiB; KV shares at 10^6 tokens), never from the code under test.
"""
import itertools
import json
import math

import numpy as np
import pytest

import toykv
from toykv import flops, zoo
from toykv import sizing
from toykv.widgets import (CacheFill, FillStepper, ShareExplorer, SizeCalculator, SizeReport,
                           size_report, update_latency)
from toykv.widgets import share_explorer
from toykv.widgets import _style, cache_fill_view, size_calculator
from toykv.widgets.size_calculator import PASTE
from toykv.widgets.size_report import model_from_config_json, variant_model

GiB, KiB = 2 ** 30, 2 ** 10
LLAMA_8B_CONFIG_JSON = {     # Llama 3.1 8B's shapes (its model card) as a Hugging Face config.json
    "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
    "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": False,
}
LLAMA_8B = zoo.get("llama-3.1-8b")
LLAMA_8B_PER_TOKEN = 2 * 32 * 8 * 128 * 2        # 2 (K, V) x L x H_kv x d_h x b (bf16)
LLAMA_8B_WEIGHTS = 8_030_000_000 * 2             # the model card: 8.03B params, bf16


def read_by_hand(active, vocab, d_model, tied, batch=1):
    """bf16 weight bytes a decode step reads: an untied input table only as looked-up rows."""
    return 2 * (active if tied else active - (vocab - batch) * d_model)


LLAMA_8B_READ = read_by_hand(8_030_000_000, 128_256, 4_096, False)          # batch 1
LLAMA_8B_READ_16 = read_by_hand(8_030_000_000, 128_256, 4_096, False, 16)   # batch 16


# -- CacheFill -------------------------------------------------------------------

@pytest.fixture(scope="module")
def fill3():
    return CacheFill(prompt_len=6, steps=3)


def test_three_steps_fill_three_positions_with_the_formula_flops(fill3):
    config = fill3.model.config
    assert fill3.positions == 6 + 3 == len(fill3.cache)
    assert fill3.flops_cached == flops.cached_step_flops(config, 9)
    assert fill3.flops_uncached == flops.full_pass_flops(config, 9)
    assert fill3.flops_match_formulas
    assert fill3.max_abs_diff == 0.0             # the exact backend: identical bits


def test_cells_show_prefill_decode_this_and_empty(fill3):
    assert fill3.row_labels == ["L0 K", "L0 V", "L1 K", "L1 V"]
    expected = ["prefill"] * 6 + ["decode"] * 2 + ["this"] + ["empty"] * (24 - 9)
    assert fill3.cells == [expected] * 4


def test_the_displayed_text_carries_the_numbers(fill3):
    stats = fill3.stats.value
    assert f"{fill3.flops_cached:,}" in stats and f"{fill3.flops_uncached:,}" in stats
    assert "0 (identical bits)" in stats
    assert "<b>9</b> of 24" in stats
    grid = fill3.grid.value
    assert grid.count("<td") == 4 * 24
    assert all(text in grid for text in ("written by prefill", "written this step", "empty"))
    assert "dropped by a sliding window" not in grid   # no sliding layers in the toy


def test_tokens_are_those_of_greedy_generation(fill3):
    prompt = fill3.tokens[:6]
    assert fill3.tokens[6:] == toykv.generate(fill3.model, prompt, 3)


def test_buttons_step_and_reset():
    fill = CacheFill(prompt_len=4)
    assert fill.positions == 4 and fill.phase == "prefill"
    assert fill.flops_cached == fill.flops_uncached == flops.full_pass_flops(fill.model.config, 4)
    assert "this" not in fill.cells[0]
    fill.step_button.click()
    fill.step_button.click()
    assert fill.positions == 6 and fill.cells[0][5] == "this" and fill.cells[0][4] == "decode"
    assert fill.flops_cached == flops.cached_step_flops(fill.model.config, 6)
    fill.reset_button.click()
    assert fill.positions == 4 and fill.cells[0][:5] == ["prefill"] * 4 + ["empty"]


def test_prompt_slider_resets_and_prefills():
    fill = CacheFill(steps=2)
    fill.prompt_slider.value = 10
    assert fill.positions == 10 and fill.prompt_len == 10 and fill.phase == "prefill"
    assert fill.cells[0] == ["prefill"] * 10 + ["empty"] * 14
    fill.reset(prompt_len=3)
    assert fill.prompt_slider.value == 3 and fill.positions == 3


def test_step_turns_off_at_the_last_position():
    fill = CacheFill(prompt_len=5, max_positions=8)
    for _ in range(3):
        assert not fill.step_button.disabled
        fill.step_button.click()
    assert fill.positions == 8 and fill.at_limit
    assert fill.step_button.disabled
    assert "fills all 8 positions" in fill.note.value
    with pytest.raises(ValueError, match="reset"):
        fill.step()
    fill.reset()
    assert not fill.step_button.disabled and fill.note.value == ""


def test_mla_rows_and_absorbed_flops():
    config = toykv.source_toy(attention="mla", kv_lora_rank=32, rope_head_dim=8, max_seq_len=16)
    model = toykv.ToyTransformer(config, exact=True, absorb=True)
    fill = CacheFill(model, prompt_len=4, steps=2)
    assert fill.row_labels == ["L0 c_kv", "L0 k_rope", "L1 c_kv", "L1 k_rope"]
    assert fill.flops_cached == flops.cached_step_flops(config, 6, absorb=True)
    assert fill.flops_uncached == flops.full_pass_flops(config, 6, absorb=True)
    assert fill.max_abs_diff == 0.0
    assert "latent c_kv" in fill.grid.value


def test_sliding_window_cells_are_evicted_as_the_cache_drops_them():
    config = toykv.source_toy(sliding_window=4, max_seq_len=12)
    fill = CacheFill(toykv.ToyTransformer(config, exact=True), prompt_len=3, steps=4)
    held = fill.cache.held(0)
    assert held == 4
    assert fill.cells[0] == ["evicted"] * 3 + ["decode"] * 3 + ["this"] + ["empty"] * 5
    assert "dropped by a sliding window" in fill.grid.value


def test_blas_backend_differs_by_rounding_only():
    model = toykv.ToyTransformer(toykv.source_toy(max_seq_len=24), exact=False)
    fill = CacheFill(model, steps=3)
    assert math.isfinite(fill.max_abs_diff) and fill.max_abs_diff < 1e-3


@pytest.mark.parametrize("kwargs, field", [
    (dict(prompt_len=24), "prompt_len"), (dict(prompt_len=0), "prompt_len"),
    (dict(prompt_len=20, steps=5), "steps"), (dict(max_positions=1), "max_positions"),
    (dict(model="toy"), "model"), (dict(steps=-1), "steps"), (dict(prompt_len=2.5), "prompt_len"),
    (dict(seed=-1), "seed"), (dict(kv_dtype="bf16"), "kv_dtype"),
    (dict(max_positions=24.0), "max_positions")])
def test_cache_fill_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        CacheFill(**kwargs)


@pytest.mark.parametrize("kwargs, words", [
    (dict(max_positions=10 ** 9), r"max_positions must be an integer in \[2, 256\]"),
    (dict(max_positions=257), "256"), (dict(steps=10 ** 12), "steps"),
    (dict(seed=2 ** 64), "seed")])
def test_counts_have_an_upper_bound_checked_before_anything_is_built(kwargs, words, monkeypatch):
    import toykv.widgets.fill_stepper as stepper

    def never(*args, **kwargs):
        raise AssertionError("a model was built before the arguments were checked")
    monkeypatch.setattr(stepper, "ToyTransformer", never)
    with pytest.raises(ValueError, match=words):
        CacheFill(**kwargs)


def test_kv_dtype_may_be_a_numpy_dtype():
    fill = CacheFill(kv_dtype=np.dtype("float16"), steps=1)
    assert fill.kv_dtype == "float16" and fill.cache.kv_dtype == "float16"


def test_the_stepper_is_the_widget_without_controls():
    stepper = FillStepper(prompt_len=6, steps=3)
    assert not hasattr(stepper, "widget")
    assert stepper.cells == CacheFill(prompt_len=6, steps=3).cells
    assert stepper.flops_cached == flops.cached_step_flops(stepper.model.config, 9)
    assert repr(stepper).startswith("9 of 24 positions cached (decode)")


def test_slider_values_that_are_not_a_prompt_length_give_a_message():
    fill = CacheFill(prompt_len=6, steps=2)
    for bad, words in [(2.5, "integer"), (30, "< 24"), (0, ">= 1"), (24, "< 24")]:
        fill.prompt_slider.value = bad
        assert words in fill.message and "prompt_len" in fill.message
        assert "Problem" in fill.message_box.value
        assert fill.prompt_slider.value == 6 and fill.positions == 8     # nothing changed
    fill.prompt_slider.value = 4                                         # a later change works
    assert fill.message == "" and fill.message_box.value == "" and fill.positions == 4


def test_slider_values_from_the_browser_are_checked_too():
    fill = CacheFill(prompt_len=6)
    fill.prompt_slider.set_state({"value": None})
    assert "prompt_len" in fill.message and fill.prompt_slider.value == 6
    fill.prompt_slider.set_state({"value": 9})
    assert fill.message == "" and fill.positions == 9


def test_a_step_click_at_the_limit_gives_a_message():
    fill = CacheFill(prompt_len=3, max_positions=4, steps=1)
    assert fill.step_button.disabled
    fill.step_button.click()                       # a click that a browser could not make
    assert "reset" in fill.message and fill.positions == 4
    fill.reset_button.click()
    assert fill.message == "" and fill.positions == 3 and not fill.step_button.disabled


def test_a_failure_half_way_through_a_step_leaves_the_widget_working(monkeypatch):
    fill = CacheFill(prompt_len=5)

    def fail(*args, **kwargs):
        raise RuntimeError("simulated failure")

    monkeypatch.setattr(fill.model, "forward", fail)
    fill.step_button.click()                       # no exception escapes the click
    assert "RuntimeError" in fill.message and "simulated failure" in fill.message
    assert "Reset" in fill.message and fill.step_button.disabled
    fill.reset_button.click()                      # Reset fails too while forward fails
    assert "RuntimeError" in fill.message and fill.step_button.disabled
    monkeypatch.undo()
    fill.reset_button.click()
    assert fill.message == "" and not fill.step_button.disabled and fill.positions == 5
    fill.step_button.click()
    assert fill.positions == 6 and fill.max_abs_diff == 0.0
    assert fill.flops_cached == flops.cached_step_flops(fill.model.config, 6)


def test_a_failing_render_is_shown_and_the_next_click_works(monkeypatch):
    fill = CacheFill(prompt_len=5)
    monkeypatch.setattr(fill, "_render", lambda: 1 / 0)
    fill.step_button.click()
    assert "ZeroDivisionError" in fill.message
    monkeypatch.undo()
    fill.step_button.click()
    assert fill.message == "" and fill.positions == 7 and "<b>7</b> of 24" in fill.stats.value


# Machado, Oliveira and Fernandes (2009), severity 1, on linear sRGB: protanopia,
# deuteranopia and tritanopia.
CVD = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216),
                   (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413),
                     (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602),
                   (0.004733, 0.691367, 0.303900)),
    "normal vision": ((1, 0, 0), (0, 1, 0), (0, 0, 1)),
}


def _lab(hex_colour, matrix):
    """CIELAB (D65) of an sRGB colour as seen through a colour-vision matrix."""
    def linear(c):
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    rgb = [linear(int(hex_colour[i:i + 2], 16) / 255) for i in (1, 3, 5)]
    r, g, b = [min(1, max(0, sum(m * c for m, c in zip(row, rgb)))) for row in matrix]
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883
    f = [t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in (x, y, z)]
    return 116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])


def test_cell_colours_stay_apart_for_colour_blind_readers_and_in_greyscale():
    css = cache_fill_view.CELL_CSS
    base = {"prefill": css["prefill"][0], "decode": css["decode"][0], "this": _style.ORANGE,
            "empty": css["empty"][0]}
    assert all(colour.startswith("#") for colour in base.values())
    for vision, matrix in CVD.items():
        for a in base:
            for b in base:
                if a < b:
                    distance = math.dist(_lab(base[a], matrix), _lab(base[b], matrix))
                    assert distance >= 20, (vision, a, b, distance)
    grey = {state: _lab(colour, CVD["normal vision"])[0] for state, colour in base.items()}
    solid = ("prefill", "decode", "empty")
    assert min(abs(grey[a] - grey[b]) for a in solid for b in solid if a < b) >= 10
    for patterned in ("this", "evicted"):          # told apart by texture as well
        assert css[patterned][0].startswith("repeating-linear-gradient")
    assert css["this"][0] != css["evicted"][0]


def test_cache_fill_displays_itself(fill3):
    bundle = fill3._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == fill3.widget.model_id
    assert "9 of 24 positions" in bundle["text/plain"]




# -- size_report: every number the calculator shows, against independent computations -------

@pytest.fixture(scope="module")
def llama():
    return size_report(LLAMA_8B, "as built", 2, 8192, 16, 80)


def test_llama_8b_worked_example_by_hand(llama):
    assert isinstance(llama, SizeReport)
    assert llama.values_per_token == 2 * 32 * 8 * 128 == 65_536
    assert llama.bytes_per_token == LLAMA_8B_PER_TOKEN == 131_072
    assert llama.sequence_bytes == 8192 * LLAMA_8B_PER_TOKEN
    assert llama.batch_bytes == 16 * 8192 * LLAMA_8B_PER_TOKEN == 16 * GiB
    assert llama.bytes_per_token_at_context == LLAMA_8B_PER_TOKEN      # no window: the same
    assert not llama.windowed and llama.full_layers == 32
    assert llama.weight_bytes == llama.active_weight_bytes == LLAMA_8B_WEIGHTS


def test_gpu_memory_is_in_gib(llama):
    assert llama.gpu_bytes == 80 * GiB
    assert llama.gpus_of_kv == 0.2                       # 16 GiB of KV on an 80 GiB GPU
    assert llama.weights_fit
    assert llama.sequences_fit == 65                     # (80 GiB - 16.06 GB) / 1 GiB = 65.04
    assert LLAMA_8B_WEIGHTS + 65 * GiB <= 80 * GiB < LLAMA_8B_WEIGHTS + 66 * GiB
    small = size_report(LLAMA_8B, gpu_memory_gib=24)
    assert small.sequences_fit == (24 * GiB - LLAMA_8B_WEIGHTS) // GiB == 9   # 24 - 14.96
    assert small.gpus_of_kv == pytest.approx(16 / 24)


def test_kv_share_and_relative_speed_by_hand(llama):
    kv, weights = 16 * GiB, LLAMA_8B_READ_16
    assert llama.kv_share == pytest.approx(kv / (kv + weights), rel=1e-15)
    assert llama.relative_decode_speed == pytest.approx(weights / (kv + weights), rel=1e-15)


@pytest.mark.parametrize("name, kv_per_token, active, vocab, d_model, tied", [
    # bf16, batch 1, 10^6 tokens; shapes and active params from each model's card/config
    ("llama-3.1-8b", 2 * 32 * 8 * 128 * 2, 8_030_000_000, 128_256, 4_096, False),
    ("llama-3.3-70b", 2 * 80 * 8 * 128 * 2, 70_550_000_000, 128_256, 8_192, False),
    ("qwen3-0.6b", 2 * 28 * 8 * 128 * 2, 600_000_000, 151_936, 1_024, True),
    ("deepseek-v3", 61 * (512 + 64) * 2, 37_000_000_000, 129_280, 7_168, False)])
def test_kv_share_at_a_million_tokens_by_hand(name, kv_per_token, active, vocab, d_model, tied):
    report = size_report(zoo.get(name), context=10 ** 6, batch=1)
    kv, weights = 10 ** 6 * kv_per_token, read_by_hand(active, vocab, d_model, tied)
    assert report.weight_bytes_read == weights
    assert report.kv_share == pytest.approx(kv / (kv + weights), rel=1e-12)
    assert report.relative_decode_speed == pytest.approx(weights / (kv + weights), rel=1e-12)


def test_moe_share_uses_active_weights_only():
    model = zoo.get("deepseek-v3")
    report = size_report(model, context=10 ** 6, batch=1)
    assert report.active_params < report.total_params
    kv = 10 ** 6 * 61 * (512 + 64) * 2                   # MLA: latent + rotary key per layer
    assert report.batch_bytes == kv
    weights = read_by_hand(model.active_params, 129_280, 7_168, False)   # 37B active
    assert report.kv_share == pytest.approx(kv / (kv + weights), rel=1e-12)


def test_llama_70b_at_a_million_tokens_matches_the_published_figure():
    report = size_report(zoo.get("llama-3.3-70b"), context=10 ** 6, batch=1)
    assert report.bytes_per_token == 327_680
    assert report.batch_bytes == 327_680 * 10 ** 6
    assert round(report.batch_bytes / GiB, 2) == 305.18


def test_deepseek_v2_mla_matches_its_table_1():
    report = size_report(zoo.get("deepseek-v2"))
    assert report.bytes_per_token == 69_120 and report.values_per_token == 34_560
    assert report.attention == "mla" and report.n_kv_heads is None


def test_windowed_model_reports_the_rate_inside_the_window_and_the_average():
    report = size_report(zoo.get("gemma-3-27b"), context=131_072, batch=1)
    per_layer = 2 * 16 * 128 * 2                         # K and V, 16 KV heads, d_h 128, bf16
    assert (report.full_layers, report.sliding_layers) == (10, 52)   # 5 local, 1 global
    assert report.windowed and report.sliding_window == 1024
    assert report.bytes_per_token == 62 * per_layer == 507_904       # inside the window
    assert report.sequence_bytes == per_layer * (10 * 131_072 + 52 * 1024)
    assert report.bytes_per_token_at_context == 85_248              # ~85 KB/token (issue 7)


def test_sliding_and_linear_layers_in_the_whole_batch():
    mistral = size_report(zoo.get("mistral-7b-v0.1"), context=8192, batch=16)
    assert mistral.batch_bytes == 16 * 32 * 4096 * 2 * 8 * 128 * 2  # every layer stops at 4,096
    model = zoo.get("qwen3-next-80b-a3b")
    state = model.config.linear_state_values             # values per linear layer and sequence
    report = size_report(model, context=8192, batch=4)
    assert (report.full_layers, report.linear_layers) == (12, 36)
    assert report.bytes_per_token == 12 * 2 * 2 * 256 * 2 == 24_576
    assert report.batch_bytes == 4 * (12 * 8192 * 2 * 2 * 256 + 36 * state) * 2
    assert report.windowed


@pytest.mark.parametrize("variant, n_kv_heads, per_token", [    # source 004's variant table
    ("as built", 8, 128 * KiB), ("mha", 32, 512 * KiB), ("gqa", 8, 128 * KiB),
    ("mqa", 1, 16 * KiB), ("mla", None, 32 * (512 + 64) * 2)])
def test_attention_variants_of_llama_8b(variant, n_kv_heads, per_token):
    report = size_report(LLAMA_8B, variant)
    assert report.bytes_per_token == per_token and report.n_kv_heads == n_kv_heads
    assert report.weight_bytes == LLAMA_8B_WEIGHTS       # the model's own parameters
    rows = {row.key: row for row in report.variants}
    assert rows[variant].bytes_per_token == per_token
    assert rows[variant].share_of_mha == pytest.approx(per_token / (512 * KiB))
    if variant in ("as built", "gqa"):                   # GQA with 8 KV heads is the model
        assert report.curve_bytes_as_built is None
    else:
        assert report.curve_bytes_as_built == tuple(
            16 * n * LLAMA_8B_PER_TOKEN for n in report.curve_contexts)


def test_gqa_kv_heads_default_and_choice():
    assert size_report(LLAMA_8B, "gqa", kv_heads=4).bytes_per_token == 2 * 32 * 4 * 128 * 2
    mha_model = zoo.get("llama-2-7b")                    # MHA, 32 heads: default near 32 / 4
    assert size_report(mha_model, "gqa").n_kv_heads == 8
    with pytest.raises(ValueError, match="5 KV heads"):
        size_report(LLAMA_8B, "gqa", kv_heads=5)         # 32 is not a multiple of 5
    with pytest.raises(ValueError, match="kv_heads"):
        size_report(LLAMA_8B, "gqa", kv_heads=2.5)
    rows = {row.key: row for row in size_report(LLAMA_8B, kv_heads=5).variants}
    assert rows["gqa"].batch_bytes is None and rows["mha"].batch_bytes is not None


def test_curve_is_memory_against_context():
    report = size_report(LLAMA_8B, "mqa", 1, 8192, 2)
    assert report.curve_contexts[0] == 1024 and report.curve_contexts[-1] == 2 ** 22
    assert list(report.curve_contexts) == sorted(set(report.curve_contexts))
    assert report.curve_bytes == tuple(2 * n * 2 * 32 * 1 * 128 for n in report.curve_contexts)


@pytest.mark.parametrize("precision", [4, 2, 1, 0.5])
def test_precisions(precision):
    report = size_report(LLAMA_8B, bytes_per_value=precision)
    assert report.bytes_per_token == 65_536 * precision
    assert report.batch_bytes == 16 * 8192 * 65_536 * precision


def test_numpy_integers_are_counts():
    a = size_report(LLAMA_8B, context=np.int64(8192), batch=np.int32(16))
    assert a.batch_bytes == 16 * GiB and type(a.batch) is int


@pytest.mark.parametrize("kwargs, argument", [
    (dict(batch=0), "batch"), (dict(batch=2.5), "batch"), (dict(batch=16.0), "batch"),
    (dict(batch=True), "batch"), (dict(batch=10 ** 310), "batch"),
    (dict(context=0), "context"), (dict(context=1.5e4), "context"),
    (dict(gpu_memory_gib=1e-12), "gpu_memory_gib"),
    (dict(gpu_memory_gib=math.inf), "gpu_memory_gib"),
    (dict(gpu_memory_gib=math.nan), "gpu_memory_gib"), (dict(gpu_memory_gib=0), "gpu_memory_gib"),
    (dict(gpu_memory_gib=1e300), "gpu_memory_gib"), (dict(gpu_memory_gib="80"), "gpu_memory_gib"),
    (dict(variant="gqa2"), "variant"), (dict(bytes_per_value=0), "bytes_per_value"),
    (dict(bytes_per_value=math.inf), "bytes_per_value"),
    (dict(variant="gqa", kv_heads=33), "kv_heads"), (dict(variant="gqa", kv_heads=0), "kv_heads")])
def test_size_report_refuses_bad_input_naming_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        size_report(LLAMA_8B, **kwargs)


def test_size_report_needs_a_zoo_model():
    with pytest.raises(ValueError, match="ZooModel"):
        size_report(LLAMA_8B.config)


def test_variant_model_keeps_layers_heads_and_head_dim():
    mqa = variant_model(LLAMA_8B, "mqa").config
    base = LLAMA_8B.config
    assert (mqa.n_layers, mqa.n_heads, mqa.head_dim, mqa.n_kv_heads) == (32, 32, 128, 1)
    assert base.n_kv_heads == 8                          # the zoo entry is not changed


@pytest.mark.parametrize("text, expected", [
    ("", "Paste"), ('{"model_type": "llama", ', "not valid JSON"), ("[1, 2]", "JSON object"),
    ("[" * 100_000 + "]" * 100_000, "too deeply"),
    ('{"a": ' * 50_000 + "1" + "}" * 50_000, "too deeply"),
    ('{"model_type": "bert"}', "model_type 'bert'"),
    (json.dumps({k: v for k, v in LLAMA_8B_CONFIG_JSON.items() if k != "hidden_size"}),
     "hidden_size"),
    (json.dumps({"text_config": 3}), "Could not read"),
    (json.dumps(dict(LLAMA_8B_CONFIG_JSON, num_hidden_layers=10 ** 8)), "num_hidden_layers"),
    (json.dumps({"model_type": "gemma3", "text_config": dict(
        LLAMA_8B_CONFIG_JSON, model_type="gemma3_text", num_hidden_layers=10 ** 30)}),
     r"num_hidden_layers.*\[1, 100000\]")])
def test_config_json_that_cannot_be_read_is_a_value_error(text, expected):
    with pytest.raises(ValueError, match=expected):
        model_from_config_json(text)


def test_config_json_of_llama_8b():
    report = size_report(model_from_config_json(json.dumps(LLAMA_8B_CONFIG_JSON)))
    assert report.bytes_per_token == LLAMA_8B_PER_TOKEN and report.batch_bytes == 16 * GiB
    assert report.model == "pasted config.json" and not report.verified


def test_weights_that_do_not_fit_leave_no_room():
    report = size_report(zoo.get("llama-3.1-405b"))
    assert not report.weights_fit and report.sequences_fit == 0


# -- the SizeCalculator widget: wiring, units, terms, and staying usable ---------------------

@pytest.fixture
def fresh():
    return SizeCalculator()


def test_chapter_4_call_shows_the_report():
    calc = SizeCalculator(model="llama-3.1-8b", bytes_per_value=2, context=8192, batch=16,
                          gpu_memory_gib=80)             # as chapter 4 calls it
    assert calc.report == size_report(LLAMA_8B, "as built", 2, 8192, 16, 80)
    v = calc.values                                      # a dict of the report, by hand:
    assert v["values_per_token"] == 2 * 32 * 8 * 128 and v["bytes_per_token"] == LLAMA_8B_PER_TOKEN
    assert v["batch_bytes"] == 16 * 8192 * LLAMA_8B_PER_TOKEN and v["gpu_bytes"] == 80 * GiB
    assert v["weight_bytes"] == LLAMA_8B_WEIGHTS and v["sequences_fit"] == 65
    assert v["kv_share"] == 16 * GiB / (16 * GiB + LLAMA_8B_READ_16)
    assert v["variants"][1]["bytes_per_token"] == 4 * LLAMA_8B_PER_TOKEN      # MHA: 32 KV heads
    assert calc.values["batch_bytes"] == 16 * GiB and calc.message == ""
    assert calc.texts["batch_bytes"] == "16.00 GiB (17.18 GB)"
    assert calc.texts["bytes_per_token"] == "131,072 B (128.0 KiB)"
    assert calc.texts["gpus_of_kv"] == "0.20" and calc.texts["sequences_fit"] == "65"
    assert calc.texts["kv_share"] == "53.4%" and calc.texts["relative_decode_speed"] == "0.466"
    assert SizeCalculator(gpu_memory_gib=80).report == calc.report
    for text in ("16.00 GiB (17.18 GB)", "17,179,869,184 B", "131,072 B", "80 GiB"):
        assert text in calc.numbers.value


def test_the_widget_says_which_unit_gpu_memory_is_in_and_why(fresh):
    assert fresh.gpu_memory_gib.description == "GPU memory (GiB)"
    shown = fresh.numbers.value.replace("&quot;", '"')
    assert "as the card reports it" in shown and "an H100 80GB 79.6 GiB" in shown
    assert "Bandwidths (GB/s, TB/s) are decimal" in shown


def test_every_term_shown_is_explained(fresh):
    for term in ("KV share", "relative decode speed", "active parameters", "MLA",
                 "sliding layers", "linear layers", "MHA, GQA, MQA"):
        assert f"<b>{term}</b>:" in fresh.terms.value
    assert "title='" in fresh.numbers.value                # a tooltip on every row


def test_windowed_models_say_inside_the_window(fresh):
    assert "inside the window" not in fresh.numbers.value
    fresh.model.value = "gemma-3-27b"
    assert "bytes / token, inside the window" in fresh.numbers.value
    assert "bytes / token at 8,192 tokens" in fresh.numbers.value
    assert "stop growing" in fresh.message and "inside the window" in fresh.variants_table.value


def test_controls_update_the_report(fresh):
    fresh.batch.value = 1
    fresh.context.value = 10 ** 6
    fresh.precision.value = 1
    fresh.gpu_memory_gib.value = 24
    fresh.variant.value = "gqa"
    fresh.kv_heads.value = 4
    assert fresh.report == size_report(LLAMA_8B, "gqa", 1, 10 ** 6, 1, 24, kv_heads=4)
    fresh.model.value = "deepseek-v2"
    assert fresh.report.model == "deepseek-v2" and fresh.kv_heads.value == 32   # its default


def test_the_plot_is_memory_against_context_in_gib(fresh):
    svg = fresh.plot.value
    assert svg.startswith("<svg") and svg.count("<polyline") == 1
    for text in ("context per sequence (tokens)", "memory (GiB = 2^30 bytes)",
                 "KV cache of 16 sequences: llama-3.1-8b", "one GPU (80 GiB)",
                 "8,192 tokens: 16.00 GiB", "model&#x27;s maximum context (131,072)"):
        assert text in svg
    dashes = [d for d in svg.split("stroke-dasharray='")[1:]]
    fresh.variant.value = "mqa"                          # a second curve: the model as built
    assert fresh.plot.value.count("<polyline") == 2 and fresh.plot.value != svg
    series = [s for s in fresh.plot.value.split("<polyline")[1:]]
    assert len({s.split("stroke='")[1][:7] for s in series}) == 2
    patterns = {d.split("'")[0] for d in fresh.plot.value.split("stroke-dasharray='")[1:]}
    assert len(patterns) == 4 and dashes                 # as built, weights, GPU, max context


def test_variant_table(fresh):
    table = fresh.variants_table.value
    assert "25.0%" in table and "3.1%" in table and "7.0%" in table and "latent 512+64" in table


def test_unverified_entries_are_marked(fresh):
    labels = dict((value, label) for label, value in fresh.model.options)
    assert labels["qwen2.5-7b"].endswith("(unverified)")
    assert "(unverified)" not in labels["llama-3.1-8b"]
    fresh.model.value = "qwen2.5-7b"
    assert "UNVERIFIED" in fresh.source.value
    for source in zoo.get("qwen2.5-7b").sources:
        assert _style.esc(source) in fresh.source.value


def test_pasted_config_json(fresh):
    assert fresh.config_json.layout.display == "none"
    fresh.model.value = PASTE
    assert fresh.config_json.layout.display == "" and "Paste" in fresh.message
    fresh.config_json.value = json.dumps(LLAMA_8B_CONFIG_JSON)
    assert fresh.message == "" and fresh.values["batch_bytes"] == 16 * GiB
    assert "UNVERIFIED" in fresh.source.value and "pasted" in fresh.source.value


def test_a_config_json_given_to_the_constructor():
    named = dict(LLAMA_8B_CONFIG_JSON, _name_or_path="meta-llama/Llama-3.1-8B")
    calc = SizeCalculator(model=PASTE, config_json=json.dumps(named), variant="mqa")
    assert calc.values["model"] == "Llama-3.1-8B"
    assert calc.values["bytes_per_token"] == 16 * KiB
    assert "Llama-3.1-8B" in calc.source.value


def _still_works(calc):
    """After a problem, a normal change updates everything again."""
    calc.model.value = "llama-3.1-70b"
    calc.model.value = "llama-3.1-8b"
    calc.batch.value, calc.gpu_memory_gib.value, calc.variant.value = 8, 80, "as built"
    assert calc.error == "" and calc.message == "" and not calc._quiet
    assert calc.values["batch_bytes"] == 8 * GiB and calc.plot.layout.display == ""
    assert "Problem" not in calc.message_box.value and "8.00 GiB" in calc.numbers.value


@pytest.mark.parametrize("control, value, words", [
    ("batch", 10 ** 310, "batch must be an integer in [1, 1000000000], got 100...(311 digits)"),
    ("batch", 2.5, "batch must be an integer"), ("batch", 0, "batch"),
    ("batch", -3, "batch"), ("gpu_memory_gib", 1e-12, "gpu_memory_gib must be a number >= 0.01"),
    ("gpu_memory_gib", math.inf, "gpu_memory_gib must be a finite number"),
    ("gpu_memory_gib", math.nan, "gpu_memory_gib"), ("gpu_memory_gib", 0, "gpu_memory_gib"),
    ("kv_heads", 2.5, "kv_heads must be an integer"), ("kv_heads", 5, "must divide n_heads"),
    ("kv_heads", 10 ** 310, "kv_heads")])
def test_numeric_extremes_give_a_message_and_the_widget_still_works(fresh, control, value, words):
    if control == "kv_heads":
        fresh.variant.value = "gqa"
    getattr(fresh, control).value = value                # no exception escapes
    assert getattr(fresh, control).value is value        # not cast, not clamped
    assert words in fresh.message and fresh.values == {} and fresh.report is None
    assert "Problem" in fresh.message_box.value and fresh.plot.layout.display == "none"
    _still_works(fresh)


def test_values_from_the_browser_are_checked_too(fresh):
    for value, words in [(2.5, "batch must be an integer"), (None, "got None")]:
        fresh.batch.set_state({"value": value})          # what a front-end edit does
        assert words in fresh.message and fresh.values == {}
    fresh.batch.set_state({"value": 8})
    fresh.gpu_memory_gib.set_state({"value": None})      # 1e400 typed: Infinity -> null
    assert "gpu_memory_gib" in fresh.message
    fresh.gpu_memory_gib.set_state({"value": 80})
    assert fresh.message == "" and fresh.values["batch_bytes"] == 8 * GiB


def test_deeply_nested_json_gives_a_message_and_the_widget_still_works(fresh):
    fresh.model.value = PASTE
    fresh.config_json.value = "[" * 100_000 + "]" * 100_000
    assert "too deeply" in fresh.message and not fresh._quiet
    fresh.config_json.value = json.dumps(LLAMA_8B_CONFIG_JSON)
    assert fresh.values["bytes_per_token"] == LLAMA_8B_PER_TOKEN
    _still_works(fresh)


def test_an_unexpected_exception_in_an_update_is_shown(fresh, monkeypatch):
    def fail(*args, **kwargs):
        raise RecursionError("simulated")
    monkeypatch.setattr(size_calculator, "size_report", fail)
    fresh.batch.value = 4
    assert "unexpected RecursionError: simulated" in fresh.message and fresh.values == {}
    monkeypatch.setattr(size_calculator, "size_report", size_report)
    monkeypatch.setattr(size_calculator.view, "plot_svg", fail)
    fresh.batch.value = 5                                # a failure while formatting
    assert "RecursionError" in fresh.message and fresh.report is None
    monkeypatch.undo()
    _still_works(fresh)


def test_an_exception_while_the_widget_is_quiet_does_not_leave_it_deaf(fresh, monkeypatch):
    def fail(config):
        raise OverflowError("simulated")
    monkeypatch.setattr(size_calculator, "default_kv_heads", fail)
    fresh.model.value = "llama-3.1-70b"                  # sets the KV-heads default quietly
    assert "OverflowError" in fresh.message and not fresh._quiet
    monkeypatch.undo()
    _still_works(fresh)


@pytest.mark.parametrize("kwargs, error", [
    (dict(model="llama-9"), KeyError), (dict(variant="gqa2"), ValueError),
    (dict(context=5000), ValueError), (dict(bytes_per_value=3), ValueError),
    (dict(gpu_memory_gib=0), ValueError), (dict(gpu_memory_gib=math.inf), ValueError),
    (dict(gpu_gb=80), TypeError), (dict(batch=2.5), ValueError),
    (dict(batch=0), ValueError), (dict(batch=10 ** 9 + 1), ValueError),
    (dict(kv_heads=1.5), ValueError), (dict(kv_heads=10 ** 9), ValueError)])
def test_size_calculator_bad_arguments(kwargs, error):
    with pytest.raises(error):
        SizeCalculator(**kwargs)


def test_size_calculator_displays_itself(fresh):
    bundle = fresh._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == fresh.widget.model_id
    assert "16.00 GiB" in bundle["text/plain"]


# -- formats and latency ----------------------------------------------------------------

def test_byte_formats_say_which_unit():
    assert _style.decimal_bytes(17_179_869_184) == "17.18 GB"
    assert _style.binary_bytes(17_179_869_184) == "16.00 GiB"
    assert _style.both_bytes(17_179_869_184) == "16.00 GiB (17.18 GB)"
    assert _style.binary_bytes(131072, 1) == "128.0 KiB"
    assert _style.decimal_bytes(512) == "512 B"
    assert _style.decimal_bytes(327_680 * 10**6) == "327.68 GB"          # Llama 3.3 70B at 1M
    assert _style.binary_bytes(327_680 * 10**6) == "305.18 GiB"


def test_update_latency_reports_medians():
    result = update_latency(repeats=3)
    assert set(result) == {"cache_fill_step", "cache_fill_reset", "attention_layer_head",
                           "size_calculator_change"}
    assert all(np.isfinite(t) and t > 0 for t in result.values())
    print("measured widget update latency (median, shared machine): " +
          ", ".join(f"{name} {1000 * t:.1f} ms" for name, t in result.items()))
    for bad in (0, 10 ** 12, 2.5):
        with pytest.raises(ValueError, match="repeats"):
            update_latency(bad)


# -- the ShareExplorer widget (chapter 8) -----------------------------------------------------

def test_share_explorer_reads_the_share_at_the_context():
    explorer = ShareExplorer(models=["llama-3.1-8b", "deepseek-v3"], context=10 ** 6)
    rows = {r["model"]: r for r in explorer.readings}
    kv = 10 ** 6 * 2 * 32 * 8 * 128 * 2                    # Llama 3.1 8B's bf16 cache at 10^6
    assert rows["llama-3.1-8b"]["kv_share"] == kv / (kv + LLAMA_8B_READ)
    v3_kv, v3_read = 10 ** 6 * 61 * (512 + 64) * 2, read_by_hand(37_000_000_000, 129_280, 7_168,
                                                                 False)
    assert rows["deepseek-v3"]["kv_share"] == pytest.approx(v3_kv / (v3_kv + v3_read), rel=1e-12)
    assert rows["llama-3.1-8b"]["relative_decode_speed"] == 1 - kv / (kv + LLAMA_8B_READ)
    assert not rows["llama-3.1-8b"]["within"]              # beyond its 131,072 tokens
    assert "89.7%" in explorer.table.value and "(beyond it)" in explorer.table.value
    assert repr(explorer).startswith("ShareExplorer: KV share at 1,000,000 tokens")


def test_share_explorer_controls_update_it():
    explorer = ShareExplorer()
    explorer.models.value = ("qwen3-0.6b",)
    explorer.context.value = share_explorer.SHARE_CONTEXTS[0]
    assert [r["model"] for r in explorer.readings] == ["qwen3-0.6b"]
    assert explorer.readings[0]["kv_share"] == sizing.kv_share(zoo.get("qwen3-0.6b"), 1000)
    svg = explorer.plot.value
    assert svg.count("<svg") == 2 and "KV share of a decode step" in svg
    assert "relative decode speed (1 - share)" in svg and "1,000 tokens" in svg


def test_share_explorer_lines_differ_beyond_the_maximum_context():
    svg = ShareExplorer(models=["qwen3-0.6b"]).plot.value   # 32,768 tokens: a dotted part
    assert svg.count(f"stroke-dasharray='{share_explorer.BEYOND_DASH}'") == 2   # both panels
    marks = {m.split("'")[0] for m in svg.split("fill='")[1:]}
    assert share_explorer.MODEL_STYLES[0][0] in marks


def test_share_explorer_too_many_or_no_models_give_a_message():
    explorer = ShareExplorer()
    before = explorer.readings
    explorer.models.value = tuple(zoo.names()[:7])
    assert "choose 1 to 6 models" in explorer.message and explorer.readings == before
    explorer.models.value = ()
    assert "got 0" in explorer.message
    explorer.models.value = ("kimi-k2",)
    assert explorer.message == "" and explorer.readings[0]["model"] == "kimi-k2"


@pytest.mark.parametrize("kwargs, error", [
    (dict(models="llama-3.1-8b"), ValueError), (dict(models=[]), ValueError),
    (dict(models=["llama-9"]), KeyError), (dict(models=["gpt2", "gpt2"]), ValueError),
    (dict(models=zoo.names()), ValueError), (dict(context=5000), ValueError),
    (dict(context=10 ** 12), ValueError)])
def test_share_explorer_bad_arguments(kwargs, error):
    with pytest.raises(error):
        ShareExplorer(**kwargs)


def test_share_explorer_models_stay_apart_for_colour_blind_readers():
    styles = share_explorer.MODEL_STYLES
    assert len(styles) == share_explorer.MAX_MODELS
    for vision, matrix in CVD.items():
        for (a, shape_a), (b, shape_b) in itertools.combinations(styles, 2):
            distance = math.dist(_lab(a, matrix), _lab(b, matrix))
            assert distance >= 15, (vision, a, b, distance)     # and each line is labelled
            if shape_a == shape_b:                              # markers alike: colours apart
                assert distance >= 20, (vision, a, b, distance)


def test_the_units_note_quotes_the_presets():
    # the calculator's note names what two cards report: the same figures as toykv's presets
    from toykv import hardware
    from toykv.widgets.size_calculator_view import UNITS_NOTE
    a100, h100 = (hardware(name).memory_bytes / 2**30 for name in ("a100-80gb-sxm", "h100-sxm"))
    assert f"an A100 80GB reports {a100:.0f} GiB, an H100 80GB {h100:.1f} GiB" in UNITS_NOTE
