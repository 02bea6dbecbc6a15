"""What serving costs: a decode step split into weights and cache, measured roofline points,
and request lengths for planning memory.

decode_step_split counts the FLOPs and bytes of one decode step of B sequences at context S
and splits them: the weights are read once for the whole batch and do 2 FLOPs per weight per
sequence, while each sequence's cache is its own, read in full for that sequence's attention.
So batching raises the weights' arithmetic intensity B-fold and leaves the cache's where it
was (austin2025scaling, the inference chapter). measure_decode and measure_prefill time toykv
(toykv.steptime) and turn counted FLOPs and bytes into a point on a roofline.
request_lengths and batch_cache_bytes simulate a mix of request lengths, for the memory a
batch needs when its requests run to their full length (source_lecture_memory_bound: plan
for the worst case).
"""
from __future__ import annotations

import numpy as np

from . import validate
from .config import ModelConfig, check_config, decode_toy
from .flops import cached_step_flops, forward_flops, layer_flops
from .layers import check_absorb
from .model import check_model
from .roofline import Hardware
from .sizing import kv_cache_bytes, read_config, weight_bytes_read
from .steptime import prefill_time_curve, step_time_curve

MAX_REQUESTS = 10_000_000             # request_lengths draws at most this many (80 MB of int64)


def _part(flops: int, nbytes: int) -> dict:
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}


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
    (see sizing.decode_step_bytes, absorb=False).
    """
    check_config(config)
    context = validate.count("context", context, 1)
    batch = validate.count("batch", batch, 1)
    check_absorb(config, absorb)
    if any(spec.rebuilt_values(absorb) for spec, _ in config.layer_groups):
        raise ValueError("MLA's expanded form also writes and reads the keys it rebuilds: "
                         "give absorb=True, or use sizing.decode_step_bytes")
    one = sum(layer_flops(config, 1, 0, absorb) for _ in range(config.n_layers))
    weight_flops = batch * (one + 2 * config.d_model * config.vocab_size)      # + output head
    cache_flops = cached_step_flops(config, context, absorb, batch) - weight_flops
    weights = _part(weight_flops, weight_bytes_read(config, bytes_per_param, batch))
    cache = _part(cache_flops, kv_cache_bytes(read_config(config), context, batch,
                                              bytes_per_value))        # as every layer reads it
    total = _part(weights["flops"] + cache["flops"], weights["bytes"] + cache["bytes"])
    return {"weights": weights, "cache": cache, "total": total}


def decode_step_seconds(config: ModelConfig, hw: Hardware, context: int, batch: int = 1,
                        bytes_per_param=2, bytes_per_value=2, absorb: bool = False) -> dict:
    """Two lower bounds on one decode step's time on hw, from decode_step_split's two parts.

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


def _point(flops: int, nbytes: int, seconds: float, tokens: int) -> dict:
    """A measured roofline point: counted FLOPs and bytes, and the seconds they took."""
    return {"flops": flops, "bytes": nbytes, "seconds": float(seconds),
            "intensity": flops / nbytes, "flops_per_s": flops / seconds,
            "bytes_per_s": nbytes / seconds, "tokens_per_s": tokens / seconds}


def measure_decode(model, context: int, batch: int = 1, steps: int = 5,
                   threads: int | None = 1) -> dict:
    """A decode step of `batch` sequences at `context` tokens, timed (median of `steps`, cache
    filled with stand-ins: steptime.step_time_curve) and counted (decode_step_split, float32).

    {'flops', 'bytes', 'seconds', 'intensity' (FLOP/byte), 'flops_per_s', 'bytes_per_s',
    'tokens_per_s' (batch / seconds)}.
    """
    check_model(model)
    context = validate.count("context", context, 2)
    batch = validate.count("batch", batch, 1)
    validate.optional_count("threads", threads, 1)
    seconds = step_time_curve(model, [context], steps, threads=threads, batch=batch)[0]
    split = decode_step_split(model.config, context, batch, 4, 4, model.absorb)["total"]
    return _point(split["flops"], split["bytes"], seconds, batch)


def measure_prefill(model, prompt_len: int, repeats: int = 3,
                    threads: int | None = 1) -> dict:
    """A prefill of prompt_len tokens, timed (median of `repeats`: steptime.prefill_time_curve)
    and counted: toykv.flops.forward_flops; the float32 weights read once and the cache written.

    The same keys as measure_decode; tokens_per_s is prompt tokens per second.
    """
    check_model(model)
    prompt_len = validate.count("prompt_len", prompt_len, 1)
    validate.optional_count("threads", threads, 1)
    seconds = prefill_time_curve(model, [prompt_len], repeats, threads)[0]
    config = model.config
    nbytes = weight_bytes_read(config, 4) + kv_cache_bytes(config, prompt_len, bytes_per_value=4)
    return _point(forward_flops(config, prompt_len, 0, model.absorb), nbytes, seconds, prompt_len)


def request_lengths(n: int, median: int, max_len: int, sigma: float = 1.0,
                    seed: int = 0) -> np.ndarray:
    """n request lengths in tokens (prompt + output): log-normal around `median` with shape
    `sigma` (a long tail: most short, a few long), rounded and clipped to [1, max_len]. [n]
    n: at most MAX_REQUESTS."""
    n = validate.count("n", n, 1, MAX_REQUESTS)
    max_len = validate.count("max_len", max_len, 1)
    median = validate.count("median", median, 1, max_len)
    sigma = validate.number("sigma", sigma, allow_minimum=True)
    seed = validate.count("seed", seed, 0)
    draws = np.random.default_rng(seed).lognormal(np.log(median), sigma, n)     # [n]
    return np.clip(np.rint(draws), 1, max_len).astype(np.int64)


def batch_cache_bytes(config: ModelConfig, lengths, batch: int, bytes_per_value=2) -> np.ndarray:
    """KV bytes each batch of `batch` consecutive requests needs once every request has reached
    its length (static batching: a batch's cache peaks at its end). lengths [n] ->
    [n // batch] (a last, incomplete batch is left out). Summed in Python ints, as
    toykv.sizing counts: int64, or exact Python ints (dtype object) past int64's range."""
    check_config(config)
    batch = validate.count("batch", batch, 1)
    try:
        lengths = np.asarray(lengths).ravel()
    except (ValueError, TypeError):                     # numpy refuses ragged nesting
        raise ValueError("lengths must be a flat list of integers >= 1 (tokens per request), "
                         "got a ragged nesting of lists") from None
    if lengths.dtype.kind not in "iu":
        raise ValueError(f"lengths must be integers >= 1 (tokens per request), got "
                         f"{lengths.dtype} values such as {lengths[:3].tolist()!r:.60}")
    if lengths.size and lengths.min() < 1:
        raise ValueError(f"lengths must be integers >= 1 (tokens per request), got "
                         f"{lengths.min()}")
    if len(lengths) < batch:
        raise ValueError(f"{len(lengths)} lengths make no full batch of {batch}")
    unique, index = np.unique(lengths, return_inverse=True)                 # sized once each
    per_length = [kv_cache_bytes(config, int(n), 1, bytes_per_value) for n in unique]
    n_batches = len(lengths) // batch
    rows = index[:n_batches * batch].reshape(n_batches, batch)              # [batches, batch]
    totals = [sum(per_length[i] for i in row) for row in rows.tolist()]    # exact ints
    fits = max(totals) < 2 ** 63
    return np.array(totals, dtype=np.int64 if fits else object)


__all__ = ["decode_toy", "decode_step_split", "decode_step_seconds", "measure_decode", "measure_prefill",
           "request_lengths", "batch_cache_bytes", "MAX_REQUESTS"]
