"""What a step costs, counted: FLOPs (toykv.flops) and bytes (sizing.decode_step_bytes), and the
time bounds they set on a roofline. Measured step times are toykv.steptime's.

A decode or verify step is one count, _step: `new` tokens for each of `batch` sequences after
`cached` ones (a decode step new = 1, a verify step of k proposals new = k + 1). Its weights
are read once for the whole batch and do 2 FLOPs per weight per token, while each sequence's
cache is its own, read in full for that sequence's attention; so batching raises the weights'
arithmetic intensity B-fold and leaves the cache's where it was (austin2025scaling, the
inference chapter). A prefill writes the cache it stores instead (prefill_cost).
"""
from __future__ import annotations

from . import validate
from .config import ModelConfig, check_config
from .flops import forward_flops
from .layers import KV_DTYPE_BYTES, check_absorb, check_kv_dtype
from .roofline import Hardware
from .sizing import decode_step_bytes, kv_cache_bytes, weight_bytes_read
from .speculative import MAX_K

WEIGHT_BYTES = 4                      # toykv's weights are float32


def _part(flops: int, nbytes: int) -> dict:
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}


def _step(config: ModelConfig, new: int, cached: int, batch: int, bytes_per_param,
          bytes_per_value, scale_bytes=0, absorb: bool = False) -> dict:
    """{'weights', 'cache', 'total'}, each {'flops', 'bytes', 'intensity'}, of `new` tokens per
    sequence after `cached` ones. The caller checks config and counts; decode_step_bytes checks
    the byte sizes before any FLOPs are counted.

    Bytes: sizing.decode_step_bytes at cached + new tokens, MLA's expanded form (absorb=False)
    with the keys and values it rebuilds, which count with the cache. FLOPs: flops.forward_flops;
    the weights' part is every product with a weight matrix (toykv.flops with no keys), the
    cache's the rest: scoring and averaging the keys (and rebuilding them, expanded MLA).
    """
    nbytes = decode_step_bytes(config, cached + new, batch, bytes_per_value, bytes_per_param,
                               scale_bytes, expanded=not absorb)
    total_flops = forward_flops(config, new, cached, absorb, batch)
    layers = sum(n * spec.flops(new, 0, absorb) for spec, n in config.layer_groups)  # no keys
    weight_flops = batch * (layers + 2 * new * config.d_model * config.vocab_size)   # + head
    return {"weights": _part(weight_flops, nbytes["weights"]),
            "cache": _part(total_flops - weight_flops, nbytes["kv"] + nbytes["expanded"]),
            "total": _part(total_flops, nbytes["total"])}


def decode_step_split(config: ModelConfig, context: int, batch: int = 1,
                      bytes_per_param=2, bytes_per_value=2, absorb: bool = False) -> dict:
    """FLOPs and bytes of one decode step of `batch` sequences at `context` tokens each (the new
    one included), split into {'weights', 'cache', 'total'}, each {'flops', 'bytes', 'intensity'}.

    weights: every product with a weight matrix (toykv.flops with no keys), batch x 2 FLOPs per
    weight, and the weights read once for the batch (sizing.weight_bytes_read: the course's one
    rule, an untied input embedding read as one looked-up row per sequence).
    cache: scoring and averaging the context keys of every sequence (the rest of
    flops.cached_step_flops), and every sequence's cache read once by each layer that attends
    to it (sizing.kv_cache_bytes of sizing.read_config: a shared cache once per sharing layer).
    MLA counts in its absorbed form (absorb=True); its expanded form also moves rebuilt keys
    (decode_step_cost counts it, toykv's float32 model).
    """
    check_config(config)
    context = validate.count("context", context, 1)
    batch = validate.count("batch", batch, 1)
    check_absorb(config, absorb)
    if any(spec.rebuilt_values(absorb) for spec, _ in config.layer_groups):
        raise ValueError("MLA's expanded form also writes and reads the keys it rebuilds: "
                         "give absorb=True, or use sizing.decode_step_bytes "
                         "(or stepcost.decode_step_cost)")
    return _step(config, 1, context - 1, batch, bytes_per_param, bytes_per_value, 0, absorb)


def decode_step_bounds(config: ModelConfig, hw: Hardware, context: int, batch: int = 1,
                       bytes_per_param=2, bytes_per_value=2, absorb: bool = False) -> dict:
    """Two lower bounds, in seconds, on one decode step's time on hw, modelled from
    decode_step_split's counts (not a measurement: see toykv.steptime for those).

    'overlapped': hw.min_seconds of the whole step, max(F / pi, M / beta): the cache reads
    hide under the weights' products and the reverse, as if one kernel did both at once.
    'serial': the cache's part, then the weights', each at its own bound (hw.serial_min_seconds):
    B M_KV / beta + max(2 B N / pi, M_W / beta) while attention stays memory-bound, the
    step-time model of austin2025scaling (the inference chapter). Also 'cache' and 'weights'
    (each part's bound, seconds) and 'split' (decode_step_split's dict).
    """
    if not isinstance(hw, Hardware):
        raise ValueError(f"hw must be a toykv.roofline.Hardware (e.g. toykv.hardware('h100-sxm'))"
                         f", got {type(hw).__name__}")
    split = decode_step_split(config, context, batch, bytes_per_param, bytes_per_value, absorb)
    parts = {name: (split[name]["flops"], split[name]["bytes"]) for name in ("cache", "weights")}
    total = split["total"]
    return {"overlapped": hw.min_seconds(total["flops"], total["bytes"]),
            "serial": hw.serial_min_seconds(parts["cache"], parts["weights"]),
            "cache": hw.min_seconds(*parts["cache"]),
            "weights": hw.min_seconds(*parts["weights"]), "split": split}


def decode_step_cost(config: ModelConfig, context: int, kv_dtype: str = "float32",
                     absorb: bool = False) -> dict:
    """FLOPs and bytes of one decode step of a toykv model (float32 weights, a kv_dtype cache)
    at `context` tokens, and their ratio: decode_step_split's total, MLA's expanded form
    (absorb=False) included. {'flops', 'bytes', 'intensity'}: intensity is FLOPs per byte."""
    check_config(config)
    context = validate.count("context", context, 1)
    value_bytes, scale_bytes = KV_DTYPE_BYTES[check_kv_dtype(kv_dtype)]
    check_absorb(config, absorb)
    return _step(config, 1, context - 1, 1, WEIGHT_BYTES, value_bytes, scale_bytes,
                 absorb)["total"]


def cache_intensity(config: ModelConfig, absorb: bool = False, kv_dtype: str = "float32",
                    context: int = 4096) -> float:
    """FLOPs per byte of the step's work over the cache: what one more cached position adds to a
    decode step's FLOPs over what it adds to its bytes (decode_step_cost at context + 1 and at
    context: float32 weights, a kv_dtype cache)."""
    check_config(config)
    context = validate.count("context", context, 1)
    more = decode_step_cost(config, context + 1, kv_dtype, absorb)
    now = decode_step_cost(config, context, kv_dtype, absorb)
    if more["bytes"] == now["bytes"]:
        raise ValueError(f"one more position adds no bytes at context {context} "
                         "(every layer slides and the window is full): take a smaller context")
    return (more["flops"] - now["flops"]) / (more["bytes"] - now["bytes"])


def verify_cost(config: ModelConfig, context: int, k: int, batch: int = 1, bytes_per_param=4,
                bytes_per_value=4) -> dict:
    """FLOPs and bytes of a verify step of k proposals after `context` cached tokens, for each
    of `batch` sequences: the newest token and k proposals fed at once, every weight read once
    for the batch and each sequence's cache of context + k + 1 tokens. k = 0 is a decode step
    (decode_step_cost at context + 1). float32 by default (toykv's arrays); MLA in its
    expanded form, as toykv's model runs by default. {'flops', 'bytes', 'intensity'}."""
    check_config(config)
    context = validate.count("context", context, 0)
    k = validate.count("k", k, 0, MAX_K)
    batch = validate.count("batch", batch, 1)
    return _step(config, k + 1, context, batch, bytes_per_param, bytes_per_value)["total"]


def prefill_cost(config: ModelConfig, prompt_len: int, bytes_per_param=4,
                 bytes_per_value=4, absorb: bool = False) -> dict:
    """FLOPs and bytes of a prefill of prompt_len tokens: flops.forward_flops, the weights read
    once (sizing.weight_bytes_read) and the prompt's cache written (sizing.kv_cache_bytes).
    float32 by default (toykv's arrays). {'flops', 'bytes', 'intensity'}."""
    check_config(config)
    prompt_len = validate.count("prompt_len", prompt_len, 1)
    nbytes = (weight_bytes_read(config, bytes_per_param)
              + kv_cache_bytes(config, prompt_len, bytes_per_value=bytes_per_value))
    return _part(forward_flops(config, prompt_len, 0, absorb), nbytes)


__all__ = ["WEIGHT_BYTES", "decode_step_split", "decode_step_bounds",
           "decode_step_cost", "cache_intensity", "verify_cost", "prefill_cost"]
