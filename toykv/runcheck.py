"""The checks of a greedy generation run, before its first forward pass: toykv.generate's
decode_steps and toykv.speculative's speculative_steps take the same arguments and check them
here (the model, the prompt, how many tokens, the stop ids, the cache to continue, and that the
run fits in max_seq_len).
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from . import validate
from .layers import check_kv_dtype
from .model import check_model


def _check_stop_ids(stop_ids, vocab_size: int) -> frozenset:
    """None, one token id, or a collection of token ids -> a set of ints in [0, vocab_size)."""
    if stop_ids is None:
        return frozenset()
    if isinstance(stop_ids, np.ndarray):
        items = list(stop_ids.ravel())
    elif isinstance(stop_ids, Iterable) and not isinstance(stop_ids, (str, bytes)):
        items = list(stop_ids)
    else:
        items = [stop_ids]                        # one id (or something validate refuses)
    return frozenset(validate.count("stop_ids", t, 0, vocab_size - 1) for t in items)


def check_run(model, prompt_ids, max_new_tokens: int, use_cache: bool = True,
              kv_dtype: str = "float32", stop_ids=None, cache=None):
    """decode_steps' checks, shared with toykv.speculative: (prompt ids as a list of ints, the
    cache to fill (a new one of kv_dtype, the given one, or None without a cache), the stop
    ids as a set, the tokens the cache held before)."""
    check_model(model)
    ids, batched = model.check_ids(prompt_ids)
    if batched:
        raise ValueError(f"prompt_ids must be one sequence of token ids (1-D), got shape "
                         f"{ids.shape}; for a batch use model.new_cache(batch=B) and model.forward")
    ids = [int(t) for t in ids[0]]
    max_new_tokens = validate.count("max_new_tokens", max_new_tokens, 0)
    validate.flag("use_cache", use_cache)
    kv_dtype = check_kv_dtype(kv_dtype)
    stops = _check_stop_ids(stop_ids, model.config.vocab_size)
    start = 0
    if cache is not None:
        if not use_cache:
            raise ValueError("cache was given with use_cache=False; a run without a cache "
                             "takes no cache")
        model.check_cache(cache, None)          # this model's, one sequence: claimed by the
        # first forward pass, once everything here has been checked
        start = len(cache)
    longest = start + len(ids) + max(max_new_tokens - 1, 0)   # the last token is not fed back
    if longest > model.config.max_seq_len:
        held = f"{start} cached tokens, " if start else ""
        raise ValueError(f"{held}a {len(ids)}-token prompt and max_new_tokens={max_new_tokens} "
                         f"need {longest} positions, more than max_seq_len "
                         f"{model.config.max_seq_len}")
    if cache is not None and longest > start:
        cache.check_room(longest - start)       # room for the whole run (a pool's blocks)
    if cache is None and use_cache:
        cache = model.new_cache(kv_dtype=kv_dtype)
    return ids, cache, stops, start


__all__ = ["check_run"]
