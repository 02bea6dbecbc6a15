"""The machinery behind every self-check: compare an answer, say right, or give a hint.

A check never prints the expected answer. It recognises the typical wrong answers an
exercise invites (each with its own hint) and says "not answered yet" for None, so a
student copy runs top to bottom before anything is filled in. Any other input, however odd
(a string, 10**400, a complex number, NaN, a nested list), gets a verdict and a line saying
what kind of answer is wanted: never a traceback.

One rule for numbers, in every chapter:
- an answer is first made plain: numpy scalars and 0-d arrays become Python numbers, lists,
  tuples and 1-d arrays become tuples, so np.int64(7), 7.0 and 7 are the same answer;
- a count (an int expected with no tolerance) is right only when equal; an integral float
  such as 4561920.0 counts as the int, a fractional one as no count at all;
- a quantity (a tolerance rel > 0) is right within rel of the value, or when the value
  rounded to the significant digits the answer gives (at least two) is the answer: 4.5 for
  4.457, 3.6 for 3.561, 2.11e9 for 2,113,929,216. Typical wrong answers match the same way,
  except that an answer of one significant digit (2e10) that the value itself rounds to is
  told to give more digits rather than the hint of a mistake it happens to be near.
"""
from __future__ import annotations

import math
import numbers
import reprlib
from fractions import Fraction

NOT_ANSWERED = ("Not answered yet: replace None with your answer and run the cell again.")
TOO_COARSE = ("your answer has one significant digit, too few to tell the right answer from a "
              "near miss: give at least two significant digits.")
MIN_DIGITS = 2               # a rounded answer gives at least this many significant digits

_shown = reprlib.Repr()
_shown.maxlong = _shown.maxstring = _shown.maxother = 40
_shown.maxlist = _shown.maxtuple = 6


class Verdict:
    """The outcome of a check: true when the answer is right. The message is printed once,
    by the check itself, so `assert check(...)` and a bare `check(...)` both show it."""

    def __init__(self, right: bool, message: str):
        self.right, self.message = bool(right), message

    def __bool__(self) -> bool:
        return self.right

    def __repr__(self) -> str:
        return f"Verdict(right={self.right})"

    def _ipython_display_(self):      # the check already printed the message
        pass


def _say(right: bool, message: str) -> Verdict:
    print(message)
    return Verdict(right, message)


# -- making an answer plain -----------------------------------------------------------------
def plain(value):
    """value with numpy taken out: scalars and 0-d arrays as Python numbers, arrays, lists and
    tuples as tuples (element by element). Anything else is returned as it is."""
    if hasattr(value, "ndim") and hasattr(value, "tolist"):        # numpy array or scalar
        try:
            value = value.tolist()
        except Exception:                                          # noqa: BLE001 (odd arrays)
            return value
    if isinstance(value, (list, tuple)):
        return tuple(plain(v) for v in value)
    return value


def is_real(value) -> bool:
    """A finite real number (not a bool, not complex, not NaN or infinite)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:                                          # an int past float's range
        return True


def whole(value) -> int | None:
    """The int a whole number stands for (7, 7.0, np.int64(7)), else None (7.5, '7', True)."""
    value = plain(value)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if is_real(value) and float(value).is_integer():
        return int(value)
    return None


def describe(value) -> str:
    """A short description of an answer, for a message (never more than a few words)."""
    if isinstance(value, str):
        return f"the text {_shown.repr(value)} (give the value itself, without quotes)"
    if isinstance(value, bool):
        return f"{value}, a bool"
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        return "a complex number"
    if isinstance(value, numbers.Real) and not is_real(value):
        return f"{value}"                                          # nan, inf
    if isinstance(value, tuple):
        return f"a list of {len(value)} value{'s' if len(value) != 1 else ''}"
    if is_real(value):
        return _shown.repr(value)
    if callable(value):
        return f"a function ({type(value).__name__})"
    return f"a {type(value).__name__}"


# -- comparing ------------------------------------------------------------------------------
def _rels(rel, n: int) -> tuple:
    """rel for each of n elements: one tolerance for all, or one each."""
    return tuple(rel) if isinstance(rel, (tuple, list)) else (rel,) * n


def _needs_whole(expected, rel) -> bool:
    return isinstance(expected, numbers.Integral) and not isinstance(expected, bool) and rel == 0


def _form(answer, expected, rel, what: str) -> str | None:
    """What is wrong with the answer's form (not its value), or None when it has the form."""
    if isinstance(expected, str):                                  # a verdict word: no form
        return None
    if isinstance(expected, tuple):
        if not isinstance(answer, tuple) or len(answer) != len(expected):
            return f"give {what or f'{len(expected)} values'}, got {describe(answer)}."
        for a, e, r in zip(answer, expected, _rels(rel, len(expected))):
            if _form(a, e, r, what) is not None:
                return f"give {what or f'{len(expected)} numbers'}; one of yours is {describe(a)}."
        return None
    if _needs_whole(expected, rel):
        if whole(answer) is None:
            return f"give {what or 'a whole number'}, got {describe(answer)}."
        return None
    if not is_real(answer):
        return f"give {what or 'a number'}, got {describe(answer)}."
    return None


def _close(a, b, rel) -> bool:
    """a equal to b, or within relative tolerance rel of b (numbers, or tuples of them)."""
    a, b = plain(a), plain(b)
    if isinstance(b, tuple):
        return (isinstance(a, tuple) and len(a) == len(b)
                and all(_close(x, y, r) for x, y, r in zip(a, b, _rels(rel, len(b)))))
    if isinstance(b, str) or isinstance(a, str):
        return a == b
    if not (is_real(a) and is_real(b)):
        return False
    a, b = Fraction(a), Fraction(b)                              # exact, for 10**400 too
    return a == b if rel == 0 else abs(a - b) <= Fraction(rel) * abs(b)


def significant_digits(value) -> int:
    """Significant digits a number is written with: 4.5 -> 2, 3.367 -> 4, 2.11e9 -> 3,
    7.0 and 7 -> 1 (trailing zeros of a whole number do not count)."""
    text = repr(float(value)).lower().lstrip("-")
    mantissa = text.split("e")[0]
    digits = mantissa.replace(".", "").lstrip("0")
    if float(value).is_integer():
        digits = digits.rstrip("0")
    return max(len(digits), 1)


def _rounds_to(a, b, rel) -> bool:
    """For a quantity (rel > 0): b rounded to a's significant digits (at least MIN_DIGITS)
    is a. Tuples element by element (an element that is a count must be equal)."""
    a, b = plain(a), plain(b)
    if isinstance(b, tuple):
        return (isinstance(a, tuple) and len(a) == len(b) and
                all(_rounds_to(x, y, r) for x, y, r in zip(a, b, _rels(rel, len(b)))))
    if rel == 0 or not (is_real(a) and is_real(b)):
        return _close(a, b, rel)
    try:
        digits = max(MIN_DIGITS, significant_digits(a))
        return f"{float(a):.{digits - 1}e}" == f"{float(b):.{digits - 1}e}"
    except OverflowError:                                        # beyond float: not rounded
        return False


def answer_check(answer, expected, hints=(), rel=0.0, right: str = "", wrong: str = "",
                 also=(), what: str = "") -> Verdict:
    """Compare answer with expected by the rule above (rel: one relative tolerance, or one
    per element of a tuple; 0 for a count).

    hints: (typical wrong answer, hint) pairs, tried in order when the answer is wrong.
    also: other values that are right too (e.g. the by-hand estimate a solution shows).
    right / wrong: what to add after "Right." / the generic "Not right yet." message.
    what: the answer wanted, for a message about its form ("a whole number of bytes").
    """
    if answer is None or answer is Ellipsis:
        return _say(False, NOT_ANSWERED)
    answer = plain(answer)
    problem = _form(answer, plain(expected), rel, what)
    if problem is not None:
        return _say(False, f"Not right yet: {problem}")
    coarse = _too_coarse(answer, plain(expected), rel)
    for matches in (_close, _rounds_to):            # exact or within rel first, then rounded
        if any(matches(answer, value, rel) for value in (expected, *also)):
            return _say(True, "Right." + (f" {right}" if right else ""))
        for value, hint in hints:
            if matches(answer, value, rel):
                if coarse and not _close(answer, value, 0):     # near a mistake, not on it
                    return _say(False, f"Not right yet. Hint: {TOO_COARSE}")
                return _say(False, f"Not right yet. Hint: {hint}")
    if coarse:
        return _say(False, f"Not right yet. Hint: {TOO_COARSE}")
    scale = _scale_hint(answer, plain(expected))
    if scale:
        return _say(False, f"Not right yet. Hint: {scale}")
    return _say(False, "Not right yet." + (f" {wrong}" if wrong else ""))


def _too_coarse(answer, expected, rel) -> bool:
    """A quantity (rel > 0) answered with one significant digit that the expected value
    rounds to (2e10 for 1.93e10): it cannot tell the answer from a mistake near it."""
    if rel == 0 or isinstance(rel, (tuple, list)) or not (is_real(answer) and is_real(expected)):
        return False
    try:
        return (significant_digits(answer) < MIN_DIGITS
                and f"{float(answer):.0e}" == f"{float(expected):.0e}")
    except OverflowError:
        return False


def _scale_hint(answer, expected) -> str:
    """For a number off by more than a factor of 100 (10**400, or a unit slip no hint
    names): say so, without saying the value."""
    if not (is_real(answer) and is_real(expected)) or expected == 0:
        return ""
    if answer == 0:
        return "the answer is not zero: check the factors."
    if (answer < 0) != (expected < 0):
        return "the answer has the other sign: check the signs and the factors."
    ratio = abs(Fraction(answer) / Fraction(expected))
    if ratio > 100 or ratio < Fraction(1, 100):
        side = "larger" if ratio > 1 else "smaller"
        return (f"yours is more than 100 times {side} than the answer: check the units "
                "(bytes, GB, GiB; seconds, ms) and the factors.")
    return ""


def function_check(answer, cases, hints, what: str, name: str, right: str = "",
                   wrong=lambda where: "") -> Verdict:
    """Check a function the student wrote by running it. cases: (where, args, kwargs,
    expected, slips) tuples, slips a dict {mistake: what that mistake gives here}; hints:
    (mistake, hint) pairs. A mistake that gives the function's result in every case gets its
    hint, else the first mistake that explains the first case it misses; what: the result
    wanted ("a whole number of FLOPs"); name: the function's name in the exercise;
    wrong(where): the message when no mistake explains it."""
    refused = not_a_function(answer, name)
    if refused is not None:
        return refused
    wrong_at, first, everywhere = None, "other", {mistake: True for mistake, _ in hints}
    for where, args, kwargs, expected, slips in cases:
        try:
            returned = answer(*args, **kwargs)
        except Exception as err:                                   # the student's code failed
            return _say(False, f"Not right yet: on {where} your function raised "
                               f"{type(err).__name__}: {err}")
        got = whole(returned)
        if got is None:
            return _say(False, f"Not right yet: your function should return {what}; on "
                               f"{where} it returned {describe(plain(returned))}.")
        if got != expected and wrong_at is None:                  # the first case it misses
            wrong_at = where
            first = next((mistake for mistake, v in slips.items() if v == got), "other")
        everywhere = {mistake: ok and slips.get(mistake, expected) == got
                      for mistake, ok in everywhere.items()}
    if wrong_at is None:
        return answer_check("right", "right", right=right)
    slip = next((mistake for mistake, ok in everywhere.items() if ok), first)
    return answer_check(slip, "right", hints=hints, wrong=wrong(wrong_at))


def not_a_function(answer, name: str) -> Verdict | None:
    """For a check that runs the student's function `name`: the verdict for None (not answered
    yet) or for an answer that is not callable; None when answer is a function to run."""
    if answer is None or answer is Ellipsis:
        return _say(False, NOT_ANSWERED)
    if not callable(answer):
        return _say(False, f"Not right yet: answer should be your {name} function itself "
                           f"(answer = {name}), got {describe(plain(answer))}.")
    return None


def verdict_from_slips(matched, hints) -> Verdict:
    """matched: for each case the function was run on, the set of names its result agreed with
    ('right', or a typical slip named in hints). Right when every case agreed with 'right';
    else the hint of the first slip every case agreed with, else hints' 'other'."""
    common = set.intersection(*matched)
    if "right" in common:
        return answer_check("right", "right")
    return answer_check(next((name for name, _ in hints if name in common), "other"), "right",
                        hints=hints)


def expect_type(answer, kinds, what: str) -> Verdict | None:
    """A 'not right yet' Verdict when answer is not None and not of the kinds, else None."""
    if answer is None or answer is Ellipsis or isinstance(answer, kinds):
        return None
    return _say(False, f"Not right yet: {what}, got a {type(answer).__name__}.")


__all__ = ["Verdict", "answer_check", "function_check", "expect_type", "not_a_function",
           "verdict_from_slips", "NOT_ANSWERED", "plain", "whole",
           "is_real", "describe", "significant_digits"]
