"""Greedy generation, with or without the cache, one step at a time with its statistics."""
from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from . import validate
from .layers import check_kv_dtype
from .model import check_model


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
    if cache is None and use_cache:
        cache = model.new_cache(kv_dtype=kv_dtype)
    return ids, cache, stops, start


def decode_steps(model, prompt_ids, max_new_tokens: int, use_cache: bool = True,
                 kv_dtype: str = "float32", stop_ids=None, cache=None):
    """Yield a Step per new token. Without a cache every step re-runs the whole sequence.

    stop_ids: token ids (one int or several) that end generation: the step that produces one
    is the last, as Hugging Face's eos_token_id does. cache: a filled cache of this model to
    continue (prefix reuse: pass a copy, it is filled further); prompt_ids are then the tokens
    that follow its len(cache) tokens, and Step.context counts them all. Without it a new cache
    of kv_dtype is made. Every argument is checked, and a run that could not fit in
    max_seq_len is refused, before the first forward pass (max_new_tokens is bounded by it).
    """
    ids, cache, stops, start = check_run(model, prompt_ids, max_new_tokens, use_cache,
                                         kv_dtype, stop_ids, cache)
    return decode_loop(model, ids, max_new_tokens, cache, stops, start)


def decode_loop(model, ids: list, max_new_tokens: int, cache=None,
                stops=frozenset(), start: int = 0):
    """The generation loop, on arguments decode_steps has checked. Step 0
    feeds the whole prompt (the prefill); every later step feeds only the
    newest token, with the cache. Without a cache every step feeds the
    whole sequence. Yields a Step per token."""
    for index in range(max_new_tokens):
        feed = ids[-1:] if (cache is not None and index > 0) else ids
        flops0, t0 = model.flops, time.perf_counter()
        logits = model.forward(feed, cache)[-1]
        seconds = time.perf_counter() - t0
        token = int(np.argmax(logits))
        phase = "prefill" if index == 0 else "decode"
        held = 0 if cache is None else len(cache)
        nbytes = 0 if cache is None else cache.nbytes
        yield Step(index, phase, token, len(feed), start + len(ids),
                   seconds, model.flops - flops0, held, nbytes, logits)
        if token in stops:
            return
        ids.append(token)


def generate(model, prompt_ids, max_new_tokens: int, use_cache: bool = True,
             stop_ids=None, cache=None, speculative=None) -> list[int]:
    """Greedy decoding; returns the new token ids, ending with the stop token if one came.
    cache: a filled cache to continue, as in decode_steps. speculative: a proposer
    (toykv.speculative.PromptLookup or DraftModel): the same tokens, several per forward pass
    where the proposals agree with the model (toykv.speculative.speculative_steps)."""
    if speculative is not None:
        from .speculative import speculative_steps     # it imports this module
        if not use_cache:
            raise ValueError("speculative decoding needs the cache (use_cache=True): it rolls "
                             "the cache back over rejected proposals")
        return [t for step in speculative_steps(model, prompt_ids, max_new_tokens, speculative,
                                                stop_ids=stop_ids, cache=cache)
                for t in step.tokens]
    return [step.token for step in decode_steps(model, prompt_ids, max_new_tokens, use_cache,
                                                stop_ids=stop_ids, cache=cache)]
