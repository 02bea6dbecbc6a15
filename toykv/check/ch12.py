"""Self-checks for chapter 12's exercises (keeping less). Each prints right or a hint.

Expected values are computed here with toykv (CachePolicy's own rule, the zoo's configurations,
toykv.sizing), so the check and the chapter cannot drift. Exercises 1 and 4 take the function
you wrote and run it on cases of their own.
"""
from __future__ import annotations

import numpy as np

from ..policies import CachePolicy
from ..sizing import kv_bytes_per_token, kv_share, param_count, weight_bytes_read
from ..zoo import get
from ._core import answer_check, describe, not_a_function, plain, _say

PCIE4 = 32e9                          # bytes/s, PCIe 4.0 x16, one direction (as the chapter)
EX1_RECEIVED = (5.0, 0.5, 0.25, 3.0, 0.75, 2.5, 0.5, 4.0, 0.25, 1.0, 0.5, 0.5)
EX1_BUDGET, EX1_RECENT = 6, 3


def ex1_received() -> np.ndarray:
    """The attention received by tokens 0..11 in exercise 1."""
    return np.array(EX1_RECEIVED)


def h2o_keep(received, budget: int, recent: int) -> tuple:
    """What toykv's H2O rule keeps (CachePolicy('h2o').keep), as a tuple of positions."""
    policy = CachePolicy("h2o", budget, recent=recent)
    received = np.asarray(received, dtype=float)
    return tuple(int(i) for i in policy.keep(np.arange(len(received)), received))


def _ex1_cases() -> list:
    """(received, budget, recent): the exercise's, then others (ties, a budget held whole)."""
    rng = np.random.default_rng(12)
    cases = [(ex1_received(), EX1_BUDGET, EX1_RECENT), (ex1_received(), 8, 2),
             (np.array([1.0, 3, 3, 2, 0, 5, 1]), 4, 1),            # a tie: the older wins
             (np.array([2.0, 1, 4]), 5, 2)]                         # within the budget: all
    cases += [(rng.random(20).round(2), 9, 4) for _ in range(3)]
    return cases


EX1_MISTAKES = {
    "top overall": lambda r, b, w: tuple(sorted(int(i) for i in
                                                np.argsort(-r, kind="stable")[:min(b, len(r))])),
    "score order": lambda r, b, w: h2o_keep(r, b, w) if len(r) <= b else tuple(
        int(i) for i in np.argsort(-r[:len(r) - w], kind="stable")[:b - w]) + tuple(
        range(len(r) - w, len(r))),
    "sinks": lambda r, b, w: tuple(range(min(b - w, len(r)))) + tuple(
        range(max(len(r) - w, b - w), len(r))) if len(r) > b else tuple(range(len(r))),
}


def ch12_ex1(answer):
    """answer: your keep(received, budget, recent) function; it is run on exercise 1's tokens
    and on other cases, and must return the positions H2O keeps, ascending."""
    refused = not_a_function(answer, "keep")
    if refused is not None:
        return refused
    got = []
    for received, budget, recent in _ex1_cases():
        try:
            out = plain(answer(received.copy(), budget, recent))
        except Exception as err:                              # noqa: BLE001 (the student's code)
            return _say(False, f"Not right yet: keep(received, {budget}, {recent}) raised "
                               f"{type(err).__name__}: {err}")
        if not isinstance(out, tuple) or not all(isinstance(p, int) and not isinstance(p, bool)
                                                 for p in out):
            return _say(False, "Not right yet: keep should return the kept positions as a list "
                               f"or tuple of whole numbers, got {describe(out)}.")
        got.append(out)

    def agrees(rule) -> bool:
        return all(out == rule(r, b, w) for out, (r, b, w) in zip(got, _ex1_cases()))

    outcome = "right" if agrees(h2o_keep) else next(
        (name for name, rule in EX1_MISTAKES.items() if agrees(rule)), "other")
    if outcome == "other" and got[0] != h2o_keep(*_ex1_cases()[0]):
        outcome = "first case"
    return answer_check(outcome, "right", hints=[
        ("top overall", "that keeps the most attended tokens overall; the last `recent` tokens "
                        "are kept whatever they received, and the heavy hitters are chosen "
                        "among the older ones only."),
        ("score order", "the right tokens, in the order of their scores: return the positions "
                        "in ascending order, as the cache holds them."),
        ("sinks", "that keeps the first tokens (sinks); H2O keeps the older tokens that "
                  "received the most attention."),
        ("first case", "on exercise 1's twelve tokens (budget 6, 3 recent) your function keeps "
                       "other positions: the last 3, then the 3 most attended among tokens "
                       "0 to 8."),
        ("other", "right on exercise 1's tokens, wrong on another case: with no more tokens "
                  "than the budget keep them all, and on a tie keep the older token."),
    ])


def ch12_ex2(answer):
    """KV share of a Llama 3.1 8B decode step (bf16) with a 4,096-token cache at 128K tokens."""
    model = get("llama-3.1-8b")
    expected = kv_share(model, 4096)
    kv = kv_bytes_per_token(model.config) * 4096
    every_weight = 2 * param_count(model.config)
    hints = [
        (kv_share(model, 131072), "that is the share of a full cache; the policy holds 4,096 "
                                  "tokens whatever the context."),
        (kv_share(model, 4096, bytes_per_value=4), "the cache is bf16: 2 bytes per value."),
        (1 - expected, "that is the weights' part of the bytes; the share is the cache's."),
        (100 * expected, "give the share as a ratio between 0 and 1, not a percentage."),
        (kv / (kv + every_weight), "that counts every parameter as read, the input embedding "
                                   "table too; a decode step looks up one row of it, and "
                                   "reads the output head whole (chapter 6's rule: "
                                   "toykv.sizing.weight_bytes_read)."),
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


# -- exercise 4: the tokens one layer's weights can hide --------------------------------------
EX4_MODELS = ("llama-3.1-8b", "qwen3-1.7b", "mistral-7b-v0.1", "smollm2-135m")
EX4_LINKS = (32e9, 64e9)


def hidden_tokens(config, link: float, hbm: float) -> int:
    """Tokens of one layer's bf16 cache the link brings back while the layer's bf16 weights are
    read from HBM: (layer weights / link-free HBM time) x link / bytes per token and layer."""
    layer_weights = 2 * param_count(config, blocks_only=True) // config.n_layers
    per_token = kv_bytes_per_token(config) // config.n_layers
    return int(layer_weights / hbm * link / per_token)


EX4_MISTAKES = {
    "whole step": lambda c, link, hbm: int(weight_bytes_read(c) / c.n_layers / hbm * link
                                           / (kv_bytes_per_token(c) // c.n_layers)),
    "all layers": lambda c, link, hbm: int(2 * param_count(c, blocks_only=True) // c.n_layers
                                           / hbm * link / kv_bytes_per_token(c)),
    "swapped": lambda c, link, hbm: int(2 * param_count(c, blocks_only=True) // c.n_layers
                                        / link * hbm / (kv_bytes_per_token(c) // c.n_layers)),
}


def ch12_ex4(answer):
    """answer: your hidden_tokens(config, link, hbm) function, run on several zoo models and
    both links (bytes per second) against an H100's 3.35 TB/s."""
    refused = not_a_function(answer, "hidden_tokens")
    if refused is not None:
        return refused
    named = [(name, (get(name).config, link, 3.35e12)) for name in EX4_MODELS
             for link in EX4_LINKS]
    cases, got = [case for _, case in named], []
    for name, (config, link, hbm) in named:
        try:
            out = plain(answer(config, link, hbm))
        except Exception as err:                              # noqa: BLE001 (the student's code)
            return _say(False, f"Not right yet: hidden_tokens on {name}'s config raised "
                               f"{type(err).__name__}: {err}")
        if isinstance(out, bool) or not isinstance(out, (int, float)):
            return _say(False, "Not right yet: hidden_tokens should return a number of tokens, "
                               f"got {describe(out)}.")
        got.append(out)

    def agrees(rule) -> bool:                 # a token either way: int() or round() both do
        return all(abs(out - rule(*case)) <= 1 for out, case in zip(got, cases))

    outcome = "right" if agrees(hidden_tokens) else next(
        (name for name, rule in EX4_MISTAKES.items() if agrees(rule)), "other")
    return answer_check(outcome, "right", hints=[
        ("whole step", "those are the whole step's weights over the layers, the embedding "
                       "row and the output head included; a layer's own weights are its "
                       "decoder block's (toykv.sizing.param_count(config, blocks_only=True))."),
        ("all layers", "a layer brings back its own cache: the bytes per token of one layer, "
                       "kv_bytes_per_token(config) / n_layers."),
        ("swapped", "the layer's weights are read from HBM, the cache comes over the link: "
                    "weights / hbm is the time, and the link moves link x that time."),
        ("other", "the time to read one layer's bf16 weights from HBM, times the link's "
                  "bandwidth, over one layer's bytes per token."),
    ])


__all__ = ["ch12_ex1", "ch12_ex2", "ch12_ex3", "ch12_ex4", "ex1_received", "h2o_keep",
           "hidden_tokens"]
