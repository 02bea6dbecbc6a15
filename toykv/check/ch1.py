"""Self-checks for chapter 1, Attention recap (book/01_attention.ipynb).

The checks rebuild the chapter's model (the same config and seed as the chapter's first code
cell) and compute every expected value with toykv's own attention layer.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ..config import recap_toy
from ..model import ToyTransformer, apply_rope
from ._core import _say, answer_check, describe, plain, whole

RTOL, ATOL = 1e-4, 1e-5        # float32 rounding between two correct implementations
HALF_TOL = 4e-3                # float16 rounding (its spacing near 1 is 1e-3): a right answer
HALF_NOTE = ("Your output is float16, so the check compared it at float16's precision (about "
             "three significant digits); the chapter's model computes in float32.")


def _tolerance(array) -> tuple[float, float]:
    """(rtol, atol) for comparing an answer of this dtype: float32 rounding, or float16's."""
    return (HALF_TOL, HALF_TOL) if array.dtype.itemsize < 4 else (RTOL, ATOL)


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
EX1_PROMPT = dict(n=12, seed=7)     # the check's own prompt: not the chapter's 10 tokens


def _wrong_step(model, h_new, position, cache, q_at=None, k_at=None, past=True, scale=True):
    """A reference decode step with one typical mistake (for the hints only): the query or
    the key rotated at position q_at / k_at instead of its own, no past, or no 1/sqrt(d_h)
    scale on the scores. [1, D]"""
    c, layer = model.config, model.layers[0]
    H, hd = c.n_heads, c.head_dim

    def rotated(x, at):                                                  # [H, 1, hd]
        at = [position if at is None else at]
        return apply_rope(x, model.cos[at], model.sin[at])

    q, k, v = ((h_new @ layer[w]).reshape(1, H, hd).transpose(1, 0, 2)  # [H, 1, hd]
               for w in ("wq", "wk", "wv"))
    q, k = rotated(q, q_at), rotated(k, k_at)
    cache["k"] = np.concatenate([cache["k"], k], axis=1)
    cache["v"] = np.concatenate([cache["v"], v], axis=1)
    keys, values = (cache["k"], cache["v"]) if past else (k, v)
    scores = q @ keys.transpose(0, 2, 1) / (np.sqrt(hd) if scale else 1)   # [H, 1, t+1]
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ values).transpose(1, 0, 2).reshape(1, H * hd) @ layer["wo"]


MISTAKES = {                 # outcome -> the mistake, as _wrong_step's arguments
    "rope at 0": dict(q_at=0, k_at=0),
    "key at 0": dict(k_at=0),
    "query at 0": dict(q_at=0),
    "no past": dict(past=False),
    "no scale": dict(scale=False),
}


def _run_steps(step, model, h):
    """Feed h one row at a time to step(h_new, position, cache); returns (outputs, cache)."""
    H, hd = model.config.n_heads, model.config.head_dim
    cache = {"k": np.zeros((H, 0, hd), np.float32), "v": np.zeros((H, 0, hd), np.float32)}
    rows = [np.asarray(step(h[i:i + 1], i, cache)) for i in range(len(h))]
    return rows, cache


def _held(cache) -> tuple:
    """Positions the student's cache holds afterwards (its axis 1), or () if unreadable."""
    try:
        return np.shape(cache["k"])[1:2]
    except (KeyError, TypeError, ValueError, IndexError):
        return ()


def ch1_ex1(answer):
    """answer: your attention_step(h_new, position, cache) function. The check runs it on a
    prompt of its own (12 tokens), from an empty cache, and compares with toykv's layer 0."""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, "right")
    if not callable(answer):
        return _say(False, "Not right yet: answer should be your attention_step function "
                           f"itself (answer = attention_step), got {describe(plain(answer))}.")
    model = chapter_model()
    n = EX1_PROMPT["n"]
    h = attention_input(model, chapter_tokens(**EX1_PROMPT))
    D = model.config.d_model
    try:
        rows, cache = _run_steps(answer, model, h)
    except Exception as err:                                        # the student's code failed
        return _say(False, f"Not right yet: on the check's own {n}-token prompt, "
                           f"attention_step raised {type(err).__name__}: {err}")
    if any(row.shape != (1, D) or row.dtype.kind not in "fiu" for row in rows):
        shapes = sorted({f"shape {row.shape} ({row.dtype})" for row in rows})
        return _say(False, f"Not right yet: attention_step should return one row of d_model "
                           f"float values, shape (1, {D}); it returned {', '.join(shapes)}.")
    ours = np.concatenate(rows)
    rtol, atol = _tolerance(ours)

    def same(reference):
        return np.allclose(ours, reference, rtol=rtol, atol=atol)

    def with_mistake(changes):
        return np.concatenate(_run_steps(lambda *a: _wrong_step(model, *a, **changes),
                                         model, h)[0])

    if same(_layer0(model, h)):
        outcome = "right" if _held(cache) == (n,) else "not appended"
    else:
        outcome = next((name for name, changes in MISTAKES.items()
                        if same(with_mistake(changes))), "other")
    return answer_check(outcome, "right", hints=[
        ("rope at 0", "the new query and key must be rotated by the angle of their real "
                      "position (model.cos[[position]], model.sin[[position]]), not of position 0: "
                      "the cached keys keep their own positions."),
        ("key at 0", "the new key is rotated as if it sat at position 0 (chapter 3's RoPE "
                     "offset bug): rotate it by the angle of its real position, "
                     "model.cos[[position]], as the query is; it is cached that way for good."),
        ("query at 0", "the new query is rotated as if it sat at position 0: rotate it by the "
                       "angle of its real position, model.cos[[position]], as the key is."),
        ("no past", "the new query must attend over every cached key and value plus its own, "
                    "not over its own alone: append to the cache, then attend over all of it."),
        ("not appended", "the outputs are right, but the cache does not hold one key per "
                         "position afterwards: append the new k and v to cache['k'] and "
                         "cache['v'] (axis 1) inside attention_step."),
        ("no scale", "divide the scores by sqrt(head_dim) before the softmax, as attend does: "
                     "without the 1/sqrt(d_h) scale the weights come out too peaked."),
    ], right=HALF_NOTE if rtol == HALF_TOL else "",
       wrong=f"The check ran your function on a {n}-token prompt of its own, not the "
             "chapter's; compare your rows with `ours` on the chapter's prompt: the first row "
             "that differs tells you which step goes wrong.")


# -- exercise 2: which rows change without the mask -----------------------------------------
def _positions(answer) -> list[int] | str:
    """The positions an answer names, in order (a list, tuple, set, range, generator or 1-d
    array of whole numbers; 3.0 counts as 3), or a message saying what is wrong with it."""
    if isinstance(answer, (set, frozenset, range, Iterator)):
        try:
            answer = tuple(answer)
        except Exception as err:                                   # a generator that fails
            return f"reading your positions raised {type(err).__name__}: {err}"
    items = plain(answer)
    if not isinstance(items, tuple):
        return f"give a list of query positions, e.g. [0, 3], got {describe(items)}."
    rows = [whole(i) for i in items]
    if None in rows:
        bad = items[rows.index(None)]
        return f"positions are whole numbers (0, 1, 2, ...), one of yours is {describe(bad)}."
    if len(set(rows)) != len(rows):
        return "give each position once."
    return sorted(rows)


def ch1_ex2(answer):
    """answer: the query positions whose output changes when the causal mask is dropped."""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, [])
    rows = _positions(answer)
    if isinstance(rows, str):
        return _say(False, f"Not right yet: {rows}")
    model = chapter_model()
    S = len(chapter_tokens())
    positions = np.arange(S)
    allowed = model.mask(positions, positions, 0)                  # [S, S] causal
    expected = [i for i in range(S) if not allowed[i].all()]       # rows that had keys hidden
    typical = {"reversed": [S - 1], "all": list(range(S)), "from 1": list(range(1, S)),
               "one short": list(range(S - 2))}
    outcome = "right" if rows == expected else \
        next((name for name, wrong in typical.items() if rows == wrong), "other")
    return answer_check(outcome, "right", hints=[
        ("reversed", "it is the other way round: which query positions had keys hidden from "
                     "them by the mask?"),
        ("all", "the last position could already see every key, so dropping the mask "
                "changes nothing for it."),
        ("from 1", "positions count from 0: position 0 also had keys hidden from it."),
        ("one short", "positions count from 0 to S - 1: which is the only one that already "
                      "saw every key?"),
    ])


# -- exercise 3: shifting every position -------------------------------------------------------
EX3_SHIFT = 100


def _shift_changes(model, h, shift) -> tuple[bool, bool]:
    """(do layer 0's scores change, does its output change) when every query and key is rotated
    at position + shift, computed with toykv's own layer (float32 rounding forgiven)."""
    S, H, hd = len(h), model.config.n_heads, model.config.head_dim
    layer = model.layers[0]

    def scores(at):                                                     # [H, S, S]
        q, k = ((h @ layer[w]).reshape(S, H, hd).transpose(1, 0, 2) for w in ("wq", "wk"))
        q, k = (apply_rope(x, model.cos[at], model.sin[at]) for x in (q, k))
        return q @ k.transpose(0, 2, 1) / np.sqrt(hd)

    at = np.arange(S)
    moved = model.attention(h, layer, 0, at + shift, None)            # toykv, shifted
    return (not np.allclose(scores(at + shift), scores(at), atol=1e-4),
            not np.allclose(moved, _layer0(model, h), rtol=RTOL, atol=ATOL))


def ch1_ex3(answer):
    """answer: (do the scores change, does the output change) when every position is shifted
    by 100, as a pair of True/False."""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, "right")
    pair = plain(answer)
    if not (isinstance(pair, tuple) and len(pair) == 2
            and all(isinstance(x, bool) for x in pair)):
        return _say(False, "Not right yet: give a pair (scores change, output changes) of "
                           f"True/False, got {describe(pair)}.")
    model = chapter_model()
    expected = _shift_changes(model, attention_input(model, chapter_tokens()), EX3_SHIFT)
    outcomes = {(True, True): "both move", (True, False): "scores only",
                (False, True): "output only", (False, False): "neither", expected: "right"}
    return answer_check(outcomes[pair], "right", hints=[
        ("both move", "compare the shifted weights with the unshifted ones: a score "
                      "q_i . k_j depends only on the difference of the two rotation angles, "
                      "i - j, and a shift of every position leaves every difference as it was."),
        ("scores only", "the output is the weights times the values (values are not "
                        "rotated): it changes only if the scores do. Look at the scores again: "
                        "what does a rotation of both q_i and k_j by the same extra angle do "
                        "to their dot product?"),
        ("output only", "the weights are the same and the values are not rotated, so the "
                        "weighted sums are the same too: compare with np.allclose, because the "
                        "rotated vectors round differently in float32's last bits."),
    ], right="Scores depend on i - j only: a common shift changes none.")


# -- exercise 4: grouped-query attention ------------------------------------------------------
def _tiled_heads(model):
    """The same GQA model with its query heads reordered so that query head i meets KV head
    i % n_kv_heads instead of i // group: the np.tile mistake, computed by toykv itself."""
    c = model.config
    hd, G = c.head_dim, c.group_size
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
        ours = np.asarray(answer)
    except (TypeError, ValueError):                                  # ragged nested lists
        ours = None
    if ours is None or ours.dtype.kind not in "fiu":                 # not complex, str, object
        got = describe(answer) if ours is None or ours.dtype.kind == "O" or ours.ndim == 0 \
            else f"an array of {ours.dtype}"
        return _say(False, f"Not right yet: give the attention output as an array of real "
                           f"numbers, got {got}.")
    rtol, atol = _tolerance(ours)
    ours = ours.astype(np.float64)
    if ours.shape != expected.shape:
        return _say(False, f"Not right yet: expected an array of shape {expected.shape} "
                           f"(positions, d_model), got {ours.shape}.")

    def same(reference):
        return np.allclose(ours, reference, rtol=rtol, atol=atol)

    outcome = ("right" if same(expected) else
               "tiled" if same(_layer0(_tiled_heads(model), h)) else "other")
    return answer_check(outcome, "right", hints=[
        ("tiled", "query head i belongs to group i // 2, so its KV head is i // 2: repeat each "
                  "KV head for its group (np.repeat, heads 0, 0, 1, 1), not the whole stack "
                  "(np.tile, heads 0, 1, 0, 1)."),
    ], right=HALF_NOTE if rtol == HALF_TOL else "")


__all__ = ["ch1_ex1", "ch1_ex2", "ch1_ex3", "ch1_ex4", "chapter_model", "chapter_tokens",
           "attention_input"]
