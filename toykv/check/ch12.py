"""Self-checks for chapter 12's exercises (keeping less). Each prints right or a hint.

Expected values are computed here with toykv, so the check and the chapter cannot drift.
"""
from __future__ import annotations

import numpy as np

from ..policies import CachePolicy
from ..sizing import kv_bytes_per_token, kv_share
from ..zoo import get
from ._core import answer_check

PCIE4 = 32e9                          # bytes/s, PCIe 4.0 x16, one direction (as the chapter)
EX1_RECEIVED = (5.0, 0.5, 0.25, 3.0, 0.75, 2.5, 0.5, 4.0, 0.25, 1.0, 0.5, 0.5)
EX1_BUDGET, EX1_RECENT = 6, 3


def ex1_received() -> np.ndarray:
    """The attention received by tokens 0..11 in exercise 1."""
    return np.array(EX1_RECEIVED)


def ch12_ex1(answer):
    """The positions an H2O cache of budget 6 (3 recent) keeps from exercise 1's 12 tokens."""
    received = ex1_received()
    policy = CachePolicy("h2o", EX1_BUDGET, recent=EX1_RECENT)
    expected = tuple(int(i) for i in policy.keep(np.arange(12), received))
    top = tuple(sorted(int(i) for i in np.argsort(-received, kind="stable")[:EX1_BUDGET]))
    by_score = tuple(int(i) for i in np.argsort(-received[:9], kind="stable")[:3]) + (9, 10, 11)
    hints = [
        (top, "that is the 6 most attended tokens overall; the 3 most recent are kept whatever "
              "they received, and the heavy hitters are chosen among the older ones."),
        (by_score, "the right tokens, in the order of their scores: give the positions in "
                   "ascending order, as the cache holds them."),
        ((0, 1, 2, 9, 10, 11), "that keeps the first tokens (sinks); H2O keeps the older "
                               "tokens that received the most attention."),
    ]
    return answer_check(answer, expected, hints,
                        what="a tuple of 6 positions in ascending order")


def ch12_ex2(answer):
    """KV share of a Llama 3.1 8B decode step (bf16) with a 4,096-token cache at 128K tokens."""
    model = get("llama-3.1-8b")
    expected = kv_share(model, 4096)
    hints = [
        (kv_share(model, 131072), "that is the share of a full cache; the policy holds 4,096 "
                                  "tokens whatever the context."),
        (kv_share(model, 4096, bytes_per_value=4), "the cache is bf16: 2 bytes per value."),
        (1 - expected, "that is the weights' part of the bytes; the share is the cache's."),
    ]
    return answer_check(answer, expected, hints, rel=0.02, what="a ratio between 0 and 1")


def ch12_ex3(answer):
    """Milliseconds to bring one layer's bf16 cache of 32,768 tokens of Llama 3.1 8B back over
    PCIe 4.0 x16 (32 GB/s)."""
    config = get("llama-3.1-8b").config
    layer_bytes = kv_bytes_per_token(config) // config.n_layers * 32768
    expected = layer_bytes / PCIE4 * 1e3
    hints = [
        (expected * config.n_layers, "that is the whole cache, every layer; one layer is "
                                     "brought back at a time."),
        (layer_bytes / 2**30 / 32 * 1e3, "32 GB/s is 32 x 10^9 bytes per second, not GiB."),
        (expected / 2, "keys and values: each token stores both in every layer."),
        (expected / 1e3, "the answer is in milliseconds, not seconds."),
    ]
    return answer_check(answer, expected, hints, rel=0.01, what="a time in milliseconds")
