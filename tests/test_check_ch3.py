"""The self-checks of chapter 3: the official answers pass, typical mistakes get their hint,
None says "not answered yet", and the expected answer is never printed.

Expected values are the chapter's hand formulas, not the functions the checks call.
"""
from __future__ import annotations

import numpy as np
import pytest

from check_helpers import assert_hint, assert_right
from toykv import ToyTransformer, check, source_toy
from toykv.check._core import NOT_ANSWERED
from toykv.check.ch3 import chapter_sequence

# the source toy: L = 2, D = 128, F = 512, |V| = 512, 8 heads of 16; a 12-token sequence
L, D, F, V, H, HD = 2, 128, 512, 512, 8, 16
N, J = 12, 5


def forward_flops(new, cached):       # MHA, SwiGLU: projections, attention, MLP, head
    keys = new + cached
    layer = 2 * new * 4 * D * D + 2 * 2 * H * new * keys * HD + 3 * 2 * new * D * F
    return L * layer + 2 * new * D * V


EX2 = (J, 2 * (N - 1) + 2 * (L - 1) * J)          # (a) j positions, (b) 2(n-1) + 2(L-1)j
EX3 = forward_flops(N - J, J)


def said(capsys):
    return capsys.readouterr().out


@pytest.mark.parametrize("fn", [check.ch3_ex1, check.ch3_ex2, check.ch3_ex3, check.ch3_ex4])
def test_none_is_not_answered(fn, capsys):
    assert not fn(None)
    assert NOT_ANSWERED in said(capsys)


@pytest.mark.parametrize("answer, hint", [
    ((J, 2 * L * J), "only position j changes"),
    ((J, 2 * N + 2 * (L - 1) * J), "change in layer 0 too"),
    ((J, EX2[1] // 2), "count K and V"),
    ((J + 1, EX2[1]), "positions count from 0"),
    ((1, 2), "Give a pair"),
])
def test_ex2(answer, hint, capsys):
    assert check.ch3_ex2(EX2)
    assert said(capsys).startswith("Right.")
    assert not check.ch3_ex2(answer)
    out = said(capsys)
    assert hint in out and str(EX2) not in out


@pytest.mark.parametrize("answer, hint", [
    (forward_flops(N - J, 0), "not a full pass of 7"),
    (forward_flops(N, 0), "recomputing all 12"),
    (forward_flops(N, 0) - EX3, "what reuse saved"),
    (EX3 + 1, "Not right yet."),
])
def test_ex3(answer, hint, capsys):
    assert check.ch3_ex3(EX3)
    assert said(capsys).startswith("Right.")
    assert not check.ch3_ex3(answer)
    out = said(capsys)
    assert hint in out and f"{EX3}" not in out and f"{EX3:,}" not in out


# -- exercises 1 and 4: gaps between cached and recomputed logits ------------------------------

def greedy_gap(model, prompt, n_steps, kv_dtype="float32"):
    """Largest |logit difference| over n_steps greedy steps between a cache of kv_dtype,
    fed one token at a time with model.forward, and a full pass of the sequence so far."""
    cache, ids, gap = model.new_cache(kv_dtype=kv_dtype), list(prompt), 0.0
    logits = model.forward(ids, cache)[-1]
    for step in range(n_steps):
        full = model.forward(ids)[-1]
        gap = max(gap, float(np.abs(logits - full).max()))
        ids.append(int(np.argmax(full)))
        if step < n_steps - 1:
            logits = model.forward(ids[-1:], cache)[-1]
    return gap


def test_ex1_exact_backend_is_bit_for_bit_for_every_variant(capsys):
    prompt = chapter_sequence(6)
    gaps = tuple(greedy_gap(ToyTransformer(source_toy(**changes), seed=0, exact=True), prompt,
                            10) for changes in (dict(n_kv_heads=2), dict(attention="mqa"),
                                                dict(sliding_window=8)))
    assert gaps == (0.0, 0.0, 0.0)
    assert_right(check.ch3_ex1, gaps, capsys)
    assert_right(check.ch3_ex1, [np.float32(0)] * 3, capsys)


@pytest.mark.parametrize("answer, hint", [
    ((2.5e-6, 0.0, 0.0), "exact=True"), ((0.0, 0.3, 0.0), "not rounding"),
    ((-1.0, 0.0, 0.0), "never negative"), ((0.0, 0.0), "three numbers"),
    ("0, 0, 0", "three numbers"),
])
def test_ex1_wrong_gaps_get_their_hint(answer, hint, capsys):
    assert not check.ch3_ex1(answer)
    out = said(capsys)
    assert out.startswith("Not right yet") and hint in out


def test_ex4_float16_gap(capsys):
    model = ToyTransformer(source_toy(), seed=0, exact=True)
    prompt = chapter_sequence(32)
    gap = greedy_gap(model, prompt, 12, kv_dtype="float16")
    assert 1e-4 < gap < 1e-2                                      # far above float32 rounding
    assert_right(check.ch3_ex4, gap, capsys)
    assert_right(check.ch3_ex4, float(f"{gap:.2e}"), capsys)     # as the solution prints it
    assert_hint(check.ch3_ex4, float(f"{gap:.0e}"), "two significant digits", capsys)
    ulp = 4.76837158203125e-07                                    # float32 spacing at 4 to 8
    assert_hint(check.ch3_ex4, gap / ulp, "float32 spacings", capsys)
    assert_hint(check.ch3_ex4, 0, "kv_dtype='float16'", capsys)
    assert_hint(check.ch3_ex4, greedy_gap(model, prompt, 24, kv_dtype="float16"), "12 steps",
                capsys)
