"""Self-checks for chapter 6's exercises (prefill and decode). Each prints right or a hint.

Expected values are computed here with toykv, so the check and the chapter cannot drift.
MIX is the chapter's simulated request mix (serving.request_lengths), the one exercise 4 uses.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from ..flops import full_pass_flops
from ..roofline import HARDWARE, hardware
from ..serving import batch_cache_bytes, request_lengths
from ..sizing import kv_cache_bytes, sequences_that_fit, weight_bytes
from ..stepcost import decode_step_bounds
from ..zoo import get
from ._core import NOT_ANSWERED, Verdict, answer_check, describe, plain

GiB = 2**30
MIX = dict(n=20_000, median=1000, max_len=8192, sigma=1.0, seed=0)


def ch6_ex1(answer):
    """Time to first token (ms) of a 2,000-token prompt, Llama 3.1 8B bf16 on an H100."""
    h100, model = hardware("h100-sxm"), get("llama-3.1-8b")
    prefill, weights = full_pass_flops(model.config, 2000), weight_bytes(model.active_params)
    expected = h100.min_seconds(prefill, weights) * 1e3
    hints = [
        (weights / h100.bandwidth * 1e3, "that is the time to read the weights once; a "
                                         "prefill of 2,000 tokens is compute-bound: FLOPs / peak."),
        (expected / 2, "the H100 preset's peak is the dense one (989.5 TFLOP/s); the "
                       "datasheet's 1,979 assumes sparsity."),
        (expected / 1e3, "give milliseconds, not seconds."),
        (expected / 2000, "that is per prompt token; the question asks for the whole prompt."),
    ]
    return answer_check(answer, expected, hints, rel=0.05,
                        what="a time in milliseconds (a number)")


def ch6_ex2(answer):
    """Sequences of 4,096 tokens of Qwen3-8B (bf16) beside its weights on a "24 GB" L4."""
    model = get("qwen3-8b")
    memory = hardware("l4").memory_bytes               # what the card reports: 23,034 MiB
    expected = sequences_that_fit(model, 4096, memory)
    query_heads = replace(model, config=replace(model.config,
                                                n_kv_heads=model.config.n_heads))
    hints = [
        (sequences_that_fit(model, 4096, 24 * GiB),
         "the L4 is sold as 24 GB but reports 23,034 MiB (22.5 GiB), not 24 GiB: use the "
         "memory the card reports, toykv.hardware('l4').memory_bytes."),
        (sequences_that_fit(query_heads, 4096, memory),
         "the cache holds the 8 KV heads, not the 32 query heads."),
        (memory // (2 * 36 * 8 * 128 * 2 * 4096),
         "the weights (16.4 GB in bf16) take their share of the memory first."),
        (expected + 1, "a sequence fits only if its whole cache fits: round the number of "
                       "sequences down, not to the nearest."),
    ]
    return answer_check(answer, expected, hints,
                        what="a whole number of sequences")


def ch6_ex3(answer):
    """Requests of 1,536 + 256 tokens that fit in 22,048 (bf16) and 41,920 (fp8) cached tokens."""
    expected = (22_048 // 1792, 41_920 // 1792)
    hints = [
        ((22_048 // 1536, 41_920 // 1536), "a request keeps its 256 output tokens in the "
                                           "cache too: 1,792 tokens each at the end."),
        ((22_048 // 1792, 2 * (22_048 // 1792)), "the fp8 capacity was measured (41,920 "
                                                 "tokens), not exactly twice 22,048."),
        ((expected[1], expected[0]), "the pair is (bf16, fp8)."),
    ]
    return answer_check(answer, expected, hints,
                        wrong="Give a pair (bf16, fp8) of whole numbers of requests.",
                        what="a pair (bf16, fp8) of whole numbers of requests")


@functools.cache
def _ex4_plans() -> dict:
    """(batch, fraction out of memory) of the plans for the 90th and 99th percentile and the
    median of the chapter's request mix (computed once: 20,000 simulated requests)."""
    model = get("llama-3.1-8b")
    lengths = request_lengths(**MIX)
    memory = hardware("h100-sxm").memory_bytes       # what the card reports: 81,559 MiB
    room = memory - weight_bytes(model.total_params)

    def plan(length):
        batch = sequences_that_fit(model, length, memory)
        need = batch_cache_bytes(model.config, lengths, batch)
        return batch, float(np.mean(need > room))

    return {"p90": plan(int(np.percentile(lengths, 90))),
            "p99": plan(int(np.percentile(lengths, 99))),
            "median": plan(int(np.median(lengths)))}


def ch6_ex4(answer):
    """(batch, fraction of batches out of memory) when planning for the 90th percentile length."""
    plans = _ex4_plans()
    expected = plans["p90"]
    hints = [
        (plans["p99"], "that is the 99th percentile; take the 90th."),
        (plans["median"], "that is the median length; take the 90th percentile."),
        ((expected[1], expected[0]), "the pair is (batch, fraction)."),
    ]
    return answer_check(answer, expected, hints, rel=(0, 1e-9),
                        wrong="Give a pair (batch, fraction of batches out of memory).",
                        what="a pair (batch, fraction of batches out of memory)")


EX5_CONTEXT = 1024
GPUS_WITH_MEMORY = tuple(name for name, hw in HARDWARE.items() if hw.memory_bytes is not None)
SOLD_AS_GB = {"a100-80gb-sxm": 80, "h100-sxm": 80, "l4": 24, "mi300x": 192, "rtx-4090": 24}


def _ex5_times(name: str) -> dict:
    """Step times (ms) at the memory ceiling of Llama 3.1 8B, bf16, S = 1,024, on preset `name`:
    toykv's serial model, the by-hand one (all 8.03B parameters read and multiplied), and the
    typical slips."""
    hw, model = hardware(name), get("llama-3.1-8b")
    most = sequences_that_fit(model, EX5_CONTEXT, hw.memory_bytes)
    kv, n = kv_cache_bytes(model.config, EX5_CONTEXT), model.active_params

    def by_hand(batch, cache_batch=None, add=False):
        weights = (2 * batch * n / hw.peak_flops, 2 * n / hw.bandwidth)
        return 1e3 * ((batch if cache_batch is None else cache_batch) * kv / hw.bandwidth
                      + (sum(weights) if add else max(weights)))

    both = decode_step_bounds(model.config, hw, EX5_CONTEXT, most)
    sold = SOLD_AS_GB.get(name)                 # the name's "N GB", read as GB or as GiB
    labels = {sequences_that_fit(model, EX5_CONTEXT, sold * unit)
              for unit in (10**9, 2**30)} - {most} if sold else set()
    return {"serial": 1e3 * both["serial"], "by_hand": by_hand(most), "most": most,
            "overlapped": 1e3 * both["overlapped"], "one_cache": by_hand(most, 1),
            "added": by_hand(most, add=True),
            "reads": 1e3 * (most * kv + 2 * n) / hw.bandwidth,
            "overlapped_by_hand": 1e3 * max(2 * most * n / hw.peak_flops,
                                            (2 * n + most * kv) / hw.bandwidth),
            "from_label": [by_hand(batch) for batch in sorted(labels)]}


def _say(right: bool, message: str) -> Verdict:
    print(message)
    return Verdict(right, message)


def ch6_ex5(answer):
    """(preset name, step time in ms) at the memory ceiling of Llama 3.1 8B (bf16, 1,024 tokens
    per sequence), by the step-time model on a GPU preset of the student's choice (not the
    H100, which the chapter works)."""
    if answer is None or answer is Ellipsis:
        return _say(False, NOT_ANSWERED)
    pair = plain(answer)
    form = ("Give a pair (preset name, milliseconds), the name one of "
            f"{', '.join(n for n in GPUS_WITH_MEMORY if n != 'h100-sxm')}")
    if not (isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str)):
        return _say(False, f"Not right yet: {form}; got {describe(answer)}.")
    name, ms = pair
    if name == "h100-sxm":
        return _say(False, "Not right yet: the chapter worked the H100; pick another preset "
                           f"for this exercise. {form}.")
    if name not in GPUS_WITH_MEMORY:
        why = " (the lecture's accelerator has no memory size)" if name == "lecture" else ""
        return _say(False, f"Not right yet: {name!r} is not a preset with a memory size{why}. "
                           f"{form}.")
    t = _ex5_times(name)
    one_max = ("that is one max over the whole step (Hardware.min_seconds); the step-time "
               "model adds the cache's time to the weights'.")
    hints = [
        (t["reads"], "that is the step's bytes over the bandwidth, as one max over the whole "
                     "step gives: past B_crit the weights' products take longer than their "
                     "reads, so add the cache's time to the larger of 2 B N / peak and "
                     "M_W / bandwidth."),
        (t["overlapped"], one_max), (t["overlapped_by_hand"], one_max),
        (t["one_cache"], "every sequence reads its own cache: B x M_KV, not one M_KV."),
        (t["added"], "the weights' reads and products overlap: take the larger of the two, "
                     "not their sum."),
    ]
    for value in (t["serial"], t["by_hand"]):        # unit slips, by toykv's count or by hand
        hints += [(value / 1e3, "give milliseconds, not seconds."),
                  (t["most"] / (value / 1e3), "that is the batch's tokens per second; the "
                                              "question asks the time of one step in ms.")]
    for value in t["from_label"]:
        hints.append((value, "the batch that fits comes from the memory the card reports, "
                             "hardware(name).memory_bytes, not from the N GB of its name "
                             "read as N x 10^9 or N x 2^30 bytes."))
    return answer_check(ms, t["serial"], hints, rel=0.01, also=[t["by_hand"]],
                        what="a time in milliseconds (a number)")


__all__ = ["ch6_ex1", "ch6_ex2", "ch6_ex3", "ch6_ex4", "ch6_ex5"]
