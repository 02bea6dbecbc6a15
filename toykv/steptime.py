"""Measured decode step time at long context, without paying for a long prefill.

A decode step's time depends on how many entries the cache holds, not on their values, so
fill_cache appends stand-in entries (random numbers, written through the cache's own update,
as a forward pass would) instead of running a prefill of thousands of tokens. Steps are then
timed one by one and the median kept: on a shared machine single steps are noisy. By default
BLAS runs on one thread while timing (threadpoolctl, when installed): with two threads, a
neighbour on the other core can stall every product, while one thread is only slowed down.
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

from . import validate

FILL_CHUNK = 256                      # positions written per update call


def _entry_shapes(config) -> dict[str, tuple[int, ...]]:
    """What the cache stores per position and layer: K and V per KV head, or MLA's latent and key."""
    if config.attention == "mla":
        return {"c_kv": (config.kv_lora_rank,), "k_rope": (config.rope_head_dim,)}
    return {"k": (config.n_kv_heads, config.head_dim), "v": (config.n_kv_heads, config.head_dim)}


def fill_cache(cache, tokens: int, seed: int = 0) -> None:
    """Append `tokens` positions of random entries to every layer of `cache` (stand-ins for a prefill).

    The entries are one random block of FILL_CHUNK positions, repeated: writing them costs a
    copy, not a forward pass. len(cache) grows by `tokens`.
    """
    tokens = validate.count("tokens", tokens, 0)
    config = cache.config
    if len(cache) + tokens > config.max_seq_len:
        raise ValueError(f"{len(cache)} cached + {tokens} tokens exceeds max_seq_len "
                         f"{config.max_seq_len}")
    rng = np.random.default_rng(seed)
    block = {name: rng.standard_normal((FILL_CHUNK, *shape)).astype(np.float32)
             for name, shape in _entry_shapes(config).items()}            # [chunk, ...]
    done = 0
    while done < tokens:
        T = min(FILL_CHUNK, tokens - done)
        for layer in range(config.n_layers):                              # as forward() does
            cache.update(layer, **{name: a[:T] for name, a in block.items()})
        cache.advance(T)
        done += T


@contextlib.contextmanager
def blas_threads(n: int | None):
    """Run the block with BLAS limited to n threads (None: leave it as it is)."""
    if n is None:
        yield
        return
    n = validate.count("blas_threads", n, 1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:            # optional: without it, BLAS keeps its own thread count
        yield
        return
    with threadpool_limits(limits=n, user_api="blas"):
        yield


def limit_blas_threads(n: int = 1):
    """Limit BLAS to n threads from now on, for the whole session (threadpoolctl).

    Returns the limiter (its restore_original_limits() undoes it), or None when threadpoolctl
    is not installed. Chapters that time steps call it once, so every product runs alike.
    """
    n = validate.count("blas_threads", n, 1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    return threadpool_limits(limits=n, user_api="blas")


def step_seconds(model, cache, steps: int = 7, token: int = 0) -> np.ndarray:
    """Wall-clock seconds of `steps` single-token decode steps, one after another. [steps]"""
    steps = validate.count("steps", steps, 1)
    seconds = np.empty(steps)
    for i in range(steps):
        start = time.perf_counter()
        model.forward([token], cache)
        seconds[i] = time.perf_counter() - start
    return seconds


def step_time_curve(model, contexts, steps: int = 7, kv_dtype: str = "float32",
                    threads: int | None = 1, seed: int = 0) -> np.ndarray:
    """Median seconds of a decode step at each context (ascending ints). [len(contexts)]

    One cache is filled up to each context in turn; the `steps` timed steps run at contexts
    c, c+1, ..., c+steps-1, so consecutive contexts must be at least `steps` apart.
    """
    steps = validate.count("steps", steps, 1)
    contexts = [validate.count("contexts", c, 2) for c in contexts]
    if not contexts:
        raise ValueError("contexts is empty: give at least one context")
    gaps = np.diff([1] + contexts)
    if np.any(gaps[1:] < steps):
        raise ValueError(f"contexts must rise by at least steps={steps}, got {contexts}")
    if contexts[-1] + steps - 1 > model.config.max_seq_len:
        raise ValueError(f"the last steps reach context {contexts[-1] + steps - 1}, above "
                         f"max_seq_len {model.config.max_seq_len}")
    cache = model.new_cache(kv_dtype=kv_dtype)
    medians = np.empty(len(contexts))
    with blas_threads(threads):
        model.forward([0], cache)                          # warm up: first-call costs
        for i, context in enumerate(contexts):
            fill_cache(cache, context - 1 - len(cache), seed=seed + i)
            medians[i] = np.median(step_seconds(model, cache, steps))
    return medians


__all__ = ["FILL_CHUNK", "fill_cache", "blas_threads", "limit_blas_threads", "step_seconds",
           "step_time_curve"]
