"""toykv.sizing: the source texts' worked figures, to the byte, and the KV share."""
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from conftest import make_model, token_ids

from toykv import ModelConfig, ToyTransformer, source_toy, zoo
from toykv.sizing import (decode_step_bytes, kv_bytes_per_token, kv_cache_bytes, kv_share,
                          kv_projection_params, kv_values_per_token, max_tokens_per_second,
                          param_count, relative_decode_speed, sequences_that_fit,
                          weight_bytes, weight_bytes_read)

GiB, MiB, KiB = 2**30, 2**20, 2**10
SEVEN_B = ModelConfig(vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, d_ff=11008)


# -- worked figures of source_lecture_memory_bound, source_blog_numpy_toy and the zoo's -----
# public sources (toykv.zoo names them); the shares at 10^6 tokens are by hand from those shapes
def test_7b_mha_lecture_figures():
    assert kv_values_per_token(SEVEN_B) == 262_144
    assert kv_bytes_per_token(SEVEN_B) == 524_288
    assert kv_cache_bytes(SEVEN_B, 4096) == 2 * GiB
    assert kv_cache_bytes(SEVEN_B, 4096, batch=16) == 32 * GiB


def test_gqa_eight_kv_heads_is_a_quarter():
    gqa = replace(SEVEN_B, n_kv_heads=8)
    assert kv_bytes_per_token(gqa) == 128 * KiB
    assert kv_cache_bytes(gqa, 4096) == 512 * MiB
    assert kv_bytes_per_token(replace(SEVEN_B, attention="mqa")) == 524_288 // 32


def test_llama3_8b_figures():
    cfg = zoo.get("llama-3.1-8b").config
    assert kv_bytes_per_token(cfg) == 131_072
    assert kv_cache_bytes(cfg, 8192, batch=16) == 17_179_869_184


def test_llama3_70b_figures():
    cfg = zoo.get("llama-3.3-70b").config
    assert kv_bytes_per_token(cfg) == 327_680
    assert kv_cache_bytes(cfg, 131_072) == 40 * GiB
    assert kv_cache_bytes(cfg, 10**6) == 327_680_000_000
    assert round(kv_cache_bytes(cfg, 10**6) / GiB, 2) == 305.18      # the essay's "305.2 GB"


def test_qwen3_and_deepseek_v2_per_token():
    assert kv_bytes_per_token(zoo.get("qwen3-1.7b").config) == 114_688
    v2 = zoo.get("deepseek-v2").config
    assert kv_values_per_token(v2) == 34_560
    assert kv_bytes_per_token(v2) == 69_120
    assert kv_bytes_per_token(v2) / KiB == 67.5


@pytest.mark.parametrize("name, share, places", [
    ("llama-3.1-8b", 0.891, 3), ("llama-3.3-70b", 0.70, 2), ("qwen3-0.6b", 0.990, 3),
    ("deepseek-v3", 0.487, 3), ("kimi-k2", 0.523, 3), ("minimax-m2", 0.927, 3)])
def test_kv_share_at_a_million_tokens(name, share, places):
    """The source essay's figures: its convention counts every active parameter."""
    assert round(kv_share(zoo.get(name), 10**6, weights="active"), places) == share


def test_weights_read_leave_out_an_untied_embedding_but_its_looked_up_rows():
    llama = zoo.get("llama-3.1-8b")                  # untied: 128,256 x 4,096 input table
    table = 128_256 * 4_096
    assert weight_bytes_read(llama) == 2 * (8_030_000_000 - table + 4_096)
    assert weight_bytes_read(llama, 2, batch=16) == 2 * (8_030_000_000 - table + 16 * 4_096)
    qwen = zoo.get("qwen3-0.6b")                     # tied: the table is the output head
    assert weight_bytes_read(qwen) == 2 * qwen.active_params
    assert weight_bytes_read(llama, 1, batch=10**9) == 8_030_000_000   # every row looked up


def test_decode_step_bytes_by_the_rule_and_by_the_essays_convention():
    llama = zoo.get("llama-3.1-8b")
    kv = 2 * 32 * 8 * 128 * 131_072 * 2              # 2 L H_kv d_h S b
    rule = decode_step_bytes(llama, 131_072)
    assert rule == {"weights": 15_009_335_040, "kv": kv, "kv_stored": kv, "expanded": 0,
                    "total": 15_009_335_040 + kv, "share": kv / (15_009_335_040 + kv)}
    essay = decode_step_bytes(llama, 131_072, weights="active")
    assert essay["weights"] == 16_060_000_000 and essay["share"] < rule["share"]
    assert round(rule["share"], 3) == 0.534 and round(essay["share"], 3) == 0.517
    with pytest.raises(ValueError, match="weights"):
        decode_step_bytes(llama, 10, weights="all")


def test_relative_speed_is_one_minus_share():
    model = zoo.get("deepseek-v3")
    kv = kv_cache_bytes(model.config, 10**6)
    weights = weight_bytes_read(model)
    assert relative_decode_speed(model, 10**6) == pytest.approx(weights / (weights + kv))
    assert relative_decode_speed(model, 0) == 1.0


def test_share_of_a_config_uses_its_param_count():
    cfg = zoo.get("llama-2-7b").config                # untied: one row of its table is read
    kv, w = kv_cache_bytes(cfg, 4096), 2 * (param_count(cfg) - (32_000 - 1) * 4096)
    assert kv_share(cfg, 4096) == kv / (kv + w)


def test_batch_shares_weights_but_not_the_cache():
    model = zoo.get("llama-3.1-8b")
    kv = kv_cache_bytes(model.config, 8192)
    w = weight_bytes(model.active_params - (128_256 - 16) * 4096)    # 16 looked-up rows
    assert kv_share(model, 8192, batch=16) == 16 * kv / (16 * kv + w)
    assert kv_share(model, 8192, batch=16) > kv_share(model, 8192)


def test_share_accepts_an_array_of_tokens():
    model = zoo.get("qwen3-0.6b")
    tokens = np.array([[0, 1000], [10**5, 10**6]])
    shares = kv_share(model, tokens)
    assert shares.shape == (2, 2)
    assert shares[1, 1] == kv_share(model, 10**6)
    assert np.all(np.diff(shares.ravel()) > 0)
    assert np.allclose(relative_decode_speed(model, tokens), 1 - shares)


# -- layer-depth invariance (source_essay_kv_share) ---------------------------------------
def test_share_of_the_blocks_does_not_depend_on_depth():
    base = zoo.get("llama-3.3-70b").config
    shares = set()
    for n_layers in (10, 20, 40, 80, 160):
        cfg = replace(base, n_layers=n_layers)
        kv = kv_cache_bytes(cfg, 10**6)
        shares.add(Fraction(kv, kv + 2 * param_count(cfg, blocks_only=True)))
    assert len(shares) == 1


def test_essay_layer_table_halves_with_layers():
    base = zoo.get("llama-3.3-70b").config
    table = {80: 305.2, 40: 152.6, 20: 76.3, 10: 38.1}
    for n_layers, gib in table.items():
        assert round(kv_cache_bytes(replace(base, n_layers=n_layers), 10**6) / GiB, 1) == gib


def test_embeddings_make_depth_invariance_approximate():
    base = zoo.get("llama-3.3-70b").config
    shares = [kv_share(replace(base, n_layers=n), 10**6) for n in (10, 80, 640)]
    blocks = kv_cache_bytes(base, 10**6)
    pure = blocks / (blocks + 2 * param_count(base, blocks_only=True))
    assert shares[0] < shares[1] < shares[2] < pure             # embeddings weigh less as L grows
    assert pure - shares[2] < pure - shares[1] < pure - shares[0]


# -- sliding windows, linear layers, MLA -------------------------------------------------
def test_gpt_oss_sliding_layers_stop_at_128():
    cfg = zoo.get("gpt-oss-120b").config
    per_value = 2 * 8 * 64 * 2
    assert kv_cache_bytes(cfg, 10**6) == (18 * 10**6 + 18 * 128) * per_value
    assert kv_cache_bytes(cfg, 100) == 36 * 100 * per_value


def test_gemma3_five_local_one_global():
    cfg = zoo.get("gemma-3-27b").config
    per_value = 2 * 16 * 128 * 2
    assert kv_cache_bytes(cfg, 10**6) == (10 * 10**6 + 52 * 1024) * per_value
    step = kv_cache_bytes(cfg, 5001) - kv_cache_bytes(cfg, 5000)
    assert step == 10 * per_value                                # only the 10 global layers grow


def test_gemma2_alternating_window():
    cfg = zoo.get("gemma-2-9b").config
    assert kv_cache_bytes(cfg, 10**6) == (21 * 10**6 + 21 * 4096) * 2 * 8 * 256 * 2


def test_mistral_cache_stops_growing_past_its_window():
    cfg = zoo.get("mistral-7b-v0.1").config
    full = 32 * 4096 * 2 * 8 * 128 * 2
    assert kv_cache_bytes(cfg, 4096) == kv_cache_bytes(cfg, 10**6) == full
    assert kv_cache_bytes(cfg, 4095) < full


def test_linear_layers_hold_a_fixed_state():
    model = zoo.get("qwen3-next-80b-a3b")
    cfg = model.config
    state = 36 * cfg.linear_state_values * 2
    assert kv_cache_bytes(cfg, 0) == state
    assert kv_cache_bytes(cfg, 10**6) - state == 12 * 10**6 * 2 * 2 * 256 * 2
    assert kv_values_per_token(cfg) == 12 * 2 * 2 * 256
    assert kv_cache_bytes(cfg, 10, batch=3) == 3 * kv_cache_bytes(cfg, 10)


def test_mla_cache_is_latent_plus_rope_key():
    cfg = zoo.get("deepseek-v3").config
    assert kv_cache_bytes(cfg, 10**6) == 61 * 576 * 2 * 10**6
    assert kv_cache_bytes(cfg, 10, scale_bytes=4) == 61 * 10 * (576 * 2 + 2 * 4)


# -- precision ------------------------------------------------------------------------
def test_fractional_bytes_per_value():
    assert kv_bytes_per_token(SEVEN_B, 0.5) == 131_072
    assert kv_cache_bytes(SEVEN_B, 3, bytes_per_value=0.5) == 3 * 131_072
    assert isinstance(kv_cache_bytes(SEVEN_B, 3, bytes_per_value=0.5), int)
    with pytest.raises(ValueError, match="whole number"):
        kv_bytes_per_token(SEVEN_B, 0.3)
    odd = ModelConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=2, d_ff=8,
                      layer_types=("linear",), linear_state_values=3)
    with pytest.raises(ValueError, match="whole number"):
        kv_cache_bytes(odd, 5, bytes_per_value=0.5)


def test_scale_bytes_per_kv_head():
    cfg = replace(SEVEN_B, n_kv_heads=8)
    plain = kv_cache_bytes(cfg, 100, bytes_per_value=1)
    assert kv_cache_bytes(cfg, 100, bytes_per_value=1, scale_bytes=4) == plain + 32 * 100 * 16 * 4


# -- agreement with toykv's own model and cache -----------------------------------------------
TOY_VARIANTS = {
    "mha": dict(),
    "gqa": dict(n_kv_heads=2),
    "mqa": dict(n_kv_heads=1),
    "mla": dict(attention="mla", kv_lora_rank=32, rope_head_dim=8),
    "sliding": dict(n_kv_heads=2, sliding_window=8, layer_types=("sliding", "full")),
    "untied": dict(n_kv_heads=4, tie_embeddings=False),
}


@pytest.mark.parametrize("variant", TOY_VARIANTS)
def test_param_count_matches_the_model_arrays(variant):
    model = ToyTransformer(source_toy(**TOY_VARIANTS[variant]))
    arrays = [model.embed, model.final_norm] + [a for layer in model.layers for a in layer.values()]
    if model.lm_head is not None:
        arrays.append(model.lm_head)
    assert param_count(model.config) == sum(a.size for a in arrays)
    assert model.weight_nbytes == 4 * param_count(model.config)          # float32
    blocks = sum(a.size for layer in model.layers for a in layer.values())
    assert param_count(model.config, blocks_only=True) == blocks


@pytest.mark.parametrize("variant", TOY_VARIANTS)
@pytest.mark.parametrize("kv_dtype, bytes_per_value, scale_bytes",
                         [("float32", 4, 0), ("float16", 2, 0), ("int8", 1, 4)])
def test_cache_nbytes_matches_the_formula(variant, kv_dtype, bytes_per_value, scale_bytes):
    model = ToyTransformer(source_toy(max_seq_len=64, **TOY_VARIANTS[variant]))
    cache = model.new_cache(kv_dtype=kv_dtype)
    model.forward(np.arange(12) % 512, cache)
    model.forward(np.array([3]), cache)
    assert cache.nbytes == kv_cache_bytes(model.config, 13, bytes_per_value=bytes_per_value,
                                          scale_bytes=scale_bytes)


def test_llama2_7b_exact_param_count():
    assert param_count(zoo.get("llama-2-7b").config) == 6_738_415_616
    assert param_count(replace(SEVEN_B, tie_embeddings=False)) == 6_738_415_616


# -- weights and the bandwidth bound (source_lecture_memory_bound) -------------------------
def test_bandwidth_bound_examples():
    weights = weight_bytes(7 * 10**9)
    assert weights == 14 * 10**9
    assert int(max_tokens_per_second(10**12, weights)) == 71
    step = weights + kv_cache_bytes(SEVEN_B, 4096)
    assert round(max_tokens_per_second(10**12, step)) == 62
    assert weight_bytes(7 * 10**9, 0.5) == 3_500_000_000


# -- bad input -----------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, field", [
    (dict(tokens=-1), "tokens"), (dict(tokens=1.5), "tokens"), (dict(tokens=True), "tokens"),
    (dict(batch=0), "batch"), (dict(batch=2.0), "batch"), (dict(batch=True), "batch"),
    (dict(bytes_per_value=0), "bytes_per_value"), (dict(bytes_per_value=-2), "bytes_per_value"),
    (dict(bytes_per_value="2"), "bytes_per_value"),
    (dict(bytes_per_value=float("nan")), "bytes_per_value"),
    (dict(bytes_per_value=float("inf")), "bytes_per_value"),
    (dict(scale_bytes=-4), "scale_bytes")])
def test_kv_cache_bytes_rejects_bad_input(kwargs, field):
    args = dict(tokens=10, batch=1, bytes_per_value=2, scale_bytes=0) | kwargs
    with pytest.raises(ValueError, match=field):
        kv_cache_bytes(SEVEN_B, **args)


def test_other_bad_inputs():
    with pytest.raises(ValueError, match="config"):
        kv_bytes_per_token("llama-3.1-8b")
    with pytest.raises(ValueError, match="bytes_per_value"):
        kv_bytes_per_token(SEVEN_B, 0)
    with pytest.raises(ValueError, match="model"):
        kv_share("llama-3.1-8b", 10)
    with pytest.raises(ValueError, match="tokens"):
        kv_share(SEVEN_B, np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="tokens"):
        kv_share(SEVEN_B, np.array([1, -2]))
    with pytest.raises(ValueError, match="batch"):
        kv_share(SEVEN_B, 10, batch=0)
    with pytest.raises(ValueError, match="bytes_per_param"):
        relative_decode_speed(SEVEN_B, 10, bytes_per_param=0)
    with pytest.raises(ValueError, match="params"):
        weight_bytes(-1)
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s"):
        max_tokens_per_second(0, 10)
    with pytest.raises(ValueError, match="bytes_per_step"):
        max_tokens_per_second(10, -1)
    with pytest.raises(ValueError, match="config"):
        param_count(None)


# -- one policy for numbers (toykv.validate) ----------------------------------------------
def test_numpy_numbers_are_accepted_where_python_ones_are():
    assert kv_cache_bytes(SEVEN_B, np.int64(4096), batch=np.int32(16)) == 32 * GiB
    assert kv_cache_bytes(SEVEN_B, 3, bytes_per_value=np.float32(0.5)) == 3 * 131_072
    assert kv_bytes_per_token(SEVEN_B, np.float64(1)) == 262_144
    assert weight_bytes(np.int64(7 * 10**9), np.int64(2)) == 14 * 10**9
    assert kv_share(SEVEN_B, np.int64(4096)) == kv_share(SEVEN_B, 4096)


@pytest.mark.parametrize("call, name", [
    (lambda: weight_bytes(7e9), "params"), (lambda: weight_bytes(True), "params"),
    (lambda: weight_bytes(10, bytes_per_param=True), "bytes_per_param"),
    (lambda: kv_share(SEVEN_B, 10, batch=1.0), "batch"),
    (lambda: kv_share(SEVEN_B, 10.0), "tokens"),
    (lambda: kv_cache_bytes(SEVEN_B, np.float64(10)), "tokens"),
    (lambda: max_tokens_per_second(float("inf"), 1), "bandwidth_bytes_per_s"),
])
def test_floats_and_bools_are_not_counts(call, name):
    with pytest.raises(ValueError, match=name):
        call()


# -- the memory ceiling: sequences beside the weights (chapter 6) ---------------------------
def test_sequences_that_fit_by_hand():
    from toykv.sizing import sequences_that_fit
    llama8 = zoo.get("llama-3.1-8b")                             # 8.03B, 128 KiB per token
    room = 80 * GiB - 2 * 8_030_000_000
    assert sequences_that_fit(llama8, 32_768, 80 * GiB) == room // (128 * KiB * 32_768)
    assert sequences_that_fit(llama8, 32_768, 80 * GiB, bytes_per_value=1) == \
        room // (64 * KiB * 32_768)
    assert sequences_that_fit(llama8, 1000, 10 * GiB) == 0       # the weights do not fit
    moe = zoo.get("gpt-oss-20b")                 # all 21B experts stay: 42e9 bytes in bf16
    assert sequences_that_fit(moe, 1, 39 * GiB) == 0 < sequences_that_fit(moe, 1, 40 * GiB)
    c = source_toy()                                             # a config: all its params
    per_sequence = kv_cache_bytes(c, 100)
    assert sequences_that_fit(c, 100, 2 * param_count(c) + 5 * per_sequence) == 5


def test_sequences_that_fit_refuses_bad_input():
    from toykv.sizing import sequences_that_fit
    for kwargs, name in ((dict(tokens=0), "tokens"), (dict(memory_bytes=-1), "memory_bytes"),
                         (dict(tokens=1.5), "tokens"), (dict(bytes_per_value=0),
                                                        "bytes_per_value")):
        args = dict(model=source_toy(), tokens=10, memory_bytes=10**9) | kwargs
        with pytest.raises(ValueError, match=name):
            sequences_that_fit(**args)


# -- cross-layer KV sharing (brandon2024cla): counts worked out by hand from the shapes --------
def test_kv_sharing_counts_only_the_layers_that_store():
    llama = zoo.get("llama-3.1-8b").config             # 32 layers, 8 KV heads of 128
    assert kv_bytes_per_token(llama, kv_sharing=2) == 2 * 16 * 8 * 128 * 2 == 65_536
    assert kv_bytes_per_token(llama, kv_sharing=3) == 2 * 11 * 8 * 128 * 2   # ceil(32 / 3)
    assert kv_bytes_per_token(llama, kv_sharing=32) == 2 * 1 * 8 * 128 * 2
    assert kv_cache_bytes(llama, 8192, batch=16, kv_sharing=2) == 17_179_869_184 // 2
    v2 = zoo.get("deepseek-v2").config                  # 60 MLA layers, 512 + 64 values
    assert kv_values_per_token(v2, kv_sharing=2) == 30 * 576
    assert kv_cache_bytes(v2, 10, bytes_per_value=1, scale_bytes=4, kv_sharing=4) == \
        15 * 10 * (576 + 4 * 2)                         # int8: a scale per latent, per rotary key


def test_kv_sharing_pairs_layers_of_the_same_kind():
    gemma = zoo.get("gemma-3-27b").config               # 52 local (1024), 10 global layers
    per_layer = 2 * 16 * 128 * 2                        # bf16 bytes per token and layer
    S = 131_072
    assert kv_cache_bytes(gemma, S, kv_sharing=2) == (26 * 1024 + 5 * S) * per_layer
    assert kv_cache_bytes(gemma, S, kv_sharing=5) == (11 * 1024 + 2 * S) * per_layer
    nxt = zoo.get("qwen3-next-80b-a3b").config          # 12 full layers, 36 linear states
    state = kv_cache_bytes(nxt, 0)
    assert kv_cache_bytes(nxt, 1000, kv_sharing=2) == state + 6 * 1000 * 2 * 2 * 256 * 2


def test_kv_sharing_drops_the_reusing_layers_kv_projections():
    llama8 = zoo.get("llama-3.1-8b")
    dropped = 16 * 2 * 4096 * 1024                      # wk and wv of 16 reusing layers
    plain, shared = (decode_step_bytes(llama8, 131_072, kv_sharing=s) for s in (1, 2))
    assert plain["weights"] - shared["weights"] == 2 * dropped      # bf16
    assert shared["kv_stored"] * 2 == plain["kv_stored"] == plain["kv"]
    assert shared["share"] == shared["kv"] / (shared["kv"] + shared["weights"])
    assert kv_share(llama8, 131_072, kv_sharing=2) == shared["share"]
    active = decode_step_bytes(llama8, 10, weights="active", kv_sharing=2)["weights"]
    assert active == 2 * (llama8.active_params - dropped)
    v2 = zoo.get("deepseek-v2").config
    assert kv_projection_params(v2, 2) == 30 * (5120 * 576 + 512)  # W_DKV and the latent's norm
    assert kv_projection_params(v2, 1) == 0


def test_kv_sharing_cuts_the_bytes_held_not_the_bytes_a_step_reads():
    # every layer attends over the cache it uses after the previous layer has finished, so a
    # cache shared by s layers is read s times a step (austin2025scaling): at 128K tokens,
    # batch 1, only W_K and W_V of the 16 reusing layers drop out of the bytes read
    llama8 = zoo.get("llama-3.1-8b")
    S, per_layer = 131_072, 2 * 8 * 128 * 2                 # bf16 bytes per token and layer
    plain, shared = (decode_step_bytes(llama8, S, kv_sharing=s) for s in (1, 2))
    assert shared["kv"] == plain["kv"] == 32 * per_layer * S == 17_179_869_184
    assert shared["kv_stored"] == 16 * per_layer * S
    assert plain["total"] - shared["total"] == 2 * 16 * 2 * 4096 * 1024      # W_K, W_V
    assert round(plain["total"] / 1e9, 2) == 32.19 and round(shared["total"] / 1e9, 2) == 31.92
    assert kv_share(llama8, S, kv_sharing=2) > kv_share(llama8, S)  # fewer weights, same cache
    gemma = zoo.get("gemma-3-27b").config                   # windows: each layer its own kind
    read = decode_step_bytes(gemma, S, kv_sharing=2)
    per_layer = 2 * 16 * 128 * 2
    assert read["kv"] == kv_cache_bytes(gemma, S) == (52 * 1024 + 10 * S) * per_layer
    assert read["kv_stored"] == (26 * 1024 + 5 * S) * per_layer     # ceil(52/2), ceil(10/2)


def test_kv_sharing_fits_more_sequences():
    # what sharing buys is room: the cache held halves, so twice the sequences fit (and the
    # freed W_K, W_V make no room for a 33rd)
    from toykv.sizing import sequences_that_fit
    llama8, memory = zoo.get("llama-3.1-8b"), 80 * 2**30
    room = memory - 2 * llama8.total_params
    assert sequences_that_fit(llama8, 32_768, memory) == room // (32 * 4096 * 32_768) == 16
    dropped = 16 * 2 * 4096 * 1024                          # the reusing layers' W_K, W_V
    assert sequences_that_fit(llama8, 32_768, memory, kv_sharing=2) == \
        (room + 2 * dropped) // (16 * 4096 * 32_768) == 32
    with pytest.raises(ValueError, match="kv_sharing"):
        sequences_that_fit(llama8, 32_768, memory, kv_sharing=0)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gemma-3-27b", "deepseek-v2", "gpt-oss-120b",
                                  "qwen3-next-80b-a3b"])
def test_kv_sharing_one_is_no_sharing(name):
    model = zoo.get(name)
    assert kv_bytes_per_token(model.config, kv_sharing=1) == kv_bytes_per_token(model.config)
    assert decode_step_bytes(model, 4096, kv_sharing=1) == decode_step_bytes(model, 4096)
    assert relative_decode_speed(model, 4096, kv_sharing=1) == relative_decode_speed(model, 4096)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "2", None, 33])
def test_kv_sharing_bad_values_are_refused(bad):
    llama = zoo.get("llama-3.1-8b")
    with pytest.raises(ValueError, match="kv_sharing"):
        kv_bytes_per_token(llama.config, kv_sharing=bad)
    with pytest.raises(ValueError, match="kv_sharing"):
        kv_share(llama, 1000, kv_sharing=bad)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gemma-3-27b", "deepseek-v2",
                                  "qwen3-next-80b-a3b"])
@pytest.mark.parametrize("s", [2, 3, 5])
def test_a_config_that_shares_counts_what_the_kv_sharing_argument_counts(name, s):
    """A config built with kv_sharing = s (one toykv's model runs) describes its reusing layers
    itself; every count of sizing then equals the count of the argument on the plain config."""
    model = zoo.get(name)
    shared = replace(model.config, kv_sharing=s)
    assert kv_bytes_per_token(shared) == kv_bytes_per_token(model.config, kv_sharing=s)
    assert kv_cache_bytes(shared, 70_000, batch=3, bytes_per_value=1, scale_bytes=4) == \
        kv_cache_bytes(model.config, 70_000, batch=3, bytes_per_value=1, scale_bytes=4,
                       kv_sharing=s)
    assert param_count(model.config) - param_count(shared) == \
        kv_projection_params(model.config, s)
    assert kv_projection_params(shared) == 0
    step, by_argument = decode_step_bytes(shared, 70_000), \
        decode_step_bytes(model.config, 70_000, kv_sharing=s)
    assert step == by_argument and step["kv"] > step["kv_stored"]      # read by every layer
    assert kv_share(shared, 70_000) == kv_share(model.config, 70_000, kv_sharing=s)
    assert sequences_that_fit(shared, 70_000, 10 ** 12) == \
        sequences_that_fit(model.config, 70_000, 10 ** 12, kv_sharing=s)
    with pytest.raises(ValueError, match="already shares"):
        kv_bytes_per_token(shared, kv_sharing=2)


@pytest.mark.parametrize("name", ["shared", "lowrank_shared", "mla_shared"])
@pytest.mark.parametrize("kv_dtype, b, scale", [("float32", 4, 0), ("float16", 2, 0),
                                                ("int8", 1, 4)])
def test_a_sharing_models_cache_holds_what_a_step_counts_as_stored(name, kv_dtype, b, scale):
    """toykv's model running kv_sharing: cache.nbytes is decode_step_bytes' 'kv_stored' (the
    storing layers), and 'kv' counts every layer reading the cache it attends to, in every
    cache dtype (int8: a float32 scale per token, layer and head or entry)."""
    model = make_model(name)
    cache = model.new_cache(kv_dtype=kv_dtype)
    model.forward(token_ids(13), cache)
    step = decode_step_bytes(model.config, 13, 1, b, 4, scale_bytes=scale)
    assert cache.nbytes == step["kv_stored"] == kv_cache_bytes(model.config, 13, 1, b, scale)
    unshared = replace(model.config, kv_sharing=1)
    assert step["kv"] == kv_cache_bytes(unshared, 13, 1, b, scale) > step["kv_stored"]
    stores = len(set(model.config.kv_sources))                  # layers that hold a cache
    assert step["kv_stored"] * model.config.n_layers == step["kv"] * stores


def test_a_sharing_models_paged_and_quantized_caches_hold_the_storing_layers():
    """A block pool's blocks and a quantized cache of a sharing model hold the storing layers'
    entries only: a block weighs what sizing counts for block_size tokens, and a quantized
    cache what its scheme counts (QuantScheme.nbytes)."""
    from toykv.kvquant import QuantScheme
    model = make_model("shared")                                # 2 of 4 layers store
    pool = model.new_paged_cache(8, 4)
    assert pool.block_nbytes == kv_cache_bytes(model.config, 4, 1, 4)
    assert pool.block_nbytes * 2 == kv_cache_bytes(replace(model.config, kv_sharing=1), 4, 1, 4)
    scheme = QuantScheme(4, group=4, residual=4)
    cache = model.new_cache(quant=scheme)
    model.forward(token_ids(13), cache)
    assert cache.nbytes == scheme.nbytes(model.config, 13)
    assert scheme.nbytes(model.config, 13) * 2 == \
        scheme.nbytes(replace(model.config, kv_sharing=1), 13)
