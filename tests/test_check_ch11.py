"""The self-checks of chapter 11: the official answers pass, typical mistakes get their hint,
None says "not answered yet", and the expected answer is never printed.

Expected values are worked by hand (the sums of the formula, SmolLM2-135M's published shapes:
30 layers, 3 KV heads of 64). Exercise 2's loop and exercise 5's sampling rule are written here
from their definitions, each with the typical mistakes as functions; the loop's reference
tokens come from a plain argmax loop over the chapter's toy, written without toykv.generate.
"""
from __future__ import annotations

import numpy as np
import pytest
from check_helpers import assert_hint, assert_right, said

import toykv
from toykv import check
from toykv.check._core import NOT_ANSWERED
from toykv.check.ch11 import EX2_NEW, ex2_prompt

EX1 = 1 + 0.8 + 0.8 ** 2 + 0.8 ** 3 + 0.8 ** 4           # 3.3616
PER_TOKEN = 2 * 30 * 3 * 64 * 4                            # float32 bytes per token
EX3 = 5 * PER_TOKEN
EX4 = EX1 / (4 * 0.05 + 1)

CHECKS = [check.ch11_ex1, check.ch11_ex2, check.ch11_ex3, check.ch11_ex4, check.ch11_ex5]


def greedy_by_hand(n):
    model = toykv.ToyTransformer(toykv.source_toy(), seed=0, exact=True)
    ids, out = list(ex2_prompt()), []
    for _ in range(n):
        out.append(int(np.argmax(model.forward(ids)[-1])))   # no cache: the whole text
        ids.append(out[-1])
    return out


def loop(model, prompt, n, propose, k, truncate=True, batch=True):
    """Speculative greedy decoding by the definition (truncate=False: the rejected proposals
    stay in the cache; batch=False: one pass per token, as plain decoding)."""
    cache = model.new_cache()
    ids = list(prompt)
    out = [int(np.argmax(model.forward(ids, cache)[-1]))]
    while len(out) < n:
        text = ids + out
        proposal = propose(text, min(k, n - len(out) - 1)) if batch else []
        start = len(cache)
        choice = np.argmax(model.forward([text[-1]] + proposal, cache), axis=-1)
        accepted = 0
        while accepted < len(proposal) and proposal[accepted] == choice[accepted]:
            accepted += 1
        if truncate:
            cache.truncate(start + 1 + accepted)
        out += proposal[:accepted] + [int(choice[accepted])]
    return out


def generate_instead(model, prompt, n, propose, k):
    return toykv.generate(model, prompt, n)


@pytest.mark.parametrize("fn", CHECKS)
def test_none_is_not_answered(fn, capsys):
    assert not fn(None)
    assert NOT_ANSWERED in said(capsys)


def test_ex1(capsys):
    assert_right(check.ch11_ex1, EX1, capsys)
    assert_right(check.ch11_ex1, 3.36, capsys)
    assert_hint(check.ch11_ex1, 5, "every proposal is accepted", capsys)
    assert_hint(check.ch11_ex1, EX1 - 1, "model's own token", capsys)
    assert_hint(check.ch11_ex1, 3.2, "accepted independently", capsys)
    assert_hint(check.ch11_ex1, 4.2, "only if all before it were", capsys)
    assert not check.ch11_ex1("3.36")
    assert "give a number of tokens" in said(capsys)


def test_ex2_runs_the_loop_and_counts_its_passes(capsys):
    assert toykv.generate(toykv.ToyTransformer(toykv.source_toy(), seed=0, exact=True),
                          ex2_prompt(), EX2_NEW) == greedy_by_hand(EX2_NEW)
    assert_right(check.ch11_ex2, loop, capsys)
    assert_right(check.ch11_ex2, lambda *a: (loop(*a), 7), capsys)   # (tokens, passes)
    assert_hint(check.ch11_ex2, generate_instead, "made 24 forward passes", capsys)
    assert_hint(check.ch11_ex2, lambda *a: loop(*a, batch=False), "made 24 forward", capsys)
    assert_hint(check.ch11_ex2, lambda *a: loop(*a, truncate=False), "truncate the cache",
                capsys)
    assert_hint(check.ch11_ex2, lambda *a: loop(*a)[:20], "exactly 24 tokens", capsys)
    assert_hint(check.ch11_ex2, lambda m, p, n, f, k: loop(m, p, n + 1, f, k),
                "exactly 24 tokens", capsys)
    assert_hint(check.ch11_ex2, greedy_by_hand(EX2_NEW), "the function itself", capsys)
    assert_hint(check.ch11_ex2, lambda *a: 1 / 0, "raised ZeroDivisionError", capsys)
    assert not check.ch11_ex2(3.5)
    assert "Not right yet" in said(capsys)


def test_ex3(capsys):
    assert EX3 == 230_400
    assert_right(check.ch11_ex3, EX3, capsys)
    assert_hint(check.ch11_ex3, 6 * PER_TOKEN, "never in the cache", capsys, EX3)
    assert_hint(check.ch11_ex3, 9 * PER_TOKEN, "stay in the cache", capsys, EX3)
    assert_hint(check.ch11_ex3, EX3 // 2, "float32", capsys, EX3)
    assert_hint(check.ch11_ex3, 3 * PER_TOKEN, "rejected ones", capsys, EX3)


def test_ex4(capsys):
    assert_right(check.ch11_ex4, EX4, capsys)
    assert_right(check.ch11_ex4, 2.8, capsys)
    assert_hint(check.ch11_ex4, EX1, "draft's own steps", capsys)
    assert_hint(check.ch11_ex4, EX1 / 0.2, "verify step itself", capsys)
    assert_hint(check.ch11_ex4, EX1 / 81, "1/20, not 20", capsys)
    best = max((1 - 0.8 ** (k + 1)) / 0.2 / (k * 0.05 + 1) for k in range(1, 13))
    assert_hint(check.ch11_ex4, best, "most any k gives", capsys)
    assert_hint(check.ch11_ex4, 3.09, "most any k gives", capsys)


def keep_or_resample(p, q, token, rng):
    if rng.random() < min(1.0, p[token] / q[token]):
        return token
    residual = np.maximum(p - q, 0)
    return int(rng.choice(len(p), p=residual / residual.sum()))


def always_keep(p, q, token, rng):
    return token


def resample_from_p(p, q, token, rng):
    if rng.random() < min(1.0, p[token] / q[token]):
        return token
    return int(rng.choice(len(p), p=p))


def keep_with_p(p, q, token, rng):
    if rng.random() < p[token]:
        return token
    residual = np.maximum(p - q, 0)
    return int(rng.choice(len(p), p=residual / residual.sum()))


def test_ex5_draws_and_compares_with_p(capsys):
    assert_right(check.ch11_ex5, keep_or_resample, capsys)
    assert_right(check.ch11_ex5, toykv.speculative.accept_or_resample, capsys)  # (t, kept)
    assert_hint(check.ch11_ex5, always_keep, "distributed as q", capsys)
    assert_hint(check.ch11_ex5, resample_from_p, "not from p", capsys)
    assert_hint(check.ch11_ex5, keep_with_p, "not p(x)", capsys)
    assert_hint(check.ch11_ex5, lambda p, q, t, rng: 0, "not distributed as p", capsys)
    assert_hint(check.ch11_ex5, lambda p, q, t, rng: 9, "token id in", capsys)
    assert_hint(check.ch11_ex5, lambda p, q, t, rng: 1 / 0, "raised ZeroDivisionError", capsys)
    assert_hint(check.ch11_ex5, 0.5, "function itself", capsys)
