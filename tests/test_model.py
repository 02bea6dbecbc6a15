"""ToyTransformer: an independent numpy reference, cached vs recomputed logits, MLA forms, windows."""
import numpy as np
import pytest

from toykv import ModelConfig, ToyTransformer, generate

BASE = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=64)
MLA = dict(attention="mla", kv_lora_rank=8, rope_head_dim=4)

# name -> (config changes, MLA absorbed form?)
VARIANTS = {
    "mha": ({}, False),
    "gqa": (dict(n_kv_heads=2), False),
    "mqa": (dict(n_kv_heads=1), False),
    "mla_expanded": (MLA, False),
    "mla_absorbed": (MLA, True),
    "sliding": (dict(sliding_window=4), False),
    "mixed": (dict(sliding_window=4, layer_types=("sliding", "full")), False),
}


def make_model(name, exact=False, seed=0, **changes):
    kw, absorb = VARIANTS[name]
    return ToyTransformer(ModelConfig(**{**BASE, **kw, **changes}), seed=seed, exact=exact,
                          absorb=absorb)


def prompt(n, vocab=BASE["vocab_size"], seed=0):
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, n)]


# -- an independent reference: float64, loops over heads, explicit masks ---------------

def ref_rope(x, positions, theta):
    """HF Llama RoPE: rotate_half on [T, d], angles pos / theta^(2i/d) repeated twice."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2) / d)
    angles = np.outer(positions, inv_freq)
    angles = np.concatenate([angles, angles], axis=-1)
    rotated = np.concatenate([-x[:, d // 2:], x[:, :d // 2]], axis=-1)
    return x * np.cos(angles) + rotated * np.sin(angles)


def ref_norm(x, weight, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * weight


def ref_forward(model, ids, window=None):
    """Logits of a plain MHA/GQA/MQA Llama forward, written without toykv's code paths."""
    c = model.config
    f64 = lambda a: np.asarray(a, dtype=np.float64)
    T, hd, group = len(ids), c.head_dim, c.n_heads // c.n_kv_heads
    pos = np.arange(T)
    mask = pos[None, :] <= pos[:, None]                              # causal [T, T]
    if window is not None:
        mask &= pos[None, :] > pos[:, None] - window                 # and inside the window
    x = f64(model.embed)[ids]
    for W in model.layers:
        h = ref_norm(x, f64(W["attn_norm"]), c.norm_eps)
        q, k, v = h @ f64(W["wq"]), h @ f64(W["wk"]), h @ f64(W["wv"])
        heads = []
        for head in range(c.n_heads):
            kv = head // group                                       # the KV head it shares
            qh = ref_rope(q[:, head * hd:(head + 1) * hd], pos, c.rope_theta)
            kh = ref_rope(k[:, kv * hd:(kv + 1) * hd], pos, c.rope_theta)
            vh = v[:, kv * hd:(kv + 1) * hd]
            scores = np.where(mask, qh @ kh.T / np.sqrt(hd), -np.inf)
            p = np.exp(scores - scores.max(axis=1, keepdims=True))
            heads.append((p / p.sum(axis=1, keepdims=True)) @ vh)
        x = x + np.concatenate(heads, axis=1) @ f64(W["wo"])
        h = ref_norm(x, f64(W["mlp_norm"]), c.norm_eps)
        gate = h @ f64(W["w_gate"])
        x = x + (gate / (1 + np.exp(-gate)) * (h @ f64(W["w_up"]))) @ f64(W["w_down"])
    x = ref_norm(x, f64(model.final_norm), c.norm_eps)
    return x @ (f64(model.embed).T if model.lm_head is None else f64(model.lm_head))


@pytest.mark.parametrize("name", ["mha", "gqa", "mqa"])
def test_logits_match_independent_reference(name):
    model = make_model(name)
    ids = prompt(20)
    np.testing.assert_allclose(model.forward(ids), ref_forward(model, ids), atol=1e-5, rtol=1e-5)


def test_reference_with_untied_head_and_rope_theta():
    model = make_model("gqa", tie_embeddings=False, rope_theta=500.0)
    ids = prompt(12)
    np.testing.assert_allclose(model.forward(ids), ref_forward(model, ids), atol=1e-5, rtol=1e-5)


def test_one_layer_sliding_window_matches_hand_written_attention():
    model = make_model("sliding", n_layers=1, sliding_window=3)
    ids = prompt(30)
    expected = ref_forward(model, ids, window=3)
    np.testing.assert_allclose(model.forward(ids), expected, atol=1e-5, rtol=1e-5)
    cache, got = model.new_cache(), []
    for t in ids:                                        # the ring wraps 10 times
        got.append(model.forward([t], cache)[-1])
    np.testing.assert_allclose(np.array(got), expected, atol=1e-5, rtol=1e-5)
    # and the window matters: full causal attention gives other logits
    assert np.abs(expected - ref_forward(model, ids)).max() > 1e-3


# -- cached vs recomputed -------------------------------------------------------------

def cached_vs_full(model, n_prompt=6, n_steps=14):
    """Greedy decode with the cache; at every step also recompute the whole sequence.

    Returns per step (cached last logits, recomputed last logits)."""
    ids, cache, pairs = prompt(n_prompt), model.new_cache(), []
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
    model, ids = make_model(name, exact=True), prompt(17)
    cache = model.new_cache()
    first, second = model.forward(ids[:10], cache), model.forward(ids[10:], cache)
    assert np.array_equal(np.concatenate([first, second]), model.forward(ids))


def test_mla_absorbed_agrees_with_expanded():
    expanded_model, ids = make_model("mla_expanded"), prompt(20)
    absorbed_model = make_model("mla_absorbed")                  # same seed: same weights
    expanded, absorbed = expanded_model.forward(ids), absorbed_model.forward(ids)
    np.testing.assert_allclose(absorbed, expanded, atol=1e-5, rtol=1e-5)
    assert np.array_equal(absorbed.argmax(axis=1), expanded.argmax(axis=1))
    assert generate(absorbed_model, ids[:5], 20) == generate(expanded_model, ids[:5], 20)


def test_absorb_is_for_mla_only():
    with pytest.raises(ValueError, match="absorb"):
        ToyTransformer(ModelConfig(**BASE), absorb=True)


def test_sliding_window_long_sequence_wraps_ring_and_matches_full_pass():
    model, ids = make_model("sliding"), prompt(48)      # window 4: the ring wraps 12 times
    full = model.forward(ids)
    cache = model.new_cache()
    steps = np.array([model.forward([t], cache)[-1] for t in ids])
    np.testing.assert_allclose(steps, full, atol=1e-4)
    # prefill larger than the window, then decode
    cache = model.new_cache()
    chunks = np.concatenate([model.forward(ids[:30], cache), model.forward(ids[30:], cache)])
    np.testing.assert_allclose(chunks, full, atol=1e-4)


def test_exact_sliding_wrapped_ring_bit_for_bit():
    model, ids = make_model("mixed", exact=True), prompt(40)
    full = model.forward(ids)
    cache = model.new_cache()
    model.forward(ids[:5], cache)
    steps = np.array([model.forward([t], cache)[-1] for t in ids[5:]])
    assert np.array_equal(steps, full[5:])


# -- input checks and determinism ------------------------------------------------------

@pytest.mark.parametrize("bad, words", [
    ([0, 64], "outside"), ([-1, 3], "outside"), ([], "empty"),
    ([1.0, 2.0], "integer"), ([[1, 2], [3, 4]], "1-D"),
])
def test_forward_rejects_bad_token_ids(bad, words):
    with pytest.raises(ValueError, match=words):
        make_model("mha").forward(bad)


def test_forward_rejects_sequence_longer_than_max_seq_len():
    model = make_model("mha", max_seq_len=8)
    with pytest.raises(ValueError, match="max_seq_len"):
        model.forward(list(range(9)))


def test_model_rejects_non_config_and_linear_layers():
    with pytest.raises(ValueError, match="config"):
        ToyTransformer(dict(BASE))
    cfg = ModelConfig(**BASE, layer_types=("linear", "full"), linear_state_values=16)
    with pytest.raises(ValueError, match="linear"):
        ToyTransformer(cfg)


@pytest.mark.parametrize("name", ["gqa", "mla_expanded"])
def test_same_seed_same_model_different_seed_different(name):
    a, b, c = make_model(name, seed=3), make_model(name, seed=3), make_model(name, seed=4)
    ids = prompt(16)
    for key in a.layers[0]:
        assert np.array_equal(a.layers[0][key], b.layers[0][key])
    assert np.array_equal(a.forward(ids), b.forward(ids))
    assert not np.array_equal(a.layers[0]["wq"], c.layers[0]["wq"])
    assert not np.allclose(a.forward(ids), c.forward(ids))
