"""Self-checks for chapter 11, More than one token per step (book/11_speculative.ipynb).

Expected values are computed here with toykv: the formulas of toykv.speculative, the zoo's
SmolLM2 configuration (the shapes of the chapter's GGUF file), and for exercise 2 the
chapter's toy (the source toy, exact, seed 0) decoded greedily without speculation.
"""
from __future__ import annotations

import functools

import numpy as np

from ..config import source_toy
from ..generate import generate
from ..model import ToyTransformer
from ..sizing import kv_bytes_per_token
from ..speculative import expected_speedup, expected_tokens_per_step
from ..zoo import get
from ._core import _say, answer_check, plain

EX2_NEW = 24                       # exercise 2: tokens to generate


def ex2_prompt() -> list[int]:
    """Exercise 2's prompt: 8 random tokens, said twice (lookup finds the second half)."""
    half = np.random.default_rng(11).integers(0, source_toy().vocab_size, 8)
    return [int(t) for t in half] * 2


@functools.lru_cache(maxsize=1)
def _ex2_tokens() -> tuple:
    model = ToyTransformer(source_toy(), seed=0, exact=True)
    return tuple(generate(model, ex2_prompt(), EX2_NEW))


def ch11_ex1(answer):
    """Expected tokens per verify step for alpha = 0.8 and k = 4 proposals."""
    alpha, k = 0.8, 4
    hints = [
        (k + 1, "that is when every proposal is accepted; each is accepted only with "
                "probability 0.8, and a rejection ends the step."),
        (sum(alpha ** i for i in range(1, k + 1)), "that counts the accepted proposals only; "
                                                   "the verify step adds the model's own token."),
        (1 / (1 - alpha), "that is for unlimited proposals; with k = 4 the sum stops at "
                          "alpha^4."),
        (alpha * k, "acceptances are not independent draws: the step stops at the first "
                    "rejection, so proposal i counts only if all before it were accepted."),
    ]
    return answer_check(answer, expected_tokens_per_step(alpha, k), hints, rel=0.005,
                        what="a number of tokens")


def ch11_ex2(answer):
    """The 24 tokens your accept-and-roll-back loop generated on exercise 2's prompt."""
    expected = _ex2_tokens()
    if answer is None or answer is Ellipsis:
        return answer_check(answer, expected)
    got = plain(answer)
    if not isinstance(got, tuple) or not all(isinstance(t, int) for t in got):
        return answer_check(answer, expected, what=f"a list of {EX2_NEW} token ids")
    same = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    if same is None and len(got) == len(expected):
        return _say(True, "Right. The same tokens as plain greedy decoding.")
    if same is None:
        return _say(False, f"Not right yet. Hint: give exactly {EX2_NEW} tokens (yours has "
                           f"{len(got)}): near the end, propose fewer than k so the last step "
                           "does not run past max_new_tokens.")
    return _say(False, f"Not right yet. Hint: your tokens agree with greedy decoding up to "
                       f"token {same}, then differ: after a rejection, keep only the agreeing "
                       "proposals plus the model's own token, and truncate the cache to the "
                       "tokens fed that were kept.")


def ch11_ex3(answer):
    """Bytes a SmolLM2 float32 verify step of k = 8 proposals rolls back when 3 are accepted."""
    config = get("smollm2-135m").config
    per_token = kv_bytes_per_token(config, 4)
    hints = [
        (6 * per_token, "the model's own next token is chosen, not fed: it was never in the "
                        "cache, so it is not rolled back."),
        (9 * per_token, "the newest token and the 3 accepted proposals stay in the cache."),
        (5 * kv_bytes_per_token(config, 2), "toykv's cache is float32: 4 bytes per value."),
        (3 * per_token, "that is what the accepted proposals add; the question asks for what "
                        "the rejected ones leave behind."),
    ]
    return answer_check(answer, 5 * per_token, hints, what="a whole number of bytes")


def ch11_ex4(answer):
    """Expected speed-up of a draft with alpha = 0.8, k = 4, a draft step 1/20 of a step."""
    alpha, k, c = 0.8, 4, 0.05
    hints = [
        (expected_tokens_per_step(alpha, k), "that ignores the draft's own steps: k of them, "
                                             "each costing 1/20 of a decode step."),
        (expected_tokens_per_step(alpha, k) / (k * c), "the verify step itself costs about one "
                                                       "decode step too."),
        (expected_speedup(alpha, k, 1 / c), "c is the draft step's time over the model's: "
                                            "1/20, not 20."),
    ]
    return answer_check(answer, expected_speedup(alpha, k, c), hints, rel=0.005,
                        what="a speed-up factor")
