"""Self-checks for chapter 9's exercises (a real model: SmolLM2-135M). Each prints right or a hint.

Expected values are computed here with toykv from the zoo's SmolLM2 configuration (the same
shapes as the GGUF file), so the check and the chapter cannot drift.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import source_toy
from ..flops import forward_flops
from ..generate import generate
from ..kvquant import round_trip
from ..model import ToyTransformer
from ..longctx import step_bytes
from ..roofline import hardware
from ..sizing import kv_cache_bytes, max_tokens_per_second, param_count, weight_bytes
from ..zoo import get
from ._core import answer_check, not_a_function, plain, _say

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


# -- exercise 5: keys quantized per channel ----------------------------------------------------
def _keys(seed: int = 0) -> np.ndarray:
    """[48, 16] keys with two outlier channels, as real keys have (chapter 9's measurement)."""
    rng = np.random.default_rng(seed)
    k = rng.normal(size=(48, 16)).astype(np.float32)
    k[:, [2, 11]] *= np.float32(8)
    return k + np.float32(0.5)                          # not centred on zero


def _levels_2b(k, bits):                                # 2^bits steps instead of 2^bits - 1
    lo, hi = k.min(axis=0), k.max(axis=0)
    s = (hi - lo) / 2**bits
    return np.clip(np.rint((k - lo) / s), 0, 2**bits - 1) * s + lo


def _levels_2b_unclipped(k, bits):                     # the same, without the clip: the
    lo, hi = k.min(axis=0), k.max(axis=0)               # maximum gets code 2^bits, one too many
    s = (hi - lo) / 2**bits
    return np.rint((k - lo) / s) * s + lo


def _floor(k, bits):                                    # truncation instead of rounding
    lo, hi = k.min(axis=0), k.max(axis=0)
    s = (hi - lo) / (2**bits - 1)
    return np.floor((k - lo) / s) * s + lo


def _symmetric(k, bits):                                # max |k| / (2^(b-1) - 1), no zero point
    s = np.abs(k).max(axis=0) / (2 ** (bits - 1) - 1)
    return np.rint(k / s) * s


def _codes(k, bits):                                    # the integer codes, not the values
    lo, hi = k.min(axis=0), k.max(axis=0)
    return np.rint((k - lo) / ((hi - lo) / (2**bits - 1)))


EX5_MISTAKES = {
    "per token": lambda k, bits: round_trip(k, bits, "token"),
    "2^bits": _levels_2b, "2^bits unclipped": _levels_2b_unclipped, "floor": _floor, "symmetric": _symmetric, "codes": _codes,
}


def ch9_ex5(answer):
    """answer: your quantize_keys(k, bits) function, k [tokens, d_h] -> k quantized to `bits`
    per channel and back. The check runs it on keys of its own at 8 and 4 bits against toykv."""
    refused = not_a_function(answer, "quantize_keys")
    if refused is not None:
        return refused
    cases = [(_keys(seed), bits) for seed in (0, 1) for bits in (8, 4)]
    try:
        outs = [np.asarray(answer(k.copy(), bits), dtype=np.float64) for k, bits in cases]
    except Exception as err:                              # noqa: BLE001 - the student's code
        return _say(False, f"Not right yet: quantize_keys on [48, 16] keys raised "
                           f"{type(err).__name__}: {err}")
    if any(o.shape != k.shape for o, (k, _) in zip(outs, cases)):
        return _say(False, "Not right yet: quantize_keys should return an array of the keys' "
                           f"shape, {cases[0][0].shape}; it returned "
                           f"{sorted({o.shape for o in outs})}.")

    def agrees(rule) -> bool:
        for out, (k, bits) in zip(outs, cases):
            ref = np.asarray(rule(k, bits), dtype=np.float64)
            span = float(k.max() - k.min())
            if not np.allclose(out, ref, rtol=0, atol=1e-5 * span):
                return False
        return True

    outcome = "right" if agrees(lambda k, b: round_trip(k, b, "channel")) else next(
        (name for name, rule in EX5_MISTAKES.items() if agrees(rule)), "other")
    return answer_check(outcome, "right", hints=[
        ("per token", "those are one scale per token (a min and max over each row); per channel "
                      "takes the min and max of each column, over the tokens: axis=0."),
        ("2^bits", "b bits give 2^b codes, 0 .. 2^b - 1, so 2^b - 1 steps between the minimum "
                   "and the maximum: s = (max - min) / (2**bits - 1)."),
        ("2^bits unclipped", "b bits give 2^b codes, 0 .. 2^b - 1, so 2^b - 1 steps between the "
                             "minimum and the maximum: s = (max - min) / (2**bits - 1). With "
                             "2**bits steps the maximum gets code 2^b, which b bits cannot "
                             "hold."),
        ("floor", "round to the nearest code (np.rint), not down: truncation makes the error "
                  "up to a whole step, always in one direction."),
        ("symmetric", "that is symmetric quantization (max |k|, no zero point); this exercise "
                      "uses min-max: s = (max - min) / (2^b - 1) and code = rint((k - min) / s)."),
        ("codes", "those are the integer codes; return the keys they stand for, code * s + min."),
    ], wrong="Compare your output with toykv.kvquant.round_trip(k, bits, 'channel') on a "
             "small array: the first column that differs shows the step that goes wrong.")


# -- exercise 6: a shared prefix's cache reused by hand ------------------------------------------
def _toy_case():
    model = ToyTransformer(source_toy(), seed=1)          # its greedy answers vary
    rng = np.random.default_rng(9)
    prefix = [int(t) for t in rng.integers(0, 512, 24)]
    questions = [[int(t) for t in rng.integers(0, 512, n)] for n in (5, 3)]
    return model, prefix, questions


def ch9_ex6(answer):
    """answer: your answer_after(model, prefix_cache, question_ids, n) function, n greedy tokens
    after a prefix held in prefix_cache and the question. Run on a toy model of the check's own,
    twice from one prefix cache, against toykv.generate on the whole prompt."""
    refused = not_a_function(answer, "answer_after")
    if refused is not None:
        return refused
    model, prefix, questions = _toy_case()
    n = 6
    cache = model.new_cache()
    model.forward(prefix, cache)
    got = []
    try:
        for q in questions:
            got.append([int(t) for t in plain(answer(model, cache, list(q), n))])
    except Exception as err:                              # noqa: BLE001 - the student's code
        return _say(False, f"Not right yet: answer_after on the check's toy model raised "
                           f"{type(err).__name__}: {err}")
    expected = [generate(model, prefix + q, n) for q in questions]
    if len(cache) != len(prefix):
        outcome = "changed"
    elif got == expected:
        outcome = "right"
    elif got == [generate(model, prefix + prefix + q, n) for q in questions]:
        outcome = "prefix twice"
    elif got == [generate(model, prefix + q, n + 1)[1:] for q in questions]:
        outcome = "first lost"
    elif all(len(g) != n for g in got):
        outcome = "length"
    else:
        outcome = "other"
    return answer_check(outcome, "right", hints=[
        ("changed", "the prefix cache held more tokens after your function ran: work on a copy "
                    "(prefix_cache.copy()), so the next question starts from the prefix alone."),
        ("prefix twice", "the cache already holds the prefix: feed it only the question's tokens, "
                         "not the prefix again."),
        ("first lost", "the first new token comes from the last row of the question's pass; "
                       "keep it before the decode steps."),
        ("length", f"return exactly n tokens (the check asks for {n})."),
    ], wrong="Compare your tokens with toykv.generate(model, prefix_ids + question_ids, n): the "
             "first one that differs shows where the cache or the feeding goes wrong.")


__all__ = ["ch9_ex1", "ch9_ex2", "ch9_ex3", "ch9_ex4", "ch9_ex5", "ch9_ex6"]
