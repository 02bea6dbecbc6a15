"""Greedy generation, with or without the cache, one step at a time with its statistics."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass
class Step:
    """What one generation step did. Step 0 is the prefill; the rest are decode steps."""
    index: int
    phase: str            # 'prefill' or 'decode'
    token: int            # the token this step chose
    tokens_in: int        # tokens the forward pass processed
    context: int          # sequence length after this step's input
    seconds: float        # wall time of the forward pass
    flops: int            # matmul FLOPs of the forward pass
    cache_tokens: int     # len(cache) after the step (0 without a cache)
    cache_bytes: int      # cache.nbytes after the step (0 without a cache)
    logits: np.ndarray    # [vocab_size] logits of the last position


def decode_steps(model, prompt_ids, max_new_tokens: int, use_cache: bool = True,
                 kv_dtype: str = "float32"):
    """Yield a Step per new token. Without a cache every step re-runs the whole sequence."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) \
            or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    ids = [int(t) for t in model._check_ids(prompt_ids)]
    cache = model.new_cache(kv_dtype) if use_cache else None
    for index in range(max_new_tokens):
        feed = ids[-1:] if (use_cache and index > 0) else ids
        flops0, t0 = model.flops, time.perf_counter()
        logits = model.forward(feed, cache)[-1]
        seconds = time.perf_counter() - t0
        token = int(np.argmax(logits))
        yield Step(index, "prefill" if index == 0 else "decode", token, len(feed), len(ids),
                   seconds, model.flops - flops0, len(cache) if cache else 0,
                   cache.nbytes if cache else 0, logits)
        ids.append(token)


def generate(model, prompt_ids, max_new_tokens: int, use_cache: bool = True) -> list[int]:
    """Greedy decoding; returns the new token ids."""
    return [step.token for step in decode_steps(model, prompt_ids, max_new_tokens, use_cache)]
