"""Facts the chapters state about the widgets they show, checked here instead of in the
chapter's reading path (the chapters show the widget; these tests hold it to the text).

Expected values come from toykv.flops (formulas tested against the model's counter in
test_flops.py), from a full recomputation, or from the source texts' published figures.
"""
from __future__ import annotations

import pytest

from toykv import flops
from toykv.widgets import CacheFill


# -- chapter 3: the cache-fill widget after a 6-token prefill and 3 decode steps ----------
@pytest.fixture(scope="module")
def fill():
    return CacheFill(prompt_len=6, max_positions=24, seed=0, steps=3)


def test_ch3_fill_holds_nine_positions_in_decode(fill):
    assert fill.positions == 6 + 3 and fill.phase == "decode"


def test_ch3_fill_flops_are_the_formulas(fill):
    config = fill.model.config
    assert fill.flops_cached == flops.cached_step_flops(config, 9)
    assert fill.flops_uncached == flops.full_pass_flops(config, 9)
    assert round(fill.flops_uncached / fill.flops_cached, 1) == 9.0   # the text's ratio


def test_ch3_fill_logits_equal_a_full_recomputation(fill):
    assert fill.max_abs_diff == 0.0


def test_ch3_fill_cells_prefill_decode_this_empty(fill):
    states = fill.cells[0]                              # row: layer 0, K
    assert states[:6] == ["prefill"] * 6 and states[6:8] == ["decode"] * 2
    assert states[8] == "this" and set(states[9:]) == {"empty"}
    assert len(fill.cells) == 2 * fill.model.config.n_layers and len(states) == 24


# -- chapter 4: the size calculator's starting state and what the text says about it ------
GB, GiB, KiB = 10**9, 2**30, 2**10


@pytest.fixture()
def calc():
    from toykv.widgets import SizeCalculator

    return SizeCalculator(model="llama-3.1-8b", bytes_per_value=2, context=8192, batch=16,
                          gpu_memory_gib=80)


def test_ch4_calculator_reproduces_the_interactive_page(calc):
    """The source page's figures for Llama 3 8B: 65,536 values and 128 KiB per token,
    17.18 GB for 16 x 8,192 tokens; 0.21 GPUs of 80 x 10^9 bytes there, 0.20 of 80 GiB here."""
    v = calc.values
    assert v["values_per_token"] == 2 * 32 * 8 * 128
    assert v["bytes_per_token"] == 128 * KiB
    assert round(v["batch_bytes"] / GB, 2) == 17.18 and v["batch_bytes"] == 16 * GiB
    assert round(v["batch_bytes"] / (80 * GB), 2) == 0.21           # the page's reading
    assert v["gpus_of_kv"] == pytest.approx(16 * GiB / (80 * GiB))  # 0.20 of 80 GiB


def test_ch4_calculator_counts_80_gb_as_the_chapter_says(calc):
    """Chapter 4 sizes on an A100 80GB, which reports 80 GiB, and the calculator counts its
    input in GiB: if the calculator changes its reading, change that paragraph too."""
    assert calc.values["gpu_bytes"] == 80 * GiB


def test_ch4_sequences_fit_beside_the_weights(calc):
    v = calc.values
    per_sequence = 2 * 32 * 8 * 128 * 2 * 8192                 # bf16, 8,192 tokens
    weights = 2 * 8_030_000_000                                # 8.03B params, bf16
    fit = v["sequences_fit"]
    assert weights + fit * per_sequence <= v["gpu_bytes"] < weights + (fit + 1) * per_sequence


def test_ch4_kv_share_and_relative_speed(calc):
    v = calc.values
    # the bf16 weights a step reads: 8.03B less the untied input table but 16 looked-up rows
    kv, weights = 16 * 2 * 32 * 8 * 128 * 2 * 8192, 2 * (8_030_000_000 - (128_256 - 16) * 4096)
    assert v["kv_share"] == pytest.approx(kv / (kv + weights))
    assert v["relative_decode_speed"] == pytest.approx(1 - v["kv_share"])


@pytest.mark.parametrize("variant, kib", [("mha", 512), ("gqa", 128), ("mqa", 16),
                                          ("mla", 36)])
def test_ch4_variant_table_of_the_source_page(calc, variant, kib):
    """The interactive page's variant table for Llama 3 8B's layers: 512, 128, 16 and 36 KiB."""
    calc.variant.value = variant
    assert calc.values["bytes_per_token"] == kib * KiB


def test_ch4_bad_input_shows_a_message_not_a_traceback(calc):
    calc.batch.value = 0
    assert "batch" in calc.message and calc.values == {}
    calc.batch.value = 16
    calc.model.value = "paste a config.json"
    calc.config_json.value = '{"model_type": "llama", "hidden_size": '
    assert "not valid JSON" in calc.message and calc.values == {}
