"""toykv.check.ch13: the folded solutions pass, typical mistakes get their hint, junk a verdict.
The solutions here are written as the chapter's are; the mistakes are the ones each exercise
invites."""
from dataclasses import replace

import numpy as np
import pytest

from toykv import ToyTransformer
from toykv.check import NOT_ANSWERED, ch13_ex1, ch13_ex2
from toykv.check.ch13 import ex1_models, ex2_tables


def pooled(model, how="mean", touch=False):
    """Exercise 1 as a student writes it: `how` the heads are combined."""
    c = model.config
    D, H_kv, hd = c.d_model, c.n_kv_heads, c.head_dim
    layers = []
    for layer in model.layers:
        new = dict(layer)
        for name in ("wk", "wv"):
            heads = layer[name].reshape(D, H_kv, hd)
            new[name] = {"mean": heads.mean(axis=1), "sum": heads.sum(axis=1),
                         "first": heads[:, 0],
                         "layout": layer[name].reshape(D, hd, H_kv).mean(axis=2),
                         "keys only": heads.mean(axis=1) if name == "wk" else heads[:, 0]}[how]
        if touch:
            layer["wo"][...] = 0                     # edits the given model in place
        layers.append(new)
    weights = {"embed": model.embed, "final_norm": model.final_norm, "lm_head": model.lm_head,
               "layers": layers}
    config = replace(c, n_kv_heads=1, attention=None)
    return ToyTransformer(config, weights=weights)


def keep_heads(model):
    """Mean-pools but keeps H_kv heads (every head the same mean): the cache stays as large."""
    c = model.config
    layers = [dict(layer) for layer in model.layers]
    for layer in layers:
        for name in ("wk", "wv"):
            mean = layer[name].reshape(c.d_model, c.n_kv_heads, c.head_dim).mean(axis=1)
            layer[name] = np.tile(mean, (1, c.n_kv_heads))
    return ToyTransformer(c, weights={"embed": model.embed, "final_norm": model.final_norm,
                                      "lm_head": model.lm_head, "layers": layers})


def choose(results, budget):
    """Exercise 2's solution, as the chapter writes it."""
    fits = [row for row in results if row["bytes"] <= budget]
    return min(fits, key=lambda row: row["kl"])["method"] if fits else None


def test_the_solutions_pass(capsys):
    assert ch13_ex1(pooled)
    assert capsys.readouterr().out.startswith("Right.")
    assert ch13_ex2(choose)
    assert capsys.readouterr().out.startswith("Right.")


@pytest.mark.parametrize("answer, words", [
    (lambda m: pooled(m, "sum"), "sum of the heads"),
    (lambda m: pooled(m, "first"), "first head only"),
    (lambda m: pooled(m, "layout"), "(D, H_kv, d_h)"),
    (lambda m: pooled(m, "keys only"), "pool W_V as well"),
    (lambda m: pooled(m, touch=True), "changed the model"),
    (keep_heads, "n_kv_heads=1"),
    (lambda m: m, "n_kv_heads=1"),
    (lambda m: ToyTransformer(replace(m.config, n_kv_heads=1, attention=None), seed=1),
     "for each layer"),
    (lambda m: m.config, "should return a new toykv.ToyTransformer"),
    (lambda m: 1 / 0, "raised ZeroDivisionError"),
    (pooled(ex1_models()[0]), "answer = to_mqa"),
])
def test_exercise_1_mistakes_get_their_hint(answer, words, capsys):
    assert not ch13_ex1(answer)
    out = capsys.readouterr().out
    assert out.startswith("Not right yet") and words in out, out


def strict(results, budget):
    fits = [row for row in results if row["bytes"] < budget]
    return min(fits, key=lambda row: row["kl"])["method"] if fits else None


def least_bytes(results, budget):
    fits = [row for row in results if row["bytes"] <= budget]
    return min(fits, key=lambda row: row["bytes"])["method"] if fits else None


def no_budget(results, budget):
    return min(results, key=lambda row: row["kl"])["method"]


def highest(results, budget):
    fits = [row for row in results if row["bytes"] <= budget]
    return max(fits, key=lambda row: row["kl"])["method"] if fits else None


def whole_row(results, budget):
    fits = [row for row in results if row["bytes"] <= budget]
    return min(fits, key=lambda row: row["kl"]) if fits else None


def by_perplexity(results, budget):
    fits = [row for row in results if row["bytes"] <= budget]
    return min(fits, key=lambda row: row["perplexity"])["method"] if fits else None


@pytest.mark.parametrize("answer, words", [
    (strict, "<=, not <"), (least_bytes, "fewest bytes"), (no_budget, "do not fit"),
    (highest, "lowest"), (whole_row, "not the row itself"), (lambda r, b: "int4", "smallest"),
    (by_perplexity, "ranks by perplexity"),
    (lambda r: None, "raised TypeError"), ("int4", "answer = choose"),
])
def test_exercise_2_mistakes_get_their_hint(answer, words, capsys):
    assert not ch13_ex2(answer)
    out = capsys.readouterr().out
    assert out.startswith("Not right yet") and words in out, out


def test_the_tables_tell_every_mistake_from_the_rule():
    budgets = [budget for _, budget in ex2_tables()]
    assert len(set(budgets)) >= 7 and min(budgets) < min(r["bytes"] for r in ex2_tables()[0][0])
    for mistake in (strict, least_bytes, no_budget, highest, by_perplexity):
        assert [mistake(r, b) for r, b in ex2_tables()] != [choose(r, b) for r, b in ex2_tables()]


@pytest.mark.parametrize("check", [ch13_ex1, ch13_ex2])
@pytest.mark.parametrize("junk", ["7", 10**400, float("nan"), [[1]], 3 + 1j, (1, 2)])
def test_junk_gets_a_verdict(check, junk, capsys):
    assert not check(junk)
    assert capsys.readouterr().out.startswith("Not right yet")
    assert not check(None)
    assert NOT_ANSWERED in capsys.readouterr().out
