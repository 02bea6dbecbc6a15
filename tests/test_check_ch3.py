"""The self-checks of chapter 3: the official answers pass, typical mistakes get their hint,
None says "not answered yet", and the expected answer is never printed.

Expected values are the chapter's hand formulas, not the functions the checks call.
"""
from __future__ import annotations

import pytest

from toykv import check
from toykv.check._core import NOT_ANSWERED

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


@pytest.mark.parametrize("fn", [check.ch3_ex2, check.ch3_ex3])
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
