"""KVCache: nbytes against the size formula and the source's figures, batches, windows,
int8/float16 caches read the same way on every layer kind, and the errors."""
import numpy as np
import pytest
from conftest import BASE, MLA, batch_ids, kv_formula, make_model
from conftest import token_ids as ids

from toykv import KVCache, ModelConfig, ToyTransformer, generate, source_toy
from toykv.sizing import kv_cache_bytes


def toy(**changes):
    return ToyTransformer(ModelConfig(**{**BASE, **changes}))


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
    # source_blog_numpy_toy, "Result 3": 2 x 2 x H_kv x 16 x 1,024 x 4 bytes
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
    cache = model.new_cache(kv_dtype="int8")
    model.forward(ids(13), cache)
    c, T = model.config, 13
    values = 2 * c.n_layers * c.n_kv_heads * c.head_dim * T * 1
    scales = 2 * c.n_layers * c.n_kv_heads * T * 4          # one float32 per token and head
    assert cache.nbytes == values + scales


def test_int8_mla_nbytes_counts_values_and_scales():
    model = toy(**MLA)
    cache = model.new_cache(kv_dtype="int8")
    model.forward(ids(13), cache)
    c = model.config
    values = c.n_layers * 13 * (c.kv_lora_rank + c.rope_head_dim) * 1
    scales = c.n_layers * 13 * 2 * 4                         # c_kv and k_rope, per token
    assert cache.nbytes == values + scales


def test_float16_nbytes_uses_two_bytes_per_value():
    model = toy(n_kv_heads=2)
    cache = model.new_cache(kv_dtype="float16")
    model.forward(ids(11), cache)
    assert cache.nbytes == kv_formula(model.config, 11, 2)


def logit_error(model, kv_dtype, n_prompt=8, n_steps=40):
    """Decode with a float32 cache and a kv_dtype cache on the same tokens.

    Returns (max |logit diff| over all steps, fraction of steps with the same greedy token)."""
    c32, cq = model.new_cache(), model.new_cache(kv_dtype=kv_dtype)
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
    c32, c8 = model.new_cache(), model.new_cache(kv_dtype="int8")
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


# -- errors --------------------------------------------------------------------------

def test_cache_from_another_config_is_rejected():
    model, other = toy(), toy(n_kv_heads=2)
    cache = other.new_cache()
    with pytest.raises(ValueError, match="config"):
        model.forward([1, 2], cache)
    with pytest.raises(ValueError, match="cache must be a toykv.KVCache, got str"):
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
        KVCache(ModelConfig(**BASE), kv_dtype="bfloat16")
    cfg = ModelConfig(**BASE, layer_types=("linear", "full"), linear_state_values=8)
    with pytest.raises(ValueError, match="linear"):
        KVCache(cfg)


# -- batches ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", SIZING_CASES)
@pytest.mark.parametrize("kv_dtype, itemsize, scale_bytes",
                         [("float32", 4, 0), ("float16", 2, 0), ("int8", 1, 4)])
@pytest.mark.parametrize("batch", [None, 1, 3])
def test_batched_nbytes_equals_sizing_for_every_variant(name, kv_dtype, itemsize, scale_bytes,
                                                        batch):
    model = toy(**SIZING_CASES[name])
    cache = model.new_cache(batch=batch, kv_dtype=kv_dtype)
    assert cache.batch == batch
    assert (cache.bytes_per_value, cache.scale_bytes) == (itemsize, scale_bytes)
    for T in (3, 9, 1, 1):                               # 3, 12, 13, 14 tokens: windows wrap
        chunk = batch_ids(batch or 1, T, seed=T)
        model.forward(chunk if batch else chunk[0], cache)
        assert cache.nbytes == kv_cache_bytes(model.config, len(cache), batch=batch or 1,
                                              bytes_per_value=itemsize, scale_bytes=scale_bytes)


@pytest.mark.parametrize("batch", [1, 4])
def test_batched_mha_nbytes_by_hand_and_array_shapes(batch):
    model = toy(n_kv_heads=2)
    cache = model.new_cache(batch=batch)
    model.forward(batch_ids(batch, 10), cache)
    assert len(cache) == 10                              # tokens per sequence
    assert cache.nbytes == kv_formula(model.config, 10, 4, batch) == batch * 2 * 2 * 2 * 8 * 10 * 4
    assert cache.layers[0]["k"].shape == (batch, BASE["max_seq_len"], 2, 8)
    assert model.new_cache().layers[0]["k"].shape == (BASE["max_seq_len"], 2, 8)


@pytest.mark.parametrize("name", ["mha", "mla_expanded", "sliding"])
def test_batched_stored_rows_are_each_sequences_own(name):
    model, ids2 = make_model(name, exact=True), batch_ids(2, 11)
    cache = model.new_cache(batch=2)
    model.forward(ids2[:, :7], cache)
    model.forward(ids2[:, 7:], cache)
    for row in range(2):
        alone = model.new_cache()
        model.forward(ids2[row], alone)
        for i in range(BASE["n_layers"]):
            for key in cache.names:
                assert np.array_equal(cache.stored(i, key)[row], alone.stored(i, key))


# -- int8 and float16: sliding and full layers attend to the same values ----------------------
# Decision (toykv/cache.py, KVCache._update): every layer attends to the new tokens as stored,
# quantized and read back, never to their float32 originals. Then a token's key does not
# depend on whether it arrived in one prefill or step by step, and a sliding layer whose
# window covers the sequence is exactly a full layer.

@pytest.mark.parametrize("kv_dtype", ["int8", "float16"])
def test_sliding_layer_with_a_wide_window_is_exactly_a_full_layer(kv_dtype):
    full = make_model("mha", exact=True)
    wide = make_model("mha", exact=True, sliding_window=BASE["max_seq_len"])
    assert wide.config.layer_kinds == ("sliding", "sliding")
    assert np.array_equal(full.layers[0]["wq"], wide.layers[0]["wq"])     # same weights
    sequence = ids(20)
    for chunks in ([20], [8, 1, 1, 10], [1] * 20):
        logits = {}
        for model in (full, wide):
            cache, parts, start = model.new_cache(kv_dtype=kv_dtype), [], 0
            for n in chunks:
                parts.append(model.forward(sequence[start:start + n], cache))
                start += n
            logits[model is wide] = np.concatenate(parts)
        assert np.array_equal(logits[True], logits[False]), chunks


@pytest.mark.parametrize("kv_dtype", ["int8", "float16"])
@pytest.mark.parametrize("name", ["mha", "sliding", "mixed", "mla_absorbed"])
def test_quantized_cache_chunked_equals_one_pass_bit_for_bit(kv_dtype, name):
    model, sequence = make_model(name, exact=True), ids(18)     # windows of 4 wrap
    one = model.forward(sequence, model.new_cache(kv_dtype=kv_dtype))
    cache = model.new_cache(kv_dtype=kv_dtype)
    steps = [model.forward(sequence[:9], cache)] + [model.forward([t], cache)
                                                    for t in sequence[9:]]
    assert np.array_equal(np.concatenate(steps), one)
    if kv_dtype == "int8":                              # and it is really quantized
        assert not np.array_equal(one, model.forward(sequence))


# -- errors --------------------------------------------------------------------------

def test_cache_of_another_model_is_refused_even_with_an_equal_config():
    a, b = make_model("gqa", seed=0), make_model("gqa", seed=0)     # equal config and weights
    assert a.config == b.config
    cache = a.new_cache()
    a.forward([1, 2, 3], cache)
    with pytest.raises(ValueError, match="another ToyTransformer"):
        b.forward([4], cache)
    with pytest.raises(ValueError, match="another ToyTransformer"):
        generate(b, [4], 2, cache=cache)                # refused before any step
    assert len(cache) == 3
    direct = KVCache(a.config)                          # made by hand: the first user owns it
    b.forward([1], direct)
    with pytest.raises(ValueError, match="another ToyTransformer"):
        a.forward([2], direct)


def kv(T, *lead):
    return np.zeros((*lead, T, 4, 8), np.float32)       # [(B,) T, H_kv, d_h] of BASE


@pytest.mark.parametrize("call, words", [
    (lambda c: c.update(0, k=kv(2)), r"missing \['v'\]"),
    (lambda c: c.update(0, k=kv(2), v=kv(2), q=kv(2)), r"unexpected \['q'\]"),
    (lambda c: c.update(2, k=kv(2), v=kv(2)), r"layer must be an integer in \[0, 1\]"),
    (lambda c: c.update(-1, k=kv(2), v=kv(2)), "layer"),
    (lambda c: c.update(1.0, k=kv(2), v=kv(2)), "layer"),
    (lambda c: c.update(True, k=kv(2), v=kv(2)), "layer"),
    (lambda c: c.update(0, k=kv(2), v=np.zeros((2, 4, 7), np.float32)), r"v must be .*\(4, 8\)"),
    (lambda c: c.update(0, k=kv(2), v=kv(2, 1)), "v must be"),
    (lambda c: c.update(0, k=kv(2), v=kv(2).astype(int)), "v must be a float array"),
    (lambda c: c.update(0, k=kv(2), v=kv(2).tolist()), "v must be a float array"),
    (lambda c: c.update(0, k=kv(2), v=kv(3)), "same number of tokens"),
    (lambda c: c.update(0, k=kv(0), v=kv(0)), "T = 0"),
    (lambda c: c.advance(-1), "T must be"), (lambda c: c.advance(65), "T must be"),
    (lambda c: c.advance(2.0), "T must be"),
    (lambda c: c.stored(0, "q"), "name must be one of"), (lambda c: c.stored(5, "k"), "layer"),
])
def test_cache_methods_refuse_bad_arguments(call, words):
    cache = toy().new_cache()
    with pytest.raises(ValueError, match=words):
        call(cache)
    assert len(cache) == 0


def test_batched_update_takes_and_returns_a_batch_axis():
    cache = toy().new_cache(batch=3)
    seen = cache.update(0, k=kv(2, 3) + 1, v=kv(2, 3))
    assert seen.kv["k"].shape == (3, 2, 4, 8) and np.all(seen.kv["k"] == 1)
    assert list(seen.positions) == [0, 1] and list(seen.queries) == [0, 1]
    assert seen.mask.tolist() == [[True, False], [True, True]]      # causal
    with pytest.raises(ValueError, match=r"k must be .*\[3, T, \.\.\.\]"):
        cache.update(0, k=kv(2, 2), v=kv(2, 2))
    with pytest.raises(ValueError, match="k must be"):
        cache.update(0, k=kv(2), v=kv(2))
    unbatched = toy().new_cache()
    seen = unbatched.update(1, k=kv(2) + 2, v=kv(2))
    assert seen.kv["k"].shape == (2, 4, 8) and np.all(seen.kv["k"] == 2)


def test_absurd_cache_is_refused_before_allocation():
    model = toy(max_seq_len=10**9)                      # the model itself allocates no table
    with pytest.raises(ValueError, match="max_seq_len=1000000000 tokens x batch 1000 would need"):
        model.new_cache(batch=1000)


@pytest.mark.parametrize("batch", [None, 3])
def test_each_kv_head_is_one_contiguous_block(batch):
    """K and V keep their [(B,) capacity, H_kv, d_h] shape but are stored head-major, as Hugging
    Face's [batch, heads, tokens, head_dim] caches are: attention reads one head as a plain
    matrix. Writing through the shape still lands at the right token and head."""
    config = ModelConfig(**BASE)
    model = ToyTransformer(config)
    cache = model.new_cache(batch=batch)
    ids = np.arange(5) if batch is None else np.tile(np.arange(5), (batch, 1))
    model(ids, cache)
    k = cache.layers[0]["k"]
    assert k.shape == (*(() if batch is None else (batch,)), config.max_seq_len,
                       config.n_kv_heads, config.head_dim)
    heads = np.swapaxes(k, -3, -2)                       # [(B,) H_kv, capacity, d_h]
    assert heads.flags.c_contiguous
    assert np.array_equal(cache.stored(0, "k"), k[..., :5, :, :])
    assert np.any(k[..., :5, :, :] != 0) and not np.any(k[..., 5:, :, :])
