"""Greedy generation, with or without the cache, one step at a time with its statistics."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .runcheck import check_run


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
