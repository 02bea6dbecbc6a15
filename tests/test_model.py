"""ToyTransformer: an independent float64 reference for every attention variant, cached vs
recomputed logits, batches row by row, RoPE for any length, and weights checked on the way in."""
import copy
import pickle
import tracemalloc

import numpy as np
import pytest
from conftest import (BASE, KV_DTYPES, MLA, VARIANTS, batch_ids, config, make_model,
                      ref_forward, ref_rope, token_ids)

from toykv import ModelConfig, ToyTransformer, generate, zoo
from toykv.model import Layer, weight_shapes
from toykv import ops
from toykv.ops import FEW_OUTPUTS, Ops

# -- the independent reference (tests/conftest.py: per-head loops in float64) --------------


@pytest.mark.parametrize("name", VARIANTS)
def test_logits_match_independent_reference(name):
    model, ids = make_model(name), token_ids(20)      # windows of 4 < 20: masks matter
    np.testing.assert_allclose(model.forward(ids), ref_forward(model, ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["gqa", "mla_absorbed"])
def test_reference_with_untied_head_and_rope_theta(name):
    model, ids = make_model(name, tie_embeddings=False, rope_theta=500.0), token_ids(12)
    np.testing.assert_allclose(model.forward(ids), ref_forward(model, ids), atol=1e-5, rtol=1e-5)


def test_one_layer_sliding_window_matches_hand_written_attention():
    model = make_model("sliding", n_layers=1, sliding_window=3)
    ids = token_ids(30)
    expected = ref_forward(model, ids)
    np.testing.assert_allclose(model.forward(ids), expected, atol=1e-5, rtol=1e-5)
    cache = model.new_cache()
    got = [model.forward([t], cache)[-1] for t in ids]      # the ring wraps 10 times
    np.testing.assert_allclose(np.array(got), expected, atol=1e-5, rtol=1e-5)
    # and the window matters: full causal attention gives other logits
    full = ToyTransformer(ModelConfig(**{**BASE, "n_layers": 1}))   # same seed: same weights
    assert np.abs(expected - ref_forward(full, ids)).max() > 1e-3


# -- cached vs recomputed -------------------------------------------------------------

def cached_vs_full(model, n_prompt=6, n_steps=14):
    """Greedy decode with the cache; at every step also recompute the whole sequence.

    Returns per step (cached last logits, recomputed last logits)."""
    ids, cache, pairs = token_ids(n_prompt), model.new_cache(), []
    feed = ids
    for _ in range(n_steps):
        cached = model.forward(feed, cache)[-1]
        full = model.forward(ids)[-1]
        pairs.append((cached, full))
        ids = ids + [int(np.argmax(full))]
        feed = ids[-1:]
    assert len(cache) == len(ids) - 1
    return pairs


@pytest.mark.parametrize("name", VARIANTS)
def test_default_backend_cached_close_to_recomputed(name):
    for step, (cached, full) in enumerate(cached_vs_full(make_model(name))):
        assert np.abs(cached - full).max() <= 1e-4, f"step {step}"
        assert np.argmax(cached) == np.argmax(full), f"step {step}"


@pytest.mark.parametrize("name", VARIANTS)
def test_exact_backend_cached_equals_recomputed_bit_for_bit(name):
    for step, (cached, full) in enumerate(cached_vs_full(make_model(name, exact=True))):
        assert np.array_equal(cached, full), f"step {step}"


@pytest.mark.parametrize("name", VARIANTS)
def test_exact_two_chunk_prefill_equals_one_pass(name):
    model, ids = make_model(name, exact=True), token_ids(17)
    cache = model.new_cache()
    first, second = model.forward(ids[:10], cache), model.forward(ids[10:], cache)
    assert np.array_equal(np.concatenate([first, second]), model.forward(ids))


def test_mla_absorbed_agrees_with_expanded():
    expanded_model, ids = make_model("mla_expanded"), token_ids(20)
    absorbed_model = make_model("mla_absorbed")                  # same seed: same weights
    expanded, absorbed = expanded_model.forward(ids), absorbed_model.forward(ids)
    np.testing.assert_allclose(absorbed, expanded, atol=1e-5, rtol=1e-5)
    assert generate(absorbed_model, ids[:5], 20) == generate(expanded_model, ids[:5], 20)


def test_absorb_is_for_mla_only():
    with pytest.raises(ValueError, match="absorb"):
        ToyTransformer(ModelConfig(**BASE), absorb=True)


def test_sliding_window_long_sequence_wraps_ring_and_matches_full_pass():
    model, ids = make_model("sliding"), token_ids(48)   # window 4: the ring wraps 12 times
    full = model.forward(ids)
    cache = model.new_cache()
    steps = np.array([model.forward([t], cache)[-1] for t in ids])
    np.testing.assert_allclose(steps, full, atol=1e-4)
    cache = model.new_cache()                           # a prefill longer than the window
    chunks = np.concatenate([model.forward(ids[:30], cache), model.forward(ids[30:], cache)])
    np.testing.assert_allclose(chunks, full, atol=1e-4)


def test_exact_sliding_wrapped_ring_bit_for_bit():
    model, ids = make_model("mixed", exact=True), token_ids(40)
    full = model.forward(ids)
    cache = model.new_cache()
    model.forward(ids[:5], cache)
    steps = np.array([model.forward([t], cache)[-1] for t in ids[5:]])
    assert np.array_equal(steps, full[5:])


# -- batches: every row is its sequence run alone ------------------------------------------

def run_batched(model, ids, kv_dtype, n_prefill):
    """Prefill ids[:, :n_prefill] into a batched cache, then decode the rest one column at a
    time. Returns the logits [B, T, |V|] and the cache."""
    cache = model.new_cache(batch=len(ids), kv_dtype=kv_dtype)
    parts = [model.forward(ids[:, :n_prefill], cache)]
    parts += [model.forward(ids[:, t:t + 1], cache) for t in range(n_prefill, ids.shape[1])]
    return np.concatenate(parts, axis=1), cache


def run_alone(model, row, kv_dtype, n_prefill):
    cache = model.new_cache(kv_dtype=kv_dtype)
    parts = [model.forward(row[:n_prefill], cache)]
    parts += [model.forward(row[t:t + 1], cache) for t in range(n_prefill, len(row))]
    return np.concatenate(parts)


@pytest.mark.parametrize("kv_dtype", KV_DTYPES)
@pytest.mark.parametrize("name", VARIANTS)
def test_exact_batch_rows_equal_each_sequence_alone_bit_for_bit(name, kv_dtype):
    model, ids = make_model(name, exact=True), batch_ids(3, 14)   # windows of 4 wrap
    batched, cache = run_batched(model, ids, kv_dtype, n_prefill=6)
    assert batched.shape == (3, 14, BASE["vocab_size"]) and len(cache) == 14
    for row in range(3):
        assert np.array_equal(batched[row], run_alone(model, ids[row], kv_dtype, 6)), row
    assert np.array_equal(model.forward(ids), np.stack([model.forward(r) for r in ids]))


@pytest.mark.parametrize("name", VARIANTS)
def test_blas_batch_rows_match_each_sequence_to_float32_rounding(name):
    model, ids = make_model(name), batch_ids(4, 12, seed=1)
    batched, _ = run_batched(model, ids, "float32", n_prefill=5)
    for row in range(4):
        np.testing.assert_allclose(batched[row], run_alone(model, ids[row], "float32", 5),
                                   atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(batched[row], ref_forward(model, ids[row]),
                                   atol=1e-5, rtol=1e-5)
    # the rows really are different sequences: a mix-up between rows would show
    assert np.abs(batched[0] - batched[1]).max() > 1e-2


def test_batch_of_one_equals_unbatched_and_numpy_ints_are_accepted():
    model, ids = make_model("gqa", exact=True), batch_ids(1, 9)
    cache = model.new_cache(batch=np.int64(1))
    assert cache.batch == 1
    assert np.array_equal(model.forward(ids, cache)[0], model.forward(ids[0]))
    assert model.new_cache().batch is None


def test_attention_of_one_sequence_2d_as_chapter_1_calls_it():
    model, ids = make_model("gqa"), batch_ids(2, 7)
    layer, positions = model.layers[0], np.arange(7)
    h = model.rms_norm(model.embed[ids], layer["attn_norm"])           # [2, 7, D]
    both = model.attention(h, layer, 0, positions, None)                # [2, 7, D]
    for row in range(2):
        one = model.attention(h[row], layer, 0, positions, None)        # [7, D]
        assert one.shape == (7, BASE["d_model"])
        np.testing.assert_allclose(one, both[row], atol=1e-6)


# -- RoPE for any length -------------------------------------------------------------------

def test_rope_for_10_to_the_8_positions_builds_only_the_rows_used():
    tracemalloc.start()
    model = make_model("mha", max_seq_len=10**8)          # a full table would be 6.4 GB
    far = model.cos[[10**8 - 1]], model.sin[10**8 - 2]    # a lone far position: no table
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 10 * 2**20
    assert model.cos.shape == (10**8, 8) and far[0].shape == (1, 8) and far[1].shape == (8,)
    positions = np.arange(40)
    one = np.ones((40, 8))                                 # RoPE of all-ones rows, by hand:
    expected = ref_rope(one, positions, 10000.0)           # cos(a) - sin(a) / cos(a) + sin(a)
    half = model.sin[positions][:, :4]
    got = model.cos[positions] + np.concatenate([-half, half], axis=1)
    np.testing.assert_allclose(got, expected, atol=1e-6)
    with pytest.raises(IndexError):
        model.cos[[10**8]]
    ids = token_ids(9)
    np.testing.assert_allclose(model.forward(ids), ref_forward(model, ids), atol=1e-5, rtol=1e-5)


def test_rope_rows_are_the_same_however_they_are_asked_for():
    model, other = make_model("mha"), make_model("mha")
    table = model.cos[np.arange(64)]                       # built in one go
    for start in range(0, 64, 7):                          # built by slices, doubling
        assert np.array_equal(other.cos[start:start + 7], table[start:start + 7])
    long_table = make_model("mha", max_seq_len=10_000).cos[np.arange(10_000)]
    alone = make_model("mha", max_seq_len=10_000).cos[[9_999, 5]]    # far: computed alone
    assert np.array_equal(alone, long_table[[9_999, 5]])


def test_rope_table_copy_is_an_array_to_edit():
    model = make_model("mha")
    table = model.cos.copy()                               # chapter 3 plants a bug in one
    assert isinstance(table, np.ndarray) and table.shape == (BASE["max_seq_len"], 8)
    table[5:] = table[0]
    assert np.array_equal(model.cos[[5]], np.asarray(model.cos)[[5]])   # the model's: untouched
    assert not np.array_equal(table[5], model.cos[5])


def test_rope_table_as_an_array_for_a_small_model():
    model = make_model("mha")
    table = np.asarray(model.sin)
    assert table.shape == (BASE["max_seq_len"], 8)
    np.testing.assert_allclose(table[:, :4], np.sin(np.outer(np.arange(64),
                                                             1e4 ** (-np.arange(4) / 4))),
                               atol=1e-6)


# -- weights checked on the way in ----------------------------------------------------------

def weights_of(model):
    return {"embed": model.embed.copy(), "final_norm": model.final_norm.copy(),
            "lm_head": None if model.lm_head is None else model.lm_head.copy(),
            "layers": [{k: a.copy() for k, a in layer.items()} for layer in model.layers]}


@pytest.mark.parametrize("name", ["gqa", "mla_expanded"])
def test_given_weights_give_the_same_model(name):
    source = make_model(name, seed=5, tie_embeddings=False)
    weights = weights_of(source)
    weights["layers"][0]["wq"] = weights["layers"][0]["wq"].astype(np.float64)  # any float
    model = ToyTransformer(source.config, weights=weights, absorb=source.absorb)
    ids = token_ids(10)
    assert np.array_equal(model.forward(ids), source.forward(ids))


def test_weight_shapes_are_the_random_models_shapes():
    for name in VARIANTS:
        model, shapes = make_model(name), weight_shapes(config(name))
        assert [{k: a.shape for k, a in layer.items()} for layer in model.layers] == \
            shapes["layers"] and len(shapes["layers"]) == model.config.n_layers
        assert model.embed.shape == shapes["embed"] and shapes["lm_head"] is None


def spoil(weights, how):
    """One class of bad weights each."""
    w, layer = weights, weights["layers"][1]
    if how == "missing layer":
        w["layers"] = w["layers"][:1]
    elif how == "extra layer":
        w["layers"] = w["layers"] + [w["layers"][0]]
    elif how == "missing tensor":
        del layer["wv"]
    elif how == "unknown tensor":
        layer["bias"] = np.zeros(4, np.float32)
    elif how == "wrong shape":
        layer["wk"] = layer["wk"].T.copy()
    elif how == "integer dtype":
        layer["wo"] = layer["wo"].astype(np.int32)
    elif how == "not an array":
        layer["w_up"] = layer["w_up"].tolist()
    elif how == "nan":
        layer["w_down"][3, 1] = np.nan
    elif how == "inf":
        w["embed"][0, 0] = np.inf
    elif how == "too large for float32":
        layer["wq"] = layer["wq"].astype(np.float64) * 1e300
    elif how == "missing key":
        del w["final_norm"]
    elif how == "unknown key":
        w["extra"] = 1
    elif how == "head with tied embeddings":
        w["lm_head"] = w["embed"].T.copy()
    elif how == "layers not a list":
        w["layers"] = {0: w["layers"][0], 1: layer}
    return w


@pytest.mark.parametrize("how, words", [
    ("missing layer", "n_layers=2"), ("extra layer", "n_layers=2"),
    ("missing tensor", r"\['layers'\]\[1\].*missing \['wv'\]"),
    ("unknown tensor", r"\['layers'\]\[1\].*unexpected \['bias'\]"),
    ("wrong shape", r"\['layers'\]\[1\]\['wk'\] has shape \(16, 32\)"),
    ("integer dtype", r"\['wo'\] must be a floating-point"),
    ("not an array", r"\['w_up'\] must be a floating-point numpy array"),
    ("nan", r"\['layers'\]\[1\]\['w_down'\] holds NaN"),
    ("inf", r"\['embed'\] holds NaN or infinite"),
    ("too large for float32", r"\['wq'\] holds NaN or infinite"),
    ("missing key", r"missing \['final_norm'\]"), ("unknown key", r"unexpected \['extra'\]"),
    ("head with tied embeddings", "lm_head.*must be None"),
    ("layers not a list", "must be a list"),
])
def test_bad_weights_are_refused_naming_the_tensor(how, words):
    source = make_model("gqa")
    with pytest.raises(ValueError, match=words):
        ToyTransformer(source.config, weights=spoil(weights_of(source), how))


def test_untied_config_needs_its_head():
    source = make_model("gqa", tie_embeddings=False)
    weights = weights_of(source)
    del weights["lm_head"]
    with pytest.raises(ValueError, match=r"missing \['lm_head'\]"):
        ToyTransformer(source.config, weights=weights)
    with pytest.raises(ValueError, match="weights must be a dict"):
        ToyTransformer(source.config, weights=[weights])


def test_weight_nbytes_by_hand():
    # embedding 64 x 32, per layer 2 norms + 4 D^2 (MHA: q, k, v, o) + 3 D F, final norm
    D, F, V, L = 32, 64, 64, 2
    assert make_model("mha").weight_nbytes == 4 * (V * D + L * (2 * D + 4 * D * D + 3 * D * F) + D)
    untied = make_model("mha", tie_embeddings=False)
    assert untied.weight_nbytes == make_model("mha").weight_nbytes + 4 * D * V


# -- input checks ----------------------------------------------------------------------------

@pytest.mark.parametrize("bad, words", [
    ([0, 64], "outside"), ([-1, 3], "outside"), ([[1, 2], [3, 64]], r"index \(1, 1\)"),
    ([], "empty"), ([[], []], "empty"), (np.zeros((0, 3), int), "empty"),
    ([1.0, 2.0], "integer"), ([True, False], "integer"), (["a"], "integer"),
    ([[1, 2], [3]], "ragged"), ([[[1, 2]]], "1-D .* or 2-D"), (5, "1-D .* or 2-D"),
])
def test_forward_rejects_bad_token_ids(bad, words):
    with pytest.raises(ValueError, match=words):
        make_model("mha").forward(bad)


def test_token_ids_must_match_the_cache_batch():
    model = make_model("mha")
    with pytest.raises(ValueError, match="token_ids is 2-D .* one sequence"):
        model.forward([[1, 2], [3, 4]], model.new_cache())
    with pytest.raises(ValueError, match=r"token_ids is 1-D .* batch of 2"):
        model.forward([1, 2], model.new_cache(batch=2))
    cache = model.new_cache(batch=3)
    with pytest.raises(ValueError, match="token_ids has 2 rows .* batch of 3"):
        model.forward([[1, 2], [3, 4]], cache)
    assert len(cache) == 0                              # refused before anything was stored


@pytest.mark.parametrize("batch", [0, -1, True, 2.0, np.float64(2), "int8", [2]])
def test_new_cache_rejects_bad_batch(batch):
    with pytest.raises(ValueError, match="batch"):
        make_model("mha").new_cache(batch)


def test_forward_refuses_a_pass_whose_attention_scores_cannot_fit():
    model = make_model("mha", max_seq_len=10**7)
    with pytest.raises(ValueError, match="attention scores .* would need"):
        model.forward(np.zeros(10**7, dtype=np.int64))         # H T^2 floats: 1.6 PB


def test_forward_rejects_sequence_longer_than_max_seq_len():
    model = make_model("mha", max_seq_len=8)
    with pytest.raises(ValueError, match="max_seq_len"):
        model.forward(list(range(9)))


@pytest.mark.parametrize("kwargs, words", [
    (dict(seed=-1), "seed"), (dict(seed=1.5), "seed"), (dict(exact="yes"), "exact"),
    (dict(exact=1), "exact"), (dict(absorb=None), "absorb"),
])
def test_model_rejects_bad_arguments(kwargs, words):
    with pytest.raises(ValueError, match=words):
        ToyTransformer(ModelConfig(**BASE), **kwargs)


def test_model_rejects_non_config_linear_layers_and_absurd_sizes():
    with pytest.raises(ValueError, match="config"):
        ToyTransformer(dict(BASE))
    cfg = ModelConfig(**BASE, layer_types=("linear", "full"), linear_state_values=16)
    with pytest.raises(ValueError, match="linear"):
        ToyTransformer(cfg)
    with pytest.raises(ValueError, match="float32 parameters would need"):
        ToyTransformer(zoo.get("llama-3.1-405b").config)      # 1.6 TB: refused, not allocated


@pytest.mark.parametrize("name", ["gqa", "mla_expanded"])
def test_same_seed_same_model_different_seed_different(name):
    a, b, c = make_model(name, seed=3), make_model(name, seed=3), make_model(name, seed=4)
    ids = token_ids(16)
    for key in a.layers[0]:
        assert np.array_equal(a.layers[0][key], b.layers[0][key])
    assert np.array_equal(a.forward(ids), b.forward(ids))
    assert not np.array_equal(a.layers[0]["wq"], c.layers[0]["wq"])
    assert not np.allclose(a.forward(ids), c.forward(ids))


def test_mla_config_has_latent_cache_names():
    assert set(make_model("mla_expanded").new_cache().layers[0]) == {"c_kv", "k_rope"}
    assert MLA["kv_lora_rank"] == make_model("mla_expanded").new_cache().layers[0]["c_kv"].shape[1]


# -- fused projections: one matrix per input, the named weights are views into it ------------

def test_fused_matrices_are_the_named_weights_side_by_side():
    model, c = make_model("gqa"), config("gqa")
    layer = model.layers[0]
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    assert layer.fused["qkv"].shape == (c.d_model, q + 2 * kv)
    assert layer.fused["gate_up"].shape == (c.d_model, 2 * c.d_ff)
    for group, names in Layer.GROUPS.items():
        for name in names:
            assert np.shares_memory(layer[name], layer.fused[group]), name
    assert set(layer) == set(weight_shapes(c)["layers"][0])       # no extra names
    assert set(make_model("mla_absorbed").layers[0].fused) == {"gate_up"}


@pytest.mark.parametrize("name", ["gqa", "mla_expanded"])
def test_assigning_a_weight_changes_the_model(name):
    model, ids = make_model(name), token_ids(9)
    before = model.forward(ids)
    layer = model.layers[1]
    new = np.random.default_rng(7).standard_normal(layer["wq"].shape).astype(np.float32)
    layer["wq"] = new                                   # as chapter 1's check rewires heads
    layer.update(w_up=2 * layer["w_up"])
    assert np.array_equal(layer["wq"], new)
    after = model.forward(ids)
    assert np.abs(after - before).max() > 1e-3
    np.testing.assert_allclose(after, ref_forward(model, ids), atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match=r"layer\['w_up'\] has shape"):
        layer["w_up"] = layer["w_up"][:, 1:]


def test_copies_and_pickles_keep_their_own_fused_matrices():
    model, ids = make_model("gqa"), token_ids(9)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        layer = clone.layers[0]
        assert np.shares_memory(layer["wk"], layer.fused["qkv"])
        assert not np.shares_memory(layer["wk"], model.layers[0]["wk"])
        assert np.array_equal(clone.forward(ids), model.forward(ids))
        layer["wk"] = 0 * layer["wk"]                      # the clone changes, the model not
        assert not np.array_equal(clone.forward(ids), model.forward(ids))


def test_attention_and_mlp_take_a_plain_dict_of_weights():
    model, ids = make_model("gqa"), token_ids(7)
    layer, positions = model.layers[0], np.arange(7)
    h = model.rms_norm(model.embed[ids], layer["attn_norm"])           # [7, D]
    plain = {name: np.array(a) for name, a in layer.items()}            # separate copies
    assert np.array_equal(model.attention(h, plain, 0, positions, None),
                          model.attention(h, layer, 0, positions, None))
    assert np.array_equal(model.mlp(h, plain), model.mlp(h, layer))


# -- the fixed-order backend ------------------------------------------------------------------

def sequential_matmul(a, b):
    """Reference: every output summed term by term in float32, one Python step at a time."""
    a, b = np.broadcast_arrays(a[..., :, :, None], b[..., None, :, :])      # [..., m, k, n]
    out = np.empty(a.shape[:-3] + (a.shape[-3], a.shape[-1]), np.float32)
    for index in np.ndindex(out.shape):
        *batch, i, j = index
        terms = a[(*batch, i, slice(None), j)] * b[(*batch, i, slice(None), j)]   # float32
        total = terms[0]
        for term in terms[1:]:
            total = np.float32(total + term)
        out[index] = total
    return out


def spread(shape, seed):
    """float32 values from 1e-6 to 1e6, so the order of the additions shows in the sums."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-6, 7, shape)).astype(np.float32)


@pytest.mark.parametrize("a_shape, b_shape, few", [
    ((1, 40), (40, 12), True),           # few outputs: running sums over every product
    ((3, 2, 1, 17), (2, 17, 5), True),   # few outputs, broadcast batch
    ((30, 40), (40, 25), False),         # many outputs: one term of every output at a time
    ((2, 3, 9, 16), (3, 16, 11), False),   # many outputs, broadcast batch
])
def test_fixed_order_matmul_sums_each_output_front_to_back(a_shape, b_shape, few):
    a, b = spread(a_shape, 0), np.asfortranarray(spread(b_shape, 1))
    ours, expected = Ops(exact=True).matmul(a, b), sequential_matmul(a, b)
    assert (expected.size <= FEW_OUTPUTS) == few                # both ways are tested
    assert ours.shape == expected.shape and np.array_equal(ours, expected)
    assert not np.array_equal(np.matmul(a.astype(np.float64), b), expected)   # order shows


def test_fixed_order_sum_is_front_to_back():
    x = spread((3, 500), 2)
    expected = np.empty((3, 1), np.float32)
    for row in range(3):
        total = x[row, 0]
        for value in x[row, 1:]:
            total = np.float32(total + value)
        expected[row] = total
    assert np.array_equal(Ops(exact=True).sum_last(x), expected)
    assert np.array_equal(Ops(exact=True).sum_last(x[0]), expected[0])       # 1-D as well
    assert not np.array_equal(x.sum(axis=-1, keepdims=True), expected)       # pairwise differs


# -- shared keys are read once per step: one product over the heads that share them ----------

@pytest.mark.parametrize("name, shared", [("gqa", 2), ("mqa", 2), ("mla_absorbed", 3),
                                          ("mha", 0)])
def test_long_shared_keys_are_read_once_for_every_head_that_shares_them(name, shared,
                                                                       monkeypatch):
    """With the threshold at 0 every product over keys shared by several query heads is one
    stacked product (MHA shares nothing); the logits stay those of one product per head."""
    model = make_model(name)
    cache, same = model.new_cache(), model.new_cache()
    model.forward(token_ids(20), cache)
    model.forward(token_ids(20), same)
    per_head = model.forward([3], same)
    calls = []
    real = ops.stacked_matmul
    monkeypatch.setattr(ops, "SHARED_BYTES", 0)
    monkeypatch.setattr(ops, "stacked_matmul", lambda a, b: calls.append(b.shape) or real(a, b))
    stacked = model.forward([3], cache)
    assert len(calls) == shared * model.config.n_layers
    assert all(b[-3] == 1 for b in calls)                 # one matrix serving a group
    assert np.abs(stacked - per_head).max() <= 1e-5 * np.abs(per_head).max()  # float32 rounding


def test_stacked_matmul_is_the_broadcast_product():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 3, 4, 5, 8)).astype(np.float32)    # [B, H_kv, G, m, k]
    b = rng.standard_normal((2, 3, 1, 8, 7)).astype(np.float32)    # [B, H_kv, 1, k, n]
    np.testing.assert_allclose(ops.stacked_matmul(a, b), np.matmul(a, b), rtol=1e-6)
    assert ops.stacked_matmul(a, b).shape == (2, 3, 4, 5, 7)
    assert not ops.shared_operand(a, b)                   # 224 bytes: read per matrix
    keys = np.zeros((3, 1, 64, 16384), np.float32)        # chapter 7's GQA at 16K: 4 MiB a head
    assert ops.shared_operand(np.zeros((3, 4, 1, 64), np.float32), keys)
