"""Self-checks for chapter 3, Why the cache is exact (book/03_why_exact.ipynb).

The checks rebuild the chapter's exact model and prompt (the source toy, seed 0, a random
32-token prompt from numpy's default_rng(0)) and compute expected values with toykv.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import flops
from ..config import source_toy
from ..generate import decode_steps
from ..model import ToyTransformer
from ._core import _say, answer_check, describe, is_real, plain

SEQ_LEN, EDIT = 12, 5          # exercises 2 and 3: a 12-token sequence edited at position 5


EX1_VARIANTS = {"gqa": dict(n_kv_heads=2), "mqa": dict(attention="mqa"),
                "sliding window 8": dict(sliding_window=8)}
EX1_PROMPT, EX1_STEPS = 6, 10           # a 6-token prompt, 10 steps: past the window of 8
EX4_STEPS = 12


def chapter_sequence(n: int = SEQ_LEN) -> list[int]:
    """The first n tokens of the chapter's prompt."""
    prompt = np.random.default_rng(0).integers(0, source_toy().vocab_size, size=32)
    return [int(t) for t in prompt[:n]]


def edited(ids, position):
    """ids with the token at `position` replaced, as the chapter edits it."""
    new = list(ids)
    new[position] = (new[position] + 1) % source_toy().vocab_size
    return new


def _largest_gap(model, prompt, n_steps, **cached_options) -> float:
    """Largest |logit difference| between greedy generation with the cache (cached_options
    passed on, e.g. kv_dtype) and without it, over n_steps steps."""
    cached = decode_steps(model, prompt, n_steps, use_cache=True, **cached_options)
    full = decode_steps(model, prompt, n_steps, use_cache=False)
    return max(float(np.abs(a.logits - b.logits).max()) for a, b in zip(cached, full))


# -- exercise 1: GQA, MQA and a sliding window are exact too ---------------------------------
@functools.cache
def _ex1_gaps(exact: bool) -> tuple[float, ...]:
    """The largest cached-vs-recomputed gap of each variant, on the exact or default backend."""
    prompt = chapter_sequence(EX1_PROMPT)
    return tuple(_largest_gap(ToyTransformer(source_toy(**changes), seed=0, exact=exact),
                              prompt, EX1_STEPS) for changes in EX1_VARIANTS.values())


def ch3_ex1(answer):
    """answer: (largest |logit difference| between cached and recomputed logits, over the
    steps, for the GQA, the MQA and the sliding-window toy), exact backend."""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, "right")
    gaps = plain(answer)
    names = ", ".join(EX1_VARIANTS)
    if not (isinstance(gaps, tuple) and len(gaps) == 3 and all(is_real(g) for g in gaps)):
        return _say(False, f"Not right yet: give three numbers, the largest gap for ({names}), "
                           f"got {describe(gaps)}.")
    expected = _ex1_gaps(exact=True)
    if any(g < 0 for g in gaps):
        outcome = "negative"
    elif gaps == expected:
        outcome = "right"
    elif max(gaps) < 1e-3:
        outcome = "rounding"
    else:
        outcome = "large"
    return answer_check(outcome, "right", hints=[
        ("negative", "a gap is an absolute difference: np.abs(...).max() is never negative."),
        ("rounding", "gaps of float32 rounding: build the three models with exact=True. The "
                     "default backend's products may add the terms of a 1-row and an S-row "
                     "product in different orders (this chapter's BLAS gap)."),
        ("large", "a gap this large is not rounding: compare, step by step, two runs of the "
                  "same model and prompt, one with use_cache=True and one with use_cache=False."),
    ], right="Bit for bit for all three: KV heads and span play no part.")


# -- exercise 4: a float16 cache -------------------------------------------------------------
@functools.cache
def _ex4_values() -> dict:
    """The float16 cache's largest gap over 12 steps (exact backend) and the usual slips."""
    model = ToyTransformer(source_toy(), seed=0, exact=True)
    blas = ToyTransformer(source_toy(), seed=0)
    prompt = chapter_sequence(32)
    full = list(decode_steps(model, prompt, 2 * EX4_STEPS, use_cache=False))
    ulp32 = max(float(np.spacing(np.float32(np.abs(s.logits).max()))) for s in full)
    gap = _largest_gap(model, prompt, EX4_STEPS, kv_dtype="float16")
    return {"gap": gap, "ulp32": ulp32, "in ulp": gap / ulp32,
            "24 steps": _largest_gap(model, prompt, 2 * EX4_STEPS, kv_dtype="float16"),
            "float32 blas": _largest_gap(blas, prompt, EX4_STEPS),
            "float16 blas": _largest_gap(blas, prompt, EX4_STEPS, kv_dtype="float16")}


def ch3_ex4(answer):
    """answer: the largest |logit difference| over 12 steps between generation with a float16
    cache and full recomputation, exact backend, the chapter's 32-token prompt."""
    v = _ex4_values()
    return answer_check(answer, v["gap"], rel=0.03, also=[v["float16 blas"]], hints=[
        (v["in ulp"], "give the gap itself, in logits, not the number of float32 spacings."),
        (v["ulp32"], "that is float32's spacing at the largest logit, the scale to compare "
                     "with; the question asks for the float16 cache's gap."),
        (0, "with the exact backend and a float32 cache the gap is 0: store the cache in "
            "float16 (kv_dtype='float16')."),
        (v["float32 blas"], "that is float32 rounding of the default backend; store the cache "
                            "in float16 (kv_dtype='float16')."),
        (v["24 steps"], "take the 12 steps the exercise asks for, not 24."),
    ], what="a gap in logits (a number)")


def _cached_kv(model, ids):
    """Every layer's K and V after a prefill of ids: a list of (k, v) arrays [S, H_kv, d_h]."""
    cache = model.new_cache()
    model.forward(ids, cache)
    return [(layer["k"][:len(ids)], layer["v"][:len(ids)]) for layer in cache.layers]


def _unchanged(model, a, b):
    """Boolean [2 * n_layers, S]: True where a (layer, K or V) row holds identical values."""
    rows = []
    for (ka, va), (kb, vb) in zip(_cached_kv(model, a), _cached_kv(model, b)):
        rows += [np.all(ka == kb, axis=(1, 2)), np.all(va == vb, axis=(1, 2))]
    return np.array(rows)


@functools.cache
def _ex2_expected() -> tuple[int, int]:
    """(positions unchanged in every layer, unchanged entries), measured on toykv's cache."""
    model = ToyTransformer(source_toy(), seed=0, exact=True)
    seq = chapter_sequence()
    same = _unchanged(model, seq, edited(seq, EDIT))
    return int(same.all(axis=0).sum()), int(same.sum())


def ch3_ex2(answer):
    """answer: (positions whose K and V are unchanged in every layer, unchanged
    (position, layer, K or V) entries in total) for the edit at position 5 of 12 tokens."""
    expected = _ex2_expected()
    L, n, j = source_toy().n_layers, SEQ_LEN, EDIT
    return answer_check(answer, expected, hints=[
        ((j, 2 * L * j), "in layer 0 the keys and values after the edit see only their own "
                         "token: there only position j changes."),
        ((j, 2 * L * n - 2 * (n - j) * (L - 1)),
         "position j's own key and value change in layer 0 too."),
        ((j, expected[1] // 2), "count K and V: each (position, layer) holds two entries."),
        ((j + 1, expected[1]), "positions count from 0: positions 0..j-1 are j positions."),
        ((j - 1, expected[1]), "positions count from 0: positions 0..j-1 are j positions."),
        ((expected[1], expected[0]), "the pair is (positions, entries)."),
    ], wrong="Give a pair (positions, entries).", what="a pair (positions, entries) of whole "
                                                        "numbers")


@functools.cache
def _ex3_expected() -> int:
    """FLOPs toykv counts for the edited sequence's positions 5.. after 5 cached ones."""
    model = ToyTransformer(source_toy(), seed=0, exact=True)
    cache = model.new_cache()
    model.forward(edited(chapter_sequence(), EDIT)[:EDIT], cache)    # the reusable prefix
    start = model.flops
    model.forward(edited(chapter_sequence(), EDIT)[EDIT:], cache)    # counted by toykv
    return model.flops - start


def ch3_ex3(answer):
    """answer: matmul FLOPs of computing the edited sequence from position 5 on, with the
    cached positions 0..4 reused."""
    config = source_toy()
    expected = _ex3_expected()
    new = SEQ_LEN - EDIT
    return answer_check(answer, expected, hints=[
        (flops.full_pass_flops(config, new), "the 7 new queries also score the 5 cached keys: "
                                             "that is a forward pass of 7 tokens after 5 "
                                             "cached ones, not a full pass of 7."),
        (flops.full_pass_flops(config, SEQ_LEN), "that is recomputing all 12 tokens; the "
                                                 "question asks for the reuse."),
        (flops.full_pass_flops(config, SEQ_LEN) - expected,
         "that is what reuse saved; the question asks what it cost."),
    ], what="a whole number of FLOPs")


__all__ = ["ch3_ex1", "ch3_ex2", "ch3_ex3", "ch3_ex4", "chapter_sequence", "edited"]
