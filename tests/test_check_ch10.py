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


def test_ex1_takes_a_rounded_answer(capsys):
    assert check.ch10_ex1(115.6e6) and check.ch10_ex1(115_605_504.0)
    assert "Right" in said(capsys)
    assert not check.ch10_ex1(113.8e6)                 # 62 blocks, rounded
    assert "round the blocks up" in said(capsys)


def test_ex3_says_why_twice_34_is_not_it(capsys):
    assert not check.ch10_ex3(68)
    assert "rounded down twice" in said(capsys)


def plan_step(running, waiting, budget, max_seqs):
    """By the definition: running first, each min(left, budget) until the budget is gone;
    then waiting in order, each min(prompt, budget), while budget and seats last."""
    scheduled = []
    for left in running:
        take = min(left, budget)
        if take == 0:
            scheduled += [0] * (len(running) - len(scheduled))
            break
        scheduled.append(take)
        budget -= take
    admitted = []
    for prompt in waiting:
        if budget == 0 or len(running) + len(admitted) >= max_seqs:
            break
        admitted.append(min(prompt, budget))
        budget -= admitted[-1]
    return scheduled, admitted


def test_ex5_runs_the_plan_against_the_scheduler(capsys):
    assert check.ch10_ex5(plan_step)
    assert said(capsys).startswith("Right")
    assert ch10.budgeted_step([1, 1, 1], [500, 200], 256, 8) == ([1, 1, 1], [253])
    assert ch10.budgeted_step([1, 300], [100], 128, 8) == ([1, 127], [])

    def waiting_first(running, waiting, budget, max_seqs):
        admitted, rest = plan_step([], waiting, budget, max_seqs - len(running))
        left = budget - sum(rest)
        return plan_step(running, [], left, max_seqs)[0], rest

    def whole(running, waiting, budget, max_seqs):
        scheduled, _ = plan_step(running, [], budget, max_seqs)
        budget -= sum(scheduled)
        admitted = []
        for prompt in waiting:
            if prompt > budget or len(running) + len(admitted) >= max_seqs:
                break
            admitted.append(prompt)
            budget -= prompt
        return scheduled, admitted

    for wrong, words in [(waiting_first, "running sequences go first"),
                         (whole, "chunked prefill"),
                         (lambda r, w, b, m: plan_step(r, w, b, 10**6), "max_seqs"),
                         (lambda r, w, b, m: ([1] * len(r), []), "your plan differs")]:
        assert not check.ch10_ex5(wrong)
        assert words in said(capsys)
    assert not check.ch10_ex5(lambda *a: 7)
    assert "two lists" in said(capsys)
    assert not check.ch10_ex5(None)
    assert "Not answered yet" in said(capsys)
