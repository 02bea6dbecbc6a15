"""Self-checks for chapter 1, Attention recap (book/01_attention.ipynb).

The checks rebuild the chapter's model (the same config and seed as the chapter's first code
cell) and compute every expected value with toykv's own attention layer.
"""
from __future__ import annotations

import numpy as np

from ..config import recap_toy
from ..model import ToyTransformer, apply_rope
from ._core import _say, answer_check, expect_type

RTOL, ATOL = 1e-4, 1e-5        # float32 rounding between two correct implementations


def chapter_model(**changes) -> ToyTransformer:
    """The chapter's model: d_model 32, 4 heads of 8, 2 layers, seed 0 (changes: config fields)."""
    return ToyTransformer(recap_toy(**changes), seed=0)


def chapter_tokens(n: int = 10, seed: int = 0) -> np.ndarray:
    """The chapter's prompt (n=10, seed=0), or another random prompt for the same model."""
    return np.random.default_rng(seed).integers(0, 64, size=n)


def attention_input(model: ToyTransformer, token_ids) -> np.ndarray:
    """h: layer 0's normalised attention input for token_ids. [S, D]"""
    return model.rms_norm(model.embed[token_ids], model.layers[0]["attn_norm"])


def _layer0(model, h):
    """toykv's layer-0 attention without a cache. [S, D]"""
    return model.attention(h, model.layers[0], 0, np.arange(len(h)), None)


# -- exercise 1: a KV cache for one attention layer --------------------------------------
def _wrong_step(model, h_new, position, cache, rope_at_zero=False, past=True):
    """A reference decode step with one typical mistake (for the hints only). [1, D]"""
    c, layer = model.config, model.layers[0]
    H, hd = c.n_heads, c.head_dim
    at = [0 if rope_at_zero else position]
    cos, sin = model.cos[at], model.sin[at]                           # [1, hd]
    q, k, v = ((h_new @ layer[w]).reshape(1, H, hd).transpose(1, 0, 2)  # [H, 1, hd]
               for w in ("wq", "wk", "wv"))
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    cache["k"] = np.concatenate([cache["k"], k], axis=1)
    cache["v"] = np.concatenate([cache["v"], v], axis=1)
    keys, values = (cache["k"], cache["v"]) if past else (k, v)
    scores = q @ keys.transpose(0, 2, 1) / np.sqrt(hd)                # [H, 1, t+1]
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ values).transpose(1, 0, 2).reshape(1, H * hd) @ layer["wo"]


def _run_steps(step, model, h):
    """Feed h one row at a time to step(h_new, position, cache); returns (outputs, cache)."""
    H, hd = model.config.n_heads, model.config.head_dim
    cache = {"k": np.zeros((H, 0, hd), np.float32), "v": np.zeros((H, 0, hd), np.float32)}
    rows = [np.asarray(step(h[i:i + 1], i, cache)) for i in range(len(h))]
    return rows, cache


def ch1_ex1(answer):
    """answer: your attention_step(h_new, position, cache) function."""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, "right")
    if not callable(answer):
        return expect_type(answer, (), "answer should be your attention_step function")
    model = chapter_model()
    h = attention_input(model, chapter_tokens(12, seed=7))           # a prompt of its own
    D = model.config.d_model
    try:
        rows, cache = _run_steps(answer, model, h)
    except Exception as err:                                        # the student's code failed
        return _say(False, f"Not right yet: attention_step raised {type(err).__name__}: {err}")
    if any(row.shape != (1, D) for row in rows):
        shapes = sorted({str(row.shape) for row in rows})
        return _say(False, f"Not right yet: attention_step should return one row of d_model "
                           f"values, shape (1, {D}); it returned shapes {', '.join(shapes)}.")
    ours = np.concatenate(rows)

    def same(reference):
        return np.allclose(ours, reference, rtol=RTOL, atol=ATOL)

    held = np.shape(cache.get("k"))[1:2] if isinstance(cache, dict) else ()
    if same(_layer0(model, h)):
        outcome = "right" if held == (len(h),) else "not appended"
    elif same(np.concatenate(_run_steps(lambda *a: _wrong_step(model, *a, rope_at_zero=True),
                                        model, h)[0])):
        outcome = "rope at 0"
    elif same(np.concatenate(_run_steps(lambda *a: _wrong_step(model, *a, past=False),
                                        model, h)[0])):
        outcome = "no past"
    else:
        outcome = "other"
    return answer_check(outcome, "right", hints=[
        ("rope at 0", "the new query and key must be rotated by the angle of their real "
                      "position (model.cos[[position]], model.sin[[position]]), not of position 0: "
                      "the cached keys keep their own positions."),
        ("no past", "the new query must attend over every cached key and value plus its own, "
                    "not over its own alone: append to the cache, then attend over all of it."),
        ("not appended", "the outputs are right, but the cache does not hold one key per "
                         "position afterwards: append the new k and v to cache['k'] and "
                         "cache['v'] (axis 1) inside attention_step."),
    ], wrong="Compare your outputs row by row with the full computation `ours`: the first row "
             "that differs tells you which step goes wrong.")


# -- exercise 2: which rows change without the mask -----------------------------------------
def ch1_ex2(answer):
    """answer: the query positions whose output changes when the causal mask is dropped."""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, [])
    try:
        rows = sorted(int(i) for i in np.asarray(answer).ravel())
    except (TypeError, ValueError):
        return _say(False, "Not right yet: give a list of query positions, e.g. [0, 3].")
    model = chapter_model()
    S = len(chapter_tokens())
    positions = np.arange(S)
    allowed = model.mask(positions, positions, 0)                  # [S, S] causal
    expected = [i for i in range(S) if not allowed[i].all()]       # rows that had keys hidden
    return answer_check(rows, expected, hints=[
        ([S - 1], "it is the other way round: which query positions had keys hidden from them "
                  "by the mask?"),
        (list(range(S)), "the last position could already see every key, so dropping the mask "
                         "changes nothing for it."),
        (list(range(1, S)), "positions count from 0: position 0 also had keys hidden from it."),
        (list(range(S - 2)), "positions count from 0 to S - 1: which is the only one that "
                             "already saw every key?"),
    ])


# -- exercise 4: grouped-query attention ------------------------------------------------------
def _tiled_heads(model):
    """The same GQA model with its query heads reordered so that query head i meets KV head
    i % n_kv_heads instead of i // group: the np.tile mistake, computed by toykv itself."""
    c = model.config
    H, hd, G = c.n_heads, c.head_dim, c.group_size
    order = [kv + c.n_kv_heads * g for kv in range(c.n_kv_heads) for g in range(G)]
    cols = np.concatenate([np.arange(i * hd, (i + 1) * hd) for i in order])
    wrong = ToyTransformer(c, seed=0)
    for layer in wrong.layers:
        layer["wq"] = np.asfortranarray(layer["wq"][:, cols])
        layer["wo"] = np.ascontiguousarray(layer["wo"][cols, :])
    return wrong


def ch1_ex4(answer):
    """answer: your GQA attention output of layer 0 for the chapter's prompt. [S, D]"""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, "right")
    model = chapter_model(n_kv_heads=2)
    h = attention_input(model, chapter_tokens())
    expected = _layer0(model, h)
    try:
        ours = np.asarray(answer, dtype=np.float64)
    except (TypeError, ValueError):
        return _say(False, "Not right yet: give the attention output as an array.")
    if ours.shape != expected.shape:
        return _say(False, f"Not right yet: expected an array of shape {expected.shape} "
                           f"(positions, d_model), got {ours.shape}.")

    def same(reference):
        return np.allclose(ours, reference, rtol=RTOL, atol=ATOL)

    outcome = ("right" if same(expected) else
               "tiled" if same(_layer0(_tiled_heads(model), h)) else "other")
    return answer_check(outcome, "right", hints=[
        ("tiled", "query head i belongs to group i // 2, so its KV head is i // 2: repeat each "
                  "KV head for its group (np.repeat, heads 0, 0, 1, 1), not the whole stack "
                  "(np.tile, heads 0, 1, 0, 1)."),
    ])


__all__ = ["ch1_ex1", "ch1_ex2", "ch1_ex4", "chapter_model", "chapter_tokens", "attention_input"]
