"""Self-checks for chapter 10's exercises (serving many requests: a paged cache). Each prints
right or a hint.

Expected values are computed here with toykv (the zoo's Qwen3-1.7B, toykv.paged's rule for
the blocks a step needs), so the check and the chapter cannot drift.
"""
from __future__ import annotations

import numpy as np

from ..kinds.paged import BlockManager
from ..scheduler import RUNNING, Request, Scheduler, Sequence, SimRunner
from ..sizing import kv_bytes_per_token
from ..zoo import get
from ._core import answer_check, describe, not_a_function, plain, _say

GIB = 2 ** 30
BLOCK = 16                                   # vLLM's default block size (tokens)


def _blocks(tokens: int, block_size: int = BLOCK) -> int:
    return -(-tokens // block_size)


def ch10_ex1(answer):
    """Bytes a paged Qwen3-1.7B sequence of 1,000 tokens holds, bf16, blocks of 16 tokens."""
    per_token = kv_bytes_per_token(get("qwen3-1.7b").config)          # bf16
    hints = [
        (1000 * per_token, "that is the tokens' own bytes: a paged sequence holds whole "
                           "blocks, and its last block is only partly full."),
        (1000 // BLOCK * BLOCK * per_token, "62 blocks hold only 992 tokens: round the "
                                            "blocks up, not down."),
        (_blocks(1000) * BLOCK * per_token * 2, "Qwen3-1.7B is served in bf16 here: 2 bytes "
                                                "per value, and 114,688 bytes per token."),
    ]
    return answer_check(answer, _blocks(1000) * BLOCK * per_token, hints, rel=5e-4,
                        what="a number of bytes")


def blocks_needed(length: int, T: int, block_size: int, held: int, last_shared: bool) -> int:
    """toykv.paged's rule: new blocks for positions length..length+T-1, plus a copy of the
    last block when it is shared and the step writes into it (copy on write)."""
    new = _blocks(length + T, block_size) - held
    return new + int(length % block_size != 0 and last_shared)


CASES = [(length, T, bs, shared) for bs in (1, 4, 16) for length in (0, 1, 3, 4, 15, 16, 17, 31)
         for T in (1, 2, 5, 16, 40) for shared in (False, True)]
MISTAKES = {
    "no copy": lambda n, T, bs, held, shared: _blocks(n + T, bs) - held,
    "floor": lambda n, T, bs, held, shared: (n + T) // bs - held
    + int(n % bs != 0 and shared),
    "always copy": lambda n, T, bs, held, shared: _blocks(n + T, bs) - held + int(shared),
}


def ch10_ex2(answer):
    """answer: your blocks_needed(length, T, block_size, held, last_shared) function, checked
    on a grid of lengths, step sizes, block sizes and shared or private last blocks."""
    refused = not_a_function(answer, "blocks_needed")
    if refused is not None:
        return refused

    def agrees(rule) -> bool:
        for length, T, bs, shared in CASES:
            held = _blocks(length, bs)
            if shared and length == 0:
                continue                                  # nothing held: nothing shared
            try:
                got = answer(length, T, bs, held, shared)
            except Exception:                             # noqa: BLE001 - the student's code
                return False
            if got != rule(length, T, bs, held, shared):
                return False
        return True

    try:
        answer(3, 2, 4, 1, False)
    except Exception as err:                              # noqa: BLE001 - the student's code
        return _say(False, f"Not right yet: blocks_needed(3, 2, 4, 1, False) raised "
                           f"{type(err).__name__}: {err}")
    outcome = "right" if agrees(blocks_needed) else next(
        (name for name, rule in MISTAKES.items() if agrees(rule)), "other")
    return answer_check(outcome, "right", hints=[
        ("no copy", "a step that writes into a shared last block (a fork, a shared prefix) "
                    "needs one more block: the copy it writes into (copy on write)."),
        ("floor", "blocks for n tokens are rounded up, ceil(n / block_size): a partly full "
                  "block is a whole block."),
        ("always copy", "a shared last block that is full is not written into: the step "
                        "starts a new block, and no copy is needed."),
        ("other", "count the blocks length + T tokens need, ceil((length + T) / block_size), "
                  "minus the `held` ones, plus 1 when the step writes into a shared block."),
    ])


def ch10_ex3(answer):
    """Requests of 512 + 128 tokens that fit in 2.36 GiB of fp8 KV cache, blocks of 16."""
    per_token = kv_bytes_per_token(get("qwen3-1.7b").config, bytes_per_value=1)
    blocks = int(2.36 * GIB // (BLOCK * per_token))
    expected = blocks // _blocks(640)
    hints = [
        (int(2.36 * GIB // (BLOCK * 2 * per_token)) // _blocks(640),
         "that is bf16 (2 bytes per value): fp8 stores 1 byte per value."),
        (41_920 // 640, "41,920 tokens is what the blog's fp8 run reported, with less memory "
                        "than 2.36 GiB: use the 2.36 GiB of the question."),
        (int(2.36 * GIB // per_token) // 640, "count in blocks of 16 tokens: the pool holds "
                                              "whole blocks, and so does each request."),
        (int(2.36 * 1e9 // (BLOCK * per_token)) // _blocks(640),
         "GiB are 2^30 bytes, not 10^9."),
        (2 * 34, "twice 34 is the guess to test, not the count: 34 was rounded down twice "
                 "(to whole blocks, then to whole requests); count the fp8 blocks in 2.36 GiB "
                 "again and divide them by a request's 40 blocks."),
    ]
    return answer_check(answer, expected, hints, what="a whole number of requests")


def ch10_ex4(answer):
    """Blocks held by 20 requests sharing a 1,000-token system prompt (50-token question, 100
    tokens out, the last one not stored), with prefix caching, blocks of 16."""
    held = 1000 + 50 + 100 - 1
    shared = 1000 // BLOCK
    expected = shared + 20 * (_blocks(held) - shared)
    hints = [
        (20 * _blocks(held), "that is without prefix caching: the system prompt's full blocks "
                             "are held once and shared by all 20."),
        (_blocks(1000) + 20 * (_blocks(held) - _blocks(1000)),
         "the block holding the last 8 tokens of the system prompt also holds the start of "
         "the question, which differs: only full blocks of the system prompt are shared."),
    ]
    return answer_check(answer, expected, hints, what="a whole number of blocks")


# -- exercise 5: a budgeted scheduler step, checked against toykv's Scheduler ------------------
def budgeted_step(running: list, waiting: list, budget: int, max_seqs: int) -> tuple:
    """What toykv's Scheduler (max_num_batched_tokens=budget) schedules: running[i] tokens
    left to feed per running sequence (1: a decode), waiting[j] prompt lengths in queue order.
    (tokens per running sequence, tokens per admitted waiting one), with blocks to spare."""
    runner = SimRunner(BlockManager(100_000, 16), None)
    scheduler = Scheduler(runner, max_seqs, budget)
    seqs = []
    for i, left in enumerate(running):
        made = 1 if left == 1 else 0                     # a decode has made a token
        seq = Sequence(Request(i, 10 + (left if not made else 0), 8))
        seq.output = [0] * made
        runner.start(seq)
        cached = seq.num_tokens - left
        runner.manager.may_append(seq.table, 0, cached)
        seq.num_cached_tokens, seq.status, seq.is_prefill = cached, RUNNING, not made
        scheduler.running.append(seq)
        seqs.append(seq)
    queued = [Sequence(Request(len(running) + j, prompt, 8)) for j, prompt in
              enumerate(waiting)]
    for seq in queued:
        scheduler.add(seq)
    scheduler.schedule()
    admitted = [seq.num_scheduled_tokens for seq in queued if seq.status == RUNNING]
    return [seq.num_scheduled_tokens for seq in seqs], admitted


def _ex5_cases() -> list:
    """(running, waiting, budget, max_seqs): a few by hand, then seeded ones."""
    cases = [([1, 1, 1], [500, 200], 256, 8), ([1, 300], [100], 128, 8),
             ([1, 1], [40, 40, 40], 2048, 3), ([], [3000], 2048, 8),
             ([1] * 6 + [900], [50], 512, 8)]
    rng = np.random.default_rng(10)
    for _ in range(40):
        max_seqs = int(rng.choice([4, 8]))
        running = [1 if rng.random() < 0.7 else int(rng.integers(2, 700))
                   for _ in range(int(rng.integers(0, max_seqs + 1)))]
        waiting = [int(rng.integers(10, 700)) for _ in range(int(rng.integers(0, 5)))]
        cases.append((running, waiting, int(rng.choice([16, 64, 256, 512, 2048])), max_seqs))
    return cases


def _waiting_first(running, waiting, budget, max_seqs):
    admitted = []
    for prompt in waiting:
        if budget <= 0 or len(running) + len(admitted) >= max_seqs:
            break
        admitted.append(min(prompt, budget))
        budget -= admitted[-1]
    scheduled = []
    for left in running:
        scheduled.append(min(left, budget))
        budget -= scheduled[-1]
    return scheduled, admitted


def _whole_prompts(running, waiting, budget, max_seqs):
    scheduled = []
    for left in running:
        scheduled.append(min(left, budget))
        budget -= scheduled[-1]
    admitted = []
    for prompt in waiting:
        if prompt > budget or len(running) + len(admitted) >= max_seqs:
            break
        admitted.append(prompt)
        budget -= prompt
    return scheduled, admitted


def _no_seat_limit(running, waiting, budget, max_seqs):
    return budgeted_step(running, waiting, budget, 10_000)


EX5_MISTAKES = {"waiting first": _waiting_first, "whole prompts": _whole_prompts,
                "no seat limit": _no_seat_limit}


def ch10_ex5(answer):
    """answer: your plan_step(running, waiting, budget, max_seqs) function; it is run on many
    states and compared with toykv's Scheduler under max_num_batched_tokens=budget."""
    refused = not_a_function(answer, "plan_step")
    if refused is not None:
        return refused
    got = []
    for running, waiting, budget, max_seqs in _ex5_cases():
        try:
            out = plain(answer(list(running), list(waiting), budget, max_seqs))
        except Exception as err:                              # noqa: BLE001 (the student's code)
            return _say(False, f"Not right yet: plan_step({running}, {waiting}, {budget}, "
                               f"{max_seqs}) raised {type(err).__name__}: {err}")
        if not (isinstance(out, tuple) and len(out) == 2
                and all(isinstance(part, tuple) for part in out)):
            return _say(False, "Not right yet: plan_step should return two lists: the tokens "
                               "of each running sequence, then those of each admitted request, "
                               f"got {describe(out)}.")
        got.append(out)

    def agrees(rule) -> bool:
        return all(out == tuple(tuple(part) for part in rule(*case))
                   for out, case in zip(got, _ex5_cases()))

    outcome = "right" if agrees(budgeted_step) else next(
        (name for name, rule in EX5_MISTAKES.items() if agrees(rule)), "other")
    where = next((case for out, case in zip(got, _ex5_cases())
                  if out != tuple(tuple(part) for part in budgeted_step(*case))), None)
    return answer_check(outcome, "right", hints=[
        ("waiting first", "the running sequences go first (their decodes and prefill chunks), "
                          "then waiting requests are admitted with what is left of the budget."),
        ("whole prompts", "a prompt longer than what is left of the budget is not skipped: "
                          "its first chunk is admitted (chunked prefill), as many tokens as "
                          "the budget has left."),
        ("no seat limit", "admit only while fewer than max_seqs sequences are running."),
        ("other", f"on running={where[0] if where else ''}, waiting="
                  f"{where[1] if where else ''}, budget={where[2] if where else ''}, "
                  f"max_seqs={where[3] if where else ''} your plan differs: each running "
                  "sequence in order takes min(its tokens left, the budget left), stopping at "
                  "an empty budget; then waiting ones in order, each min(its prompt, the budget "
                  "left), while the budget lasts and seats are free."),
    ])


__all__ = ["ch10_ex1", "ch10_ex2", "ch10_ex3", "ch10_ex4", "ch10_ex5", "blocks_needed",
           "budgeted_step"]
