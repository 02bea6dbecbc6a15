"""Self-checks for chapter 10's exercises (serving many requests: a paged cache). Each prints
right or a hint.

Expected values are computed here with toykv (the zoo's Qwen3-1.7B, toykv.paged's rule for
the blocks a step needs), so the check and the chapter cannot drift.
"""
from __future__ import annotations

from ..sizing import kv_bytes_per_token
from ..zoo import get
from ._core import _say, answer_check, describe, plain

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
    return answer_check(answer, _blocks(1000) * BLOCK * per_token, hints,
                        what="a whole number of bytes")


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
    if answer is None or answer is Ellipsis:
        return answer_check(answer, "right")
    if not callable(answer):
        return _say(False, "Not right yet: answer should be your blocks_needed function itself "
                           f"(answer = blocks_needed), got {describe(plain(answer))}.")

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


__all__ = ["ch10_ex1", "ch10_ex2", "ch10_ex3", "ch10_ex4", "blocks_needed"]
