"""Prefix caching: prefill a prompt's shared beginning once, continue a copy of its cache per request.

Many requests start with the same tokens (a system prompt, a document, earlier turns of a
chat). A serving engine keeps the cache of that prefix and prefills only what follows it, as
vLLM's automatic prefix caching does with blocks of its paged cache (kwon2023pagedattention,
vllm_prefix_caching). Causality makes this exact: the prefix's keys and values do not depend
on anything after it. Here the prefix's cache is copied (KVCache.copy) and the rest of the
prompt fed to the copy; compare_reuse generates both ways and times the first token.
"""
from __future__ import annotations

import time

from . import validate
from .cache import KVCache
from .generate import decode_steps
from .runcheck import check_run
from .model import ToyTransformer


def suffix_after(prompt_ids, prefix_ids) -> list[int]:
    """The tokens of prompt_ids after prefix_ids: ValueError unless prompt_ids starts with every
    token of prefix_ids and has at least one token more (a chat template and a tokenizer can
    split the shared text differently at the boundary; the ids are what must match)."""
    prompt = validate.token_ids("prompt_ids", prompt_ids)
    prefix = validate.token_ids("prefix_ids", prefix_ids)
    if not prefix:
        raise ValueError("prefix_ids is empty: give the tokens the prompts share")
    if len(prompt) <= len(prefix):
        raise ValueError(f"prompt_ids has {len(prompt)} tokens, not more than the "
                         f"{len(prefix)} of prefix_ids: nothing would follow the prefix")
    for i, (a, b) in enumerate(zip(prompt, prefix)):
        if a != b:
            raise ValueError(f"prompt_ids does not start with prefix_ids: token {i} is {a} in "
                             f"the prompt and {b} in the prefix")
    return prompt[len(prefix):]


def compare_reuse(model, prefix_ids, prefix_cache: KVCache, prompt_ids, max_new_tokens: int,
                  stop_ids=None) -> dict:
    """Generate prompt_ids twice, greedily: from a fresh prefill of all of it, and from a copy of
    prefix_cache (the cache of prefix_ids, which prompt_ids starts with) fed only the rest.

    Returns {'fresh', 'reused': the Steps of each run; 'suffix': the tokens fed after the
    prefix; 'copy_seconds': time of the copy; 'first_token_fresh': seconds to the first token
    from scratch (the prefill); 'first_token_reused': the copy plus the prefill of the rest;
    'same_tokens': whether both runs chose the same tokens}. prefix_cache is left as it was.
    Every argument is checked, the cache's owner too, before either run starts.
    """
    if not isinstance(model, ToyTransformer):
        raise ValueError(f"model must be a toykv.ToyTransformer, got {type(model).__name__}")
    limits = dict(vocab_size=model.config.vocab_size, max_len=model.config.max_seq_len)
    prompt = validate.token_ids("prompt_ids", prompt_ids, **limits)
    suffix = suffix_after(prompt, validate.token_ids("prefix_ids", prefix_ids, **limits))
    validate.count("max_new_tokens", max_new_tokens, 1)
    n_prefix = len(prompt) - len(suffix)
    if not isinstance(prefix_cache, KVCache) or len(prefix_cache) != n_prefix:
        held = len(prefix_cache) if isinstance(prefix_cache, KVCache) else \
            type(prefix_cache).__name__
        raise ValueError(f"prefix_cache must be the KVCache of the {n_prefix} prefix "
                         f"tokens, got {held}")
    if prefix_cache.batch is not None:
        raise ValueError(f"prefix_cache holds a batch of {prefix_cache.batch} sequences; "
                         "compare_reuse continues one: fill model.new_cache() with prefix_ids")
    check_run(model, suffix, max_new_tokens, stop_ids=stop_ids,     # the reused run's checks,
              cache=prefix_cache)                 # on the prefix: its model, room, blocks
    fresh_run = decode_steps(model, prompt, max_new_tokens, stop_ids=stop_ids)   # checked
    start = time.perf_counter()
    cache = prefix_cache.copy()                       # bound to prefix_cache's model
    copy_seconds = time.perf_counter() - start
    try:                                              # a pool's copy holds blocks: given back
        reused_run = decode_steps(model, suffix, max_new_tokens, stop_ids=stop_ids,
                                  cache=cache)        # checked (room for the run) first
        fresh, reused = list(fresh_run), list(reused_run)
    finally:
        cache.finish()
    return {"fresh": fresh, "reused": reused, "suffix": suffix, "copy_seconds": copy_seconds,
            "first_token_fresh": fresh[0].seconds,
            "first_token_reused": copy_seconds + reused[0].seconds,
            "same_tokens": [s.token for s in fresh] == [s.token for s in reused]}


__all__ = ["suffix_after", "compare_reuse"]
