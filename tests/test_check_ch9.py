"""The self-checks of chapter 9: the official answers pass, typical mistakes get their hint,
None says "not answered yet", and the expected answer is never printed.

Expected values are hand products of SmolLM2-135M's published shapes (30 layers, 9 query heads,
3 KV heads of 64, d_model 576, d_ff 1536, vocabulary 49,152, tied embeddings), not toykv.sizing.
"""
from __future__ import annotations

import numpy as np
import pytest

from toykv import check
from toykv.check._core import NOT_ANSWERED

from check_helpers import assert_hint, assert_right, said

L, H, HKV, HD, D, F, V = 30, 9, 3, 64, 576, 1536, 49152


def kv(tokens, b, kv_heads=HKV):
    return 2 * L * kv_heads * HD * tokens * b


# ex1: 40-token prompt, 60 new tokens: 99 tokens held, float32
EX1 = kv(99, 4)

# ex2: bf16, 135e6 published parameters, 8,192 tokens, L4 at 300 GB/s
W_BF16 = 2 * 135_000_000
EX2 = 300e9 / (W_BF16 + kv(8192, 2))

# ex3: FLOPs of a pass of T new tokens against Tk keys (matmuls, 2 per multiply-add)


def pass_flops(T, Tk):
    layer = (2 * T * D * H * HD + 2 * 2 * T * D * HKV * HD       # q; k and v
             + 2 * 2 * H * T * Tk * HD                          # scores and values
             + 2 * T * H * HD * D + 3 * 2 * T * D * F)          # out; MLP
    return L * layer + 2 * T * D * V                            # + output head


EX3 = 8 * pass_flops(1020, 1020) / (pass_flops(1000, 1000) + 8 * pass_flops(20, 1020))
EX3_HAND = 8 * 1020 / (1000 + 8 * 20)

# ex4: every weight once (tied embedding, norms), float32 vs 20 bytes per 32 weights
PARAMS = V * D + L * (2 * D + D * H * HD + 2 * D * HKV * HD + H * HD * D + 3 * D * F) + D


def q4_ratio(tokens):
    return (4 * PARAMS + kv(tokens, 4)) / (PARAMS * 20 / 32 + kv(tokens, 4))


EX4 = q4_ratio(1024)

CHECKS = [check.ch9_ex1, check.ch9_ex2, check.ch9_ex3, check.ch9_ex4, check.ch9_ex5,
          check.ch9_ex6]


@pytest.mark.parametrize("fn", CHECKS)
def test_none_is_not_answered(fn, capsys):
    assert not fn(None)
    assert NOT_ANSWERED in said(capsys)


def test_ex1(capsys):
    assert EX1 == 4_561_920
    assert_right(check.ch9_ex1, EX1, capsys)
    assert_hint(check.ch9_ex1, kv(100, 4), "never fed back", capsys, EX1)
    assert_hint(check.ch9_ex1, kv(99, 2), "float32", capsys, EX1)    # bf16, or no V
    assert_hint(check.ch9_ex1, EX1 // 2, "factor 2", capsys, EX1)
    assert_hint(check.ch9_ex1, kv(99, 4, kv_heads=H), "KV heads", capsys, EX1)
    assert_hint(check.ch9_ex1, kv(40, 4), "decode steps", capsys, EX1)
    assert_right(check.ch9_ex1, float(EX1), capsys)      # an integral float is the count
    assert not check.ch9_ex1(EX1 + 0.5)
    assert "whole number of bytes" in said(capsys)


def test_ex2(capsys):
    assert round(EX2) == 654
    assert_right(check.ch9_ex2, EX2, capsys)
    assert_right(check.ch9_ex2, 654, capsys)             # rounded by hand
    assert_hint(check.ch9_ex2, 300e9 / W_BF16, "empty cache", capsys)
    assert_hint(check.ch9_ex2, 300e9 / (2 * W_BF16 + kv(8192, 4)), "bf16", capsys)
    assert_hint(check.ch9_ex2, 300e9 / (W_BF16 + kv(8192, 2, kv_heads=H)), "KV heads",
                capsys)
    assert_hint(check.ch9_ex2, 300e9 / kv(8192, 2), "weights as well", capsys)


def test_ex3(capsys):
    assert_right(check.ch9_ex3, EX3, capsys)
    assert_right(check.ch9_ex3, EX3_HAND, capsys)        # the token count is close enough
    for shown in (7.0, 7.06):                            # the values the solution prints
        assert_right(check.ch9_ex3, shown, capsys)
    assert_hint(check.ch9_ex3, pass_flops(1020, 1020) / pass_flops(20, 1020),
                "one request's saving", capsys)
    assert_hint(check.ch9_ex3, 1 / EX3, "with / without", capsys)
    assert_hint(check.ch9_ex3, 8 * 1020 / 1000, "own 20 tokens", capsys)


def test_ex4(capsys):
    assert 4.4 < EX4 < 4.5
    assert_right(check.ch9_ex4, EX4, capsys)
    assert_right(check.ch9_ex4, 4.5, capsys)             # as the solution rounds it
    assert_hint(check.ch9_ex4, 6.4, "weights alone", capsys)
    assert_hint(check.ch9_ex4, q4_ratio(8192), "8,192", capsys)
    assert_hint(check.ch9_ex4, 1 / EX4, "new bound over the old", capsys)


@pytest.mark.parametrize("fn", CHECKS)
def test_a_string_is_not_an_answer(fn, capsys):
    assert not fn("654")
    assert said(capsys).startswith("Not right yet:")


# ex5: keys quantized per channel, written here by hand (min-max, 2^b - 1 steps, rint)
def per_channel(k, bits):
    lo, hi = k.min(axis=0), k.max(axis=0)
    s = (hi - lo) / (2**bits - 1)
    return np.rint((k - lo) / s) * s + lo


def per_row(k, bits):
    lo, hi = k.min(axis=1, keepdims=True), k.max(axis=1, keepdims=True)
    s = (hi - lo) / (2**bits - 1)
    with np.errstate(invalid="ignore"):          # the student's code may divide 0 by 0
        return np.rint((k - lo) / s) * s + lo


def test_ex5(capsys):
    assert_right(check.ch9_ex5, per_channel, capsys)
    assert_hint(check.ch9_ex5, per_row, "per token", capsys)
    assert_hint(check.ch9_ex5, lambda k, b: np.clip(
        np.rint((k - k.min(0)) / ((k.max(0) - k.min(0)) / 2**b)), 0, 2**b - 1)
        * (k.max(0) - k.min(0)) / 2**b + k.min(0), "2^b - 1 steps", capsys)
    assert_hint(check.ch9_ex5, lambda k, b: np.rint(                     # not clipped either
        (k - k.min(0)) / ((k.max(0) - k.min(0)) / 2**b))
        * (k.max(0) - k.min(0)) / 2**b + k.min(0), "cannot hold", capsys)
    assert_hint(check.ch9_ex5, lambda k, b: np.floor(
        (k - k.min(0)) / ((k.max(0) - k.min(0)) / (2**b - 1)))
        * (k.max(0) - k.min(0)) / (2**b - 1) + k.min(0), "np.rint", capsys)
    assert_hint(check.ch9_ex5, lambda k, b: np.rint(
        k / (np.abs(k).max(0) / (2**(b - 1) - 1))) * np.abs(k).max(0) / (2**(b - 1) - 1),
        "symmetric", capsys)
    assert_hint(check.ch9_ex5, lambda k, b: np.rint(
        (k - k.min(0)) / ((k.max(0) - k.min(0)) / (2**b - 1))), "integer codes", capsys)
    assert_hint(check.ch9_ex5, lambda k, b: k, "Not right yet", capsys)     # no quantization
    assert not check.ch9_ex5(lambda k, b: k[:3])
    assert "shape" in said(capsys)
    assert not check.ch9_ex5(lambda k, b: 1 / 0)
    assert "ZeroDivisionError" in said(capsys)
    assert not check.ch9_ex5(np.zeros((4, 4)))                          # a value, not a function
    assert "quantize_keys function" in said(capsys)


# ex6: a prefix's cache reused by hand: copy it, feed the question, then one token a step
def answer_after(model, prefix_cache, question_ids, n):
    cache = prefix_cache.copy()
    logits = model.forward(question_ids, cache)[-1]
    out = [int(np.argmax(logits))]
    while len(out) < n:
        out.append(int(np.argmax(model.forward([out[-1]], cache)[-1])))
    return out


def no_copy(model, prefix_cache, question_ids, n):
    logits = model.forward(question_ids, prefix_cache)[-1]
    out = [int(np.argmax(logits))]
    while len(out) < n:
        out.append(int(np.argmax(model.forward([out[-1]], prefix_cache)[-1])))
    return out


def test_ex6(capsys):
    from toykv.check.ch9 import _toy_case
    assert_right(check.ch9_ex6, answer_after, capsys)
    assert_hint(check.ch9_ex6, no_copy, "copy", capsys)
    model, prefix, _ = _toy_case()

    def prefix_twice(model, prefix_cache, question_ids, n):
        return answer_after(model, prefix_cache, prefix + list(question_ids), n)

    def first_lost(model, prefix_cache, question_ids, n):
        cache = prefix_cache.copy()
        token = int(np.argmax(model.forward(question_ids, cache)[-1]))
        out = []
        for _ in range(n):
            token = int(np.argmax(model.forward([token], cache)[-1]))
            out.append(token)
        return out

    assert_hint(check.ch9_ex6, prefix_twice, "only the question", capsys)
    assert_hint(check.ch9_ex6, first_lost, "first new token", capsys)
    assert_hint(check.ch9_ex6, lambda m, c, q, n: answer_after(m, c, q, n)[:-1],
                "exactly n tokens", capsys)
    assert not check.ch9_ex6(lambda m, c, q, n: [0] * n)
    assert said(capsys).startswith("Not right yet.")
    assert not check.ch9_ex6(lambda m, c, q, n: m.forward(q, None)[5])   # raises on a shape
    assert not check.ch9_ex6(42)
    assert "answer_after function" in said(capsys)
