"""Tests of toykv.widgets, driven headlessly: set controls, click buttons, read what is shown.

Expected numbers come from toykv's own model, flops and sizing functions, or from the source
texts and ZOO.md (Llama 3.1 8B: 131,072 B/token; 16 x 8,192 tokens = 17.18 GB; 16.06 GB of
weights; the variant sizes 512, 16 and 36 KiB; DeepSeek-V2 69,120 B/token; KV share 0.891).
"""
import json
import math

import numpy as np
import pytest

import toykv
from toykv import flops, sizing, zoo
from toykv.widgets import CacheFill, SizeCalculator, update_latency
from toykv.widgets import _style
from toykv.widgets.size_calculator import PASTE

LLAMA_8B_CONFIG_JSON = {     # Llama 3.1 8B's shapes (ZOO.md) as a Hugging Face config.json
    "model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
    "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": False,
}


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
    (dict(model="toy"), "model"), (dict(steps=-1), "steps")])
def test_cache_fill_bad_arguments(kwargs, field):
    with pytest.raises(ValueError, match=field):
        CacheFill(**kwargs)


def test_cache_fill_displays_itself(fill3):
    bundle = fill3._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == fill3.widget.model_id
    assert "9 of 24 positions" in bundle["text/plain"]


# -- SizeCalculator ------------------------------------------------------------------

@pytest.fixture(scope="module")
def calc():
    return SizeCalculator()


@pytest.fixture
def fresh():
    return SizeCalculator()


def test_llama_8b_worked_example(calc):
    v, t = calc.values, calc.texts
    config = zoo.get("llama-3.1-8b").config
    assert v["bytes_per_token"] == 131072 == sizing.kv_bytes_per_token(config, 2)
    assert v["values_per_token"] == sizing.kv_values_per_token(config)
    assert (v["batch"], v["context"]) == (16, 8192)
    assert v["batch_bytes"] == 17_179_869_184 == sizing.kv_cache_bytes(config, 8192, 16, 2)
    assert t["batch_bytes"] == "17.18 GB (16.00 GiB)"
    assert t["bytes_per_token"] == "131,072 B (128.0 KiB)"
    assert t["weight_bytes"] == "16.06 GB"
    for text in ("17.18 GB", "17,179,869,184 B", "131,072 B", "GB = 10^9 bytes"):
        assert text in calc.numbers.value
    assert calc.message == ""


def test_gpus_and_sequences_beside_the_weights(fresh):
    v = fresh.values
    weights = sizing.weight_bytes(zoo.get("llama-3.1-8b").total_params, 2)
    assert v["gpus_of_kv"] == pytest.approx(v["batch_bytes"] / 80e9)
    assert fresh.texts["gpus_of_kv"] == "0.21"                        # source 004
    assert v["sequences_fit"] == (80 * 10**9 - weights) // v["sequence_bytes"]
    fresh.gpu_gb.value = 24
    assert fresh.values["sequences_fit"] == (24 * 10**9 - weights) // v["sequence_bytes"]
    assert fresh.values["gpus_of_kv"] == pytest.approx(v["batch_bytes"] / 24e9)


def test_weights_that_do_not_fit_give_zero_with_a_message(fresh):
    fresh.model.value = "llama-3.1-405b"
    assert not fresh.values["weights_fit"] and fresh.values["sequences_fit"] == 0
    assert "do not fit" in fresh.message and "do not fit" in fresh.message_box.value


def test_kv_share_matches_sizing_and_zoo_md(fresh):
    fresh.context.value = 10**6
    fresh.batch.value = 1
    model = zoo.get("llama-3.1-8b")
    assert fresh.values["kv_share"] == sizing.kv_share(model, 10**6, 1, 2, 2)
    assert fresh.values["kv_share"] == pytest.approx(0.891, abs=5e-4)     # ZOO.md
    assert fresh.texts["kv_share"] == "89.1%"
    assert fresh.values["relative_decode_speed"] == sizing.relative_decode_speed(model, 10**6)


@pytest.mark.parametrize("variant, bytes_per_token", [
    ("mha", 512 * 1024), ("mqa", 16 * 1024), ("mla", 36 * 1024), ("as built", 128 * 1024)])
def test_attention_variants_of_llama_8b(fresh, variant, bytes_per_token):
    fresh.variant.value = variant                               # source 004's variant table
    assert fresh.values["bytes_per_token"] == bytes_per_token
    base = zoo.get("llama-3.1-8b").config
    expected = {"mha": 32, "mqa": 1, "as built": 8}.get(variant, base.n_heads)
    assert fresh.values["n_kv_heads"] == expected


def test_gqa_choice_and_a_group_that_does_not_divide(fresh):
    fresh.variant.value = "gqa"
    assert fresh.kv_heads.layout.display == "" and fresh.kv_heads.value == 8
    fresh.kv_heads.value = 4
    assert fresh.values["bytes_per_token"] == 2 * 32 * 4 * 128 * 2
    fresh.kv_heads.value = 5
    assert fresh.values == {} and "5" in fresh.message and "multiple" in fresh.message
    assert "Problem" in fresh.message_box.value and fresh.image.layout.display == "none"
    fresh.kv_heads.value = 2
    assert fresh.error == "" and fresh.values["n_kv_heads"] == 2
    assert "Problem" not in fresh.message_box.value and "K/V projection" in fresh.message


def test_variant_table_rows(fresh):
    rows = {r["key"]: r for r in fresh.variant_rows()}
    assert rows["mha"]["batch_bytes"] == 4 * rows["as built"]["batch_bytes"]
    assert rows["mla"]["kv_heads"] == "latent 512+64"
    assert "25.0%" in fresh.variants_table.value and "7.0%" in fresh.variants_table.value


@pytest.mark.parametrize("bpv", [4, 2, 1, 0.5])
def test_precisions(fresh, bpv):
    fresh.precision.value = bpv
    assert fresh.values["bytes_per_token"] == 65536 * bpv
    assert fresh.values["batch_bytes"] == sizing.kv_cache_bytes(
        zoo.get("llama-3.1-8b").config, 8192, 16, bpv)


def test_batch_zero_shows_a_message(fresh):
    fresh.batch.value = 0
    assert "batch" in fresh.message and ">= 1" in fresh.message and fresh.values == {}
    fresh.batch.value = 1
    assert fresh.message == "" and fresh.values["batch"] == 1


def test_deepseek_v2_and_a_sliding_model(fresh):
    fresh.model.value = "deepseek-v2"
    assert fresh.values["bytes_per_token"] == 69120                      # ZOO.md
    assert fresh.values["kv_share"] == sizing.kv_share(zoo.get("deepseek-v2"), 8192, 16)
    fresh.model.value = "mistral-7b-v0.1"
    assert fresh.values["batch_bytes"] == sizing.kv_cache_bytes(
        zoo.get("mistral-7b-v0.1").config, 8192, 16)
    assert "stop growing" in fresh.message


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
    assert fresh.config_json.layout.display == ""
    assert "Paste" in fresh.message
    fresh.config_json.value = json.dumps(LLAMA_8B_CONFIG_JSON)
    assert fresh.message == ""
    assert fresh.values["bytes_per_token"] == 131072
    assert fresh.values["batch_bytes"] == 17_179_869_184
    assert "UNVERIFIED" in fresh.source.value and "pasted" in fresh.source.value


def test_a_config_json_given_to_the_constructor():
    named = dict(LLAMA_8B_CONFIG_JSON, _name_or_path="meta-llama/Llama-3.1-8B")
    calc = SizeCalculator(model=PASTE, config_json=json.dumps(named), variant="mqa")
    assert calc.values["model"] == "Llama-3.1-8B"
    assert calc.values["bytes_per_token"] == 16 * 1024
    assert "Llama-3.1-8B" in calc.source.value


@pytest.mark.parametrize("text, expected", [
    ('{"model_type": "llama", ', "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"model_type": "bert"}', "model_type 'bert'"),
    (json.dumps({k: v for k, v in LLAMA_8B_CONFIG_JSON.items() if k != "hidden_size"}),
     "hidden_size"),
    (json.dumps({"text_config": 3}), "Could not read")])
def test_bad_pasted_config_shows_a_message(fresh, text, expected):
    fresh.model.value = PASTE
    fresh.config_json.value = text
    assert expected in fresh.message and fresh.values == {}
    assert "Problem" in fresh.message_box.value


def test_the_plot_updates_in_place_without_pyplot_figures(fresh):
    import matplotlib.pyplot as plt
    figures = plt.get_fignums()
    first = fresh.image.value
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    fresh.context.value = 131072
    assert fresh.image.value[:8] == b"\x89PNG\r\n\x1a\n" and fresh.image.value != first
    assert plt.get_fignums() == figures


@pytest.mark.parametrize("kwargs, error", [
    (dict(model="llama-9"), KeyError), (dict(variant="gqa2"), ValueError),
    (dict(context=5000), ValueError), (dict(bytes_per_value=3), ValueError),
    (dict(gpu_gb=0), ValueError)])
def test_size_calculator_bad_arguments(kwargs, error):
    with pytest.raises(error):
        SizeCalculator(**kwargs)


def test_size_calculator_displays_itself(calc):
    bundle = calc._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == calc.widget.model_id
    assert "17.18 GB" in bundle["text/plain"]


# -- formats and latency ----------------------------------------------------------------

def test_byte_formats_say_which_unit():
    assert _style.decimal_bytes(17_179_869_184) == "17.18 GB"
    assert _style.binary_bytes(17_179_869_184) == "16.00 GiB"
    assert _style.binary_bytes(131072, 1) == "128.0 KiB"
    assert _style.decimal_bytes(512) == "512 B"
    assert _style.decimal_bytes(327_680 * 10**6) == "327.68 GB"          # ZOO.md: 70B at 1M


def test_update_latency_reports_medians():
    result = update_latency(repeats=2)
    assert set(result) == {"cache_fill_step", "cache_fill_reset", "size_calculator_change"}
    assert all(np.isfinite(t) and t > 0 for t in result.values())
    with pytest.raises(ValueError, match="repeats"):
        update_latency(0)
