"""What a lower-precision cache costs in accuracy: the same tokens through a float32 and a smaller cache.

Comparing two free-running generations says little once their tokens differ (they then
continue different texts). So forced_logits feeds one fixed token path through a cache of
any kv_dtype, and compare_cache measures, step by step along the float32 cache's own greedy
path, how far the other cache's logits are off and whether its top token is still the same;
it also reports how long a free-running generation with the other cache keeps the same tokens.

Below the cache dtypes, the schemes of the quantized caches people serve with: 8, 4 or 2 bits
with a float32 scale and zero point (minimum) per group of values, keys with one scale per
token or one per channel (KIVI, liu2024kivi: keys have outlier channels), values per token,
and the most recent tokens kept in float32 until a whole group of them can be quantized (as
Hugging Face's QuantizedCache keeps a residual). QuantScheme says which, round_trip is the
arithmetic, compare_schemes runs several schemes beside the float32 cache on one text.
"""
from __future__ import annotations

import numpy as np

from dataclasses import dataclass

from . import validate
from .cache import FullLayer, check_cache
from .generate import decode_steps
from .layers import check_kv_dtype
from .model import check_model


def forced_logits(model, token_ids, prompt_len: int, kv_dtype: str = "float32") -> np.ndarray:
    """Logits of the last position after the prefill of token_ids[:prompt_len] and after each
    later token fed one at a time through a kv_dtype cache. [len(token_ids) - prompt_len + 1, vocab]
    """
    check_model(model)
    ids = validate.token_ids("token_ids", token_ids, model.config.vocab_size,
                             model.config.max_seq_len)
    prompt_len = validate.count("prompt_len", prompt_len, 1, len(ids))
    kv_dtype = check_kv_dtype(kv_dtype)
    cache = model.new_cache(kv_dtype=kv_dtype)
    rows = [model.forward(ids[:prompt_len], cache)[-1]]                   # the prefill
    for token in ids[prompt_len:]:                                        # one decode step each
        rows.append(model.forward([token], cache)[-1])
    return np.stack(rows)


def compare_cache(model, prompt_ids, n_new: int, kv_dtype: str) -> dict:
    """A kv_dtype cache against the float32 cache over n_new greedy steps (step 0: the prefill).

    Along the float32 cache's greedy path: 'max_error' [n_new] (max |logit difference| per step),
    'top1_same' [n_new] (the other cache's top token is the float32 one), 'scale' (largest
    |float32 logit|), 'top2_margin' [n_new] (float32's top logit minus its second: a flip of the
    top token needs an error of at least half of it). Free-running: 'free_same' [n_new] (the other cache's own greedy tokens equal
    float32's), 'first_divergence' (first step where they differ, or None).
    """
    check_model(model)
    prompt = validate.token_ids("prompt_ids", prompt_ids, model.config.vocab_size,
                                model.config.max_seq_len)
    n_new = validate.count("n_new", n_new, 1, model.config.max_seq_len)   # a bound before work
    kv_dtype = check_kv_dtype(kv_dtype)
    reference = list(decode_steps(model, prompt, n_new, kv_dtype="float32"))
    ref_tokens = np.array([s.token for s in reference])
    ref_logits = np.stack([s.logits for s in reference])                  # [n_new, vocab]
    path = prompt + [int(t) for t in ref_tokens[:-1]]
    other = forced_logits(model, path, len(prompt), kv_dtype)             # [n_new, vocab]
    free = np.array([s.token for s in decode_steps(model, prompt, n_new, kv_dtype=kv_dtype)])
    differ = np.flatnonzero(free != ref_tokens)
    top2 = np.sort(ref_logits, axis=1)[:, -2:]                           # [n_new, 2]
    return {"max_error": np.abs(other - ref_logits).max(axis=1),
            "top1_same": other.argmax(axis=1) == ref_tokens,
            "scale": float(np.abs(ref_logits).max()),
            "top2_margin": top2[:, 1] - top2[:, 0],
            "free_same": free == ref_tokens,
            "first_divergence": int(differ[0]) if differ.size else None}


# -- quantized caches: bits, scales per token or per channel, a float32 residual ------------------
QUANT_BITS = (2, 4, 8)
SCALES = ("token", "channel")
SCALE_BYTES = 4                   # a float32 scale and a float32 zero point per group of values


def round_trip(x, bits: int, per: str = "token") -> np.ndarray:
    """x [tokens, ..., d_h] after quantizing to `bits` and back (float32, same shape).

    Asymmetric min-max: s = (max - min) / (2^bits - 1), code = rint((x - min) / s), x' = code s
    + min, so |x - x'| <= s / 2. per='token': one (s, min) per token row of d_h values (over
    the last axis); per='channel': one per channel, over the tokens (axis 0)."""
    bits = validate.choice("bits", bits, QUANT_BITS)
    per = validate.choice("per", per, SCALES)
    x = np.asarray(x)
    if x.ndim < 2 or x.dtype.kind not in "fiu":
        raise ValueError(f"x must be a real array [tokens, ..., d_h], got shape {x.shape} "
                         f"({x.dtype})")
    x = x.astype(np.float32)
    axis = -1 if per == "token" else 0
    lo, hi = x.min(axis=axis, keepdims=True), x.max(axis=axis, keepdims=True)
    levels = np.float32(2 ** bits - 1)
    scale = (hi - lo) / levels
    safe = np.where(scale > 0, scale, np.float32(1))
    codes = np.clip(np.rint((x - lo) / safe), 0, levels)               # integers 0 .. 2^b - 1
    return (codes * scale + lo).astype(np.float32)


@dataclass(frozen=True)
class QuantScheme:
    """A quantized cache: `bits` per value, keys' scales per 'token' or per 'channel' (over a
    group of `group` tokens), values' per token; the newest tokens stay float32 until `group`
    of them are older than the `residual` most recent, then that group is quantized."""
    bits: int = 4
    keys: str = "channel"
    group: int = 32
    residual: int = 32

    def __post_init__(self):
        validate.choice("bits", self.bits, QUANT_BITS)
        validate.choice("keys", self.keys, SCALES)
        validate.count("group", self.group, 1)
        validate.count("residual", self.residual, 0)

    @property
    def name(self) -> str:
        """'int4, keys per channel' and the like."""
        return f"int{self.bits}, keys per {self.keys}"

    def quantized(self, tokens: int) -> int:
        """Positions held quantized at this length: whole groups older than the residual."""
        tokens = validate.count("tokens", tokens, 0)
        return max(tokens - self.residual, 0) // self.group * self.group

    def nbytes(self, config, tokens: int) -> int:
        """Exact bytes of one sequence's cache at `tokens`: codes (bits / 8 a value), a float32
        scale and zero per token row (values; keys per token) or per channel and group (keys
        per channel), and the float32 residual. Full-attention K/V layers only."""
        _check_layers(config)
        q = self.quantized(tokens)
        rows = config.n_layers * config.n_kv_heads                    # [L x H_kv] rows of d_h
        d_h = config.head_dim
        codes = 2 * q * d_h * self.bits // 8                          # K and V
        key_scales = q if self.keys == "token" else q // self.group * d_h
        scales = 2 * SCALE_BYTES * (key_scales + q)                   # (scale, zero) each
        residual = 2 * (tokens - q) * d_h * 4                         # float32 K and V
        return rows * (codes + scales + residual)


def _check_layers(config):
    """Quantized schemes are defined for full-attention layers caching K and V per KV head."""
    specs = config.layers
    if any(s.kind != "full" or set(s.entry_shapes) != {"k", "v"} for s in specs):
        raise ValueError("a quantized scheme needs full-attention layers caching k and v "
                         f"(MHA, GQA, MQA), got attention={config.attention!r} with layer "
                         f"kinds {sorted({s.kind for s in specs})}")
    if (config.head_dim * 2) % 8:
        raise ValueError(f"head_dim {config.head_dim} must be a multiple of 4 for 2-bit codes")


def quantize_cache(cache, scheme: QuantScheme, done: int = 0, row: int | None = None) -> int:
    """Quantize, in place, the groups of a float32 cache that `scheme` holds quantized at its
    length and that are not yet (positions done .. ; row: one sequence of a batched cache).
    Returns the positions now quantized, the `done` of the next call."""
    cache = check_cache(cache)
    if not isinstance(scheme, QuantScheme):
        raise ValueError(f"scheme must be a QuantScheme, got {type(scheme).__name__}")
    _check_layers(cache.config)
    if cache.kv_dtype != "float32" or any(type(layer) is not FullLayer for layer in cache.layers):
        raise ValueError(f"quantize_cache needs a plain float32 cache, got kv_dtype="
                         f"{cache.kv_dtype!r}" + ("" if cache.policy is None else " with a policy"))
    q = scheme.quantized(len(cache))
    done = validate.count("done", done, 0, len(cache))
    if cache.batch is None:
        row = validate.optional_count("row", row, 0, 0)
    else:
        row = validate.count("row", row if row is not None else -1, 0, cache.batch - 1)
    for start in range(done, q, scheme.group):
        end = start + scheme.group
        for layer in cache.layers:
            k = layer["k"] if cache.batch is None else layer["k"][row]      # [slots, H_kv, d_h]
            v = layer["v"] if cache.batch is None else layer["v"][row]
            k[start:end] = round_trip(k[start:end], scheme.bits, scheme.keys)
            v[start:end] = round_trip(v[start:end], scheme.bits, "token")
    return max(q, done)


def quantized_logits(model, token_ids, scheme: QuantScheme) -> np.ndarray:
    """Logits [N, |V|] of a text read through a cache quantized by `scheme`: a float32 cache fed
    `group` tokens per step, each whole group quantized once it is older than the residual
    (quantize_cache). When residual is a multiple of group, every token sees what it would see
    decoded one at a time; otherwise the text goes one token per step."""
    check_model(model)
    if not isinstance(scheme, QuantScheme):
        raise ValueError(f"scheme must be a QuantScheme, got {type(scheme).__name__}")
    _check_layers(model.config)
    ids = validate.token_ids("token_ids", token_ids, model.config.vocab_size,
                             model.config.max_seq_len)
    if not ids:
        raise ValueError("token_ids must hold at least one token")
    chunk = scheme.group if scheme.residual % scheme.group == 0 else 1
    cache, done, rows = model.new_cache(capacity=len(ids)), 0, []
    for start in range(0, len(ids), chunk):
        rows.append(model.forward(ids[start:start + chunk], cache))        # [T, |V|]
        done = quantize_cache(cache, scheme, done)
    return np.concatenate(rows)


def key_channel_spread(cache) -> np.ndarray:
    """Per layer: the largest channel's max |key| over the median channel's (channels of
    every KV head, over the tokens held). [n_layers]"""
    cache = check_cache(cache)
    _check_layers(cache.config)
    n = len(cache)
    out = []
    for layer in cache.layers:
        k = np.abs(layer["k"][..., :n, :, :]).reshape(-1, *layer["k"].shape[-2:])
        peak = k.max(axis=0).ravel()                                    # [H_kv x d_h]
        out.append(peak.max() / np.median(peak))
    return np.array(out)


def key_error(cache, scheme: QuantScheme) -> np.ndarray:
    """Per layer: ||K' - K|| / ||K|| over the positions `scheme` would quantize in this float32
    cache (one sequence), K' its keys quantized and back. The cache is not changed. [n_layers]"""
    cache = check_cache(cache)
    if not isinstance(scheme, QuantScheme):
        raise ValueError(f"scheme must be a QuantScheme, got {type(scheme).__name__}")
    _check_layers(cache.config)
    if cache.batch is not None:
        raise ValueError(f"key_error takes a cache of one sequence, got batch {cache.batch}")
    q = scheme.quantized(len(cache))
    if q == 0:
        raise ValueError(f"nothing to quantize: {len(cache)} tokens, residual "
                         f"{scheme.residual}, groups of {scheme.group}")
    out = []
    for layer in cache.layers:
        k = np.asarray(layer["k"][:q], dtype=np.float32)                # [q, H_kv, d_h]
        back = np.concatenate([round_trip(k[s:s + scheme.group], scheme.bits, scheme.keys)
                               for s in range(0, q, scheme.group)])
        out.append(np.linalg.norm(back - k) / np.linalg.norm(k))
    return np.array(out)


def compare_schemes(model, prefix_cache, prompt_ids, n_new: int, schemes) -> dict:
    """Several quantized caches beside the float32 one, on the float32 cache's greedy path.

    One batched run: row 0 a float32 copy of prefix_cache continued with prompt_ids (its
    tokens the path), row 1 + i the same under schemes[i]. Returns 'tokens' [n_new] (float32's
    greedy answer), per scheme (lists, in order) 'max_error' [n_new] (max |logit difference|
    per step), 'top1_same' [n_new] (its top token is float32's), 'nbytes' (held at the end);
    'top2_margin' [n_new] (float32's top logit minus its second), 'scale', 'tokens_held'.
    """
    check_model(model)
    prefix_cache = check_cache(prefix_cache)
    if not prefix_cache.owned_by(model) or prefix_cache.batch is not None:
        raise ValueError("prefix_cache must be a cache of this model holding one sequence")
    schemes = list(schemes)
    if not schemes or not all(isinstance(s, QuantScheme) for s in schemes):
        raise ValueError(f"schemes must be a non-empty list of QuantScheme, got {schemes!r}")
    config = model.config
    _check_layers(config)
    n0 = len(prefix_cache)
    prompt = validate.token_ids("prompt_ids", prompt_ids, config.vocab_size,
                                config.max_seq_len - n0)
    n_new = validate.count("n_new", n_new, 1, config.max_seq_len - n0 - len(prompt) + 1)
    if not prompt:
        raise ValueError("prompt_ids must hold at least one token")
    B = 1 + len(schemes)
    cache = model.new_cache(batch=B, capacity=n0 + len(prompt) + n_new)
    for mine, theirs in zip(cache.layers, prefix_cache.layers):      # every row: the prefix
        for name in ("k", "v"):
            mine[name][:, :n0] = theirs[name][:n0]
    cache.length = n0
    done = [0] * B
    feed = np.tile(np.asarray(prompt), (B, 1))                       # [B, T]
    tokens, rows = [], []
    for _ in range(n_new):
        logits = model.forward(feed, cache)[:, -1]                   # [B, vocab]
        for i, scheme in enumerate(schemes, start=1):
            done[i] = quantize_cache(cache, scheme, done[i], row=i)
        rows.append(logits)
        tokens.append(int(np.argmax(logits[0])))
        feed = np.full((B, 1), tokens[-1])
    logits = np.stack(rows)                                          # [n_new, B, vocab]
    ref = logits[:, 0]
    top2 = np.sort(ref, axis=1)[:, -2:]
    held = len(cache)
    return {"tokens": tokens,
            "max_error": [np.abs(logits[:, i] - ref).max(axis=1) for i in range(1, B)],
            "top1_same": [logits[:, i].argmax(axis=1) == ref.argmax(axis=1)
                          for i in range(1, B)],
            "nbytes": [s.nbytes(config, held) for s in schemes],
            "top2_margin": top2[:, 1] - top2[:, 0], "scale": float(np.abs(ref).max()),
            "tokens_held": held}


__all__ = ["forced_logits", "compare_cache", "QUANT_BITS", "SCALES", "SCALE_BYTES",
           "round_trip", "QuantScheme", "quantize_cache", "quantized_logits",
           "key_channel_spread", "key_error", "compare_schemes"]
