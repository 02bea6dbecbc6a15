"""Self-checks for the exercises: toykv.check.ch4_ex2(answer) says right, or gives a hint.

Each chapter's checks live in their own module (ch1, ch2, ...); this package gathers them.
A check prints one line: "Right.", a hint aimed at the typical mistake, or "Not answered
yet" when answer is still None. It never prints the expected answer, and it returns a
Verdict that is true when the answer is right, so a solution can `assert` it.
"""
from ._core import NOT_ANSWERED, Verdict, answer_check
from .ch1 import ch1_ex1, ch1_ex2, ch1_ex3, ch1_ex4
from .ch2 import ch2_ex1, ch2_ex2, ch2_ex3, ch2_ex4, ch2_ex5, ch2_ex6
from .ch3 import ch3_ex1, ch3_ex2, ch3_ex3, ch3_ex4
from .ch4 import ch4_ex1, ch4_ex2, ch4_ex3, ch4_ex4, ch4_ex5, ch4_ex6
from .ch5 import ch5_ex1, ch5_ex2, ch5_ex3, ch5_ex4, ch5_ex5
from .ch6 import ch6_ex1, ch6_ex2, ch6_ex3, ch6_ex4, ch6_ex5
from .ch7 import ch7_ex1, ch7_ex2, ch7_ex3, ch7_ex4, ch7_ex5, ch7_ex6
from .ch8 import ch8_ex1, ch8_ex2, ch8_ex3, ch8_ex4, ch8_ex5
from .ch9 import ch9_ex1, ch9_ex2, ch9_ex3, ch9_ex4, ch9_ex5, ch9_ex6
from .ch10 import ch10_ex1, ch10_ex2, ch10_ex3, ch10_ex4, ch10_ex5
from .ch11 import ch11_ex1, ch11_ex2, ch11_ex3, ch11_ex4, ch11_ex5
from .ch12 import ch12_ex1, ch12_ex2, ch12_ex3, ch12_ex4
from .ch13 import ch13_ex1, ch13_ex2

__all__ = ["Verdict", "answer_check", "NOT_ANSWERED",
           "ch1_ex1", "ch1_ex2", "ch1_ex3", "ch1_ex4",
           "ch2_ex1", "ch2_ex2", "ch2_ex3", "ch2_ex4", "ch2_ex5", "ch2_ex6",
           "ch3_ex1", "ch3_ex2", "ch3_ex3", "ch3_ex4",
           "ch4_ex1", "ch4_ex2", "ch4_ex3", "ch4_ex4", "ch4_ex5", "ch4_ex6",
           "ch5_ex1", "ch5_ex2", "ch5_ex3", "ch5_ex4", "ch5_ex5",
           "ch6_ex1", "ch6_ex2", "ch6_ex3", "ch6_ex4", "ch6_ex5",
           "ch7_ex1", "ch7_ex2", "ch7_ex3", "ch7_ex4", "ch7_ex5", "ch7_ex6",
           "ch8_ex1", "ch8_ex2", "ch8_ex3", "ch8_ex4", "ch8_ex5",
           "ch9_ex1", "ch9_ex2", "ch9_ex3", "ch9_ex4", "ch9_ex5", "ch9_ex6",
           "ch10_ex1", "ch10_ex2", "ch10_ex3", "ch10_ex4", "ch10_ex5",
           "ch11_ex1", "ch11_ex2", "ch11_ex3", "ch11_ex4", "ch11_ex5",
           "ch12_ex1", "ch12_ex2", "ch12_ex3", "ch12_ex4",
           "ch13_ex1", "ch13_ex2"]
