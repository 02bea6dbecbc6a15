"""Self-checks for chapter 13's exercises (what shrinking the cache costs). Each prints right or
a hint.

Exercise 1 runs the student's conversion on small GQA models and compares its cache bytes and
logits with toykv.convert's; exercise 2 runs the student's budget rule on tables made here.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import recap_toy, source_toy
from ..convert import pool_kv_heads, weights_of
from ..model import ToyTransformer
from ..sizing import kv_bytes_per_token
from ._core import answer_check, describe, not_a_function, plain, _say

EX1_SEED = 13


def ex1_models() -> list[ToyTransformer]:
    """The GQA models exercise 1's check converts: the blog's toy with 4 KV heads of 16 for its
    8 query heads, and chapter 1's with 2 KV heads of 8 for 4."""
    return [ToyTransformer(source_toy(n_kv_heads=4), seed=EX1_SEED),
            ToyTransformer(recap_toy(n_kv_heads=2), seed=EX1_SEED)]


def _pooled(model, how: str) -> ToyTransformer:
    """model converted to one KV head the wrong way `how` (the mistakes exercise 1 invites)."""
    c = model.config
    D, H_kv, hd = c.d_model, c.n_kv_heads, c.head_dim
    weights = weights_of(model)
    for layer in weights["layers"]:
        for name in ("wk", "wv"):
            heads = layer[name].reshape(D, H_kv, hd)                  # [D, H_kv, d_h]
            layer[name] = {"sum": heads.sum(axis=1), "first": heads[:, 0],
                           "layout": layer[name].reshape(D, hd, H_kv).mean(axis=2),
                           "keys only": heads.mean(axis=1) if name == "wk" else heads[:, 0],
                           }[how]
    return ToyTransformer(replace(c, n_kv_heads=1, attention=None), weights=weights)


POOL_MISTAKES = ("sum", "first", "layout", "keys only")


def _snapshot(model) -> list[dict]:
    return [{name: np.array(a) for name, a in layer.items()} for layer in model.layers]


def _same_weights(model, before) -> bool:
    return all(set(layer) == set(old) and all(np.array_equal(layer[n], old[n]) for n in old)
               for layer, old in zip(model.layers, before))


def ch13_ex1(answer):
    """answer: your to_mqa(model) function, which returns a new ToyTransformer with one KV head
    whose W_K and W_V are the mean of the model's heads; run on two GQA toys, its cache bytes and
    logits compared with toykv.convert.pool_kv_heads(model, 1)'s."""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, "right")
    if not callable(answer) or isinstance(answer, ToyTransformer):     # a model is callable
        return _say(False, "Not right yet: answer should be your to_mqa function itself "
                           f"(answer = to_mqa), got {describe(plain(answer))}.")
    outcome = "right"
    for model in ex1_models():
        before = _snapshot(model)
        try:
            mine = answer(model)
        except Exception as err:                              # noqa: BLE001 - the student's code
            return _say(False, f"Not right yet: to_mqa raised {type(err).__name__}: {err}")
        if not _same_weights(model, before):
            outcome = "changed"
            break
        if not isinstance(mine, ToyTransformer):
            return _say(False, "Not right yet: to_mqa should return a new toykv.ToyTransformer "
                               f"(ToyTransformer(config, weights=...)), got {describe(mine)}.")
        ids = np.arange(12) % model.config.vocab_size
        cache = mine.new_cache(kv_dtype="float16")
        mine(ids, cache)
        if cache.nbytes != 12 * kv_bytes_per_token(pool_kv_heads(model, 1).config):
            outcome = "bytes"
            break
        theirs = pool_kv_heads(model, 1)(ids)
        got = mine(ids)
        close = lambda ref: np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
        if not close(theirs):
            outcome = next((how for how in POOL_MISTAKES if close(_pooled(model, how)(ids))),
                           "other")
            break
    return answer_check(outcome, "right", hints=[
        ("changed", "to_mqa changed the model it was given; build new weights (the mean makes "
                    "new arrays) and leave the model as it was."),
        ("bytes", "its cache does not hold one KV head's keys and values per layer: the new "
                  "config needs n_kv_heads=1 (dataclasses.replace(model.config, n_kv_heads=1, "
                  "attention=None))."),
        ("sum", "that is the sum of the heads; take their mean (divide by the number of heads)."),
        ("first", "that keeps the first head only; each new head is the mean of all the heads "
                  "it replaces."),
        ("layout", "head j's columns of W_K and W_V are j*d_h to (j+1)*d_h: reshape them to "
                   "(D, H_kv, d_h) and average over the heads axis, not (D, d_h, H_kv)."),
        ("keys only", "pool W_V as well as W_K: the values of the one head are the mean too."),
        ("other", "for each layer, W_K and W_V [D, H_kv d_h] -> reshape (D, H_kv, d_h), mean over "
                  "the heads, reshape (D, d_h); every other weight stays as it is."),
    ])


# -- exercise 2: which method for a memory budget ---------------------------------------------
def ex2_tables() -> list[tuple[list[dict], float]]:
    """(results, budget) cases: rows {'method', 'bytes' (per token), 'kl', 'top1',
    'perplexity'} as the chapter's table gives them."""
    def row(method, nbytes, kl, perplexity=None):
        return {"method": method, "bytes": nbytes, "kl": kl, "top1": 1 - kl / 10,
                "perplexity": 40 * np.exp(kl) if perplexity is None else perplexity}
    table = [row("16-bit", 24000, 0.0), row("int8", 12000, 0.002), row("int4", 8000, 0.01),
             row("latent 256", 16000, 0.05), row("latent 64", 4000, 1.0),
             row("window", 1500, 0.8), row("MQA", 8000, 6.0), row("shared", 12000, 9.0),
             row("2-bit", 7600, 0.24, 55.0), row("sinks", 5800, 0.23, 59.0)]
    return [(table, 24000), (table, 13000), (table, 12000), (table, 9000), (table, 8000),
            (table, 7600), (table, 5000), (table, 2000), (table, 1000),
            (list(reversed(table)), 8000)]


def _rule(rows, budget, how: str = "right"):
    """The method a budget rule picks (the right one, or a mistake's); None when none fits."""
    fits = [r for r in rows if (r["bytes"] < budget if how == "strict" else
                                r["bytes"] <= budget or how == "no budget")]
    if not fits:
        return None
    key = {"least bytes": lambda r: r["bytes"], "highest": lambda r: -r["kl"],
           "perplexity": lambda r: r["perplexity"]}.get(how, lambda r: r["kl"])
    return min(fits, key=key)["method"]


BUDGET_MISTAKES = ("least bytes", "no budget", "strict", "highest", "perplexity")


def ch13_ex2(answer):
    """answer: your choose(results, budget) function, which returns the 'method' of the row with
    the lowest KL divergence among those of at most `budget` bytes per token (None if none): the
    lowest point left of the budget on the chapter's plot."""
    refused = not_a_function(answer, "choose")
    if refused is not None:
        return refused
    got = []
    for rows, budget in ex2_tables():
        try:
            got.append(answer([dict(r) for r in rows], budget))
        except Exception as err:                              # noqa: BLE001 - the student's code
            return _say(False, f"Not right yet: choose raised {type(err).__name__}: {err}")
    picks = lambda how: [_rule(rows, budget, how) for rows, budget in ex2_tables()]
    if any(isinstance(g, dict) for g in got):
        outcome = "row"
    else:
        outcome = "right" if got == picks("right") else next(
            (how for how in BUDGET_MISTAKES if got == picks(how)), "other")
    return answer_check(outcome, "right", hints=[
        ("row", "return the row's 'method' (its name), not the row itself."),
        ("least bytes", "that is the method with the fewest bytes; among those that fit, take "
                        "the one that loses least (the lowest KL divergence)."),
        ("no budget", "some of those methods do not fit: keep only the rows of at most `budget` "
                      "bytes per token first."),
        ("strict", "a method of exactly `budget` bytes per token fits too (<=, not <)."),
        ("highest", "a lower KL divergence is closer to the original model: take the "
                    "lowest."),
        ("perplexity", "that ranks by perplexity; the plot and the exercise rank by KL "
                       "divergence, which can choose otherwise when two methods are close."),
        ("other", "keep the rows with bytes <= budget; if none, return None; else return the "
                  "'method' of the one with the smallest 'kl'."),
    ])
