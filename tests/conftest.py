"""Shared helpers of toykv's model tests: small configs of every attention variant, token ids,
the hand formula for MHA/GQA/MQA cache bytes, an independent float64 reference forward, and
the plot tests' `plots` fixture.

Import them as `from conftest import ...` (pytest puts tests/ on the path).
"""
import numpy as np
import pytest

from toykv import ModelConfig, ToyTransformer

BASE = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=64)
MLA = dict(attention="mla", kv_lora_rank=8, rope_head_dim=4)
LOWRANK = dict(attention="lowrank", kv_lora_rank=12, n_kv_heads=2)

# name -> (config changes, MLA absorbed form?): every attention variant and layer pattern
VARIANTS = {
    "mha": ({}, False),
    "gqa": (dict(n_kv_heads=2), False),
    "mqa": (dict(n_kv_heads=1), False),
    "mla_expanded": (MLA, False),
    "mla_absorbed": (MLA, True),
    "sliding": (dict(sliding_window=4), False),
    "mixed": (dict(sliding_window=4, layer_types=("sliding", "full")), False),
    "lowrank": (LOWRANK, False),
    "shared": (dict(n_kv_heads=2, kv_sharing=2), False),
    "lowrank_shared": (dict(LOWRANK, n_layers=3, kv_sharing=2), False),
    "mla_shared": (dict(MLA, kv_sharing=2), True),
}
KV_DTYPES = {"float32": (4, 0), "float16": (2, 0), "int8": (1, 4)}   # (b, scale bytes)


def config(name="mha", **changes) -> ModelConfig:
    return ModelConfig(**{**BASE, **VARIANTS[name][0], **changes})


def make_model(name="mha", exact=False, seed=0, **changes) -> ToyTransformer:
    return ToyTransformer(config(name, **changes), seed=seed, exact=exact,
                          absorb=VARIANTS[name][1])


def token_ids(n, vocab=BASE["vocab_size"], seed=0) -> list[int]:
    """n random token ids, as a list of Python ints."""
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, n)]


def batch_ids(B, T, vocab=BASE["vocab_size"], seed=0) -> np.ndarray:
    """[B, T] random token ids, every row different."""
    return np.random.default_rng(seed).integers(0, vocab, (B, T))


def kv_formula(c, tokens, itemsize, batch=1):
    """MHA/GQA/MQA by hand: 2 (K and V) x L x H_kv x d_h x S x b x B."""
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * tokens * itemsize * batch


def counted(model, token_ids, cache=None) -> int:
    """Matmul FLOPs the model's counter adds during one forward pass."""
    before = model.flops
    model.forward(token_ids, cache)
    return model.flops - before


# -- an independent reference: float64, loops over heads, explicit masks ---------------------

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


def ref_softmax_attend(scores, mask, v):
    scores = np.where(mask, scores, -np.inf)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


def ref_mask(T, kind, window):
    """Causal, and for a sliding layer only the last `window` positions."""
    pos = np.arange(T)
    mask = pos[None, :] <= pos[:, None]
    if kind == "sliding":
        mask &= pos[None, :] > pos[:, None] - window
    return mask


def ref_mha_heads(c, W, h, mask, positions=None):
    """MHA/GQA/MQA, one head at a time: query head `head` reads KV head head // G."""
    pos = np.arange(len(h)) if positions is None else positions
    hd, group = c.head_dim, c.n_heads // c.n_kv_heads
    q, k, v = h @ W["wq"], h @ W["wk"], h @ W["wv"]
    heads = []
    for head in range(c.n_heads):
        kv = head // group                                       # the KV head it shares
        qh = ref_rope(q[:, head * hd:(head + 1) * hd], pos, c.rope_theta)
        kh = ref_rope(k[:, kv * hd:(kv + 1) * hd], pos, c.rope_theta)
        heads.append(ref_softmax_attend(qh @ kh.T / np.sqrt(hd), mask,
                                        v[:, kv * hd:(kv + 1) * hd]))
    return np.concatenate(heads, axis=1)


def ref_mla_heads(c, W, h, mask, positions=None):
    """DeepSeek-V2's MLA (deepseek2024v2, eqs. 9-19), one head at a time: each head's key is
    [latent @ W_UK's head columns, the shared rotary key], its value latent @ W_UV's columns."""
    pos = np.arange(len(h)) if positions is None else positions
    hd, rd, r = c.head_dim, c.rope_head_dim, c.kv_lora_rank
    q = h @ W["wq"]                                              # per head [d_h | d_h^R]
    ckv = h @ W["w_dkv"]                                         # [r | d_h^R]
    latent = ref_norm(ckv[:, :r], W["kv_norm"], c.norm_eps)
    k_rope = ref_rope(ckv[:, r:], pos, c.rope_theta)
    heads = []
    for head in range(c.n_heads):
        qh = q[:, head * (hd + rd):(head + 1) * (hd + rd)]
        q_full = np.concatenate([qh[:, :hd], ref_rope(qh[:, hd:], pos, c.rope_theta)], axis=1)
        k_full = np.concatenate([latent @ W["w_uk"][:, head * hd:(head + 1) * hd], k_rope],
                                axis=1)
        v = latent @ W["w_uv"][:, head * hd:(head + 1) * hd]
        heads.append(ref_softmax_attend(q_full @ k_full.T / np.sqrt(hd + rd), mask, v))
    return np.concatenate(heads, axis=1)


def ref_lowrank_heads(c, W, h, mask, positions=None):
    """'lowrank': keys and values of H_kv heads rebuilt from the latent h W_DKV, RoPE on the
    rebuilt keys: the heads of MHA/GQA/MQA with W_K = W_DKV W_UK and W_V = W_DKV W_UV."""
    return ref_mha_heads(c, {**W, "wk": W["w_dkv"] @ W["w_uk"], "wv": W["w_dkv"] @ W["w_uv"]},
                         h, mask, positions)


HEADS = {"mla": "ref_mla_heads", "lowrank": "ref_lowrank_heads"}


def ref_forward(model, ids):
    """Logits [T, |V|] of one sequence, float64, written without toykv's code paths; each
    layer's mask follows config.layer_kinds (sliding: the last sliding_window positions).
    kv_sharing = s: a layer that reuses another's keys and values gets that layer's input h
    (its K/V projections are the source's): the source's keys, this layer's queries."""
    c = model.config
    f64 = lambda a: np.asarray(a, dtype=np.float64)
    x = f64(model.embed)[np.asarray(ids)]
    inputs, weights = {}, {}                    # each storing layer's input and weights
    for i, (kind, layer) in enumerate(zip(c.layer_kinds, model.layers)):
        W = {name: f64(a) for name, a in layer.items()}
        mask = ref_mask(len(ids), kind, c.sliding_window)
        h = ref_norm(x, W["attn_norm"], c.norm_eps)
        heads = globals()[HEADS.get(c.attention, "ref_mha_heads")]
        source = c.kv_sources[i]
        if source == i:
            inputs[i], weights[i] = h, W
            x = x + heads(c, W, h, mask) @ W["wo"]
        else:                                   # the source's keys and values, our queries
            x = x + ref_shared_heads(c, heads, W, weights[source], h, inputs[source],
                                     mask) @ W["wo"]
        h = ref_norm(x, W["mlp_norm"], c.norm_eps)
        gate = h @ W["w_gate"]
        x = x + (gate / (1 + np.exp(-gate)) * (h @ W["w_up"])) @ W["w_down"]
    x = ref_norm(x, f64(model.final_norm), c.norm_eps)
    return x @ (f64(model.embed).T if model.lm_head is None else f64(model.lm_head))


def ref_shared_heads(c, heads, W, W_source, h, h_source, mask):
    """A layer that reuses an earlier layer's cache: since queries and keys come from different
    inputs, run the heads on the stacked inputs [h_source; h] with this layer's weights but the
    source's projections that make the cache (W_K, W_V; MLA's and 'lowrank''s W_DKV), and keep
    the rows of h's queries against h_source's keys."""
    T = len(h)
    both = np.concatenate([h_source, h])                         # [2T, D]
    wide = np.zeros((2 * T, 2 * T), bool)
    wide[T:, :T] = mask                                          # h's queries, h_source's keys
    wide[np.arange(T), np.arange(T)] = True                      # rows never read: no NaN
    makers = {"mla": ("w_dkv", "kv_norm"), "lowrank": ("w_dkv",)}.get(c.attention, ("wk", "wv"))
    mixed = {**W, **{name: W_source[name] for name in makers}}
    return heads(c, mixed, both, wide, positions=np.concatenate([np.arange(T)] * 2))[T:]


# -- the plot tests: toykv.plots without a display, every figure closed after each test ---------

@pytest.fixture
def plots():
    """toykv.plots on matplotlib's Agg backend (no display); closes every figure afterwards."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from toykv import plots

    yield plots
    plt.close("all")


def labelled(ax) -> bool:
    """The axes have a title and both axis labels."""
    return bool(ax.get_title() and ax.get_xlabel() and ax.get_ylabel())
