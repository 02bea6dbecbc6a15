"""Self-checks for chapter 9's exercises (a real model: SmolLM2-135M). Each prints right or a hint.

Expected values are computed here with toykv from the zoo's SmolLM2 configuration (the same
shapes as the GGUF file), so the check and the chapter cannot drift.
"""
from __future__ import annotations

from dataclasses import replace

from ..flops import forward_flops
from ..longctx import step_bytes
from ..roofline import hardware
from ..sizing import kv_cache_bytes, max_tokens_per_second, param_count, weight_bytes
from ..zoo import get
from ._core import answer_check

MODEL = "smollm2-135m"


def _config(**changes):
    config = get(MODEL).config
    return replace(config, **changes) if changes else config


def ch9_ex1(answer):
    """Bytes of the float32 cache after a 40-token prompt and a 60-token reply."""
    config = _config()

    def cache(tokens, b=4, cfg=config):
        return kv_cache_bytes(cfg, tokens, bytes_per_value=b)

    query_heads = _config(n_kv_heads=config.n_heads)
    hints = [
        (cache(100), "the 60th token was chosen but never fed back: it is not in the cache."),
        (cache(99, 2), "that is half: toykv's cache is float32 (4 bytes per value, not 2), "
                       "and it stores a key and a value (the factor 2)."),
        (cache(99, cfg=query_heads), "the cache holds the 3 KV heads, not the 9 query heads."),
        (cache(40), "the decode steps stored their tokens too, not only the prompt."),
    ]
    return answer_check(answer, cache(99), hints,
                        what="a whole number of bytes")


def ch9_ex2(answer):
    """Bandwidth bound (tokens/s) of SmolLM2 in bf16 on an L4 at 8,192 tokens of context."""
    model, bandwidth = get(MODEL), hardware("l4").bandwidth
    parts = step_bytes(model, 8192)

    def bound(nbytes):
        return max_tokens_per_second(bandwidth, nbytes)

    query_heads = replace(model, config=_config(n_kv_heads=model.config.n_heads))
    hints = [
        (bound(parts["weights"]), "that is the bound with an empty cache; a step at 8,192 "
                                  "tokens also reads the cache."),
        (bound(step_bytes(model, 8192, bytes_per_value=4, bytes_per_param=4)["total"]),
         "served in bf16: 2 bytes per weight and per cached value, not toykv's 4."),
        (bound(step_bytes(query_heads, 8192)["total"]),
         "the cache holds the 3 KV heads, not the 9 query heads."),
        (bound(parts["kv"]), "a step reads the weights as well as the cache."),
    ]
    return answer_check(answer, bound(parts["total"]), hints, rel=0.005,
                        what="a number of tokens per second")


def ch9_ex3(answer):
    """Total prefill FLOPs of 8 requests (1,000-token prefix + 20 tokens), without / with reuse."""
    config = _config()
    fresh = 8 * forward_flops(config, 1020)
    reused = forward_flops(config, 1000) + 8 * forward_flops(config, 20, 1000)
    hints = [
        (forward_flops(config, 1020) / forward_flops(config, 20, 1000),
         "that is one request's saving; with reuse the prefix is still prefilled once."),
        (reused / fresh, "that is with / without; the question asks without / with."),
        (8 * 1020 / 1000, "with reuse the 8 questions' own 20 tokens are prefilled too."),
    ]
    by_hand = 8 * 1020 / (1000 + 8 * 20)                # prefill FLOPs ~ tokens fed
    return answer_check(answer, fresh / reused, hints, rel=0.005, also=[by_hand],
                        right="The count of tokens fed predicts it within half a percent.",
                        what="a ratio")


def ch9_ex4(answer):
    """How many times the decode bandwidth bound rises with Q4_1 weights, float32 cache, 1,024."""
    config = _config()
    params = param_count(config)

    def ratio(tokens):
        kv = kv_cache_bytes(config, tokens, bytes_per_value=4)
        return (weight_bytes(params, 4) + kv) / (weight_bytes(params, 0.625) + kv)

    hints = [
        (4 / 0.625, "that is the weights alone; the float32 cache is read at every step too "
                    "and does not shrink."),
        (ratio(8192), "that is at 8,192 tokens; the question asks 1,024."),
        (1 / ratio(1024), "that is the new bound over the old; the question asks how many "
                          "times it rises."),
    ]
    return answer_check(answer, ratio(1024), hints, rel=0.005,
                        what="a ratio")


__all__ = ["ch9_ex1", "ch9_ex2", "ch9_ex3", "ch9_ex4"]
