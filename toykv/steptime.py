"""Measured decode step time at long context, without paying for a long prefill; prefill time.

A decode step's time depends on how many entries the cache holds, not on their values, so
fill_cache appends stand-in entries (random numbers, written through the cache's own update,
as a forward pass would) instead of running a prefill of thousands of tokens. Steps are then
timed one by one and the median kept: on a shared machine single steps are noisy. By default
BLAS runs on one thread while timing (threadpoolctl, when installed): with two threads, a
neighbour on the other core can stall every product, while one thread is only slowed down.
A batched cache (model.new_cache(batch=B)) is filled and stepped the same way, every sequence
alike. prefill_time_curve times whole prompts of several lengths (the time to first token).
measure_decode and measure_prefill set such a time beside the step's counted FLOPs and bytes
(toykv.stepcost): a measured point on a roofline.
"""
from __future__ import annotations

import contextlib
import itertools
import time

import numpy as np

from . import validate
from .cache import check_cache
from .layers import check_kv_dtype
from .model import check_model
from .stepcost import decode_step_split, prefill_cost

FILL_CHUNK = 256                      # positions written per update call
MAX_STEPS = 10_000                    # timed steps (or repeats) per measurement, at most
MAX_POINTS = 1_000                    # contexts or prompt lengths per curve, at most


def fill_cache(cache, tokens: int, seed: int = 0) -> None:
    """Append `tokens` positions of random entries to every layer of `cache` (stand-ins for a prefill).

    The entries are one random block of FILL_CHUNK positions, repeated: writing them costs a
    copy, not a forward pass. len(cache) grows by `tokens`; a batched cache gets the same
    entries in every sequence.
    """
    check_cache(cache)
    tokens = validate.count("tokens", tokens, 0)
    config = cache.config
    if len(cache) + tokens > config.max_seq_len:
        raise ValueError(f"{len(cache)} cached + {tokens} tokens exceeds max_seq_len "
                         f"{config.max_seq_len}")
    rng = np.random.default_rng(validate.count("seed", seed, 0))
    if tokens:                                # every chunk's step, checked up front
        cache.check_chunks(tokens, FILL_CHUNK)
    block = {name: rng.standard_normal((FILL_CHUNK, *shape)).astype(np.float32)
             for name, shape in config.layers[0].entries}                 # [chunk, ...]
    done = 0
    while done < tokens:
        T = min(FILL_CHUNK, tokens - done)
        for layer in range(config.n_layers):                              # as forward() does
            cache.update(layer, **{name: _rows(a[:T], cache.batch)
                                   for name, a in block.items()})
        cache.advance(T)
        done += T


def _rows(entries: np.ndarray, batch: int | None) -> np.ndarray:
    """entries [T, ...] as the cache takes them: as they are, or [batch, T, ...] (a view)."""
    return entries if batch is None else np.broadcast_to(entries, (batch, *entries.shape))


def _ids(token_ids, batch: int | None) -> np.ndarray:
    """token_ids [T] for one sequence, or the same ids for every sequence: [batch, T]."""
    ids = np.asarray(token_ids)
    return ids if batch is None else np.tile(ids, (batch, 1))


def _points(name: str, values, minimum: int, maximum: int | None = None) -> list[int]:
    """A list of at most MAX_POINTS counts, each checked (a str is not a list of them)."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a list of integers, got {values!r}")
    values = list(itertools.islice(values, MAX_POINTS + 1))     # never more than that read
    if len(values) > MAX_POINTS:
        raise ValueError(f"{name} has more than MAX_POINTS={MAX_POINTS} entries")
    return [validate.count(name, v, minimum, maximum) for v in values]


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


def measure_step_seconds(model, cache, steps: int = 7, token: int = 0) -> np.ndarray:
    """Wall-clock seconds of `steps` single-token decode steps, one after another. [steps]

    A batched cache steps all its sequences at once (the same token in each). steps: at most
    MAX_STEPS."""
    check_model(model)
    check_cache(cache)
    steps = validate.count("steps", steps, 1, MAX_STEPS)
    token = validate.count("token", token, 0, model.config.vocab_size - 1)
    model.check_cache(cache, cache.batch)
    cache.check_room(steps)                                # room for every step, up front
    ids = _ids([token], cache.batch)                       # [1] or [B, 1]
    seconds = np.empty(steps)
    for i in range(steps):
        start = time.perf_counter()
        model.forward(ids, cache)
        seconds[i] = time.perf_counter() - start
    return seconds


def step_time_curve(model, contexts, steps: int = 7, kv_dtype: str = "float32",
                    threads: int | None = 1, seed: int = 0,
                    batch: int | None = None) -> np.ndarray:
    """Median seconds of a decode step at each context (ascending ints). [len(contexts)]

    One cache is filled up to each context in turn; the `steps` timed steps run at contexts
    c, c+1, ..., c+steps-1, so consecutive contexts must be at least `steps` apart.
    batch=B times steps of B sequences together (a cache from new_cache(batch=B)). steps: at
    most MAX_STEPS; contexts: at most MAX_POINTS of them.
    """
    check_model(model)
    steps = validate.count("steps", steps, 1, MAX_STEPS)
    kv_dtype = check_kv_dtype(kv_dtype)
    validate.optional_count("threads", threads, 1)
    batch = validate.optional_count("batch", batch, 1)
    contexts = _points("contexts", contexts, 2)
    if not contexts:
        raise ValueError("contexts is empty: give at least one context")
    gaps = np.diff([1] + contexts)
    if np.any(gaps[1:] < steps):
        raise ValueError(f"contexts must rise by at least steps={steps}, got {contexts}")
    if contexts[-1] + steps - 1 > model.config.max_seq_len:
        raise ValueError(f"the last steps reach context {contexts[-1] + steps - 1}, above "
                         f"max_seq_len {model.config.max_seq_len}")
    seed = validate.count("seed", seed, 0)
    cache = model.new_cache(batch=batch, kv_dtype=kv_dtype)
    medians = np.empty(len(contexts))
    with blas_threads(threads):
        model.forward(_ids([0], cache.batch), cache)       # warm up: first-call costs
        for i, context in enumerate(contexts):
            fill_cache(cache, context - 1 - len(cache), seed=seed + i)
            medians[i] = np.median(measure_step_seconds(model, cache, steps))
    return medians


def prefill_time_curve(model, prompt_lens, repeats: int = 3, threads: int | None = 1,
                       seed: int = 0) -> np.ndarray:
    """Median seconds of a prefill (one forward pass of a random prompt into an empty cache)
    for each prompt length: the time to first token. [len(prompt_lens)] repeats: at most
    MAX_STEPS; prompt_lens: at most MAX_POINTS of them."""
    check_model(model)
    repeats = validate.count("repeats", repeats, 1, MAX_STEPS)
    validate.optional_count("threads", threads, 1)
    lens = _points("prompt_lens", prompt_lens, 1, model.config.max_seq_len)
    if not lens:
        raise ValueError("prompt_lens is empty: give at least one prompt length")
    rng = np.random.default_rng(validate.count("seed", seed, 0))
    medians = np.empty(len(lens))
    with blas_threads(threads):
        model.forward([0], model.new_cache())              # warm up: first-call costs
        for i, n in enumerate(lens):
            prompt = rng.integers(0, model.config.vocab_size, n)            # [P]
            seconds = []
            for _ in range(repeats):
                cache = model.new_cache()
                start = time.perf_counter()
                model.forward(prompt, cache)
                seconds.append(time.perf_counter() - start)
            medians[i] = np.median(seconds)
    return medians


def _point(count: dict, seconds: float, tokens: int) -> dict:
    """A measured roofline point: a stepcost count ({'flops', 'bytes', 'intensity'}) and the
    seconds it took."""
    return {**count, "seconds": float(seconds), "flops_per_s": count["flops"] / seconds,
            "bytes_per_s": count["bytes"] / seconds, "tokens_per_s": tokens / seconds}


def measure_decode(model, context: int, batch: int = 1, steps: int = 5,
                   threads: int | None = 1) -> dict:
    """A decode step of `batch` sequences at `context` tokens, timed (median of `steps`, cache
    filled with stand-ins: step_time_curve) and counted (stepcost.decode_step_split, float32).

    {'flops', 'bytes', 'seconds', 'intensity' (FLOP/byte), 'flops_per_s', 'bytes_per_s',
    'tokens_per_s' (batch / seconds)}.
    """
    check_model(model)
    context = validate.count("context", context, 2)
    batch = validate.count("batch", batch, 1)
    validate.optional_count("threads", threads, 1)
    count = decode_step_split(model.config, context, batch, 4, 4, model.absorb)["total"]
    seconds = step_time_curve(model, [context], steps, threads=threads, batch=batch)[0]
    return _point(count, seconds, batch)


def measure_prefill(model, prompt_len: int, repeats: int = 3,
                    threads: int | None = 1) -> dict:
    """A prefill of prompt_len tokens, timed (median of `repeats`: prefill_time_curve) and
    counted (stepcost.prefill_cost: the float32 weights read once and the cache written).

    The same keys as measure_decode; tokens_per_s is prompt tokens per second.
    """
    check_model(model)
    prompt_len = validate.count("prompt_len", prompt_len, 1)
    validate.optional_count("threads", threads, 1)
    count = prefill_cost(model.config, prompt_len, 4, 4, model.absorb)
    seconds = prefill_time_curve(model, [prompt_len], repeats, threads)[0]
    return _point(count, seconds, prompt_len)


__all__ = ["FILL_CHUNK", "MAX_STEPS", "MAX_POINTS", "fill_cache", "blas_threads",
           "limit_blas_threads", "measure_step_seconds",
           "step_time_curve", "prefill_time_curve", "measure_decode", "measure_prefill"]
