"""toykv.stepcost: what a decode, verify or prefill step costs, counted, and the bounds it sets.

Expected values come from hand formulas (2 FLOPs per weight, 4 H d_h FLOPs per cached
position and layer, bytes of the arrays) or from the model's own FLOP counter.
"""
import numpy as np
import pytest
from conftest import make_model
from test_variants import BASE, SHAPES, variants  # noqa: F401 - variants is a fixture

import toykv
from toykv import ModelConfig, ToyTransformer, hardware, roofline, source_toy, zoo
from toykv.config import decode_toy
from toykv.stepcost import (cache_intensity, decode_step_bounds, decode_step_cost,
                            decode_step_split, prefill_cost, verify_cost)

MLA = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                  attention="mla", kv_lora_rank=16, rope_head_dim=4, max_seq_len=256)


def _matrices(config):
    """Weights a token multiplies: every block matrix and the output head (by hand)."""
    D, H, hd, F, L = (config.d_model, config.n_heads, config.head_dim, config.d_ff,
                      config.n_layers)
    per_layer = D * H * hd + 2 * D * config.n_kv_heads * hd + H * hd * D + 3 * D * F
    return L * per_layer + D * config.vocab_size


# -- decode_step_split ---------------------------------------------------------------------
@pytest.mark.parametrize("config", [source_toy(), source_toy(n_kv_heads=2),
                                    zoo.get("llama-2-7b").config])
@pytest.mark.parametrize("context, batch", [(1, 1), (100, 1), (100, 8)])
def test_split_by_hand(config, context, batch):
    s = decode_step_split(config, context, batch, bytes_per_param=2, bytes_per_value=2)
    L, H, hd, D = config.n_layers, config.n_heads, config.head_dim, config.d_model
    assert s["weights"]["flops"] == batch * 2 * _matrices(config)
    assert s["cache"]["flops"] == batch * 4 * L * H * hd * context      # q.k and p.v per head
    norms = (2 * L + 1) * D
    row = 0 if config.tie_embeddings else batch * D  # an untied table: a row per sequence
    assert s["weights"]["bytes"] == 2 * (_matrices(config) + norms + row)
    assert s["cache"]["bytes"] == batch * 2 * L * config.n_kv_heads * hd * context * 2
    total = s["total"]
    assert total["flops"] == s["weights"]["flops"] + s["cache"]["flops"]
    assert total["bytes"] == s["weights"]["bytes"] + s["cache"]["bytes"]
    assert total["intensity"] == total["flops"] / total["bytes"]


def test_split_of_a_shared_cache_by_hand():
    c = source_toy(kv_sharing=2)              # 2 layers: the second reuses the first's cache
    D, H, hd, L = c.d_model, c.n_heads, c.head_dim, c.n_layers
    s = decode_step_split(c, 100, 3)
    reusing = L - L // 2                       # layers without K and V projections
    assert s["weights"]["flops"] == 3 * 2 * (_matrices(c) - reusing * 2 * D * c.n_kv_heads * hd)
    assert s["cache"]["flops"] == 3 * 4 * L * H * hd * 100     # every layer attends
    assert s["cache"]["intensity"] == 1.0                      # MHA, bf16: read by each layer


def test_split_matches_the_models_counter():
    model = ToyTransformer(source_toy(n_kv_heads=2))
    cache = model.new_cache(batch=3)
    model.forward(np.zeros((3, 9), dtype=int), cache)
    before = model.flops
    model.forward(np.zeros((3, 1), dtype=int), cache)          # the 10th token of each row
    assert model.flops - before == decode_step_split(model.config, 10, 3)["total"]["flops"]


def test_batching_shares_weights_not_cache():
    c = zoo.get("llama-2-7b").config
    one, many = (decode_step_split(c, 4096, B) for B in (1, 64))
    # the weights once for the batch; of the untied input table, one more row per sequence
    assert many["weights"]["bytes"] == one["weights"]["bytes"] + 2 * 63 * c.d_model
    assert many["cache"]["bytes"] == 64 * one["cache"]["bytes"]
    assert many["cache"]["intensity"] == one["cache"]["intensity"] == 1.0   # MHA, bf16
    assert many["weights"]["flops"] == 64 * one["weights"]["flops"]        # 64 x the intensity,
    assert 63.99 * one["weights"]["intensity"] < many["weights"]["intensity"]   # but 63 rows
    assert many["weights"]["intensity"] < 64 * one["weights"]["intensity"]


def test_split_gqa_cache_intensity_is_the_group_size():
    c = zoo.get("llama-3.1-8b").config                     # G = 4
    assert decode_step_split(c, 1000)["cache"]["intensity"] == c.group_size


def test_split_mla_absorbed_and_refusals():
    s = decode_step_split(MLA, 50, absorb=True, bytes_per_value=4)
    assert s["cache"]["bytes"] == 2 * 50 * (16 + 4) * 4
    with pytest.raises(ValueError, match="absorb=True"):
        decode_step_split(MLA, 50)
    with pytest.raises(ValueError, match="mla"):
        decode_step_split(source_toy(), 50, absorb=True)
    for bad in (dict(context=0), dict(context=2.0), dict(batch=0)):
        args = dict(context=10, batch=1) | bad
        with pytest.raises(ValueError, match=next(iter(bad))):
            decode_step_split(source_toy(), **args)
    with pytest.raises(ValueError, match="ModelConfig"):
        decode_step_split("llama", 10)


def test_decode_toy_weights_stream_from_memory():
    c = decode_toy()
    assert c.n_kv_heads == 4 and c.group_size == 4
    assert decode_step_split(c, 1, 1, 4, 4)["weights"]["bytes"] > 256 * 2**20


# -- decode_step_bounds --------------------------------------------------------------------
def test_decode_step_bounds_both_models_by_hand():
    h100, c = hardware("h100-sxm"), zoo.get("llama-3.1-8b").config
    S, B = 1024, 520
    L, H, hd, D = c.n_layers, c.n_heads, c.head_dim, c.d_model
    kv = B * 2 * L * c.n_kv_heads * hd * S * 2                             # bf16 caches
    w = 2 * (_matrices(c) + (2 * L + 1) * D + B * D)                      # + B embedding rows
    w_flops, kv_flops = B * 2 * _matrices(c), B * 4 * L * H * hd * S
    t = decode_step_bounds(c, h100, S, B)
    assert t["overlapped"] == pytest.approx(
        max((w_flops + kv_flops) / h100.peak_flops, (w + kv) / h100.bandwidth), rel=1e-12)
    # scaling-book's model: B M_KV / beta + max(2 B N / pi, M_W / beta)
    assert t["serial"] == pytest.approx(kv / h100.bandwidth + max(w_flops / h100.peak_flops,
                                                                 w / h100.bandwidth), rel=1e-12)
    assert round(t["overlapped"] * 1e3, 1) == 25.3 and round(t["serial"] * 1e3, 1) == 28.7
    assert t["serial"] == pytest.approx(t["cache"] + t["weights"], rel=1e-12)
    one = decode_step_bounds(c, h100, S, 1)                                # batch 1: no gap
    assert one["serial"] == pytest.approx(one["overlapped"], rel=1e-12)
    with pytest.raises(ValueError, match="Hardware"):
        decode_step_bounds(c, "h100-sxm", S, B)


# -- decode_step_cost and cache_intensity: toykv's float32 model --------------------------
@pytest.mark.parametrize("name, absorb", [("mha", False), ("gqa", False), ("mqa", False),
                                          ("mla", False), ("mla", True)])
def test_step_flops_equal_the_models_counter(variants, name, absorb):
    config = variants[name]
    model = ToyTransformer(config, absorb=absorb)
    cache = model.new_cache()
    model.forward(list(range(30)), cache)
    before = model.flops
    model.forward([1], cache)                          # the step at context 31
    cost = decode_step_cost(config, 31, absorb=absorb)
    assert cost["flops"] == model.flops - before
    assert cost["intensity"] == cost["flops"] / cost["bytes"]


@pytest.mark.parametrize("kv_dtype, value, scale", [("float32", 4, 0), ("float16", 2, 0),
                                                    ("int8", 1, 4)])
def test_step_bytes_by_hand(variants, kv_dtype, value, scale):
    S, L, H, hd = 31, BASE.n_layers, BASE.n_heads, BASE.head_dim
    weights = 4 * toykv.param_count(BASE)                 # float32, tied: read whole
    gqa = decode_step_cost(variants["gqa"], S, kv_dtype)
    gqa_weights = weights - 4 * L * 2 * BASE.d_model * (H - 2) * hd      # 2 KV heads, not 8
    assert gqa["bytes"] == gqa_weights + L * S * (2 * 2 * hd * value + 2 * 2 * scale)
    mla, r, rd = variants["mla"], SHAPES["kv_lora_rank"], SHAPES["rope_head_dim"]
    absorbed = decode_step_cost(mla, S, kv_dtype, absorb=True)
    expanded = decode_step_cost(mla, S, kv_dtype)
    assert absorbed["bytes"] == 4 * toykv.param_count(mla) + L * S * ((r + rd) * value
                                                                      + 2 * scale)
    # the expanded form writes, then reads back, every head's key and value (float32)
    assert expanded["bytes"] - absorbed["bytes"] == 2 * 4 * L * S * 2 * H * hd


def test_cache_intensity_by_hand(variants):
    # 4 d_h FLOPs per query head and cached position, over 2 d_h values per KV head
    assert cache_intensity(variants["mha"]) == 0.5                 # float32
    assert cache_intensity(variants["mha"], kv_dtype="float16") == 1.0
    assert cache_intensity(variants["gqa"]) == 0.5 * 4             # G = 4
    assert cache_intensity(variants["mqa"]) == 0.5 * 8             # G = H = 8
    mla = variants["mla"]
    H, r, rd = mla.n_heads, mla.kv_lora_rank, mla.rope_head_dim
    assert cache_intensity(mla, absorb=True) == (2 * H * rd + 4 * H * r) / ((r + rd) * 4)


def test_cache_intensity_needs_a_growing_layer():
    with pytest.raises(ValueError, match="adds no bytes"):
        cache_intensity(source_toy(sliding_window=8), context=100)
    with pytest.raises(ValueError, match="context"):
        cache_intensity(source_toy(), context="100")


def test_deepseek_v2_absorbed_intensity_below_the_h100_ridge():
    ds2 = zoo.get("deepseek-v2").config
    value = cache_intensity(ds2, absorb=True, kv_dtype="float16")
    H, r, rd = 128, 512, 64                                      # DS2 Table 1 shapes
    assert value == (2 * H * rd + 4 * H * r) / ((r + rd) * 2)
    assert 200 < value < roofline.hardware("h100-sxm").ridge_point


# -- verify_cost and prefill_cost ----------------------------------------------------------
def test_verify_cost_counts_one_read_of_the_weights():
    model = make_model("gqa")
    c = model.config
    step = decode_step_cost(c, 11)
    zero = verify_cost(c, 10, 0)
    assert (zero["flops"], zero["bytes"]) == (step["flops"], step["bytes"])
    four = verify_cost(c, 10, 4)
    assert four["bytes"] - zero["bytes"] == 4 * toykv.kv_bytes_per_token(c, 4)
    assert four["flops"] == toykv.flops.forward_flops(c, 5, 10) > 4 * zero["flops"]
    # a batch of 8 in bf16: the weights read once, each sequence's own cache, 8x the FLOPs
    eight = verify_cost(c, 10, 4, batch=8, bytes_per_param=2, bytes_per_value=2)
    weights = toykv.sizing.weight_bytes_read(c, 2, 8)
    assert eight["bytes"] == weights + 8 * 15 * toykv.kv_bytes_per_token(c, 2)
    assert eight["flops"] == 8 * four["flops"]


def test_verify_cost_equals_the_models_counter():
    model = make_model("gqa")
    cache = model.new_cache()
    model.forward(list(range(10)), cache)
    before = model.flops
    model.forward([1, 2, 3, 4, 5], cache)              # the newest token and 4 proposals
    assert verify_cost(model.config, 10, 4)["flops"] == model.flops - before


def test_prefill_cost_by_hand():
    c = source_toy()                                   # tied, MHA, 2 layers of 8 heads of 16
    P, L, H, hd, D = 30, c.n_layers, c.n_heads, c.head_dim, c.d_model
    cost = prefill_cost(c, P)
    assert cost["bytes"] == 4 * toykv.param_count(c) + 2 * L * H * hd * P * 4
    # every weight product for P tokens, P x P scores and weighted sums per head and layer
    assert cost["flops"] == P * 2 * _matrices(c) + L * 4 * H * hd * P * P
    assert cost["intensity"] == cost["flops"] / cost["bytes"]
    with pytest.raises(ValueError, match="prompt_len"):
        prefill_cost(c, 0)
