"""What a lower-precision cache costs in accuracy: the same tokens through a float32 and a smaller cache.

Comparing two free-running generations says little once their tokens differ (they then
continue different texts). So forced_logits feeds one fixed token path through a cache of
any kv_dtype, and compare_cache measures, step by step along the float32 cache's own greedy
path, how far the other cache's logits are off and whether its top token is still the same;
it also reports how long a free-running generation with the other cache keeps the same tokens.
"""
from __future__ import annotations

import numpy as np

from . import validate
from .generate import decode_steps
from .layers import check_kv_dtype
from .model import check_model


def forced_logits(model, token_ids, prompt_len: int, kv_dtype: str = "float32") -> np.ndarray:
    """Logits of the last position after the prefill of token_ids[:prompt_len] and after each
    later token fed one at a time through a kv_dtype cache. [len(token_ids) - prompt_len + 1, vocab]
    """
    check_model(model)
    ids = validate.token_ids("token_ids", token_ids, model.config.vocab_size,
                             model.config.max_seq_len)
    prompt_len = validate.count("prompt_len", prompt_len, 1, len(ids))
    kv_dtype = check_kv_dtype(kv_dtype)
    cache = model.new_cache(kv_dtype=kv_dtype)
    rows = [model.forward(ids[:prompt_len], cache)[-1]]                   # the prefill
    for token in ids[prompt_len:]:                                        # one decode step each
        rows.append(model.forward([token], cache)[-1])
    return np.stack(rows)


def compare_cache(model, prompt_ids, n_new: int, kv_dtype: str) -> dict:
    """A kv_dtype cache against the float32 cache over n_new greedy steps (step 0: the prefill).

    Along the float32 cache's greedy path: 'max_error' [n_new] (max |logit difference| per step),
    'top1_same' [n_new] (the other cache's top token is the float32 one), 'scale' (largest
    |float32 logit|), 'top2_margin' [n_new] (float32's top logit minus its second: a flip of the
    top token needs an error of at least half of it). Free-running: 'free_same' [n_new] (the other cache's own greedy tokens equal
    float32's), 'first_divergence' (first step where they differ, or None).
    """
    check_model(model)
    prompt = validate.token_ids("prompt_ids", prompt_ids, model.config.vocab_size,
                                model.config.max_seq_len)
    n_new = validate.count("n_new", n_new, 1, model.config.max_seq_len)   # a bound before work
    kv_dtype = check_kv_dtype(kv_dtype)
    reference = list(decode_steps(model, prompt, n_new, kv_dtype="float32"))
    ref_tokens = np.array([s.token for s in reference])
    ref_logits = np.stack([s.logits for s in reference])                  # [n_new, vocab]
    path = prompt + [int(t) for t in ref_tokens[:-1]]
    other = forced_logits(model, path, len(prompt), kv_dtype)             # [n_new, vocab]
    free = np.array([s.token for s in decode_steps(model, prompt, n_new, kv_dtype=kv_dtype)])
    differ = np.flatnonzero(free != ref_tokens)
    top2 = np.sort(ref_logits, axis=1)[:, -2:]                           # [n_new, 2]
    return {"max_error": np.abs(other - ref_logits).max(axis=1),
            "top1_same": other.argmax(axis=1) == ref_tokens,
            "scale": float(np.abs(ref_logits).max()),
            "top2_margin": top2[:, 1] - top2[:, 0],
            "free_same": free == ref_tokens,
            "first_divergence": int(differ[0]) if differ.size else None}


__all__ = ["forced_logits", "compare_cache"]
