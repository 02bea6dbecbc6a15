"""The machinery behind every self-check: compare an answer, say right, or give a hint.

A check never prints the expected answer. It recognises the typical wrong answers an
exercise invites (each with its own hint) and says "not answered yet" for None, so a
student copy runs top to bottom before anything is filled in.
"""
from __future__ import annotations

import math
import numbers

NOT_ANSWERED = ("Not answered yet: replace None with your answer and run the cell again.")


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


def _plain(value):
    """A numpy scalar, 0-d or 1-d array as the Python number or list it holds."""
    if hasattr(value, "tolist") and getattr(value, "ndim", 2) <= 1:
        return value.tolist()
    return value


def _close(a, b, rel: float) -> bool:
    """a and b equal, or within a relative tolerance rel of b (numbers or tuples of them)."""
    a, b = _plain(a), _plain(b)
    if isinstance(b, (tuple, list)):
        return (isinstance(a, (tuple, list)) and len(a) == len(b)
                and all(_close(x, y, rel) for x, y in zip(a, b)))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(b, numbers.Number):
        if isinstance(a, bool) or not isinstance(a, numbers.Number):
            return False
        if rel == 0:
            return a == b
        return math.isclose(a, b, rel_tol=rel, abs_tol=0.0)
    try:
        return bool(a == b)
    except (TypeError, ValueError):   # e.g. a 2-d array against a number: not equal
        return False


def answer_check(answer, expected, hints=(), rel: float = 0.0, right: str = "",
                 wrong: str = "") -> Verdict:
    """Compare answer with expected (within relative tolerance rel for numbers).

    hints: (typical wrong answer, hint) pairs, tried in order when the answer is wrong.
    right / wrong: what to add after "Right." / the generic "Not right yet." message.
    """
    if answer is None or answer is Ellipsis:
        return _say(False, NOT_ANSWERED)
    if _close(answer, expected, rel):
        return _say(True, "Right." + (f" {right}" if right else ""))
    for value, hint in hints:
        if _close(answer, value, rel):
            return _say(False, f"Not right yet. Hint: {hint}")
    return _say(False, "Not right yet." + (f" {wrong}" if wrong else ""))


def expect_type(answer, kinds, what: str) -> Verdict | None:
    """A 'not right yet' Verdict when answer is not None and not of the kinds, else None."""
    if answer is None or answer is Ellipsis or isinstance(answer, kinds):
        return None
    return _say(False, f"Not right yet: {what}, got a {type(answer).__name__}.")


__all__ = ["Verdict", "answer_check", "expect_type", "NOT_ANSWERED"]
