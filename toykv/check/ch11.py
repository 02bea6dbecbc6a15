"""Self-checks for chapter 11, More than one token per step (book/11_speculative.ipynb).

Expected values are computed here with toykv: the formulas of toykv.speculative, the zoo's
SmolLM2 configuration (the shapes of the chapter's GGUF file), and, for exercise 2, the
chapter's toy (the source toy, exact, seed 0) decoded greedily without speculation. Exercises 2
and 5 take the function you wrote and run it: the loop with proposers of the check's own (one
always right, one always wrong), counting its forward passes; the sampling rule on seeded
draws, whose distribution must be the model's.
"""
from __future__ import annotations

import functools

import numpy as np

from ..config import source_toy
from ..generate import generate
from ..model import ToyTransformer
from ..sizing import kv_bytes_per_token
from ..speculative import PromptLookup, expected_speedup, expected_tokens_per_step
from ..zoo import get
from ._core import _say, answer_check, describe, plain

EX2_NEW = 24                       # exercise 2: tokens to generate
EX2_K = 4


def ex2_prompt() -> list[int]:
    """Exercise 2's prompt: 8 random tokens, said twice (lookup finds the second half)."""
    half = np.random.default_rng(11).integers(0, source_toy().vocab_size, 8)
    return [int(t) for t in half] * 2


class _Counting(ToyTransformer):
    """The chapter's toy, its forward passes counted (model.forward and model(...) alike)."""

    passes = 0

    def forward(self, token_ids, cache=None):
        self.passes += 1
        return super().forward(token_ids, cache)

    __call__ = forward


@functools.lru_cache(maxsize=1)
def _ex2_model() -> _Counting:
    return _Counting(source_toy(), seed=0, exact=True)


@functools.lru_cache(maxsize=1)
def _ex2_tokens() -> tuple:
    return tuple(generate(_ex2_model(), ex2_prompt(), EX2_NEW))


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
        (1 + alpha * k, "that counts each proposal as kept with probability 0.8 on its own; "
                        "each is accepted independently, but a rejection ends the step, so "
                        "proposal i is kept only if all before it were: probability alpha^i."),
        (alpha * k, "each proposal is accepted independently with probability 0.8, but a "
                    "rejection ends the step: proposal i is kept only if all before it were "
                    "(alpha^i), and the model's own token always comes."),
    ]
    return answer_check(answer, expected_tokens_per_step(alpha, k), hints, rel=0.005,
                        what="a number of tokens")


# -- exercise 2: the student's loop, run by the check -------------------------------------------
def _oracle(tokens_after):
    """A proposer that always proposes the right tokens (greedy's own)."""
    def propose(tokens, k):
        done = len(tokens) - len(ex2_prompt())
        return list(tokens_after[done:done + k])
    return propose


def _contrarian(tokens_after):
    """A proposer that is always wrong: the right token plus one."""
    def propose(tokens, k):
        done = len(tokens) - len(ex2_prompt())
        return [(t + 1) % source_toy().vocab_size for t in tokens_after[done:done + k]]
    return propose


def ch11_ex2(answer):
    """answer: your my_speculative(model, prompt, n, propose, k) function. The check runs it on
    exercise 2's prompt with three proposers (prompt lookup, one always right, one always
    wrong): every run must give plain greedy decoding's 24 tokens, and with the right proposer
    in fewer forward passes than tokens."""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, "right")
    if not callable(answer):
        got = plain(answer)
        if isinstance(got, tuple):
            return _say(False, "Not right yet: give the function itself (answer = "
                               "my_speculative), not its tokens: the check runs it with "
                               "proposers of its own.")
        return _say(False, "Not right yet: answer should be your my_speculative function "
                           f"itself, got {describe(got)}.")
    expected = _ex2_tokens()
    runs = {"prompt lookup": PromptLookup(k=EX2_K), "a proposer that is always right":
            _oracle(expected), "a proposer that is always wrong": _contrarian(expected)}
    passes = {}
    for name, propose in runs.items():
        model = _ex2_model()
        model.passes = 0
        try:
            out = plain(answer(model, ex2_prompt(), EX2_NEW, propose, EX2_K))
        except Exception as err:                              # noqa: BLE001 (the student's code)
            return _say(False, f"Not right yet: with {name} your function raised "
                               f"{type(err).__name__}: {err}")
        if isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], tuple):
            out = out[0]                                      # (tokens, passes) is welcome
        if not isinstance(out, tuple) or not all(isinstance(t, int) for t in out):
            return _say(False, f"Not right yet: your function should return the {EX2_NEW} "
                               f"new token ids, got {describe(out)}.")
        if len(out) != EX2_NEW:
            return _say(False, f"Not right yet. Hint: give exactly {EX2_NEW} tokens (with "
                               f"{name} yours gave {len(out)}): near the end, ask for fewer "
                               "than k proposals so the last step does not run past n.")
        wrong = next((i for i, (a, b) in enumerate(zip(out, expected)) if a != b), None)
        if wrong is not None:
            return _say(False, f"Not right yet. Hint: with {name} your tokens agree with "
                               f"greedy decoding up to token {wrong}, then differ: after a "
                               "rejection, keep only the agreeing proposals plus the model's "
                               "own token, and truncate the cache to the tokens fed that were "
                               "kept (the newest and the accepted proposals).")
        passes[name] = model.passes
    right = passes["a proposer that is always right"]
    if right >= EX2_NEW:
        return _say(False, f"Not right yet. Hint: the tokens are right, but with a proposer "
                           f"that is always right your loop made {right} forward passes for "
                           f"{EX2_NEW} tokens: feed the newest token and the k proposals in "
                           "one pass and keep every proposal the model agrees with.")
    least = 1 + -(-(EX2_NEW - 1) // (EX2_K + 1))              # the prefill, then k + 1 a pass
    if right > least:
        return _say(False, f"Not right yet. Hint: with a proposer that is always right your "
                           f"loop made {right} passes; it can make {EX2_NEW} tokens in "
                           f"{least}: each pass keeps all k proposals and adds the model's "
                           "own token.")
    return _say(True, f"Right. Greedy decoding's tokens with every proposer, and {right} "
                      f"passes\ninstead of {EX2_NEW} when the proposals are right.")


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
    best = max(expected_speedup(alpha, kk, c) for kk in range(1, 13))
    hints = [
        (expected_tokens_per_step(alpha, k), "that ignores the draft's own steps: k of them, "
                                             "each costing 1/20 of a decode step."),
        (expected_tokens_per_step(alpha, k) / (k * c), "the verify step itself costs about one "
                                                       "decode step too."),
        (expected_speedup(alpha, k, 1 / c), "c is the draft step's time over the model's: "
                                            "1/20, not 20."),
        (best, "that is the most any k gives, the exercise's last question; the first asks for "
               "k = 4."),
    ]
    return answer_check(answer, expected_speedup(alpha, k, c), hints, rel=0.005,
                        what="a speed-up factor")


# -- exercise 5: the sampling rule, run by the check on seeded draws ----------------------------
EX5_P = np.array([0.5, 0.25, 0.15, 0.1])         # the model's distribution
EX5_Q = np.array([0.1, 0.6, 0.2, 0.1])           # the draft's
EX5_DRAWS = 20_000
EX5_BOUND = 20.0               # chi-square, 3 degrees of freedom: P(X > 20) is about 2e-4


def _ex5_outcomes(p, q) -> dict:
    """The distribution of the token that comes out, under the right rule and the typical
    mistakes (a token drawn from q, then the rule)."""
    both = np.minimum(p, q)
    rest = 1 - both.sum()
    residual = np.maximum(p - q, 0) / np.maximum(p - q, 0).sum()
    kept_by_p = q * p                                 # kept with probability p(x), not p/q
    return {
        "right": p,
        "always keep": q,
        "resample from p": both + rest * p,
        "keep with p": kept_by_p + (1 - kept_by_p.sum()) * residual,
        "resample from q": both + rest * q,
    }


def ch11_ex5(answer):
    """answer: your keep_or_resample(p, q, token, rng) function: `token` was drawn from the
    draft's q; it returns the token that comes out. The check draws tokens from its own q,
    calls your function on seeded generators, and compares what comes out with p."""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, "right")
    if not callable(answer):
        return _say(False, "Not right yet: answer should be your keep_or_resample function "
                           f"itself (answer = keep_or_resample), got {describe(plain(answer))}.")
    rng = np.random.default_rng(5)
    counts = np.zeros(len(EX5_P))
    for _ in range(EX5_DRAWS):
        token = int(np.searchsorted(np.cumsum(EX5_Q), rng.random() * EX5_Q.sum(), "right"))
        try:
            out = plain(answer(EX5_P.copy(), EX5_Q.copy(), token, rng))
        except Exception as err:                              # noqa: BLE001 (the student's code)
            return _say(False, f"Not right yet: keep_or_resample raised "
                               f"{type(err).__name__}: {err}")
        if isinstance(out, tuple) and len(out) == 2:          # (token, accepted) is welcome
            out = out[0]
        if isinstance(out, bool) or not isinstance(out, int) or not 0 <= out < len(EX5_P):
            return _say(False, f"Not right yet: keep_or_resample should return a token id "
                               f"in [0, {len(EX5_P)}), got {describe(out)}.")
        counts[out] += 1
    fits = {name: float(((counts - EX5_DRAWS * probs) ** 2 / (EX5_DRAWS * probs)).sum())
            for name, probs in _ex5_outcomes(EX5_P, EX5_Q).items()}
    outcome = "right" if fits["right"] < EX5_BOUND else min(
        (name for name in fits if name != "right"), key=fits.get)
    if outcome != "right" and fits[outcome] > EX5_BOUND:
        outcome = "other"
    return answer_check(outcome, "right", right="What comes out is distributed as p.", hints=[
        ("always keep", "what comes out is distributed as q: a drafted token must be kept "
                        "only with probability min(1, p(x) / q(x))."),
        ("resample from p", "a rejected token must be replaced by a draw from max(0, p - q), "
                            "normalised, not from p: p's mass that q already covered was "
                            "offered by the kept tokens."),
        ("keep with p", "keep the drafted token with probability min(1, p(x) / q(x)), not "
                        "p(x)."),
        ("resample from q", "a rejected token must be replaced by a draw from max(0, p - q), "
                            "normalised: from the model's side, not the draft's."),
        ("other", "what comes out is not distributed as p: keep x with probability "
                  "min(1, p(x) / q(x)), else draw from max(0, p - q) normalised."),
    ])


__all__ = ["ch11_ex1", "ch11_ex2", "ch11_ex3", "ch11_ex4", "ch11_ex5", "ex2_prompt"]
