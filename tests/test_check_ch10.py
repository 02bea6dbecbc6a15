"""The self-checks of chapter 10: the official answers pass, typical mistakes get their hint.

Expected values by hand: Qwen3-1.7B stores 2 x 28 layers x 8 KV heads x 128 = 57,344 values
per token (114,688 bytes in bf16); blocks of 16 tokens.
"""
from __future__ import annotations

import pytest

from toykv import check
from toykv.check import ch10

PER_TOKEN = 2 * 28 * 8 * 128 * 2


def said(capsys) -> str:
    return capsys.readouterr().out


def test_the_official_answers_are_right(capsys):
    assert check.ch10_ex1(63 * 16 * PER_TOKEN)
    assert check.ch10_ex3(int(2.36 * 2**30 // (16 * PER_TOKEN // 2)) // 40) and \
        check.ch10_ex3(69)
    assert check.ch10_ex4(62 + 20 * (72 - 62))
    assert check.ch10_ex2(ch10.blocks_needed)


@pytest.mark.parametrize("answer, hint", [
    (1000 * PER_TOKEN, "partly full"), (62 * 16 * PER_TOKEN, "round the blocks up")])
def test_ex1_hints(answer, hint, capsys):
    assert not check.ch10_ex1(answer)
    assert hint in said(capsys)


def test_ex2_takes_a_function_and_names_the_mistake(capsys):
    def no_copy(length, T, bs, held, shared):
        return -(-(length + T) // bs) - held

    assert not check.ch10_ex2(no_copy)
    assert "copy on write" in said(capsys)

    def broken(*args):
        raise ZeroDivisionError("oops")

    assert not check.ch10_ex2(broken)
    assert "raised ZeroDivisionError" in said(capsys)
    assert not check.ch10_ex2(42)
    assert "function itself" in said(capsys)
    assert not check.ch10_ex2(None)
    assert "Not answered yet" in said(capsys)


def test_ex3_and_ex4_hints(capsys):
    assert not check.ch10_ex3(34)
    assert "fp8 stores 1 byte" in said(capsys)
    assert not check.ch10_ex4(20 * 72)
    assert "without prefix caching" in said(capsys)
    assert not check.ch10_ex4(63 + 20 * 9)
    assert "only full blocks" in said(capsys)
