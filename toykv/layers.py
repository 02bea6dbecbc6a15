"""One description of a layer: what it is, what it weighs, what its cache holds and costs.

`describe(config)` (also `config.layers`) gives one LayerSpec per layer, built once per config,
in the spirit of Hugging Face's cache layers (DynamicLayer, DynamicSlidingWindowLayer: their
`is_sliding` and `get_mask_sizes`). The model's weights, both loaders, KVCache, the mask,
toykv.flops, toykv.sizing, toykv.variants and toykv.steptime read it, so the attention kind and
the layer kind are decided here and nowhere else:

- the attention kind ('mha', 'gqa', 'mqa' share one form, H_kv heads of keys and values; 'mla'
  is DeepSeek-V2's latent form, deepseek2024v2; 'lowrank' a latent from which H_kv heads of keys
  and values are rebuilt, RoPE after) gives the cache entries and their per-token shapes, the
  weight shapes, how many values RoPE turns, and the FLOPs of a layer;
- the layer kind ('full', 'sliding', 'linear') gives the positions held at a context and the
  mask: a sliding layer keeps the last w = sliding_window positions, a linear-attention layer
  a fixed state of linear_state_values values (for sizing only: the numpy model has none);
- cross-layer sharing (kv_sharing = s > 1) makes the layers that reuse another layer's keys
  and values: they cache nothing and have no projections that make cache entries.

KV_DTYPE_BYTES is the one table of what a stored value costs in each cache dtype.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from . import validate

# bytes per stored value, and bytes of the float32 scale int8 keeps per token, head and entry
KV_DTYPE_BYTES = {"float32": (4, 0), "float16": (2, 0), "int8": (1, 4)}
# the weights whose output joins the residual stream: initialised smaller (model.py)
RESIDUAL_OUTPUTS = ("wo", "w_down")


@dataclass(frozen=True)
class LayerSpec:
    """One layer, as toykv builds, caches and counts it. Shapes in values, weights [in, out].

    kind: 'full' | 'sliding' | 'linear'; attention: a name in ATTENTION; window: w of a
    sliding layer (else None); n_heads, head_dim: H and d_h of the queries; rope_dim: the
    values RoPE turns per head (d_h, or MLA's d_h^R); entries: the cache's (name, per-token
    shape) pairs; weights: (name, shape) pairs in the order a seeded model draws them;
    state_values: a linear layer's fixed state per sequence; rotated: the entry that holds keys
    turned by RoPE ('k', MLA's 'k_rope'; None when keys are turned after the cache is read);
    shares_kv: the layer attends to an earlier layer's cache (config.kv_sources) and so has no
    entries and none of its kind's projections.
    """

    kind: str
    attention: str
    window: int | None
    n_heads: int
    head_dim: int
    rope_dim: int
    entries: tuple
    weights: tuple
    state_values: int = 0
    rotated: str | None = None
    shares_kv: bool = False

    @property
    def is_sliding(self) -> bool:
        """True for a layer that keeps only the last `window` positions."""
        return self.kind == "sliding"

    @property
    def entry_shapes(self) -> dict[str, tuple]:
        """{cache entry: its per-token shape}: 'k', 'v' [H_kv, d_h], or MLA's 'c_kv' [r] and
        'k_rope' [d_h^R] ('lowrank': 'c_kv'). Empty for a linear layer and one that reuses
        another's cache."""
        return dict(self.entries)

    @property
    def weight_shapes(self) -> dict[str, tuple]:
        """{weight name: shape}: projections [in, out], norms [n]."""
        return dict(self.weights)

    # -- what the cache holds -------------------------------------------------------------
    def held(self, context: int) -> int:
        """Positions the layer's cache holds once `context` tokens have gone by: all of them,
        the last `window` (sliding), or none (a linear layer keeps a fixed state instead)."""
        if self.kind == "linear":
            return 0
        return min(context, self.window) if self.is_sliding else context

    def mask_sizes(self, n_new: int, n_cached: int) -> tuple[int, int]:
        """(keys the n_new queries are scored against, position of the first): the positions
        held before this step plus the new ones (as HF's get_mask_sizes)."""
        held = self.held(n_cached)
        return held + n_new, n_cached - held

    def allowed(self, positions: np.ndarray, key_positions: np.ndarray):
        """Bool [T, Tk]: query position may see key position (causal, and inside the window);
        None when every query may see every key (a decode step), so nothing needs masking.
        Key positions are ascending, as a cache returns them."""
        first, last = key_positions[0], key_positions[-1]
        if last <= positions[0] and (not self.is_sliding or first > positions[-1] - self.window):
            return None
        allowed = key_positions[None, :] <= positions[:, None]                    # [T, Tk]
        if self.is_sliding:
            allowed &= key_positions[None, :] > positions[:, None] - self.window
        return allowed

    @property
    def values_per_token(self) -> int:
        """Values one token adds to this layer's cache (0 for a linear layer)."""
        return sum(math.prod(shape) for _, shape in self.entries)

    @property
    def scales_per_token(self) -> int:
        """int8 scales one token adds: one per entry and head (per row of d_h values)."""
        return sum(math.prod(shape[:-1]) for _, shape in self.entries)

    def cache_values(self, context: int) -> int:
        """Values the layer holds per sequence at this context (a linear layer: its state)."""
        return self.state_values if self.kind == "linear" else \
            self.held(context) * self.values_per_token

    def cache_scales(self, context: int) -> int:
        """int8 scales the layer holds per sequence at this context."""
        return self.held(context) * self.scales_per_token

    # -- what it weighs and computes ------------------------------------------------------
    @property
    def params(self) -> int:
        """Parameters of the layer's weights (norms, attention, SwiGLU MLP)."""
        return sum(math.prod(shape) for _, shape in self.weights)

    def flops(self, T: int, Tk: int, absorb: bool = False) -> int:
        """Matmul FLOPs (2 per multiply-add) of T new tokens scored against Tk keys.

        Every weight matrix multiplies the T new rows, except those the expanded MLA form
        applies to the Tk cached latents instead (it rebuilds every key and value); scoring
        and weighting take 2 H T Tk (score values + value values) more.
        """
        per_key, score_dim, value_dim = _attention_core(self, absorb)
        matrices = {name: math.prod(shape) for name, shape in self.weights if len(shape) == 2}
        per_token = sum(size for name, size in matrices.items() if name not in per_key)
        keys = sum(matrices[name] for name in per_key)
        return 2 * T * per_token + 2 * Tk * keys + 2 * self.n_heads * T * Tk * (score_dim +
                                                                               value_dim)

    def rebuilt_values(self, absorb: bool = False) -> int:
        """Values per held position the layer rebuilds from its cache in a step: MLA's
        expanded form makes every head's key and value (2 H d_h), 'lowrank' every KV head's
        (2 H_kv d_h); every other form none."""
        per_key, _, _ = _attention_core(self, absorb)
        return sum(self.weight_shapes[name][1] for name in per_key)


# -- the attention kinds, each described once ------------------------------------------------
def _kv_heads(c) -> dict:
    """MHA, GQA, MQA: H_kv heads of keys and values, each of d_h values."""
    D, H, Hkv, hd = c.d_model, c.n_heads, c.n_kv_heads, c.head_dim
    return dict(entries=(("k", (Hkv, hd)), ("v", (Hkv, hd))), rope_dim=hd, rotated="k",
                weights=(("wq", (D, H * hd)), ("wk", (D, Hkv * hd)), ("wv", (D, Hkv * hd))))


def _latent(c) -> dict:
    """MLA: a latent c_kv of r values and one shared rotary key of d_h^R values per token."""
    D, H, hd, r, rd = c.d_model, c.n_heads, c.head_dim, c.kv_lora_rank, c.rope_head_dim
    return dict(entries=(("c_kv", (r,)), ("k_rope", (rd,))), rope_dim=rd, rotated="k_rope",
                weights=(("wq", (D, H * (hd + rd))), ("w_dkv", (D, r + rd)), ("kv_norm", (r,)),
                         ("w_uk", (r, H * hd)), ("w_uv", (r, H * hd))))


def _lowrank(c) -> dict:
    """'lowrank': a latent c_kv of r values per token, rebuilt into H_kv heads of keys and
    values, RoPE turning the rebuilt keys (so nothing cached is rotated)."""
    D, H, Hkv, hd, r = c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.kv_lora_rank
    return dict(entries=(("c_kv", (r,)),), rope_dim=hd, rotated=None,
                weights=(("wq", (D, H * hd)), ("w_dkv", (D, r)), ("w_uk", (r, Hkv * hd)),
                         ("w_uv", (r, Hkv * hd))))


def _heads_core(spec, absorb: bool) -> tuple[tuple, int, int]:
    return (), spec.head_dim, spec.head_dim


def _latent_core(spec, absorb: bool) -> tuple[tuple, int, int]:
    r, rd = spec.weight_shapes["w_uk"][0], spec.rope_dim      # a reusing layer caches none
    if absorb:              # scores against the latent and the rotary key; sums of latents
        return (), r + rd, r
    return ("w_uk", "w_uv"), spec.head_dim + rd, spec.head_dim      # keys, values rebuilt


def _lowrank_core(spec, absorb: bool) -> tuple[tuple, int, int]:
    return ("w_uk", "w_uv"), spec.head_dim, spec.head_dim      # every held latent rebuilt


@dataclass(frozen=True)
class AttentionKind:
    """One attention kind, described once: everything toykv, its sizing and its widgets need.

    name: config.attention; label: what a table or widget calls it; form: config -> its cache
    entries, RoPE width and weights; core: (spec, absorb) -> (weights applied to every cached
    key, values per score, values per weighted sum); forward: the ToyTransformer method that
    runs it; projections: the weights that make its cache entries (a layer that reuses another's
    keys and values has none of them); fields: the config fields only it takes;
    kv_heads: config -> its n_kv_heads when swapped to it (None: the given n_kv_heads; MLA
    has none of its own; 'lowrank' keeps the config's); latent: it caches MLA's latent and
    rotary key rather than keys and values per KV head (what an absorbed form and a widget's
    'latent r+d' need); cached: what its cache rows
    hold, in words; variant: one of the variants chapter 7 builds from any config (False for a
    form a conversion makes, toykv.convert)."""
    name: str
    label: str
    form: object
    core: object
    forward: str
    projections: tuple = ("wk", "wv")
    fields: tuple = ()
    kv_heads: object = None
    latent: bool = False
    cached: str = "K or V"
    variant: bool = True

    def heads_text(self, config) -> str:
        """What one token caches per layer, for a table: its KV heads, or 'latent r+d'
        ('latent r' when no rotary key is cached)."""
        if self.latent:
            return f"latent {config.kv_lora_rank}+{config.rope_head_dim}"
        if "kv_lora_rank" in self.fields:
            return f"latent {config.kv_lora_rank}"
        return str(config.n_kv_heads)


_HEADS = dict(form=_kv_heads, core=_heads_core, forward="attention")
ATTENTION = {
    "mha": AttentionKind("mha", "MHA", kv_heads=lambda c: c.n_heads, **_HEADS),
    "gqa": AttentionKind("gqa", "GQA", **_HEADS),
    "mqa": AttentionKind("mqa", "MQA", kv_heads=lambda c: 1, **_HEADS),
    "mla": AttentionKind("mla", "MLA", _latent, _latent_core, "mla_attention",
                         projections=("w_dkv", "kv_norm"),
                         fields=("kv_lora_rank", "rope_head_dim"), latent=True,
                         cached="latent c_kv or rotary key k_rope"),
    "lowrank": AttentionKind("lowrank", "low-rank", _lowrank, _lowrank_core,
                             "lowrank_attention", projections=("w_dkv",),
                             fields=("kv_lora_rank",), kv_heads=lambda c: c.n_kv_heads,
                             cached="latent c_kv", variant=False),
}


def attention_kind(config) -> AttentionKind:
    """The description of config's attention kind (ATTENTION[config.attention])."""
    return ATTENTION[config.attention]


def _attention_core(spec: LayerSpec, absorb: bool) -> tuple[tuple, int, int]:
    """(weights applied to every cached key, values per score, values per weighted sum)."""
    return ATTENTION[spec.attention].core(spec, absorb)


def kv_sources(config) -> tuple[int, ...]:
    """For each layer, the layer whose cache it attends to. With kv_sharing = s, a kind's layers
    are taken s at a time in order and the first of each group stores for the group
    (brandon2024cla; toykv.sizing counts the same layers); a linear layer keeps its own state."""
    seen, first, sources = {}, {}, []
    for i, kind in enumerate(config.layer_kinds):
        rank = seen[kind] = seen.get(kind, -1) + 1               # i's place among its kind
        if kind == "linear" or rank % config.kv_sharing == 0:
            first[kind] = i
        sources.append(i if kind == "linear" else first[kind])
    return tuple(sources)


def describe(config) -> tuple[LayerSpec, ...]:
    """One LayerSpec per layer of config (layers of the same kind, storing or reusing a
    cache, share one object)."""
    c = config
    attention = ATTENTION[c.attention]
    form = attention.form(c)
    D, F, H, hd = c.d_model, c.d_ff, c.n_heads, c.head_dim
    weights = (("attn_norm", (D,)), ("mlp_norm", (D,)), ("w_gate", (D, F)), ("w_up", (D, F)),
               ("w_down", (F, D)), ("wo", (H * hd, D))) + form["weights"]
    reused = tuple(w for w in weights if w[0] not in attention.projections)

    def spec(kind, shares):
        # a linear layer has no cache entries; its weights are counted as toykv's attention
        # block (toykv has no linear-attention weights: hfconfig counts a real model's)
        return LayerSpec(
            kind=kind, attention=str(c.attention),
            window=c.sliding_window if kind == "sliding" else None, n_heads=H, head_dim=hd,
            rope_dim=form["rope_dim"],
            entries=() if kind == "linear" or shares else form["entries"],
            weights=reused if shares else weights,
            state_values=c.linear_state_values if kind == "linear" else 0,
            rotated=form["rotated"], shares_kv=shares)

    specs = {}
    keys = [(kind, source != i) for i, (kind, source) in
            enumerate(zip(c.layer_kinds, kv_sources(c)))]
    return tuple(specs[key] if key in specs else specs.setdefault(key, spec(*key))
                 for key in keys)


def groups(config) -> list[tuple[LayerSpec, int]]:
    """(spec, how many layers are it) for each distinct layer of config, in first-seen order:
    a sum over a model's layers needs one term per kind of layer, not one per layer."""
    return list(Counter(config.layers).items())


# -- checks shared by every module that takes a kv_dtype or absorb -------------------------
def check_kv_dtype(kv_dtype) -> str:
    """The cache dtype's name ('float32', 'float16' or 'int8'); numpy dtypes and types welcome
    (np.dtype('float16'), np.int8), anything else refused with the names."""
    if not isinstance(kv_dtype, str):
        try:
            kv_dtype = np.dtype(kv_dtype).name if isinstance(kv_dtype, (np.dtype, type)) \
                else kv_dtype
        except TypeError:
            pass
    return validate.choice("kv_dtype", kv_dtype, tuple(KV_DTYPE_BYTES))


def check_absorb(config, absorb) -> bool:
    """absorb as a bool: MLA's absorbed form (deepseek2024v2, section 2.1), for MLA only."""
    validate.flag("absorb", absorb)
    if absorb and not ATTENTION[config.attention].latent:
        latent = " or ".join(repr(k.name) for k in ATTENTION.values() if k.latent)
        raise ValueError(f"absorb=True is for attention={latent} only (its absorbed form), "
                         f"got attention={config.attention!r}")
    return absorb


__all__ = ["LayerSpec", "describe", "kv_sources", "groups", "check_kv_dtype", "check_absorb",
           "KV_DTYPE_BYTES", "AttentionKind", "ATTENTION", "attention_kind"]
