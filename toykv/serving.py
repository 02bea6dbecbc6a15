"""Planning a server's memory: request lengths, and the cache a batch of them needs.

request_lengths and batch_cache_bytes simulate a mix of request lengths, for the memory a
batch needs when its requests run to their full length (source_lecture_memory_bound: plan
for the worst case). What one step costs is toykv.stepcost's (counted) and toykv.steptime's
(measured); decode_toy, the model whose weights outweigh its cache, is toykv.config's.
"""
from __future__ import annotations

import numpy as np

from . import validate
from .config import ModelConfig, check_config, decode_toy
from .sizing import kv_cache_bytes

MAX_REQUESTS = 10_000_000             # request_lengths draws at most this many (80 MB of int64)


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


__all__ = ["decode_toy", "request_lengths", "batch_cache_bytes", "MAX_REQUESTS"]
