"""The KV share at long context: what one decode step reads, the share against context, depth.

step_bytes splits the bytes a decode step reads into active weights and cache (toykv.sizing
does the counting). share_curve gives the share at many contexts and marks those beyond the
model's published maximum context (hypothetical: chapter 8 draws them dashed), and
crossover_context finds where the share reaches a level (half: cache as costly as weights). depth_model
rebuilds a dense model with another number of layers, for the layer-depth argument.
fit_two_bandwidths explains measured step times with one bandwidth for weights and one for
the cache, where the bandwidth bound assumes a single one. compressed_cache_bytes sizes a cache
whose layers keep a raw window plus pooled rows (time-axis compression), for estimates of models
whose layers toykv does not build.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import validate
from .sizing import decode_step_bytes, kv_share, model_parts, param_count
from .zoo import ZooModel


def step_bytes(model, tokens, batch=1, bytes_per_value=2, bytes_per_param=2,
               weights: str = "read") -> dict:
    """Bytes one decode step reads at `tokens` of context per sequence, for `batch` sequences:
    sizing.decode_step_bytes, the course's one rule ({'weights', 'kv', 'total', 'share'};
    weights='active' is the source essay's convention of counting every active parameter)."""
    return decode_step_bytes(model, tokens, batch, bytes_per_value, bytes_per_param,
                             weights=weights)


def share_curve(model, contexts, bytes_per_value=2, bytes_per_param=2, batch=1,
                weights: str = "read"):
    """KV share at each context, and whether the context is within the published maximum.

    contexts: integers. Returns (shares [n] float, within [n] bool), within meaning
    context <= config.max_seq_len (for a zoo model: its published maximum context).
    weights: 'read' (the course's rule) or 'active' (the essay's), as sizing.kv_share.
    """
    config, _ = model_parts(model)
    contexts = np.array([validate.count("contexts", c, 0) for c in contexts])    # [n]
    shares = kv_share(model, contexts, batch, bytes_per_value, bytes_per_param,
                      weights)                                                   # [n]
    within = contexts <= config.max_seq_len
    return shares, within


def crossover_context(model, share: float = 0.5, batch=1, bytes_per_value=2,
                      bytes_per_param=2, limit: int = 10**9, weights: str = "read"):
    """Smallest context at which the KV share of a decode step reaches `share` (0 < share < 1),
    with the weights counted by `weights` (as sizing.kv_share).

    None when it never does up to `limit` tokens (a cache that stops growing: every layer
    slides). The share never falls as the context grows, so a binary search finds it.
    """
    share = validate.number("share", share, 0.0, maximum=1.0)
    if share >= 1:
        raise ValueError(f"share must be below 1 (the weights are always read), got {share}")
    limit = validate.count("limit", limit, 1)
    kv_share(model, 0, batch, bytes_per_value, bytes_per_param, weights)    # checks, once

    def reached(tokens):
        return kv_share(model, tokens, batch, bytes_per_value, bytes_per_param,
                        weights) >= share

    if not reached(limit):
        return None
    low, high = 0, limit                    # reached(high) is true; find the first such
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if reached(middle) else (middle, high)
    return high


def depth_model(model, n_layers: int, blocks_only: bool = False) -> ZooModel:
    """The same layers, n_layers of them; all params active (dense models only).

    blocks_only=True counts only the blocks' parameters (no embeddings, no final norm): the
    part of the weights that grows with depth, as the cache does.
    """
    config, active = model_parts(model)
    n_layers = validate.count("n_layers", n_layers, 1)
    validate.flag("blocks_only", blocks_only)
    if isinstance(model, ZooModel) and model.is_moe:
        raise ValueError(f"{model.name} is a mixture of experts: its active parameters are not "
                         "the parameters of its config, so they cannot be rebuilt for another depth")
    if config.layer_types is not None:
        raise ValueError("depth_model needs a config without a per-layer pattern (layer_types)")
    deeper = replace(config, n_layers=n_layers)
    params = param_count(deeper, blocks_only=blocks_only)
    if blocks_only:        # weights with no embedding: nothing for the one rule to look up
        deeper = replace(deeper, tie_embeddings=True)
    name = f"{getattr(model, 'name', 'model')}, {n_layers} layers" + (
        " (blocks only)" if blocks_only else "")
    return ZooModel(name, deeper, params, params, sources=("toykv.param_count of the config",))


def _reals(name: str, values) -> np.ndarray:
    """values as a float array: real numbers only (no strings, bools or complex numbers)."""
    array = np.asarray(values)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be real numbers, got dtype {array.dtype}")
    return array.astype(float)


def fit_two_bandwidths(weight_bytes_read, kv_bytes, seconds) -> dict:
    """Explain measured decode steps with one bandwidth for weights and one for the cache.

    seconds = weights / beta_weights + kv / beta_kv, anchored at the first (shortest-context)
    step and fitted to the others with relative errors, so short and long steps count alike.
    weight_bytes_read: bytes of weights each step reads; kv_bytes [n], seconds [n]: the cache
    bytes and measured time of steps at n contexts, the first the shortest. Returns
    {'beta_weights', 'beta_kv'} in bytes/s, 'seconds' [n] (fitted) and 'relative_speed' [n]:
    fitted time of the first step / fitted time, comparable with seconds[0] / seconds.
    """
    w = validate.number("weight_bytes_read", weight_bytes_read)
    kv, t = _reals("kv_bytes", kv_bytes), _reals("seconds", seconds)   # [n] each
    if kv.ndim != 1 or kv.shape != t.shape or kv.size < 2:
        raise ValueError(f"kv_bytes and seconds must be 1-D of the same length >= 2, got "
                         f"shapes {kv.shape} and {t.shape}")
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(kv))):
        raise ValueError("seconds and kv_bytes must be finite numbers (no NaN or inf): a step "
                         "that was not measured cannot be fitted")
    if np.any(t <= 0) or np.any(kv < 0) or np.any(kv[1:] <= kv[0]):
        raise ValueError("seconds must be > 0, kv_bytes >= 0 and the first context the "
                         "shortest (its cache smaller than every other)")
    grow, extra = (kv[1:] - kv[0]) / t[1:], (t[1:] - t[0]) / t[1:]   # relative terms, [n-1]
    per_kv_byte = float(grow @ extra / (grow @ grow))       # seconds per cache byte
    per_step = t[0] - kv[0] * per_kv_byte                   # the weights' time, empty cache
    if per_kv_byte <= 0 or per_step <= 0:
        raise ValueError(f"the fit gave a non-positive time ({per_step:.3g} s for the weights, "
                         f"{per_kv_byte:.3g} s per cache byte): the step times do not grow "
                         "with the cache")
    fitted = per_step + kv * per_kv_byte                    # [n]
    return {"beta_weights": float(w / per_step), "beta_kv": 1 / per_kv_byte, "seconds": fitted,
            "relative_speed": fitted[0] / fitted}


def compressed_cache_bytes(ratios, tokens: int, window: int, row_values: int,
                           bytes_per_value=2) -> int:
    """Bytes of one sequence's cache over layers that each keep the last `window` tokens raw
    plus one pooled row for every `ratio` tokens of the context (ratio None: the window only),
    each row `row_values` values: sum of (min(S, w) + S // ratio) x row_values x b."""
    ratios = list(ratios)
    if not ratios:
        raise ValueError("ratios must name at least one layer (a ratio, or None)")
    ratios = [None if r is None else validate.count("ratio", r, 1) for r in ratios]
    tokens = validate.count("tokens", tokens, 0)
    window = validate.count("window", window, 0)
    row_values = validate.count("row_values", row_values, 1)
    b = validate.exact_number("bytes_per_value", bytes_per_value)
    rows = sum(min(tokens, window) + (0 if r is None else tokens // r) for r in ratios)
    total = rows * row_values * b
    if total.denominator != 1:
        raise ValueError(f"{rows} rows of {row_values} values at {bytes_per_value} bytes "
                         "is not a whole number of bytes")
    return int(total)


__all__ = ["compressed_cache_bytes", "step_bytes", "share_curve", "crossover_context", "depth_model",
           "fit_two_bandwidths"]
