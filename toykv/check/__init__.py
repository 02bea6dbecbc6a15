"""Self-checks for the exercises: toykv.check.ch4_ex2(answer) says right, or gives a hint.

Each chapter's checks live in their own module (ch1, ch2, ...); this package gathers them.
A check prints one line: "Right.", a hint aimed at the typical mistake, or "Not answered
yet" when answer is still None. It never prints the expected answer, and it returns a
Verdict that is true when the answer is right, so a solution can `assert` it.
"""
from ._core import NOT_ANSWERED, Verdict, answer_check

__all__ = ["Verdict", "answer_check", "NOT_ANSWERED"]
from .ch7 import ch7_ex1, ch7_ex2, ch7_ex3, ch7_ex4  # noqa: E402  (chapter 7)
from .ch8 import ch8_ex1, ch8_ex2, ch8_ex3, ch8_ex4  # noqa: E402  (chapter 8)
