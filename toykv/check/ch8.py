"""Self-checks for chapter 8's exercises (the KV share at long context). Each prints right or a hint.

Expected values are computed here with toykv, so the check and the chapter cannot drift.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import replace

import numpy as np

from ..longctx import crossover_context, depth_model, step_bytes
from ..sizing import kv_cache_bytes, kv_share, relative_decode_speed, weight_bytes_read
from ..zoo import get
from ._core import _say, answer_check, describe, not_a_function, plain, verdict_from_slips

GB, GiB = 10**9, 2**30


def ch8_ex1(answer):
    """Smallest context at which Llama 3.1 8B's bf16 KV share reaches one half. Right too: the
    same rule with the parameters counted from the shapes (8,030,261,248, as chapters 5 and 6
    count them with stepcost.decode_step_split) instead of the published 8.03B."""
    model = get("llama-3.1-8b")
    expected = crossover_context(model)
    counted = crossover_context(model.config)                 # param_count of the shapes
    query_heads = replace(model, config=replace(model.config, n_kv_heads=model.config.n_heads))
    hints = [
        (expected - 1, "at that context the cache is still a little smaller than the weights."),
        (crossover_context(model, weights="active"),
         "that counts every active weight, the source essay's convention; a decode step reads "
         "only the looked-up row of Llama's untied input embedding (sizing.weight_bytes_read)."),
        (crossover_context(model, bytes_per_param=1),
         "the weights are bf16: 2 bytes per parameter, not 1."),
        (crossover_context(model, bytes_per_value=1),
         "the cache is bf16 too: 2 bytes per value."),
        (crossover_context(query_heads),
         "you used the 32 query heads; the cache holds the 8 KV heads."),
    ]
    return answer_check(answer, expected, hints, also=[counted],
                        what="a whole number of tokens")


def ch8_ex2(answer):
    """Relative decode speed of 16 sequences of 32,768 tokens on Llama 3.1 8B (bf16)."""
    model = get("llama-3.1-8b")
    expected = relative_decode_speed(model, 32768, batch=16)
    hints = [
        (relative_decode_speed(model, 32768),
         "that is the speed of one sequence (or of sixteen that each read the weights): the "
         "weights are read once per step for the batch, every sequence's cache in full."),
        (kv_share(model, 32768, batch=16), "that is the KV share; the speed is 1 - share."),
        (relative_decode_speed(model, 32768, batch=16, weights="active"),
         "that counts the whole untied input embedding; a step reads only its looked-up rows."),
    ]
    return answer_check(answer, expected, hints, rel=0.005,
                        what="a ratio between 0 and 1")


def ch8_ex3(answer):
    """KV share at 32,768 tokens of Qwen3-0.6B's shapes with 7 layers, all parameters counted."""
    config = get("qwen3-0.6b").config
    expected = kv_share(depth_model(config, 7), 32768)
    hints = [
        (kv_share(depth_model(config, 7, blocks_only=True), 32768),
         "that is the blocks-only share, the same at every depth; count the embeddings too."),
        (kv_share(depth_model(config, 28), 32768),
         "that is the 28-layer model; rebuild it with 7 layers."),
        (kv_share(get("qwen3-0.6b"), 32768),
         "that uses the zoo's published 0.6B parameters at 28 layers; rebuild with 7 layers."),
    ]
    return answer_check(answer, expected, hints, rel=0.002,
                        what="a share between 0 and 1")


def ch8_ex4(answer):
    """GiB one decode step of MiniMax M2 reads at 10^6 tokens (bf16, batch 1)."""
    parts = step_bytes(get("minimax-m2"), 10**6)
    expected = parts["total"] / GiB
    hints = [
        (parts["total"] / GB, "that is in GB (10^9 bytes); the question asks GiB (2^30 bytes)."),
        (parts["kv"] / GiB, "that is the cache alone; a step also reads the active weights."),
        (step_bytes(get("minimax-m2"), 2**20)["total"] / GiB,
         "1M tokens means 10^6 here, not 2^20."),
        ((parts["kv"] / GiB) + parts["weights"] / GB,
         "you mixed GiB for the cache with GB for the weights."),
    ]
    return answer_check(answer, expected, hints, rel=0.001,
                        what="a number of GiB")


# -- exercise 5: two bandwidths fitted to step times, by the student's function ---------------
def _ex5_cases() -> list:
    """(weight bytes, cache bytes [n], seconds [n], (beta_weights, beta_kv)): step times made
    exactly from known bandwidths, for three models and contexts (the shortest first; never an
    empty cache, so the shortest step reads some cache too)."""
    cases = []
    for name, contexts, betas in [("llama-2-7b", (16, 1024, 2048, 4096), (30e9, 20e9)),
                                  ("llama-3.1-8b", (4096, 32_768, 131_072), (3.0e12, 2.2e12)),
                                  ("smollm2-135m", (100, 2000, 4000, 8192), (25e9, 40e9))]:
        model = get(name)
        w = weight_bytes_read(model)
        kv = np.array([kv_cache_bytes(model.config, S) for S in contexts], dtype=float)
        cases.append((w, kv, w / betas[0] + kv / betas[1], betas))
    return cases


def _ex5_slips(w, kv, t, betas) -> dict:
    """What the typical mistakes return for one case."""
    bw, bkv = betas
    slope = (kv[-1] - kv[0]) / (t[-1] - t[0])               # bytes of cache per second
    one = float((w + kv) @ t / (t @ t))                     # one bandwidth for all bytes
    return {"right": (bw, bkv), "swapped": (bkv, bw), "inverse": (1 / bw, 1 / bkv),
            "first step": (w / t[0], slope), "one": (one, one)}


EX5_HINTS = [
    ("swapped", "the pair is (beta_weights, beta_kv): the weights' bandwidth first."),
    ("inverse", "those are seconds per byte; the question asks bytes per second (1 / each)."),
    ("first step", "the shortest step reads its cache too: its time is M_W / beta_W + "
                   "M_KV / beta_KV, not M_W / beta_W alone."),
    ("one", "that is one bandwidth for every byte; fit two, one for the weights and one for "
            "the cache."),
    ("other", "each step is one equation t = M_W x + M_KV y in x = 1 / beta_W and "
              "y = 1 / beta_KV: solve them together (np.linalg.lstsq), then invert."),
]


def ch8_ex5(answer):
    """answer: your two_bandwidths(weight_bytes, kv_bytes, seconds) function, run on step times
    made from bandwidths the check knows."""
    refused = not_a_function(answer, "two_bandwidths")
    if refused is not None:
        return refused
    matched = []
    for w, kv, t, betas in _ex5_cases():
        try:
            got = plain(answer(w, kv.copy(), t.copy()))
        except Exception as err:                              # noqa: BLE001 - the student's code
            return _say(False, f"Not right yet: two_bandwidths raised {type(err).__name__}: "
                               f"{err}")
        if not (isinstance(got, tuple) and len(got) == 2 and all(
                isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)
                for x in got)):
            return _say(False, "Not right yet: two_bandwidths should return a pair of numbers "
                               f"(beta_weights, beta_kv), got {describe(got)}.")
        matched.append({name for name, pair in _ex5_slips(w, kv, t, betas).items()
                        if all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got, pair))})
    return verdict_from_slips(matched, EX5_HINTS)


__all__ = ["ch8_ex1", "ch8_ex2", "ch8_ex3", "ch8_ex4", "ch8_ex5"]
