"""The self-checks of chapter 1: the official answers pass, typical mistakes get their hint,
None says "not answered yet", and the expected answer is never printed.

The official answers are written here independently of toykv (a per-head numpy reference),
so a check that computed the wrong expected value would fail these tests.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from toykv import check
from toykv.check import ch1
from toykv.check._core import NOT_ANSWERED
from toykv.model import apply_rope

from check_helpers import assert_hint, assert_right

ROOT = Path(__file__).resolve().parent.parent


def _heads(a, n, hd):                       # [T, n*hd] -> [n, T, hd]
    return a.reshape(len(a), n, hd).transpose(1, 0, 2)


def make_step(rope_at_zero=False, append=True, past=True, key_at_zero=False,
              query_at_zero=False, scale=True, dtype=None):
    """An attention_step as a student writes it, optionally with one mistake."""
    model = ch1.chapter_model()
    layer, c = model.layers[0], model.config
    H, hd = c.n_heads, c.head_dim

    def attention_step(h_new, position, cache):
        q_at = [0 if rope_at_zero or query_at_zero else position]
        k_at = [0 if rope_at_zero or key_at_zero else position]
        q = apply_rope(_heads(h_new @ layer["wq"], H, hd), model.cos[q_at], model.sin[q_at])
        k = apply_rope(_heads(h_new @ layer["wk"], H, hd), model.cos[k_at], model.sin[k_at])
        v = _heads(h_new @ layer["wv"], H, hd)
        keys = np.concatenate([cache["k"], k], axis=1)
        values = np.concatenate([cache["v"], v], axis=1)
        if append:
            cache["k"], cache["v"] = keys, values
        if not past:
            keys, values = k, v
        scores = (q.astype(np.float64) @ keys.transpose(0, 2, 1)) / (np.sqrt(hd) if scale else 1)
        w = np.exp(scores - scores.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        out = (w @ values).transpose(1, 0, 2).reshape(1, H * hd) @ layer["wo"]
        return out if dtype is None else out.astype(dtype)

    return attention_step


def reference_gqa(tile=False):
    """Layer-0 GQA output for the chapter's prompt, by a float64 loop over heads."""
    model = ch1.chapter_model(n_kv_heads=2)
    layer, c = model.layers[0], model.config
    H, Hkv, hd = c.n_heads, c.n_kv_heads, c.head_dim
    h = ch1.attention_input(model, ch1.chapter_tokens()).astype(np.float64)
    S = len(h)
    cos, sin = model.cos[:S], model.sin[:S]
    q = apply_rope(_heads(h @ layer["wq"], H, hd), cos, sin)
    k = apply_rope(_heads(h @ layer["wk"], Hkv, hd), cos, sin)
    v = _heads(h @ layer["wv"], Hkv, hd)
    out = np.zeros((H, S, hd))
    for head in range(H):
        kv = head % Hkv if tile else head // (H // Hkv)
        for i in range(S):
            s = q[head, i] @ k[kv, :i + 1].T / np.sqrt(hd)
            w = np.exp(s - s.max())
            out[head, i] = (w / w.sum()) @ v[kv, :i + 1]
    return out.transpose(1, 0, 2).reshape(S, H * hd) @ layer["wo"]


def said(capsys):
    return capsys.readouterr().out


def test_chapter_model_matches_the_notebook():
    """The checks rebuild the chapter's model: the notebook must build the same one."""
    nb = json.loads((ROOT / "book" / "01_attention.ipynb").read_text())
    code = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    code = "".join(code.split())                  # whitespace-free: line breaks do not matter
    for line in ("config = toykv.config.recap_toy()",          # the config the checks use
                 "toykv.ToyTransformer(config, seed=0)", "rng = np.random.default_rng(0)",
                 "rng.integers(0, config.vocab_size, size=10)"):
        assert "".join(line.split()) in code, line


@pytest.mark.parametrize("fn", [check.ch1_ex1, check.ch1_ex2, check.ch1_ex3, check.ch1_ex4])
def test_none_is_not_answered(fn, capsys):
    assert not fn(None)
    assert NOT_ANSWERED in said(capsys)


def test_ex1_official_answer_passes(capsys):
    assert check.ch1_ex1(make_step())
    assert said(capsys).startswith("Right.")


@pytest.mark.parametrize("mistake, hint", [
    (dict(rope_at_zero=True), "real position"),
    (dict(key_at_zero=True), "new key is rotated as if it sat at position 0 (chapter 3's"),
    (dict(query_at_zero=True), "new query is rotated as if it sat at position 0"),
    (dict(past=False), "every cached key"),
    (dict(append=False), "every cached key"),        # never appended: sees itself only
    (dict(scale=False), "sqrt(head_dim)"),           # the chapter's named mistake
    (dict(scale=False, dtype=np.float16), "sqrt(head_dim)"),   # found at float16 too
    (dict(rope_at_zero=True, dtype=np.float16), "real position"),
])
def test_ex1_typical_mistakes_get_their_hint(mistake, hint, capsys):
    assert not check.ch1_ex1(make_step(**mistake))
    out = said(capsys)
    assert out.startswith("Not right yet") and hint in out


def test_ex1_a_right_float16_output_passes_and_says_so(capsys):
    assert check.ch1_ex1(make_step(dtype=np.float16))
    out = said(capsys)
    assert out.startswith("Right.") and "float16" in out


def test_ex1_right_outputs_but_cache_elsewhere_gets_its_hint(capsys):
    step, own = make_step(), {}

    def attention_step(h_new, position, cache):     # keeps the keys in its own dict
        own.setdefault("k", cache["k"].copy()), own.setdefault("v", cache["v"].copy())
        return step(h_new, position, own)

    assert not check.ch1_ex1(attention_step)
    assert "does not hold one key per position" in said(capsys)


def test_ex1_says_it_runs_a_prompt_of_its_own(capsys):
    def off(h_new, position, cache):                  # right shape, wrong values
        return make_step()(h_new, position, cache) * 1.5

    assert not check.ch1_ex1(off)
    out = said(capsys)
    assert "12-token prompt of its own, not the chapter's" in out
    assert ch1.EX1_PROMPT["n"] == 12 != len(ch1.chapter_tokens())  # what the message says


def test_ex1_odd_returns_get_a_message(capsys):
    for result in (None, "row", np.full((1, 32), 1j), np.zeros((32,)), [[0.0] * 32] * 2):
        assert not check.ch1_ex1(lambda h_new, position, cache, r=result: r)
        assert "should return one row of d_model float values" in said(capsys)


def test_ex1_broken_code_gets_a_message_not_a_traceback(capsys):
    def broken(h_new, position, cache):
        return h_new @ np.zeros((3, 3))

    assert not check.ch1_ex1(broken)
    assert "raised ValueError" in said(capsys)
    assert not check.ch1_ex1(42)
    assert "attention_step function" in said(capsys)


def test_ex2_answers(capsys):
    S = len(ch1.chapter_tokens())
    assert check.ch1_ex2(list(range(S - 1)))
    assert check.ch1_ex2(np.arange(S - 1))                 # any sequence of ints
    for wrong, hint in [([S - 1], "other way round"), (list(range(S)), "already see"),
                        (list(range(1, S)), "count from 0"), ([0, 1], "Not right yet")]:
        said(capsys)
        assert not check.ch1_ex2(wrong)
        out = said(capsys)
        assert hint in out
        assert str(list(range(S - 1))) not in out           # never the answer


@pytest.mark.parametrize("answer", [range(9), (i for i in range(9)), iter(range(9)),
                                    map(int, "012345678"), range(8, -1, -1),
                                    set(range(9)), frozenset(range(9)), tuple(range(9)),
                                    [float(i) for i in range(9)], np.arange(9.0),
                                    [np.int64(i) for i in range(9)], list(range(8, -1, -1))])
def test_ex2_takes_the_positions_in_any_collection_and_order(answer, capsys):
    assert check.ch1_ex2(answer)
    assert said(capsys).startswith("Right.")


@pytest.mark.parametrize("answer, message", [
    ([0.9, 1.9, 2.9, 3.9, 4.9, 5.9, 6.9, 7.9, 8.9], "whole numbers.*0.9"),   # not truncated
    ([0, 1, 2, 3, 4, 5, 6, 7, 8.5], "whole numbers.*8.5"),
    ([0, 0, 1, 2, 3, 4, 5, 6, 7, 8], "each position once"),
    ("0, 1, 2", "list of query positions.*text"), (8, "list of query positions.*got 8"),
    ([[0, 1]], "whole numbers"), ([True, 1], "whole numbers.*bool"), ({0: 1}, "dict"),
])
def test_ex2_refuses_what_is_not_a_list_of_positions(answer, message, capsys):
    assert not check.ch1_ex2(answer)
    out = said(capsys)
    assert out.startswith("Not right yet") and re.search(message, out), out


def test_ex2_a_range_or_generator_that_is_wrong_gets_its_hint(capsys):
    assert not check.ch1_ex2(range(10))
    assert "already see every key" in said(capsys)
    assert not check.ch1_ex2(i for i in range(1, 10))
    assert "count from 0" in said(capsys)


def test_ex3_the_shift_changes_neither_scores_nor_output(capsys):
    # worked out independently: rotate every q and k at position + 100 by hand, in float64
    model = ch1.chapter_model()
    layer, c = model.layers[0], model.config
    h = ch1.attention_input(model, ch1.chapter_tokens()).astype(np.float64)
    S = len(h)

    def scores(at):
        q = apply_rope(_heads(h @ layer["wq"], c.n_heads, c.head_dim), model.cos[at],
                       model.sin[at])
        k = apply_rope(_heads(h @ layer["wk"], c.n_heads, c.head_dim), model.cos[at],
                       model.sin[at])
        return q @ k.transpose(0, 2, 1)

    shifted = np.arange(S) + 100
    assert np.allclose(scores(shifted), scores(np.arange(S)), atol=1e-4)
    for answer in [(False, False), [np.False_, np.False_], np.array([False, False])]:
        assert_right(check.ch1_ex3, answer, capsys)


@pytest.mark.parametrize("answer, hint", [
    ((True, True), "difference of the two rotation angles"),
    ((True, False), "changes only if the scores do"),
    ((False, True), "np.allclose"),
])
def test_ex3_each_wrong_prediction_gets_its_hint(answer, hint, capsys):
    assert_hint(check.ch1_ex3, answer, hint, capsys)


@pytest.mark.parametrize("answer", [(0, 0), (False,), "no", False, (None, None), [0.0, 0.0]])
def test_ex3_asks_for_a_pair_of_booleans(answer, capsys):
    assert not check.ch1_ex3(answer)
    out = said(capsys)
    assert out.startswith("Not right yet: give a pair") and out.count("\n") == 1


def test_ex4_answers(capsys):
    assert check.ch1_ex4(reference_gqa())
    assert said(capsys).startswith("Right.")
    assert check.ch1_ex4(reference_gqa().astype(np.float16))           # right, in float16
    assert "float16" in said(capsys)
    assert not check.ch1_ex4(reference_gqa(tile=True).astype(np.float16))
    assert "np.repeat" in said(capsys)
    assert not check.ch1_ex4(reference_gqa(tile=True))
    assert "np.repeat" in said(capsys)
    assert not check.ch1_ex4(np.zeros((3, 3)))
    assert "shape" in said(capsys)
    assert not check.ch1_ex4(reference_gqa() + 0.1)
    assert said(capsys).startswith("Not right yet.")
