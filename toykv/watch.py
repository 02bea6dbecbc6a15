"""Watching attention: the weights one layer's queries gave its keys, recorded during forward
passes, for views of attention (where it goes, the causal triangle of a prefill, the new row a
decode step adds) and for counts such as the share the first tokens receive.

`with model.watch_attention(layer) as watch: model.forward(...)` records one AttentionStep per
forward pass: the softmax weights of every head, the positions of the queries and of the keys
they were scored against (the keys the cache held and the new ones). Nothing is recorded, and
nothing costs anything, outside the `with` block.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class AttentionStep:
    """One forward pass of one layer: weights [H, T, Tk] (a batch: [B, H, T, Tk]), each query
    row summing to 1 over the keys it may see (0 elsewhere); queries [T] and keys [Tk], their
    positions (a policy's renumbered keys: their places in the cache)."""
    weights: np.ndarray
    queries: np.ndarray
    keys: np.ndarray


class AttentionWatch:
    """Records a model layer's attention weights while active (a context manager, from
    ToyTransformer.watch_attention); `steps` holds one AttentionStep per forward pass."""

    def __init__(self, model, layer: int):
        self.model, self.layer, self.steps = model, layer, []

    def __enter__(self) -> AttentionWatch:
        watching = self.model._watching
        if self.layer in watching:
            raise ValueError(f"layer {self.layer} is already watched: one watch per layer")
        watching[self.layer] = self
        return self

    def __exit__(self, *exc):
        self.model._watching.pop(self.layer, None)
        return False

    def see(self, weights: np.ndarray, seen):
        """Record a step's weights (any layout whose last axes are [T, Tk], heads before them
        in query-head order) and the positions the step's Seen gives."""
        T, Tk = weights.shape[-2:]
        heads = self.model.config.n_heads
        rows = np.array(weights, dtype=np.float32).reshape(-1, heads, T, Tk)
        self.steps.append(AttentionStep(rows[0] if seen.batch is None else rows,
                                        np.array(seen.queries), np.array(seen.positions)))


__all__ = ["AttentionStep", "AttentionWatch"]
