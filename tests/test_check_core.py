"""toykv.check's core: a self-check says right, gives the hint for a typical wrong answer,
says "Not answered yet" for None, and never prints the expected value."""
from __future__ import annotations

import numpy as np
import pytest

from toykv.check import NOT_ANSWERED, Verdict, answer_check
from toykv.check._core import expect_type, plain, significant_digits, whole

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


def test_other_wrong_answers_get_the_generic_message(capsys):
    verdict, printed = check(EXPECTED + 1, capsys, wrong="Recount the factors.")
    assert not verdict and printed == "Not right yet. Recount the factors."


@pytest.mark.parametrize("answer, got", [
    ("131072", "the text '131072' (give the value itself, without quotes)"),
    (True, "True, a bool"), ([EXPECTED], "a list of 1 value"),
    (np.full((2, 2), EXPECTED), "a list of 2 values"), (EXPECTED + 0.5, "131072.5"),
    (1 + 2j, "a complex number"), (float("nan"), "nan"), (np.float64("inf"), "inf"),
    ({"bytes": 1}, "a dict"), (len, "a function"),
])
def test_an_answer_of_the_wrong_form_is_told_what_form_is_wanted(answer, got, capsys):
    verdict = answer_check(answer, EXPECTED, hints=HINTS, what="a whole number of bytes")
    printed = capsys.readouterr().out
    assert not verdict and printed.startswith(f"Not right yet: give a whole number of bytes, "
                                              f"got {got}")


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


# -- one rule for numbers -----------------------------------------------------------------
@pytest.mark.parametrize("answer", [10**400, -10**400, 1e300 + 0.5j, (1, [2, [3]]),
                                    [None], object(), b"7", {7}, float("-inf"), np.array("x")])
def test_any_input_gets_a_verdict_never_a_traceback(answer, capsys):
    for expected, rel in ((EXPECTED, 0), (4.457, 0.005), ((3, 0.5), (0, 0.01)), ("right", 0)):
        verdict = answer_check(answer, expected, hints=HINTS, rel=rel)
        printed = capsys.readouterr().out
        assert isinstance(verdict, Verdict) and not verdict
        assert printed.startswith("Not right yet") and "Traceback" not in printed


def test_a_far_off_number_gets_a_hint_about_its_scale(capsys):
    verdict, printed = check(10**400, capsys)
    assert not verdict and "more than 100 times larger" in printed
    assert not answer_check(4.457e-3, 4.457, rel=0.01)               # a unit slip, say ms for s
    assert "more than 100 times smaller" in capsys.readouterr().out
    assert not answer_check(4.457 * 50, 4.457, rel=0.01)             # off, but not by 100x
    assert capsys.readouterr().out.strip() == "Not right yet."
    assert "not zero" in check(0, capsys)[1] and "other sign" in check(-EXPECTED, capsys)[1]


@pytest.mark.parametrize("answer", [7, 7.0, np.int64(7), np.float32(7), np.array(7)])
def test_integral_numbers_are_counts(answer, capsys):
    assert answer_check(answer, 7)
    capsys.readouterr()


@pytest.mark.parametrize("answer, right", [
    (4.457, True), (4.46, True), (4.5, True),       # within rel, or rounded to 3 / 2 digits
    (4.45, False), (4.4, False),                    # 4.457 rounds to 4.46 and 4.5
    (4, False), (4.0, False),                       # one digit is not enough (MIN_DIGITS)
    (4.4571, False),                                # 5 digits given: 4.457 is 4.4570
])
def test_a_quantity_may_be_given_rounded_to_the_digits_shown(answer, right, capsys):
    assert bool(answer_check(answer, 4.457, rel=1e-5)) is right
    capsys.readouterr()


def test_rounding_works_for_large_numbers_pairs_and_hints(capsys):
    assert answer_check((344064, 2.11e9), (344064, 2_113_929_216), rel=(0, 1e-3))
    assert not answer_check((344000, 2.11e9), (344064, 2_113_929_216), rel=(0, 1e-3))
    assert answer_check((7.3, 3.6), (7.302, 3.561), rel=0.001)
    verdict = answer_check(0.22, 4.457, hints=[(1 / 4.457, "upside down")], rel=1e-3)
    assert not verdict and "upside down" in capsys.readouterr().out     # 0.2244 -> 0.22


def test_a_count_is_never_rounded(capsys):
    assert not answer_check(200, 199) and not answer_check(2.0e2, 199)
    assert answer_check(199.0, 199)
    capsys.readouterr()


def test_an_exact_hint_wins_over_a_rounded_right_answer(capsys):
    verdict = answer_check(7.1, 7.06, hints=[(7.1, "that is another quantity")], rel=1e-3)
    assert not verdict and "another quantity" in capsys.readouterr().out


def test_also_right_values(capsys):
    assert answer_check(7.0, 7.06, rel=0.005, also=[8160 / 1160])   # the by-hand estimate
    assert not answer_check(7.0, 7.06, rel=0.005)
    capsys.readouterr()


@pytest.mark.parametrize("value, digits", [(4.5, 2), (3.367, 4), (2.11e9, 3), (7.0, 1), (7, 1),
                                           (0.058, 2), (120, 2), (1e-5, 1), (654, 3)])
def test_significant_digits(value, digits):
    assert significant_digits(value) == digits


def test_plain_and_whole():
    assert plain(np.array([[1, 2]])) == ((1, 2),) and plain([np.int64(3), (4.0,)]) == (3, (4.0,))
    assert [whole(x) for x in (3, 3.0, np.int32(3), np.float64(3.0))] == [3] * 4
    assert [whole(x) for x in (3.5, "3", True, None, float("nan"), 1j)] == [None] * 6
    assert whole(10**400) == 10**400


def test_one_significant_digit_near_a_mistake_asks_for_more_digits(capsys):
    # 1.93e10 expected, 2.035e10 a mistake: 2e10 rounds both, so it earns neither verdict
    mistake = [(2.035e10, "the mistake's hint")]
    assert not answer_check(2e10, 1.93e10, hints=mistake, rel=0.03)
    out = capsys.readouterr().out
    assert "one significant digit" in out and "mistake's hint" not in out
    assert not answer_check(2.04e10, 1.93e10, hints=mistake, rel=0.03)     # two digits
    assert "mistake's hint" in capsys.readouterr().out
    assert not answer_check(2e10, 1.93e10, rel=0.03)                       # no hint near
    assert "one significant digit" in capsys.readouterr().out
    assert answer_check(1.9e10, 1.93e10, rel=0.03)                         # two digits: right
    assert not answer_check(4, 3.6, hints=[(4, "the limit")], rel=0.01)    # exactly a mistake
    assert "the limit" in capsys.readouterr().out
    assert not answer_check(3e10, 1.93e10, rel=0.03)                       # not its rounding
    assert "one significant digit" not in capsys.readouterr().out
