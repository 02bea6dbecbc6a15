"""Every self-check, across the chapters: it accepts every answer its folded solution shows
(printed, or written in the solution's text, rounded as shown), treats integral floats and
numpy integers as the counts they are, and answers any other input with a verdict and a line
saying what is wanted, never a traceback.

The shown answers are copied from the solutions in book/NN_*.ipynb (outputs and text), so a
check that stopped accepting what its own solution prints fails here.
"""
from __future__ import annotations

import decimal
import fractions

import numpy as np
import pytest

from toykv import check

# check -> the answers its solution shows (the first is the computed value, as printed)
SHOWN = {
    "ch1_ex2": [list(range(9))],
    "ch2_ex1": [199],
    "ch2_ex2": [(1218, 65)],
    "ch2_ex3": [19.30e9, 19.29e9, 19.3e9],           # toykv's, by hand, "about 19.3 GFLOP"
    "ch2_ex4": [(0.058, 0.067)],                     # printed as 5.8% and 6.7%
    "ch2_ex5": [(7.3, 3.56), (7.3, 3.6)],            # printed [.. 7.3] and [.. 3.56]
    "ch3_ex1": [(0.0, 0.0, 0.0)],                    # bit for bit: no gap at all
    "ch3_ex2": [(5, 32)],
    "ch3_ex3": [8_343_552],
    "ch3_ex4": [1.30e-3, 1.3e-3],                    # printed "1.30e-03"
    "ch4_ex1": [516_096],
    "ch4_ex2": [(16, 32)],
    "ch4_ex3": [8],                                  # "8x smaller"
    "ch4_ex4": [(344_064, 2_113_929_216), (344_064, 2.11e9)],   # "2.11 GB"
    "ch4_ex5": [7680],
    "ch5_ex1": [296],
    "ch5_ex2": [35.4, 34.9],                         # printed: the one rule, the essay's
    "ch5_ex3": [4],
    "ch5_ex4": [3.33, 3.3, 3.367],                   # printed, the text's 16.1 / 4.83, and
                                                     # exercise 3's 8.03B parameters by hand
    "ch6_ex1": [32.5, 32],                           # printed, "about 32 ms"
    "ch6_ex2": [12],                                 # on the 23,034 MiB an L4 reports
    "ch6_ex3": [(12, 23)],
    "ch6_ex4": [(147, 0.0), (147, 0)],               # "0% out of memory"
    "ch7_ex1": [33_792],
    "ch7_ex2": [28.44, 28.4],
    "ch7_ex3": [5325],
    "ch7_ex4": [120.8, 120],                         # printed, "about 120"
    "ch8_ex1": [114_513],
    "ch8_ex2": [0.179, 0.18],
    "ch8_ex3": [0.639],
    "ch8_ex4": [254.0],
    "ch9_ex1": [4_561_920],
    "ch9_ex2": [654],
    "ch9_ex3": [7.06, 7.0],                          # toykv's, the token count by hand
    "ch9_ex4": [4.46, 4.5],
    "ch10_ex1": [115_605_504, 115.6e6],
    "ch10_ex3": [69],
    "ch10_ex4": [262],
    "ch11_ex1": [3.3616, 3.36],
    "ch11_ex3": [230_400],
    "ch11_ex4": [2.80, 2.8],
    "ch12_ex2": [0.035],
    "ch12_ex3": [4.19, 4.2],
}
NOT_NUMBERS = {"ch1_ex1", "ch1_ex3", "ch1_ex4", "ch2_ex6", "ch4_ex6", "ch5_ex5", "ch6_ex5",
               "ch7_ex5", "ch7_ex6", "ch8_ex5", "ch9_ex5", "ch9_ex6", "ch10_ex2", "ch10_ex5",
               "ch11_ex2", "ch11_ex5", "ch12_ex1", "ch12_ex4", "ch13_ex1", "ch13_ex2"}
# functions, arrays, booleans, tokens, (GPU, ms): their own tests


def test_every_check_is_covered():
    names = {n for n in check.__all__ if n.startswith("ch")}
    assert names == set(SHOWN) | NOT_NUMBERS


def said(capsys) -> str:
    return capsys.readouterr().out


def forms(answer):
    """The same answer as a student may write it: numpy integers, integral floats, lists."""
    if isinstance(answer, tuple):
        yield from (answer, list(answer), np.array(answer))
        if all(isinstance(x, int) for x in answer):
            yield tuple(float(x) for x in answer)
            yield tuple(np.int64(x) for x in answer)
    elif isinstance(answer, int):
        yield from (answer, float(answer), np.int64(answer), np.int32(answer), np.array(answer))
    elif isinstance(answer, float):
        yield from (answer, np.float64(answer), np.float32(answer), np.array(answer))
    else:
        yield answer


@pytest.mark.parametrize("name, answer", [(n, a) for n, shown in SHOWN.items() for a in shown])
def test_every_answer_a_solution_shows_is_right(name, answer, capsys):
    for form in forms(answer):
        assert getattr(check, name)(form), (name, form, said(capsys))
        assert said(capsys).startswith("Right.")


JUNK = [10**400, -10**400, 1 + 2j, "654", "", [1, [2, [3]]], {"a": 1}, {1, 2}, float("nan"),
        float("inf"), np.float64("nan"), True, b"x", object(), np.array([[1, 2], [3, 4]]),
        np.array(["a"]), np.array([1 + 1j]), (10**400, 10**400), (1j, 2), (float("nan"), 1),
        [None, None], (), [[]], fractions.Fraction(1, 3), decimal.Decimal("1.5"), -1, 0,
        1e308, lambda *args: None, len]


@pytest.mark.parametrize("name", sorted(set(SHOWN) | NOT_NUMBERS))
def test_any_input_gets_a_verdict_and_a_line_never_a_traceback(name, capsys):
    for junk in JUNK:
        verdict = getattr(check, name)(junk)
        out = said(capsys)
        assert isinstance(verdict, check.Verdict) and not verdict, (name, junk)
        assert out.startswith("Not right yet") and out.count("\n") == 1, (name, junk, out)


@pytest.mark.parametrize("name", sorted(SHOWN))
def test_a_wrong_form_says_what_is_wanted(name, capsys):
    for junk in ("654", 1 + 2j, {"a": 1}):
        getattr(check, name)(junk)
        out = said(capsys)
        assert out.startswith("Not right yet: give "), (name, junk, out)


@pytest.mark.parametrize("name", sorted(set(SHOWN) - {"ch1_ex2"}))
def test_a_huge_number_gets_a_hint_not_an_overflow(name, capsys):
    answer = SHOWN[name][0]
    huge = tuple(10**400 for _ in answer) if isinstance(answer, tuple) else 10**400
    assert not getattr(check, name)(huge)
    out = said(capsys)
    assert out.startswith("Not right yet"), out
    if not isinstance(answer, tuple):
        assert "more than 100 times larger" in out


COUNTS = ["ch2_ex1", "ch3_ex3", "ch4_ex1", "ch4_ex5", "ch5_ex1", "ch5_ex3", "ch6_ex2", "ch7_ex1",
          "ch7_ex3", "ch8_ex1", "ch9_ex1"]                  # whole numbers: never rounded


@pytest.mark.parametrize("name", COUNTS)
def test_a_fractional_count_is_not_truncated(name, capsys):
    assert not getattr(check, name)(SHOWN[name][0] + 0.5)
    assert "whole number" in said(capsys)
