"""The self-checks of chapter 11: the official answers pass, typical mistakes get their hint,
None says "not answered yet", and the expected answer is never printed.

Expected values are worked by hand (the sums of the formula, SmolLM2-135M's published shapes:
30 layers, 3 KV heads of 64), and exercise 2's tokens by a plain argmax loop over the
chapter's toy, written here without toykv.generate.
"""
from __future__ import annotations

import numpy as np
import pytest
from check_helpers import assert_hint, assert_right, said

import toykv
from toykv import check
from toykv.check._core import NOT_ANSWERED
from toykv.check.ch11 import EX2_NEW, ex2_prompt

EX1 = 1 + 0.8 + 0.8 ** 2 + 0.8 ** 3 + 0.8 ** 4           # 3.3616
PER_TOKEN = 2 * 30 * 3 * 64 * 4                            # float32 bytes per token
EX3 = 5 * PER_TOKEN
EX4 = EX1 / (4 * 0.05 + 1)

CHECKS = [check.ch11_ex1, check.ch11_ex2, check.ch11_ex3, check.ch11_ex4]


def greedy_by_hand(n):
    model = toykv.ToyTransformer(toykv.source_toy(), seed=0, exact=True)
    ids, out = list(ex2_prompt()), []
    for _ in range(n):
        out.append(int(np.argmax(model.forward(ids)[-1])))   # no cache: the whole text
        ids.append(out[-1])
    return out


@pytest.mark.parametrize("fn", CHECKS)
def test_none_is_not_answered(fn, capsys):
    assert not fn(None)
    assert NOT_ANSWERED in said(capsys)


def test_ex1(capsys):
    assert_right(check.ch11_ex1, EX1, capsys)
    assert_right(check.ch11_ex1, 3.36, capsys)
    assert_hint(check.ch11_ex1, 5, "every proposal is accepted", capsys)
    assert_hint(check.ch11_ex1, EX1 - 1, "model's own token", capsys)
    assert_hint(check.ch11_ex1, 3.2, "first rejection", capsys)
    assert not check.ch11_ex1("3.36")
    assert "give a number of tokens" in said(capsys)


def test_ex2(capsys):
    want = greedy_by_hand(EX2_NEW)
    assert_right(check.ch11_ex2, want, capsys)
    assert_right(check.ch11_ex2, np.array(want), capsys)
    wrong = list(want)
    wrong[7] = (wrong[7] + 1) % 512
    assert_hint(check.ch11_ex2, wrong, "up to token 7", capsys)
    assert_hint(check.ch11_ex2, want[:20], "exactly 24 tokens", capsys)
    assert_hint(check.ch11_ex2, want + [1], "exactly 24 tokens", capsys)
    assert not check.ch11_ex2(3.5)
    assert "list of 24 token ids" in said(capsys)


def test_ex3(capsys):
    assert EX3 == 230_400
    assert_right(check.ch11_ex3, EX3, capsys)
    assert_hint(check.ch11_ex3, 6 * PER_TOKEN, "never in the cache", capsys, EX3)
    assert_hint(check.ch11_ex3, 9 * PER_TOKEN, "stay in the cache", capsys, EX3)
    assert_hint(check.ch11_ex3, EX3 // 2, "float32", capsys, EX3)
    assert_hint(check.ch11_ex3, 3 * PER_TOKEN, "rejected ones", capsys, EX3)


def test_ex4(capsys):
    assert_right(check.ch11_ex4, EX4, capsys)
    assert_right(check.ch11_ex4, 2.8, capsys)
    assert_hint(check.ch11_ex4, EX1, "draft's own steps", capsys)
    assert_hint(check.ch11_ex4, EX1 / 0.2, "verify step itself", capsys)
    assert_hint(check.ch11_ex4, EX1 / 81, "1/20, not 20", capsys)
