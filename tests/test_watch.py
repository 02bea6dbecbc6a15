"""model.watch_attention: a layer's attention weights as the forward pass computed them, for
views of attention (issue 37's widget) and counts such as chapter 12's share of the first
tokens. Expected values: a softmax written here from the layer's own weights (float64), and
for decode steps the rows of a prefill over the same tokens (exact backend: bit for bit)."""
import numpy as np
import pytest
from conftest import make_model, ref_norm, ref_rope
from conftest import token_ids as ids

from toykv import CachePolicy


def by_hand(model, tokens, layer=0):
    """Layer 0's weights [H, T, T] of a prefill, float64, from its weights alone."""
    c, W = model.config, {n: np.asarray(a, np.float64) for n, a in model.layers[0].items()}
    h = ref_norm(np.asarray(model.embed, np.float64)[tokens], W["attn_norm"], c.norm_eps)
    pos, hd, group = np.arange(len(tokens)), c.head_dim, c.n_heads // c.n_kv_heads
    q, k = h @ W["wq"], h @ W["wk"]
    out = []
    for head in range(c.n_heads):
        kv = head // group
        qh = ref_rope(q[:, head * hd:(head + 1) * hd], pos, c.rope_theta)
        kh = ref_rope(k[:, kv * hd:(kv + 1) * hd], pos, c.rope_theta)
        s = np.where(pos[None, :] <= pos[:, None], qh @ kh.T / np.sqrt(hd), -np.inf)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out.append(p / p.sum(axis=1, keepdims=True))
    return np.stack(out)


@pytest.mark.parametrize("name", ["mha", "gqa", "mqa"])
def test_the_prefill_weights_are_the_layers_softmax(name):
    model, tokens = make_model(name), ids(7)
    with model.watch_attention(0) as watch:
        model.forward(tokens)
    (step,) = watch.steps
    assert step.weights.shape == (4, 7, 7)
    assert list(step.queries) == list(step.keys) == list(range(7))
    assert np.allclose(step.weights, by_hand(model, tokens), atol=1e-5)
    assert np.all(np.triu(step.weights, 1) == 0)                  # masked: exactly 0


@pytest.mark.parametrize("name", ["gqa", "mla_absorbed", "mla_expanded"])
def test_a_decode_step_adds_the_row_a_prefill_computes(name):
    model, tokens = make_model(name, exact=True), ids(9)
    cache = model.new_cache()
    with model.watch_attention(1) as watch:
        model.forward(tokens[:8], cache)
        model.forward(tokens[8:], cache)
    prefill, step = watch.steps
    assert step.weights.shape == (4, 1, 9) and list(step.keys) == list(range(9))
    with model.watch_attention(1) as whole:
        model.forward(tokens)
    full = whole.steps[0].weights
    assert np.array_equal(prefill.weights, full[:, :8, :8])
    assert np.array_equal(step.weights[:, 0], full[:, 8])


def test_a_batch_a_policy_and_the_end_of_the_watch():
    model = make_model("gqa")
    rows = np.array([ids(5, seed=1), ids(5, seed=2)])
    with model.watch_attention(0) as watch:
        model.forward(rows)
    assert watch.steps[0].weights.shape == (2, 4, 5, 5)
    assert np.allclose(watch.steps[0].weights[1], by_hand(model, rows[1]), atol=1e-5)
    model.forward(rows)                                            # after the block: nothing
    assert len(watch.steps) == 1 and model._watching == {}
    cache = model.new_cache(policy=CachePolicy("window", 4))
    for t in ids(8):
        with model.watch_attention(1) as watch:
            model.forward([t], cache)
    assert list(watch.steps[0].keys) == [3, 4, 5, 6, 7]             # 4 held, then itself
    with pytest.raises(ValueError, match="layer must be"):
        model.watch_attention(2)
    with model.watch_attention(0):
        with pytest.raises(ValueError, match="already watched"):
            model.watch_attention(0).__enter__()
