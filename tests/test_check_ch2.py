"""The self-checks of chapter 2: the official answers pass, typical mistakes get their hint,
None says "not answered yet", and the expected answer is never printed.

Expected values here are worked out by hand from the chapter's formulas and the published
shapes, not by calling the functions the checks call.
"""
from __future__ import annotations

import pytest

from toykv import check
from toykv.check._core import NOT_ANSWERED

from check_helpers import assert_hint, assert_right, said

# The source toy: L = 2, D = 128, F = 512, |V| = 512, MHA with 8 heads of 16, SwiGLU.
L, D, F, V = 2, 128, 512, 512


def toy_step(S):           # cached step: 2 x weights in products + 4 L S D (H d_h = D)
    return 2 * (L * (4 * D * D + 3 * D * F) + D * V) + 4 * L * S * D


def toy_full(S, n_kv=8):   # full pass: q, o (D x D), k, v (D x 16 n_kv), SwiGLU, head
    proj = 2 * S * D * D * 2 + 2 * 2 * S * D * 16 * n_kv
    return L * (proj + 4 * S * S * D + 6 * S * D * F) + 2 * S * D * V


def first(predicate):
    return next(s for s in range(33, 100_000) if predicate(s))


EX2 = (first(lambda s: toy_step(s) >= 2 * toy_step(33)),
       first(lambda s: toy_full(s) >= 2 * toy_full(33)))
# Llama 3.1 8B at 8,192 tokens: published 8.03B parameters minus the 128,256 x 4,096
# embedding, counted from the published shapes (meta-llama's model card): 32 layers of q, o (4096^2), k, v (4096 x 1024),
# three 4096 x 14336 MLP matrices, plus the 4096 x 128,256 output head.
LLAMA8_PRODUCTS = 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 4096 * 128256
EX3 = 2 * LLAMA8_PRODUCTS + 4 * 32 * 8192 * 32 * 128
EX4 = tuple(1 - toy_full(512, n) / toy_full(512) for n in (2, 1))


@pytest.mark.parametrize("fn", [check.ch2_ex1, check.ch2_ex2, check.ch2_ex3, check.ch2_ex4,
                                check.ch2_ex5])
def test_none_is_not_answered(fn, capsys):
    assert not fn(None)
    assert NOT_ANSWERED in said(capsys)


def test_ex1(capsys):
    assert_right(check.ch2_ex1, 199, capsys)                  # (n + 1) / 2 >= 100
    assert_hint(check.ch2_ex1, 200, "off by one", capsys, expected=199)
    assert_hint(check.ch2_ex1, 198, "off by one", capsys, expected=199)
    assert_hint(check.ch2_ex1, 100, "(n + 1) / 2", capsys, expected=199)


def test_ex2(capsys):
    assert EX2 == (1218, 65)               # the hand formula's search, as the chapter says
    assert_right(check.ch2_ex2, EX2, capsys)
    assert_hint(check.ch2_ex2, (EX2[0] - 33, EX2[1]), "not the number of tokens added", capsys)
    assert_hint(check.ch2_ex2, (EX2[0], 66), "S^2 attention term", capsys)
    assert_hint(check.ch2_ex2, (1, 2), "Give a pair", capsys)


def test_ex3(capsys):
    assert_right(check.ch2_ex3, EX3, capsys)
    assert_right(check.ch2_ex3, 2 * (8.03e9 - 0.53e9) + 4 * 32 * 8192 * 32 * 128, capsys)  # by hand
    assert_hint(check.ch2_ex3, EX3 / 1e9, "not GFLOP", capsys)
    assert_hint(check.ch2_ex3, 2 * LLAMA8_PRODUCTS, "add attention", capsys)
    assert_hint(check.ch2_ex3, 2 * LLAMA8_PRODUCTS + 4 * 32 * 8192 * 8 * 128, "query heads",
              capsys)
    assert_hint(check.ch2_ex3, LLAMA8_PRODUCTS + 2 * 32 * 8192 * 32 * 128, "2 FLOPs", capsys)
    assert_hint(check.ch2_ex3, 2 * 8.03e9 + 4 * 32 * 8192 * 32 * 128, "lookup", capsys)


def test_ex4(capsys):
    assert_right(check.ch2_ex4, EX4, capsys)
    assert_hint(check.ch2_ex4, (0.75, 0.875), "fraction of KV heads", capsys)
    assert_hint(check.ch2_ex4, tuple(100 * x for x in EX4), "percentages", capsys)


def test_ex5(capsys):
    def total(n, cached):                  # 32-token prefill, then n - 33 decode steps
        steps = range(33, n)
        return toy_full(32) + sum(toy_step(s) if cached else toy_full(s) for s in steps)

    expected = tuple(total(16384, c) / total(8192, c) for c in (False, True))
    assert 7 < expected[0] < 8 and 3 < expected[1] < 4
    assert_right(check.ch2_ex5, expected, capsys)
    assert_hint(check.ch2_ex5, (8, 4), "limits", capsys)
    assert_hint(check.ch2_ex5, (4, 2), "without the attention terms", capsys)
    assert_hint(check.ch2_ex5, expected[::-1], "(without a cache, with a cache)", capsys)
