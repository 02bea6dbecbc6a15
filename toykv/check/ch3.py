"""Self-checks for chapter 3, Why the cache is exact (book/03_why_exact.ipynb).

The checks rebuild the chapter's exact model and prompt (the source toy, seed 0, a random
32-token prompt from numpy's default_rng(0)) and compute expected values with toykv.
"""
from __future__ import annotations

import functools

import numpy as np

from .. import flops
from ..config import source_toy
from ..model import ToyTransformer
from ._core import answer_check

SEQ_LEN, EDIT = 12, 5          # exercises 2 and 3: a 12-token sequence edited at position 5


def chapter_sequence(n: int = SEQ_LEN) -> list[int]:
    """The first n tokens of the chapter's prompt."""
    prompt = np.random.default_rng(0).integers(0, source_toy().vocab_size, size=32)
    return [int(t) for t in prompt[:n]]


def edited(ids, position):
    """ids with the token at `position` replaced, as the chapter edits it."""
    new = list(ids)
    new[position] = (new[position] + 1) % source_toy().vocab_size
    return new


def _cached_kv(model, ids):
    """Every layer's K and V after a prefill of ids: a list of (k, v) arrays [S, H_kv, d_h]."""
    cache = model.new_cache()
    model.forward(ids, cache)
    return [(layer["k"][:len(ids)], layer["v"][:len(ids)]) for layer in cache.layers]


def _unchanged(model, a, b):
    """Boolean [2 * n_layers, S]: True where a (layer, K or V) row holds identical values."""
    rows = []
    for (ka, va), (kb, vb) in zip(_cached_kv(model, a), _cached_kv(model, b)):
        rows += [np.all(ka == kb, axis=(1, 2)), np.all(va == vb, axis=(1, 2))]
    return np.array(rows)


@functools.cache
def _ex2_expected() -> tuple[int, int]:
    """(positions unchanged in every layer, unchanged entries), measured on toykv's cache."""
    model = ToyTransformer(source_toy(), seed=0, exact=True)
    seq = chapter_sequence()
    same = _unchanged(model, seq, edited(seq, EDIT))
    return int(same.all(axis=0).sum()), int(same.sum())


def ch3_ex2(answer):
    """answer: (positions whose K and V are unchanged in every layer, unchanged
    (position, layer, K or V) entries in total) for the edit at position 5 of 12 tokens."""
    expected = _ex2_expected()
    L, n, j = source_toy().n_layers, SEQ_LEN, EDIT
    return answer_check(answer, expected, hints=[
        ((j, 2 * L * j), "in layer 0 the keys and values after the edit see only their own "
                         "token: there only position j changes."),
        ((j, 2 * L * n - 2 * (n - j) * (L - 1)),
         "position j's own key and value change in layer 0 too."),
        ((j, expected[1] // 2), "count K and V: each (position, layer) holds two entries."),
        ((j + 1, expected[1]), "positions count from 0: positions 0..j-1 are j positions."),
        ((j - 1, expected[1]), "positions count from 0: positions 0..j-1 are j positions."),
        ((expected[1], expected[0]), "the pair is (positions, entries)."),
    ], wrong="Give a pair (positions, entries).", what="a pair (positions, entries) of whole "
                                                        "numbers")


@functools.cache
def _ex3_expected() -> int:
    """FLOPs toykv counts for the edited sequence's positions 5.. after 5 cached ones."""
    model = ToyTransformer(source_toy(), seed=0, exact=True)
    cache = model.new_cache()
    model.forward(edited(chapter_sequence(), EDIT)[:EDIT], cache)    # the reusable prefix
    start = model.flops
    model.forward(edited(chapter_sequence(), EDIT)[EDIT:], cache)    # counted by toykv
    return model.flops - start


def ch3_ex3(answer):
    """answer: matmul FLOPs of computing the edited sequence from position 5 on, with the
    cached positions 0..4 reused."""
    config = source_toy()
    expected = _ex3_expected()
    new = SEQ_LEN - EDIT
    return answer_check(answer, expected, hints=[
        (flops.full_pass_flops(config, new), "the 7 new queries also score the 5 cached keys: "
                                             "that is a forward pass of 7 tokens after 5 "
                                             "cached ones, not a full pass of 7."),
        (flops.full_pass_flops(config, SEQ_LEN), "that is recomputing all 12 tokens; the "
                                                 "question asks for the reuse."),
        (flops.full_pass_flops(config, SEQ_LEN) - expected,
         "that is what reuse saved; the question asks what it cost."),
    ], what="a whole number of FLOPs")


__all__ = ["ch3_ex2", "ch3_ex3", "chapter_sequence", "edited"]
