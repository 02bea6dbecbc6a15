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
                                check.ch2_ex5, check.ch2_ex6])
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


def test_ex3_one_digit_asks_for_more_not_for_the_lookup_hint(capsys):
    # 2e10 rounds both 1.93e10 (right) and 2.035e10 (the lookup mistake) to one digit
    assert_hint(check.ch2_ex3, 2e10, "two significant digits", capsys)
    assert_right(check.ch2_ex3, 1.9e10, capsys)
    assert_hint(check.ch2_ex3, 2.0e10, "two significant digits", capsys)  # 2.0e10 is 2e10
    assert_hint(check.ch2_ex3, 2.04e10, "lookup", capsys)


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


def by_hand_step(c, S, mlp=3, kv_width=None, keys=None, width=None):
    """A cached step written out from the chapter's formula, for any config (and slips)."""
    D, F, V, L = c.d_model, c.d_ff, c.vocab_size, c.n_layers
    q = c.n_heads * c.head_dim
    kv = c.n_kv_heads * c.head_dim if kv_width is None else kv_width
    attention = 4 * (S if keys is None else keys) * (q if width is None else width)
    return L * (2 * D * (2 * q + 2 * kv) + attention + 2 * mlp * D * F) + 2 * D * V


def test_ex6_the_formula_written_out_passes(capsys):
    assert_right(check.ch2_ex6, by_hand_step, capsys)
    assert_right(check.ch2_ex6, lambda c, S: float(by_hand_step(c, S)), capsys)  # 1.0e6 counts


@pytest.mark.parametrize("slip, hint", [
    (lambda c, S: by_hand_step(c, S, mlp=2), "SwiGLU"),
    (lambda c, S: by_hand_step(c, S, kv_width=c.n_heads * c.head_dim), "H_kv d_h columns"),
    (lambda c, S: by_hand_step(c, S, keys=S - 1), "S - 1 cached ones and its own"),
    (lambda c, S: by_hand_step(c, S, width=c.n_kv_heads * c.head_dim), "query heads"),
    (lambda c, S: by_hand_step(c, S) - 2 * c.d_model * c.vocab_size, "output head"),
    (lambda c, S: by_hand_step(c, S) // 2, "2 FLOPs per multiply-add"),
    (lambda c, S: L * (8 * c.d_model**2 + 4 * S * c.d_model + 6 * c.d_model * c.d_ff)
     + 2 * c.d_model * c.vocab_size, "H_kv d_h columns"),           # the MHA formula for all
])
def test_ex6_typical_slips_get_their_hint(slip, hint, capsys):
    assert_hint(check.ch2_ex6, slip, hint, capsys)


def test_ex6_narrow_heads_are_caught(capsys):
    # D in place of H d_h: right for the source toy, wrong when H d_h != D
    def d_for_width(c, S):
        return by_hand_step(c, S, kv_width=c.d_model * c.n_kv_heads // c.n_heads,
                            width=c.d_model) + L * 4 * c.d_model * (c.d_model
                                                                    - c.n_heads * c.head_dim)
    assert not check.ch2_ex6(d_for_width)
    assert "head_dim" in said(capsys)


def test_ex6_what_is_not_a_working_function_gets_a_message(capsys):
    for answer, text in [(toy_step, "raised TypeError"), (lambda c, S: 1 / 0, "raised Zero"),
                         (lambda c, S: 1.5, "whole number of FLOPs"), (42, "function itself"),
                         (lambda c, S: by_hand_step(c, S) + 1, "differs from toykv's counter")]:
        assert not check.ch2_ex6(answer)
        out = said(capsys)
        assert out.startswith("Not right yet") and text in out and out.count("\n") == 1, out
