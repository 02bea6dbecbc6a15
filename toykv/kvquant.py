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
Hugging Face's QuantizedCache keeps a residual). QuantScheme says which and round_trip is the
arithmetic (both from the quantized kind, toykv.kinds.quantized: model.new_cache(quant=...));
key_channel_spread and key_error measure a float32 cache's keys, and compare_schemes runs
several schemes beside the float32 cache on one text.
"""
from __future__ import annotations

import numpy as np

from . import validate
from .cache import check_cache
from .generate import decode_steps
from .kinds.quantized import (QUANT_BITS, SCALE_BYTES, SCALES, QuantScheme, check_layers,
                              round_trip)
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


# -- quantized caches: the kind (toykv.kinds.quantized) and what they cost ------------------
def _check_measurable(cache, what: str):
    """A float32 cache of full-attention K/V layers that holds every token it was fed (the
    measurements read its keys as they came): else a ValueError, before any work."""
    cache = check_cache(cache)
    check_layers(cache.config)
    if cache.config.kv_sharing > 1:
        raise ValueError(f"{what} measures every layer's own keys; with kv_sharing="
                         f"{cache.config.kv_sharing} some layers hold none (they read another "
                         "layer's): measure a model whose layers each store their own")
    if cache.kv_dtype != "float32" or cache.quant is not None:
        raise ValueError(f"{what} reads float32 keys as the model made them: the cache holds "
                         f"kv_dtype={cache.kv_dtype!r}" + ("" if cache.quant is None else
                                                          ", quantized"))
    short = [i for i in range(cache.config.n_layers) if cache.held(i) != len(cache)]
    if short:
        raise ValueError(f"{what} needs a cache that holds every token it was fed; layer "
                         f"{short[0]} holds {cache.held(short[0])} of {len(cache)} (a policy or "
                         "a window dropped some)")
    return cache


def key_channel_spread(cache) -> np.ndarray:
    """Per layer: the largest channel's max |key| over the median channel's (channels of
    every KV head, over the tokens held). [n_layers]"""
    cache = _check_measurable(cache, "key_channel_spread")
    if len(cache) == 0:
        raise ValueError("the cache is empty: nothing to measure")
    out = []
    for i in range(cache.config.n_layers):
        k = np.abs(cache.stored(i, "k"))                                # [(B,) n, H_kv, d_h]
        peak = k.reshape(-1, *k.shape[-2:]).max(axis=0).ravel()         # [H_kv x d_h]
        out.append(peak.max() / np.median(peak))
    return np.array(out)


def key_error(cache, scheme: QuantScheme) -> np.ndarray:
    """Per layer: ||K' - K|| / ||K|| over the positions `scheme` would quantize in this float32
    cache (one sequence), K' its keys quantized and back. The cache is not changed. [n_layers]"""
    cache = _check_measurable(cache, "key_error")
    if not isinstance(scheme, QuantScheme):
        raise ValueError(f"scheme must be a QuantScheme, got {type(scheme).__name__}")
    if cache.batch is not None:
        raise ValueError(f"key_error takes a cache of one sequence, got batch {cache.batch}")
    q = scheme.quantized(len(cache))
    if q == 0:
        raise ValueError(f"nothing to quantize: {len(cache)} tokens, residual "
                         f"{scheme.residual}, groups of {scheme.group}")
    out = []
    for i in range(cache.config.n_layers):
        k = np.asarray(cache.stored(i, "k")[:q], dtype=np.float32)      # [q, H_kv, d_h]
        back = np.concatenate([round_trip(k[s:s + scheme.group], scheme.bits, scheme.keys)
                               for s in range(0, q, scheme.group)])
        out.append(np.linalg.norm(back - k) / np.linalg.norm(k))
    return np.array(out)


def quantized_logits(model, token_ids, scheme: QuantScheme) -> np.ndarray:
    """Logits [N, |V|] of a text read through a cache quantized by `scheme`
    (model.new_cache(quant=scheme)), `group` tokens per step: when residual is a multiple of
    group, every token then sees what it would see decoded one at a time (a step's groups are
    those quantized when it began); otherwise the text goes one token per step."""
    check_model(model)
    if not isinstance(scheme, QuantScheme):
        raise ValueError(f"scheme must be a QuantScheme, got {type(scheme).__name__}")
    check_layers(model.config)
    ids = validate.token_ids("token_ids", token_ids, model.config.vocab_size,
                             model.config.max_seq_len)
    if not ids:
        raise ValueError("token_ids must hold at least one token")
    chunk = scheme.group if scheme.residual % scheme.group == 0 else 1
    cache = model.new_cache(capacity=len(ids), quant=scheme)
    return np.concatenate([model.forward(ids[start:start + chunk], cache)   # [T, |V|] each
                           for start in range(0, len(ids), chunk)])


def compare_schemes(model, prefix_cache, prompt_ids, n_new: int, schemes) -> dict:
    """Several quantized caches beside the float32 one, on the float32 cache's greedy path.

    One batched run: row 0 a float32 copy of prefix_cache continued with prompt_ids (its
    tokens the path), row 1 + i the same in a cache quantized by schemes[i] (QuantizedLayer:
    the prefix and the prompt read in float32, quantized from the first decode step on). Returns 'tokens' [n_new] (float32's
    greedy answer), per scheme (lists, in order) 'max_error' [n_new] (max |logit difference|
    per step), 'top1_same' [n_new] (its top token is float32's), 'nbytes' (held at the end);
    'top2_margin' [n_new] (float32's top logit minus its second), 'scale', 'tokens_held'.
    """
    check_model(model)
    prefix_cache = _check_measurable(prefix_cache, "compare_schemes")
    if not prefix_cache.owned_by(model) or prefix_cache.batch is not None:
        raise ValueError("prefix_cache must be a cache of this model holding one sequence")
    if isinstance(schemes, (QuantScheme, str, bytes, dict)) or not hasattr(schemes, "__iter__"):
        raise ValueError(f"schemes must be a list of QuantScheme (one per quantized row), got "
                         f"{type(schemes).__name__}")
    schemes = list(schemes)
    if not schemes or not all(isinstance(s, QuantScheme) for s in schemes):
        raise ValueError(f"schemes must be a non-empty list of QuantScheme, got {schemes!r}")
    config = model.config
    n0 = len(prefix_cache)
    prompt = validate.token_ids("prompt_ids", prompt_ids, config.vocab_size,
                                config.max_seq_len - n0)
    n_new = validate.count("n_new", n_new, 1, config.max_seq_len - n0 - len(prompt) + 1)
    if not prompt:
        raise ValueError("prompt_ids must hold at least one token")
    B = 1 + len(schemes)
    cache = prefix_cache.copy(capacity=n0 + len(prompt) + n_new, batch=B,   # every row: the
                              quant=[None] + schemes)                        # prefix, float32
    feed = np.tile(np.asarray(prompt), (B, 1))                       # [B, T]
    tokens, rows = [], []
    for _ in range(n_new):
        logits = model.forward(feed, cache)[:, -1]                   # [B, vocab]
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
           "round_trip", "QuantScheme", "key_channel_spread", "key_error",
           "compare_schemes", "quantized_logits"]
