"""Self-checks for chapter 2, The cost of recomputing (book/02_cost_of_recomputing.ipynb).

Expected values come from toykv.flops and toykv.zoo; the hints recognise the usual slips
(off by one, the 2 FLOPs per multiply-add, KV heads where query heads belong, units).
"""
from __future__ import annotations

import functools

import numpy as np

from .. import flops, zoo
from ..config import ModelConfig, source_toy
from ..generate import decode_steps
from ..model import ToyTransformer
from ._core import answer_check, function_check

PROMPT_LEN = 32          # the chapter's prompt


@functools.lru_cache(maxsize=None)
def _tokens_fed(n_steps: int, use_cache: bool) -> np.ndarray:
    """Tokens each of n_steps greedy steps feeds from a one-token prompt, counted by running
    toykv.decode_steps on a tiny model (the count does not depend on the model's size)."""
    config = ModelConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=2, d_ff=8,
                         max_seq_len=n_steps + 1)
    steps = decode_steps(ToyTransformer(config, seed=0), [0], n_steps, use_cache=use_cache)
    return np.array([step.tokens_in for step in steps])


def ch2_ex1(answer):
    """answer: the smallest n at which n steps without a cache process >= 100x the tokens."""
    uncached, cached = (np.cumsum(_tokens_fed(300, c)) for c in (False, True))
    expected = int(np.argmax(uncached >= 100 * cached)) + 1      # steps are counted from 1
    return answer_check(answer, expected, hints=[
        (expected + 1, "off by one: try the number just below yours; (n + 1) / 2 >= 100."),
        (expected - 1, "off by one: at that n the ratio (n + 1) / 2 is still below 100."),
        (100, "the ratio is (n + 1) / 2, not n: solve (n + 1) / 2 >= 100."),
        (200, "the ratio is (n + 1) / 2: n = 200 works, but is it the smallest?"),
    ], what="a whole number of steps n")


def _doubles_at(cost, start: int) -> int:
    config = source_toy()
    return next(s for s in range(start, 100_000) if cost(config, s) >= 2 * cost(config, start))


def ch2_ex2(answer):
    """answer: (context at which a cached step costs twice the step at context 33,
    context at which an uncached step does)."""
    start = PROMPT_LEN + 1
    cached = _doubles_at(flops.cached_step_flops, start)
    uncached = _doubles_at(flops.full_pass_flops, start)
    return answer_check(answer, (cached, uncached), hints=[
        ((cached - start, uncached), "give the context at which the cost has doubled, not the "
                                     "number of tokens added to 33."),
        ((cached, 2 * start), "the uncached pass has an S^2 attention term, so it doubles a "
                              "little before the sequence doubles: search for it."),
        ((cached - start, uncached - start), "give contexts (tokens in the sequence), not the "
                                             "number of tokens added to 33."),
    ], wrong="Give a pair (cached, uncached) of contexts.",
       what="a pair (cached, uncached) of contexts, whole numbers of tokens")


def _llama8():
    return zoo.get("llama-3.1-8b")


EX3_CONTEXT = 8192


def ch2_ex3(answer):
    """answer: matmul FLOPs of one cached decode step of Llama 3.1 8B at context 8,192."""
    model = _llama8()
    c = model.config
    expected = flops.cached_step_flops(c, EX3_CONTEXT)
    weights = model.total_params - c.vocab_size * c.d_model     # the embedding is a lookup
    attention = 4 * c.n_layers * EX3_CONTEXT * c.n_heads * c.head_dim
    attention_kv = 4 * c.n_layers * EX3_CONTEXT * c.n_kv_heads * c.head_dim
    return answer_check(answer, expected, rel=0.03, hints=[
        (expected / 1e9, "give FLOPs, not GFLOP (multiply by 10^9)."),
        (2 * weights, "that is the weights' part only: add attention, 4 L S H d_h (the new "
                      "query scores 8,192 keys and averages 8,192 values, in every head)."),
        (2 * weights + attention_kv, "every query head scores the keys: attention costs "
                                     "4 L S H d_h with the H query heads, not the H_kv KV heads."),
        (weights + attention / 2, "count 2 FLOPs per multiply-add."),
        (2 * model.total_params + attention, "the input embedding is a table lookup, not a "
                                             "matrix product: leave its 0.53B weights out."),
    ], what="a number of FLOPs")


def ch2_ex4(answer):
    """answer: (fraction of a 512-token full pass's FLOPs saved by n_kv_heads=2 against MHA,
    the same for n_kv_heads=1)."""
    mha = flops.full_pass_flops(source_toy(), 512)
    saved = tuple(1 - flops.full_pass_flops(source_toy(n_kv_heads=n), 512) / mha
                  for n in (2, 1))
    heads_removed = (1 - 2 / 8, 1 - 1 / 8)
    return answer_check(answer, saved, rel=0.02, hints=[
        (heads_removed, "that is the fraction of KV heads removed; the question asks for the "
                        "fraction of FLOPs saved."),
        (tuple(100 * x for x in saved), "give fractions (0.05), not percentages (5)."),
        ((saved[1], saved[0]), "the pair is (GQA with 2 KV heads, MQA with 1)."),
    ], what="a pair (GQA, MQA) of fractions")


@functools.lru_cache(maxsize=None)
def _long_run_growth() -> tuple[float, float]:
    """Growth of a run's total FLOPs from 8,192 to 16,384 tokens: (no cache, cache)."""
    config = source_toy(max_seq_len=16_384)

    def total(n, use_cache):
        return sum(flops.generation_flops(config, PROMPT_LEN, n - PROMPT_LEN, use_cache))

    return tuple(total(16_384, c) / total(8192, c) for c in (False, True))


def ch2_ex5(answer):
    """answer: (growth of the total FLOPs from a run to 8,192 tokens to one to 16,384 without a
    cache, the same with a cache), 32-token prompt."""
    expected = _long_run_growth()
    return answer_check(answer, expected, rel=0.01, hints=[
        ((8, 4), "8 and 4 are the limits the ratios approach; compute the actual ratios for this "
                 "doubling."),
        ((4, 2), "those are the growths without the attention terms; the S^2 and S terms of "
                 "attention add to them."),
        ((expected[1], expected[0]), "the pair is (without a cache, with a cache)."),
    ], what="a pair (without a cache, with a cache) of growth factors")


# -- exercise 6: the cached step's FLOPs, written by the student --------------------------------
EX6_CONFIGS = {                      # MHA, GQA, MQA, and heads narrower than d_model / n_heads
    "the source toy (MHA)": dict(),
    "GQA, 2 KV heads": dict(n_kv_heads=2),
    "MQA": dict(attention="mqa"),
    "4 heads of 16 (H d_h = 64, not d_model)": dict(n_heads=4, n_kv_heads=2, head_dim=16),
}
EX6_CONTEXTS = (1, 2, 40)


@functools.lru_cache(maxsize=None)
def _ex6_model(changes: tuple) -> ToyTransformer:
    """A model of the exercise's config with these changes to the source toy."""
    return ToyTransformer(source_toy(max_seq_len=64, **dict(changes)), seed=0)


@functools.lru_cache(maxsize=None)
def _counted_step(changes: tuple, context: int) -> int:
    """FLOPs toykv's counter (model.flops) records for one cached step at `context` tokens
    (the new one included): prefill context - 1 random tokens, then feed one more."""
    model = _ex6_model(changes)
    config = model.config
    ids = np.random.default_rng(0).integers(0, config.vocab_size, context)
    cache = model.new_cache()
    if context > 1:
        model.forward(ids[:-1], cache)
    before = model.flops
    model.forward(ids[-1:], cache)
    return model.flops - before


def _ex6_mistakes(c, S) -> dict:
    """What the usual slips give for config c at context S (for the hints only)."""
    D, F, V, L = c.d_model, c.d_ff, c.vocab_size, c.n_layers
    H, Hkv, hd = c.n_heads, c.n_kv_heads, c.head_dim

    def step(q=H * hd, kv=Hkv * hd, keys=S, width=H * hd, mlp=3, head=True, per_mac=2):
        projections = D * (2 * q + 2 * kv)                     # W_Q, W_O and W_K, W_V
        attention = 2 * keys * width                           # scores and weighted sums
        return per_mac * (L * (projections + attention + mlp * D * F) + head * D * V)

    return {"two-matrix MLP": step(mlp=2), "K, V as D x D": step(kv=H * hd),
            "KV heads in attention": step(width=Hkv * hd), "S - 1 keys": step(keys=S - 1),
            "D for H d_h": step(q=D, kv=D * Hkv // H, width=D), "no head": step(head=False),
            "1 FLOP per multiply-add": step(per_mac=1)}


EX6_HINTS = [
    ("two-matrix MLP", "toykv's MLP is SwiGLU: three D x F matrices (gate, up, down), not two."),
    ("K, V as D x D", "with GQA or MQA, W_K and W_V have H_kv d_h columns, not D: the other "
                      "configs the check runs have fewer KV heads."),
    ("KV heads in attention", "every query head scores the keys and averages the values: "
                              "attention costs 4 S H d_h per layer with the H query heads."),
    ("S - 1 keys", "the new query meets S keys: the S - 1 cached ones and its own."),
    ("D for H d_h", "W_Q and W_O are D x H d_h and W_K, W_V are D x H_kv d_h: use "
                    "config.head_dim, which need not be d_model / n_heads (one of the check's "
                    "configs has heads of 16 with d_model 128 and 4 heads)."),
    ("no head", "add the output head: 2 D |V| FLOPs, once per step."),
    ("1 FLOP per multiply-add", "count 2 FLOPs per multiply-add."),
]


def _ex6_cases():
    """(where, args, kwargs, expected, slips) for every config and context the check runs."""
    for name, changes in EX6_CONFIGS.items():
        config = source_toy(max_seq_len=64, **changes)
        for S in EX6_CONTEXTS:
            yield (f"{name} at S = {S}", (config, S), {},
                   _counted_step(tuple(sorted(changes.items())), S), _ex6_mistakes(config, S))


def ch2_ex6(answer):
    """answer: your cached_step_flops(config, S) function. The check runs it on four configs
    (MHA, GQA, MQA, narrow heads) at contexts 1, 2 and 40 and compares it with the FLOPs
    toykv's counter records for those steps."""
    return function_check(
        answer, _ex6_cases(), EX6_HINTS, what="a whole number of FLOPs",
        name="my_cached_step_flops",
        right="Equal to toykv's counter for MHA, GQA, MQA and narrow heads.",
        wrong=lambda where: f"On {where} your count differs from toykv's counter; check each "
                            "term against the chapter's formula.")


__all__ = ["ch2_ex1", "ch2_ex2", "ch2_ex3", "ch2_ex4", "ch2_ex5", "ch2_ex6"]
