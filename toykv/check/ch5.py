"""Self-checks for chapter 5's exercises (the roofline). Each prints right or a hint.

Expected values are computed here with toykv, so the check and the chapter cannot drift.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numbers

from ..config import decode_toy
from ..roofline import Hardware, hardware
from ..sizing import (decode_step_bytes, kv_cache_bytes, max_tokens_per_second, weight_bytes,
                      weight_bytes_read)
from ..stepcost import decode_step_split
from ..zoo import get
from ._core import _say, answer_check, describe, not_a_function, plain, verdict_from_slips


def ch5_ex1(answer):
    """Smallest batch whose bf16 weight reads (B FLOPs per byte) reach the H100's ridge point."""
    h100 = hardware("h100-sxm")
    expected = math.ceil(h100.ridge_point)
    hints = [
        (expected - 1, "at that batch the weights do a little less than the ridge point's "
                       "FLOPs per byte: round up."),
        (math.ceil(2 * h100.ridge_point),
         "that is twice too large: the datasheet's sparse peak is twice the dense one (the "
         "preset holds the dense), and bf16 weights give B FLOPs per byte, not B / 2."),
        (math.ceil(h100.ridge_point / 2), "in bf16 a weight is 2 bytes and does 2 FLOPs per "
                                          "sequence: B FLOPs per byte, not 2 B."),
    ]
    return answer_check(answer, expected, hints,
                        what="a whole number of sequences")


def _bound_70b(context=32_768, kv_heads=None, weights="read"):
    model = get("llama-3.1-70b")
    if kv_heads is not None:
        model = replace(model, config=replace(model.config, n_kv_heads=kv_heads))
    step = (decode_step_bytes(model, context, weights=weights)["total"] if context
            else weight_bytes_read(model) if weights == "read"
            else weight_bytes(model.active_params))
    return max_tokens_per_second(hardware("mi300x").bandwidth, step)


def ch5_ex2(answer):
    """Bandwidth bound (tok/s) on Llama 3.1 70B's decode on an MI300X, bf16, 32,768 tokens.

    Right: the course's rule (sizing.decode_step_bytes: the input embedding read as one
    looked-up row) and, as the solution shows, the source essay's convention (every parameter
    read), 1.4% apart."""
    expected = _bound_70b()
    essay = _bound_70b(weights="active")
    hints = [
        (_bound_70b(context=0), "that is the weights alone: a step also reads the cache of "
                                "32,768 tokens."),
        (_bound_70b(context=0, weights="active"), "that is the weights alone: a step also "
                                                  "reads the cache of 32,768 tokens."),
        (_bound_70b(kv_heads=64), "the cache holds the 8 KV heads, not the 64 query heads."),
        (_bound_70b(kv_heads=64, weights="active"), "the cache holds the 8 KV heads, not the "
                                                    "64 query heads."),
        (expected * 2**30 / 10**9, "keep the bandwidth and the bytes in the same unit: "
                                   "5.3 TB/s is 5.3 x 10^12 bytes/s."),
        (1 / expected, "that is seconds per token; the question asks tokens per second."),
        (1 / essay, "that is seconds per token; the question asks tokens per second."),
    ]
    return answer_check(answer, expected, hints, rel=0.005, also=[essay],
                        what="a number of tokens per second")


def _batch_where_cache_wins(config, context=32_768, cache_scale=1):
    one = decode_step_split(config, context)
    return math.floor(one["weights"]["bytes"] / (one["cache"]["bytes"] * cache_scale)) + 1


def ch5_ex3(answer):
    """Smallest batch at which Llama 3.1 8B (bf16, 32,768 tokens each) reads more cache than
    weights in a decode step."""
    c8 = get("llama-3.1-8b").config
    expected = _batch_where_cache_wins(c8)
    hints = [
        (expected - 1, "at that batch the cache is still a little smaller than the weights: "
                       "the first batch where it is larger is one more."),
        (_batch_where_cache_wins(replace(c8, n_kv_heads=c8.n_heads)),
         "the cache holds the 8 KV heads, not the 32 query heads."),
        (_batch_where_cache_wins(c8, cache_scale=0.5),
         "a token's cache holds a key and a value in every layer: the factor 2."),
    ]
    return answer_check(answer, expected, hints,
                        what="a whole number of sequences")


def ch5_ex4(answer):
    """Speed-up of the decode bound of Llama 3.1 8B at 8,192 tokens: 4-bit over bf16 weights."""
    c8 = get("llama-3.1-8b").config
    bf16 = decode_step_split(c8, 8192)["total"]["bytes"]
    int4 = decode_step_split(c8, 8192, bytes_per_param=0.5)["total"]["bytes"]
    expected = bf16 / int4
    kv = kv_cache_bytes(c8, 8192)                     # by hand: all 8.03B parameters read
    params = get("llama-3.1-8b").total_params
    by_hand = (weight_bytes(params) + kv) / (weight_bytes(params, 0.5) + kv)
    hints = [
        (4.0, "4 is the ratio of the weights alone; the bf16 cache of 8,192 tokens is read in "
              "full either way."),
        (1 / expected, "that is bf16 over 4-bit speed; the question asks 4-bit over bf16."),
        (2.0, "4-bit weights take 0.5 bytes, a quarter of bf16's 2 bytes, not a half."),
    ]
    return answer_check(answer, expected, hints, rel=0.01, also=[by_hand],
                        what="a ratio (a number)")


# -- exercise 5: the roofline bound of a batched decode step, built by the student -----------
def _ex5_cases() -> list:
    """(config, S, B, hw): memory-bound steps (long contexts, small batches) and compute-bound
    ones (short contexts, large batches), on presets and on a CPU-like chip."""
    core = Hardware("one core", peak_flops=100e9, bandwidth=20e9)
    l2, l8, toy = get("llama-2-7b").config, get("llama-3.1-8b").config, decode_toy()
    return [(l2, 4096, 1, hardware("lecture")), (l2, 4096, 64, hardware("lecture")),
            (l8, 32_768, 16, hardware("a100-80gb-sxm")), (l8, 16, 1024, hardware("h100-sxm")),
            (l2, 64, 512, hardware("lecture")), (toy, 256, 64, core), (toy, 2048, 1, core)]


def _ex5_bounds(config, S, B, hw) -> dict:
    """The bound (tokens per second) and what the typical slips give instead."""
    split = decode_step_split(config, S, B)["total"]
    f, m = split["flops"], split["bytes"]
    weights, one_cache = weight_bytes_read(config, batch=B), kv_cache_bytes(config, S)
    t = hw.min_seconds(f, m)
    return {"right": B / t,
            "cache once": B / hw.min_seconds(f, weights + one_cache),
            "no cache": B / hw.min_seconds(f, weights),
            "bytes only": B / (m / hw.bandwidth), "flops only": B / (f / hw.peak_flops),
            "min": B / min(f / hw.peak_flops, m / hw.bandwidth),
            "sum": B / (f / hw.peak_flops + m / hw.bandwidth),
            "per sequence": 1 / t, "seconds": t}


EX5_HINTS = [
    ("cache once", "every sequence reads its own cache: kv_cache_bytes(config, S, batch=B), "
                   "not one sequence's."),
    ("no cache", "a step reads the cache too, not only the weights."),
    ("bytes only", "right while the step is memory-bound; past the ridge point its FLOPs (B "
                   "times one sequence's) at the peak take longer than its bytes: take the "
                   "larger of the two times."),
    ("flops only", "a step also moves its bytes: take the larger of the FLOPs' time and the "
                   "bytes' time."),
    ("min", "the step cannot be faster than either limit: the larger of the two times, not "
            "the smaller."),
    ("sum", "the roofline overlaps the FLOPs with the bytes: the larger of the two times, not "
            "their sum."),
    ("per sequence", "that is one sequence's tokens per second; the step makes B tokens."),
    ("seconds", "that is the step's time; the question asks tokens per second (B / time)."),
    ("other", "tokens per second = B / max(B x FLOPs of one sequence / peak, (weights read "
              "once + B caches) / bandwidth)."),
]


def ch5_ex5(answer):
    """answer: your decode_bound(config, S, B, hw) function, compared with toykv's count
    (stepcost.decode_step_split) and roofline (Hardware.min_seconds) on several cases."""
    refused = not_a_function(answer, "decode_bound")
    if refused is not None:
        return refused
    matched = []
    for config, S, B, hw in _ex5_cases():
        try:
            got = plain(answer(config, S, B, hw))
        except Exception as err:                              # noqa: BLE001 - the student's code
            return _say(False, f"Not right yet: decode_bound raised {type(err).__name__}: {err}")
        if isinstance(got, bool) or not isinstance(got, numbers.Real) or not math.isfinite(got):
            return _say(False, "Not right yet: decode_bound should return a number of tokens "
                               f"per second, got {describe(got)}.")
        matched.append({name for name, value in _ex5_bounds(config, S, B, hw).items()
                        if math.isclose(got, value, rel_tol=1e-6)})
    return verdict_from_slips(matched, EX5_HINTS)


__all__ = ["ch5_ex1", "ch5_ex2", "ch5_ex3", "ch5_ex4", "ch5_ex5"]
