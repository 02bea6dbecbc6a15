"""Helpers shared by the tests of the exercise self-checks (tests/test_check_ch*.py)."""
from __future__ import annotations

import re


def said(capsys) -> str:
    """What the check printed since the last call."""
    return capsys.readouterr().out


def assert_right(fn, answer, capsys):
    """fn(answer) is a right Verdict and says so."""
    verdict = fn(answer)
    out = said(capsys)
    assert verdict and out.startswith("Right."), out


def assert_hint(fn, answer, text, capsys, expected=()):
    """fn(answer) is wrong, says "Not right yet" with `text` in it, and does not print any of
    the expected values (as whole numbers, plain or with thousands separators)."""
    verdict = fn(answer)
    out = said(capsys)
    assert not verdict and out.startswith("Not right yet") and text in out, out
    for value in (expected if isinstance(expected, tuple) else (expected,)):
        for shown in {f"{value:,}", f"{value}"}:
            assert not re.search(rf"(?<![\w.,]){re.escape(shown)}(?![\w.,])", out), shown
