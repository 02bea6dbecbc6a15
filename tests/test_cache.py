"""KVCache: nbytes against the size formula, the source's figures, windows, int8/float16, errors."""
import numpy as np
import pytest

from toykv import KVCache, ModelConfig, ToyTransformer, source_toy
from toykv.sizing import kv_cache_bytes

BASE = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=64)
MLA = dict(attention="mla", kv_lora_rank=8, rope_head_dim=4)


def toy(**changes):
    return ToyTransformer(ModelConfig(**{**BASE, **changes}))


def ids(n, vocab=BASE["vocab_size"], seed=0):
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, n)]


def kv_formula(c, tokens, itemsize):
    """2 (K and V) x layers x KV heads x head_dim x tokens x bytes per value."""
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * tokens * itemsize


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_nbytes_equals_formula_while_filling(n_kv_heads):
    model = toy(n_kv_heads=n_kv_heads)
    cache = model.new_cache()
    assert cache.nbytes == 0 and len(cache) == 0
    model.forward(ids(7), cache)
    for tokens in range(8, 20):
        model.forward([tokens % 64], cache)
        assert len(cache) == tokens
        assert cache.nbytes == kv_formula(model.config, tokens, 4)
        assert cache.allocated_nbytes >= cache.nbytes
    assert cache.allocated_nbytes == kv_formula(model.config, BASE["max_seq_len"], 4)


@pytest.mark.parametrize("n_kv_heads, expected", [(8, 2_097_152), (2, 524_288), (1, 262_144)])
def test_source_toy_figures_after_1024_token_prefill(n_kv_heads, expected):
    # figures from the blog post (source 003), "Result 3": 2 x 2 x h_kv x 16 x 1,024 x 4 bytes
    config = source_toy(n_kv_heads=n_kv_heads)
    assert config.max_seq_len >= 1024
    model = ToyTransformer(config)
    cache = model.new_cache()
    model.forward(ids(1024, vocab=config.vocab_size), cache)
    assert len(cache) == 1024
    assert cache.nbytes == expected == kv_formula(config, 1024, 4)
    assert cache.allocated_nbytes >= cache.nbytes


def test_mla_cache_holds_latent_and_rotary_key():
    model = toy(**MLA)
    cache = model.new_cache()
    model.forward(ids(9), cache)
    c = model.config
    assert cache.nbytes == c.n_layers * 9 * (c.kv_lora_rank + c.rope_head_dim) * 4
    assert cache.nbytes < kv_formula(c, 9, 4)           # smaller than MHA's K and V


def test_sliding_window_nbytes_stops_growing_at_window():
    model, W = toy(sliding_window=5), 5
    cache, sizes = model.new_cache(), []
    for t in ids(30):
        model.forward([t], cache)
        sizes.append(cache.nbytes)
    for tokens, size in enumerate(sizes, start=1):
        assert size == kv_formula(model.config, min(tokens, W), 4)
    assert len(cache) == 30
    assert cache.allocated_nbytes == kv_formula(model.config, W, 4)


def test_mixed_layers_sum_their_own_sizes():
    model = toy(sliding_window=5, layer_types=("sliding", "full"))
    cache = model.new_cache()
    model.forward(ids(20), cache)
    one_layer = kv_formula(model.config, 1, 4) // model.config.n_layers   # per token, per layer
    assert cache.nbytes == one_layer * (5 + 20)


@pytest.mark.parametrize("changes", [{}, dict(n_kv_heads=1)])
def test_int8_nbytes_counts_values_and_scales(changes):
    model = toy(**changes)
    cache = model.new_cache("int8")
    model.forward(ids(13), cache)
    c, T = model.config, 13
    values = 2 * c.n_layers * c.n_kv_heads * c.head_dim * T * 1
    scales = 2 * c.n_layers * c.n_kv_heads * T * 4          # one float32 per token and head
    assert cache.nbytes == values + scales


def test_int8_mla_nbytes_counts_values_and_scales():
    model = toy(**MLA)
    cache = model.new_cache("int8")
    model.forward(ids(13), cache)
    c = model.config
    values = c.n_layers * 13 * (c.kv_lora_rank + c.rope_head_dim) * 1
    scales = c.n_layers * 13 * 2 * 4                         # c_kv and k_rope, per token
    assert cache.nbytes == values + scales


def test_float16_nbytes_uses_two_bytes_per_value():
    model = toy(n_kv_heads=2)
    cache = model.new_cache("float16")
    model.forward(ids(11), cache)
    assert cache.nbytes == kv_formula(model.config, 11, 2)


def logit_error(model, kv_dtype, n_prompt=8, n_steps=40):
    """Decode with a float32 cache and a kv_dtype cache on the same tokens.

    Returns (max |logit diff| over all steps, fraction of steps with the same greedy token)."""
    c32, cq = model.new_cache(), model.new_cache(kv_dtype)
    prompt = ids(n_prompt)
    a, b = model.forward(prompt, c32)[-1], model.forward(prompt, cq)[-1]
    worst, same = 0.0, 0
    for _ in range(n_steps):
        worst = max(worst, float(np.abs(a - b).max()))
        same += int(np.argmax(a) == np.argmax(b))
        token = int(np.argmax(a))
        a, b = model.forward([token], c32)[-1], model.forward([token], cq)[-1]
    return worst, same / n_steps


# Measured on this toy (seed 0, 40 steps): int8 max |diff| 0.015-0.030 with logits of size ~3,
# float16 0.0008-0.0014; greedy tokens all equal. The bounds leave a margin of 3x or more.
@pytest.mark.parametrize("changes", [{}, dict(n_kv_heads=2), MLA])
def test_int8_cache_logit_error_is_small_and_measured(changes):
    model = toy(**changes)
    worst, same = logit_error(model, "int8")
    assert 0 < worst < 0.1                                  # > 0: it is really quantized
    assert same >= 0.9


@pytest.mark.parametrize("changes", [{}, MLA])
def test_float16_cache_logit_error_is_smaller(changes):
    model = toy(**changes)
    worst16, same = logit_error(model, "float16")
    assert 0 < worst16 < 0.01 and same >= 0.9
    assert worst16 < logit_error(model, "int8")[0]


def test_int8_values_roundtrip_within_half_a_step():
    model = toy()
    c32, c8 = model.new_cache(), model.new_cache("int8")
    model.forward(ids(10), c32)
    model.forward(ids(10), c8)
    for name in ("k", "v"):
        exact, approx = c32.stored(0, name), c8.stored(0, name)
        step = np.abs(exact).max(axis=-1, keepdims=True) / 127        # per token and head
        assert np.all(np.abs(exact - approx) <= step / 2 + 1e-7)


@pytest.mark.parametrize("changes, names", [({}, ("k", "v")), (MLA, ("c_kv", "k_rope")),
                                            (dict(sliding_window=6), ("k", "v"))])
def test_early_keys_and_values_do_not_change_when_tokens_are_appended(changes, names):
    model = toy(**changes)
    cache, sequence = model.new_cache(), ids(20)
    model.forward(sequence[:5], cache)
    before = {(i, n): cache.stored(i, n).copy() for i in range(2) for n in names}
    model.forward(sequence[5:8], cache)
    model.forward([sequence[8]], cache)
    for (layer, name), old in before.items():
        now = cache.stored(layer, name)                  # positions 0..8 (last window if sliding)
        kept = 5 - max(0, 9 - cache.capacity[layer])     # early positions still held
        assert np.array_equal(now[:kept], old[5 - kept:]), (layer, name)


def test_early_raw_arrays_untouched_by_later_writes():
    model = toy(n_kv_heads=2)
    cache = model.new_cache()
    model.forward(ids(6), cache)
    raw = [cache.layers[i]["k"][:6].copy() for i in range(2)]
    model.forward(ids(10, seed=1), cache)
    for i in range(2):
        assert np.array_equal(cache.layers[i]["k"][:6], raw[i])


SIZING_CASES = {"mha": {}, "gqa": dict(n_kv_heads=2), "mqa": dict(n_kv_heads=1), "mla": MLA,
                "sliding": dict(sliding_window=5),
                "mixed": dict(sliding_window=5, layer_types=("sliding", "full"))}


@pytest.mark.parametrize("name", SIZING_CASES)
@pytest.mark.parametrize("kv_dtype, itemsize, scale_bytes",
                         [("float32", 4, 0), ("float16", 2, 0), ("int8", 1, 4)])
def test_nbytes_equals_sizing_kv_cache_bytes(name, kv_dtype, itemsize, scale_bytes):
    model = toy(**SIZING_CASES[name])
    cache = model.new_cache(kv_dtype)
    for chunk in (ids(3), ids(9, seed=1), [1], [2]):    # 3, 12, 13, 14 tokens: windows wrap
        model.forward(chunk, cache)
        assert cache.nbytes == kv_cache_bytes(model.config, len(cache),
                                              bytes_per_value=itemsize, scale_bytes=scale_bytes)


# -- errors --------------------------------------------------------------------------

def test_cache_from_another_config_is_rejected():
    model, other = toy(), toy(n_kv_heads=2)
    cache = other.new_cache()
    with pytest.raises(ValueError, match="config"):
        model.forward([1, 2], cache)
    with pytest.raises(ValueError, match="config"):
        model.forward([1, 2], "not a cache")


def test_cache_filled_past_max_seq_len_is_rejected():
    model = toy(max_seq_len=8)
    cache = model.new_cache()
    model.forward(ids(6), cache)
    with pytest.raises(ValueError, match="max_seq_len"):
        model.forward(ids(3), cache)
    assert len(cache) == 6                                 # the failed call stored nothing
    model.forward(ids(2), cache)
    with pytest.raises(ValueError, match="max_seq_len"):
        model.forward([1], cache)


def test_cache_update_itself_refuses_to_overflow():
    cache = KVCache(ModelConfig(**{**BASE, "max_seq_len": 4}))
    k = np.zeros((5, 4, 8), np.float32)
    with pytest.raises(ValueError, match="max_seq_len"):
        cache.update(0, k=k, v=k)


def test_cache_rejects_unknown_dtype_and_linear_layers():
    with pytest.raises(ValueError, match="kv_dtype"):
        KVCache(ModelConfig(**BASE), "bfloat16")
    cfg = ModelConfig(**BASE, layer_types=("linear", "full"), linear_state_values=8)
    with pytest.raises(ValueError, match="linear"):
        KVCache(cfg)
