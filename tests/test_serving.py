"""toykv.serving: a decode step split into weights and cache, measured points, request mixes.

Expected values come from hand formulas (2 FLOPs per weight, 4 H d_h FLOPs per cached
position and layer, bytes of the arrays) or from the model's own FLOP counter.
"""
import numpy as np
import pytest

from toykv import ModelConfig, ToyTransformer, serving, sizing, source_toy, zoo

MLA = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                  attention="mla", kv_lora_rank=16, rope_head_dim=4, max_seq_len=256)


def _matrices(config):
    """Weights a token multiplies: every block matrix and the output head (by hand)."""
    D, H, hd, F, L = (config.d_model, config.n_heads, config.head_dim, config.d_ff,
                      config.n_layers)
    per_layer = D * H * hd + 2 * D * config.n_kv_heads * hd + H * hd * D + 3 * D * F
    return L * per_layer + D * config.vocab_size


@pytest.mark.parametrize("config", [source_toy(), source_toy(n_kv_heads=2),
                                    zoo.get("llama-2-7b").config])
@pytest.mark.parametrize("context, batch", [(1, 1), (100, 1), (100, 8)])
def test_split_by_hand(config, context, batch):
    s = serving.decode_step_split(config, context, batch, bytes_per_param=2, bytes_per_value=2)
    L, H, hd, D = config.n_layers, config.n_heads, config.head_dim, config.d_model
    assert s["weights"]["flops"] == batch * 2 * _matrices(config)
    assert s["cache"]["flops"] == batch * 4 * L * H * hd * context      # q.k and p.v per head
    norms = (2 * L + 1) * D
    row = 0 if config.tie_embeddings else batch * D  # an untied table: a row per sequence
    assert s["weights"]["bytes"] == 2 * (_matrices(config) + norms + row)
    assert s["cache"]["bytes"] == batch * 2 * L * config.n_kv_heads * hd * context * 2
    total = s["total"]
    assert total["flops"] == s["weights"]["flops"] + s["cache"]["flops"]
    assert total["intensity"] == total["flops"] / total["bytes"]


def test_split_matches_the_models_counter():
    model = ToyTransformer(source_toy(n_kv_heads=2))
    cache = model.new_cache(batch=3)
    model.forward(np.zeros((3, 9), dtype=int), cache)
    before = model.flops
    model.forward(np.zeros((3, 1), dtype=int), cache)          # the 10th token of each row
    assert model.flops - before == serving.decode_step_split(model.config, 10, 3)["total"]["flops"]


def test_batching_shares_weights_not_cache():
    c = zoo.get("llama-2-7b").config
    one, many = (serving.decode_step_split(c, 4096, B) for B in (1, 64))
    # the weights once for the batch; of the untied input table, one more row per sequence
    assert many["weights"]["bytes"] == one["weights"]["bytes"] + 2 * 63 * c.d_model
    assert many["cache"]["bytes"] == 64 * one["cache"]["bytes"]
    assert many["cache"]["intensity"] == one["cache"]["intensity"] == 1.0   # MHA, bf16
    assert many["weights"]["flops"] == 64 * one["weights"]["flops"]        # 64 x the intensity,
    assert 63.99 * one["weights"]["intensity"] < many["weights"]["intensity"]   # but 63 rows
    assert many["weights"]["intensity"] < 64 * one["weights"]["intensity"]


def test_split_gqa_cache_intensity_is_the_group_size():
    c = zoo.get("llama-3.1-8b").config                     # G = 4
    assert serving.decode_step_split(c, 1000)["cache"]["intensity"] == c.group_size


def test_split_mla_absorbed_and_refusals():
    s = serving.decode_step_split(MLA, 50, absorb=True, bytes_per_value=4)
    assert s["cache"]["bytes"] == 2 * 50 * (16 + 4) * 4
    with pytest.raises(ValueError, match="absorb=True"):
        serving.decode_step_split(MLA, 50)
    with pytest.raises(ValueError, match="mla"):
        serving.decode_step_split(source_toy(), 50, absorb=True)
    for bad in (dict(context=0), dict(context=2.0), dict(batch=0)):
        args = dict(context=10, batch=1) | bad
        with pytest.raises(ValueError, match=next(iter(bad))):
            serving.decode_step_split(source_toy(), **args)
    with pytest.raises(ValueError, match="ModelConfig"):
        serving.decode_step_split("llama", 10)


def test_decode_toy_weights_stream_from_memory():
    c = serving.decode_toy()
    assert c.n_kv_heads == 4 and c.group_size == 4
    assert serving.decode_step_split(c, 1, 1, 4, 4)["weights"]["bytes"] > 256 * 2**20


def test_measured_points_pair_counts_with_time():
    model = ToyTransformer(source_toy(max_seq_len=128))
    decode = serving.measure_decode(model, 40, batch=3, steps=2)
    split = serving.decode_step_split(model.config, 40, 3, 4, 4)["total"]
    assert decode["flops"] == split["flops"] and decode["bytes"] == split["bytes"]
    assert decode["seconds"] > 0
    assert decode["flops_per_s"] == pytest.approx(decode["flops"] / decode["seconds"])
    assert decode["tokens_per_s"] == pytest.approx(3 / decode["seconds"])
    prefill = serving.measure_prefill(model, 30, repeats=2)
    assert prefill["flops"] == 30 * serving.decode_step_split(model.config, 1, 1)["weights"][
        "flops"] + 2 * 30 * 30 * 4 * model.config.n_layers * model.config.d_model // 2
    assert prefill["tokens_per_s"] == pytest.approx(30 / prefill["seconds"])
    with pytest.raises(ValueError, match="context"):
        serving.measure_decode(model, 1)


def test_request_lengths_are_seeded_and_clipped():
    a = serving.request_lengths(5000, 500, 4000, sigma=1.0, seed=3)
    assert np.array_equal(a, serving.request_lengths(5000, 500, 4000, sigma=1.0, seed=3))
    assert a.min() >= 1 and a.max() == 4000                   # the tail is clipped
    assert abs(np.median(a) / 500 - 1) < 0.1
    assert np.all(serving.request_lengths(10, 7, 100, sigma=0) == 7)
    for bad in (dict(n=0), dict(median=0), dict(median=5000), dict(sigma=-1.0)):
        args = dict(n=10, median=100, max_len=1000) | bad
        with pytest.raises(ValueError, match=next(iter(bad))):
            serving.request_lengths(**args)


def test_batch_cache_bytes_sums_full_batches():
    c = source_toy(n_kv_heads=2)
    lengths = [10, 20, 30, 40, 50]
    got = serving.batch_cache_bytes(c, lengths, 2)
    per_token = 2 * c.n_layers * 2 * c.head_dim * 2                   # bf16
    assert got.tolist() == [30 * per_token, 70 * per_token]           # the 50 is left out
    windowed = source_toy(sliding_window=16)
    assert serving.batch_cache_bytes(windowed, [100, 8], 2).tolist() == [
        sizing.kv_cache_bytes(windowed, 16) + sizing.kv_cache_bytes(windowed, 8)]
    with pytest.raises(ValueError, match="no full batch"):
        serving.batch_cache_bytes(c, [1, 2], 3)
    with pytest.raises(ValueError, match="lengths"):
        serving.batch_cache_bytes(c, [1, 0], 1)


def test_decode_step_seconds_both_models_by_hand():
    from toykv import hardware
    h100, c = hardware("h100-sxm"), zoo.get("llama-3.1-8b").config
    S, B = 1024, 520
    L, H, hd, D = c.n_layers, c.n_heads, c.head_dim, c.d_model
    kv = B * 2 * L * c.n_kv_heads * hd * S * 2                             # bf16 caches
    w = 2 * (_matrices(c) + (2 * L + 1) * D + B * D)                      # + B embedding rows
    w_flops, kv_flops = B * 2 * _matrices(c), B * 4 * L * H * hd * S
    t = serving.decode_step_seconds(c, h100, S, B)
    assert t["overlapped"] == pytest.approx(
        max((w_flops + kv_flops) / h100.peak_flops, (w + kv) / h100.bandwidth), rel=1e-12)
    # scaling-book's model: B M_KV / beta + max(2 B N / pi, M_W / beta)
    assert t["serial"] == pytest.approx(kv / h100.bandwidth + max(w_flops / h100.peak_flops,
                                                                 w / h100.bandwidth), rel=1e-12)
    assert round(t["overlapped"] * 1e3, 1) == 25.3 and round(t["serial"] * 1e3, 1) == 28.7
    assert t["serial"] == pytest.approx(t["cache"] + t["weights"], rel=1e-12)
    one = serving.decode_step_seconds(c, h100, S, 1)                       # batch 1: no gap
    assert one["serial"] == pytest.approx(one["overlapped"], rel=1e-12)
    with pytest.raises(ValueError, match="Hardware"):
        serving.decode_step_seconds(c, "h100-sxm", S, B)
