"""toykv.convert: conversions without training. A conversion that changes nothing gives the
original logits; each converted cache holds the bytes toykv.sizing counts; each rule is checked
against the same rule written out here with other numpy routines (a loop over heads, the SVD);
bad input is refused before any work and the given model is never changed."""
import numpy as np
import pytest
from conftest import config, make_model, ref_forward, token_ids

from toykv import ModelConfig, ToyTransformer, kv_bytes_per_token
from toykv.convert import (attention_inputs, kv_directions, low_rank_kv, pool_kv_heads,
                           share_kv_layers, weights_of)

GQA4 = dict(vocab_size=64, d_model=48, n_layers=3, n_heads=8, n_kv_heads=4, d_ff=64,
            max_seq_len=64)                                       # head_dim 6, 4 KV heads


def gqa4(**changes):
    return ToyTransformer(ModelConfig(**{**GQA4, **changes}), seed=3)


def snapshot(model):
    """Every weight of the model, copied."""
    return [{name: a.copy() for name, a in layer.items()} for layer in model.layers]


def assert_unchanged(model, before):
    for layer, old in zip(model.layers, before):
        assert set(layer) == set(old)
        for name in old:
            np.testing.assert_array_equal(layer[name], old[name])


def cache_bytes_per_token(model, n=7, kv_dtype="float16"):
    cache = model.new_cache(kv_dtype=kv_dtype)
    model(token_ids(n), cache)
    assert cache.nbytes % n == 0
    return cache.nbytes // n


# -- a conversion that changes nothing -----------------------------------------------------
def test_conversions_that_change_nothing_give_the_original_logits():
    model, ids = gqa4(), token_ids(20)
    original = model(ids)
    np.testing.assert_array_equal(pool_kv_heads(model, 4)(ids), original)      # bit for bit
    np.testing.assert_array_equal(share_kv_layers(model, 1)(ids), original)
    full = 2 * 4 * 6                                             # 48 = min(D, 2 H_kv d_h)
    scale = np.abs(original).max()
    for calibration in (None, attention_inputs(model, token_ids(30, seed=1))):
        same = low_rank_kv(model, full, calibration)(ids)
        assert np.abs(same - original).max() <= 1e-5 * scale     # float32 rounding only


# -- bytes: what each converted cache holds is what sizing counts ---------------------------
@pytest.mark.parametrize("kv_dtype, b", [("float32", 4), ("float16", 2)])
def test_converted_caches_hold_what_sizing_counts(kv_dtype, b):
    model = gqa4()
    L, hd = GQA4["n_layers"], 6
    by_hand = {
        "pooled to 2": (pool_kv_heads(model, 2), 2 * L * 2 * hd * b),
        "pooled to 1": (pool_kv_heads(model, 1), 2 * L * 1 * hd * b),
        "rank 10": (low_rank_kv(model, 10), L * 10 * b),
        "shared by 2": (share_kv_layers(model, 2), 2 * 2 * 4 * hd * b),  # layers 0, 2 store
        "shared by 3": (share_kv_layers(model, 3), 2 * 1 * 4 * hd * b),
    }
    for name, (converted, expected) in by_hand.items():
        counted = kv_bytes_per_token(converted.config, bytes_per_value=b)
        assert cache_bytes_per_token(converted, kv_dtype=kv_dtype) == counted == expected, name
    shared = by_hand["shared by 2"][0].config
    assert kv_bytes_per_token(shared, b) == kv_bytes_per_token(model.config, b, kv_sharing=2)


def test_int8_caches_of_converted_models_count_their_scales():
    model = gqa4()
    for converted in (pool_kv_heads(model, 1), low_rank_kv(model, 10), share_kv_layers(model, 2)):
        c = converted.config
        scales = sum(4 * spec.scales_per_token for spec in c.layers)
        counted = kv_bytes_per_token(c, bytes_per_value=1) + scales
        assert cache_bytes_per_token(converted, kv_dtype="int8") == counted


# -- each rule, against the same rule written another way ----------------------------------
def test_pooling_averages_the_heads_of_each_group():
    model = gqa4()
    before = snapshot(model)
    pooled = pool_kv_heads(model, 2)                              # heads (0, 1) and (2, 3)
    assert pooled.config.n_kv_heads == 2 and pooled.config.attention == "gqa"
    for old, new in zip(model.layers, pooled.layers):
        for name in ("wk", "wv"):
            head = [old[name][:, j * 6:(j + 1) * 6] for j in range(4)]        # [D, d_h] each
            np.testing.assert_allclose(new[name][:, :6], (head[0] + head[1]) / 2, rtol=1e-6)
            np.testing.assert_allclose(new[name][:, 6:], (head[2] + head[3]) / 2, rtol=1e-6)
        for name in ("wq", "wo", "w_gate", "w_down", "attn_norm"):
            np.testing.assert_array_equal(new[name], old[name])
    mqa = pool_kv_heads(model, 1)
    assert mqa.config.attention == "mqa"
    np.testing.assert_allclose(mqa.layers[0]["wk"], model.layers[0]["wk"].reshape(48, 4, 6)
                               .mean(axis=1), rtol=1e-6)
    assert_unchanged(model, before)


def test_low_rank_from_weights_is_their_truncated_svd():
    """Eckart-Young: W_DKV W_UKV is W_KV's best rank-r approximation, U_r S_r V_r^T."""
    model, r = gqa4(), 10
    converted = low_rank_kv(model, r)
    assert converted.config.attention == "lowrank" and converted.config.kv_lora_rank == r
    for old, new in zip(model.layers, converted.layers):
        w_kv = np.concatenate([old["wk"], old["wv"]], axis=1).astype(np.float64)
        u, s, vt = np.linalg.svd(w_kv, full_matrices=False)
        best = (u[:, :r] * s[:r]) @ vt[:r]
        made = new["w_dkv"] @ np.concatenate([new["w_uk"], new["w_uv"]], axis=1)
        np.testing.assert_allclose(made, best, atol=1e-5 * np.abs(best).max())
        assert set(new) == set(old) - {"wk", "wv"} | {"w_dkv", "w_uk", "w_uv"}


def test_low_rank_from_text_keeps_the_principal_directions_of_its_keys_and_values():
    """With calibration, W_KV P P^T projects the layer's keys and values Y = h W_KV on their
    top r principal directions (the right singular vectors of Y): the least squared error on
    that text of any rank r, below the weights' SVD's."""
    model, r = gqa4(), 10
    inputs = attention_inputs(model, token_ids(40, seed=2))
    by_text, by_weights = low_rank_kv(model, r, inputs), low_rank_kv(model, r)
    for h, old, new, plain in zip(inputs, model.layers, by_text.layers, by_weights.layers):
        w_kv = np.concatenate([old["wk"], old["wv"]], axis=1).astype(np.float64)
        y = h.astype(np.float64) @ w_kv                          # [T, 2 H_kv d_h]
        vt = np.linalg.svd(y, full_matrices=False)[2][:r]        # [r, 2 H_kv d_h]
        made = new["w_dkv"] @ np.concatenate([new["w_uk"], new["w_uv"]], axis=1)
        np.testing.assert_allclose(made, w_kv @ vt.T @ vt, atol=1e-5 * np.abs(w_kv).max())
        error = lambda w: np.linalg.norm(h @ w - y)
        other = plain["w_dkv"] @ np.concatenate([plain["w_uk"], plain["w_uv"]], axis=1)
        assert error(made) < error(other)


def test_directions_found_once_give_every_rank_what_finding_them_again_gives():
    """kv_directions(model, calibration) computed once and passed to low_rank_kv at several
    ranks gives, bit for bit, the model low_rank_kv builds from the calibration itself; the
    directions are orthonormal, and the first r span what the truncated SVD keeps."""
    model = gqa4()
    before = snapshot(model)
    inputs = attention_inputs(model, token_ids(40, seed=2))
    for calibration in (None, inputs):
        found = kv_directions(model, calibration)
        assert len(found) == GQA4["n_layers"] and found[0].shape == (48, 48)
        np.testing.assert_allclose(found[0].T @ found[0], np.eye(48), atol=1e-12)
        for r in (3, 10, 48):
            once, again = low_rank_kv(model, r, directions=found), low_rank_kv(model, r,
                                                                               calibration)
            for a, b in zip(once.layers, again.layers):
                for name in ("w_dkv", "w_uk", "w_uv", "wq", "wo"):
                    np.testing.assert_array_equal(a[name], b[name])
    w_kv = np.concatenate([model.layers[1]["wk"], model.layers[1]["wv"]], axis=1)
    vt = np.linalg.svd(w_kv.astype(np.float64), full_matrices=False)[2][:5]   # [5, 48]
    top = kv_directions(model)[1][:, :5]                                    # [48, 5]
    np.testing.assert_allclose(top @ top.T, vt.T @ vt, atol=1e-8)          # same subspace
    assert_unchanged(model, before)


def test_attention_inputs_are_what_each_layer_normalises():
    model, ids = gqa4(), token_ids(9)
    inputs = attention_inputs(model, ids)
    assert len(inputs) == GQA4["n_layers"] and inputs[0].shape == (9, 48)
    x = model.embed[ids]                                        # layer 0 reads the embedding
    np.testing.assert_allclose(inputs[0], model.rms_norm(x, model.layers[0]["attn_norm"]))
    two = gqa4(n_layers=2)                                       # the last layer's input ->
    outputs = two(ids)                                           # through the model's head
    assert np.isfinite(outputs).all() and len(attention_inputs(two, ids)) == 2


def test_low_rank_models_compute_their_gqa_twin():
    """The cache holds the latent; the logits are those of the GQA model whose W_K and W_V are
    W_DKV W_UK and W_DKV W_UV (conftest's float64 reference runs the same maths its own way)."""
    converted = low_rank_kv(gqa4(), 7)
    ids = token_ids(15)
    reference = ref_forward(converted, ids)
    assert np.abs(converted(ids) - reference).max() <= 1e-5 * np.abs(reference).max()


def test_shared_layers_drop_their_kv_projections_and_attend_to_the_first_ones():
    model = gqa4(n_layers=4)
    shared = share_kv_layers(model, 2)
    assert shared.config.kv_sources == (0, 0, 2, 2)
    for i, (old, new) in enumerate(zip(model.layers, shared.layers)):
        kept = set(old) - ({"wk", "wv"} if i % 2 else set())
        assert set(new) == kept
        assert new["wo"] is old["wo"] and new["w_down"] is old["w_down"]   # not copied
    ids = token_ids(12)
    reference = ref_forward(shared, ids)
    assert np.abs(shared(ids) - reference).max() <= 1e-5 * np.abs(reference).max()
    cache = shared.new_cache()                                   # cached decode = one pass
    steps = np.concatenate([shared(ids[:5], cache)] + [shared([t], cache) for t in ids[5:]])
    np.testing.assert_allclose(steps, shared(ids), atol=1e-5 * np.abs(reference).max())


def test_conversions_compose_and_keep_the_fixed_order_backend():
    model = make_model("gqa", exact=True)                        # conftest: 2 KV heads
    mqa = pool_kv_heads(model, 1)
    both = share_kv_layers(low_rank_kv(mqa, 4), 2)
    assert both.exact and both.config.attention == "lowrank" and both.config.kv_sharing == 2
    assert both.config.n_kv_heads == 1
    assert cache_bytes_per_token(both, kv_dtype="float32") == 1 * 4 * 4   # one layer of 2


def test_weights_of_gives_the_arrays_themselves():
    model = make_model("gqa")
    weights = weights_of(model)
    assert weights["embed"] is model.embed and weights["lm_head"] is None
    assert all(weights["layers"][0][name] is model.layers[0][name] for name in model.layers[0])
    again = ToyTransformer(model.config, weights=weights)
    np.testing.assert_array_equal(again(token_ids(6)), model(token_ids(6)))


# -- bad input: refused up front, the model untouched ---------------------------------------
@pytest.mark.parametrize("call, words", [
    (lambda m: pool_kv_heads(m, 3), "must divide"),
    (lambda m: pool_kv_heads(m, 0), "n_kv_heads must be an integer in"),
    (lambda m: pool_kv_heads(m, 8), "n_kv_heads must be an integer in"),
    (lambda m: pool_kv_heads(m, 2.0), "n_kv_heads must be an integer"),
    (lambda m: low_rank_kv(m, 0), "rank must be an integer in"),
    (lambda m: low_rank_kv(m, 49), r"rank must be an integer in \[1, 48\]"),
    (lambda m: low_rank_kv(m, 4, calibration=[np.zeros((5, 48))]), "list of n_layers=3"),
    (lambda m: low_rank_kv(m, 4, calibration=np.zeros((3, 5, 48))), "list of n_layers=3"),
    (lambda m: low_rank_kv(m, 4, calibration=[np.zeros((5, 47))] * 3), r"calibration\[0\]"),
    (lambda m: low_rank_kv(m, 4, [np.full((5, 48), np.nan)] * 3), r"calibration\[0\]"),
    (lambda m: kv_directions(m, [np.zeros((5, 48))]), "list of n_layers=3"),
    (lambda m: low_rank_kv(m, 4, calibration=[np.ones((5, 48))] * 3,
                           directions=kv_directions(m)), "not both"),
    (lambda m: low_rank_kv(m, 4, directions=kv_directions(m)[:2]), "list of n_layers=3"),
    (lambda m: low_rank_kv(m, 4, directions=np.stack(kv_directions(m))), "list of n_layers=3"),
    (lambda m: low_rank_kv(m, 4, directions=[np.eye(47)] * 3), r"directions\[0\]"),
    (lambda m: low_rank_kv(m, 4, directions=[2 * np.eye(48)] * 3), "orthonormal"),
    (lambda m: low_rank_kv(m, 4, directions=[np.eye(48, dtype=int)] * 3), "orthonormal"),
    (lambda m: share_kv_layers(m, 0), "s must be an integer in"),
    (lambda m: share_kv_layers(m, 4), r"s must be an integer in \[1, 3\]"),
    (lambda m: attention_inputs(m, [[1, 2], [3, 4]]), "one sequence"),
    (lambda m: attention_inputs(m, [1, 99]), "outside"),
])
def test_bad_arguments_are_refused_and_change_nothing(call, words):
    model = gqa4()
    before = snapshot(model)
    with pytest.raises(ValueError, match=words):
        call(model)
    assert_unchanged(model, before)


@pytest.mark.parametrize("name", ["mla_expanded", "lowrank", "shared"])
def test_only_models_caching_their_own_kv_heads_are_pooled_or_factored(name):
    model = make_model(name)
    for convert in (lambda m: pool_kv_heads(m, 1), lambda m: low_rank_kv(m, 2),
                    kv_directions):
        with pytest.raises(ValueError, match="caches keys and values per KV head|cache keys"):
            convert(model)


def test_a_model_that_shares_already_is_refused_and_not_a_model_is_named():
    with pytest.raises(ValueError, match="kv_sharing=2"):
        share_kv_layers(make_model("shared"), 2)
    for convert in (pool_kv_heads, low_rank_kv, share_kv_layers, weights_of):
        with pytest.raises(ValueError, match="must be a toykv.ToyTransformer"):
            convert(config("gqa"), 1) if convert is not weights_of else convert(config("gqa"))


# -- the real model: SmolLM2-135M, 3 KV heads of 64 -------------------------------------------
@pytest.fixture(scope="module")
def smol():
    from toykv import load_gguf, smollm2_gguf_path
    return load_gguf(smollm2_gguf_path(), max_seq_len=64)[0]


def test_smollm2_conversions_size_and_reproduce(smol):
    ids = token_ids(24, vocab=smol.config.vocab_size, seed=4)
    original = smol(ids)
    scale = np.abs(original).max()
    assert smol.config.n_kv_heads == 3 and smol.config.head_dim == 64
    np.testing.assert_array_equal(pool_kv_heads(smol, 3)(ids), original)
    full = low_rank_kv(smol, 2 * 3 * 64)                          # 384 < d_model = 576
    assert np.abs(full(ids) - original).max() <= 1e-4 * scale
    for converted, values in ((pool_kv_heads(smol, 1), 2 * 30 * 64), (low_rank_kv(smol, 64),
                              30 * 64), (share_kv_layers(smol, 2), 2 * 15 * 3 * 64)):
        assert cache_bytes_per_token(converted) == 2 * values   # float16
