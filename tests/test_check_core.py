"""toykv.check's core: a self-check says right, gives the hint for a typical wrong answer,
says "Not answered yet" for None, and never prints the expected value."""
from __future__ import annotations

import numpy as np
import pytest

from toykv.check import NOT_ANSWERED, Verdict, answer_check
from toykv.check._core import expect_type

EXPECTED = 131_072                       # bytes per token of a made-up config
HINTS = [(2 * EXPECTED, "count KV heads, not query heads."),
         (EXPECTED // 2, "the factor 2: K and V.")]


def check(answer, capsys, **kwargs):
    verdict = answer_check(answer, EXPECTED, hints=HINTS, **kwargs)
    printed = capsys.readouterr().out
    assert str(EXPECTED) not in printed and f"{EXPECTED:,}" not in printed
    return verdict, printed.strip()


@pytest.mark.parametrize("answer", [None, ...])
def test_not_answered_yet(answer, capsys):
    verdict, printed = check(answer, capsys)
    assert not verdict and printed == NOT_ANSWERED


@pytest.mark.parametrize("answer", [EXPECTED, float(EXPECTED), np.int64(EXPECTED),
                                    np.float32(EXPECTED), np.array(EXPECTED)])
def test_right_answer_in_any_numeric_form(answer, capsys):
    verdict, printed = check(answer, capsys)
    assert verdict and printed == "Right."


def test_right_with_a_comment_and_within_tolerance(capsys):
    verdict = answer_check(EXPECTED * (1 + 1e-4), EXPECTED, rel=1e-3, right="128 KiB.")
    assert verdict and capsys.readouterr().out.strip() == "Right. 128 KiB."
    assert not answer_check(EXPECTED * (1 + 1e-2), EXPECTED, rel=1e-3)


@pytest.mark.parametrize("answer, hint", [(2 * EXPECTED, "KV heads"),
                                          (EXPECTED // 2, "factor 2")])
def test_typical_wrong_answers_get_their_hint(answer, hint, capsys):
    verdict, printed = check(answer, capsys)
    assert not verdict and printed.startswith("Not right yet. Hint:") and hint in printed


@pytest.mark.parametrize("answer", [EXPECTED + 1, "131072", True, [EXPECTED],
                                    np.full((2, 2), EXPECTED)])
def test_other_wrong_answers_get_the_generic_message(answer, capsys):
    verdict, printed = check(answer, capsys, wrong="Recount the factors.")
    assert not verdict and printed == "Not right yet. Recount the factors."


def test_sequences_compare_element_by_element(capsys):
    assert answer_check(np.array([1.0, 2.0]), (1, 2))
    assert answer_check([1, 2.0005], [1, 2], rel=1e-3)
    assert not answer_check((1, 2, 3), (1, 2))
    assert not answer_check((True, 2), (1, 2))          # a bool is not a number here
    assert not answer_check(np.ones((2, 2)), "right")   # an array is no verdict string
    capsys.readouterr()


def test_verdict_is_truthy_only_when_right_and_shows_nothing_itself():
    assert Verdict(True, "Right.") and not Verdict(False, "no")
    assert Verdict(True, "x")._ipython_display_() is None   # the check already printed
    assert repr(Verdict(False, "x")) == "Verdict(right=False)"


def test_expect_type(capsys):
    assert expect_type(None, (int,), "give a count") is None
    assert expect_type(3, (int,), "give a count") is None
    verdict = expect_type("3", (int,), "give a count")
    assert not verdict
    assert capsys.readouterr().out.strip() == "Not right yet: give a count, got a str."
