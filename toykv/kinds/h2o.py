"""Heavy hitters (H2O, zhang2023h2o): keep the last `recent` tokens and the older tokens that
received the most attention so far, summed over queries and heads, within a budget. H2O
chooses per head; this kind chooses per layer.

It needs the attention weights of each step: `observe` adds them to what each key received.
With no budget (CachePolicy('full')) it keeps every token and only counts, which is what
toykv.quality.attention_share reads. A step of several tokens chooses the heavy hitters once,
at its end, not after every token: one token per step is the policy exactly (chapter 12 says
so). What it keeps depends on every query it saw, so it never rolls back.
"""
from __future__ import annotations

import numpy as np

from .kept import KeptLayer


class HeavyHitterLayer(KeptLayer):
    """A layer that keeps the recent tokens and the heaviest older ones; `received` [n] is the
    attention each held token has received."""

    steps_split = False                          # heavy hitters chosen once per step
    policies = ("h2o",)                          # and 'full', counting (CachePolicy.kind)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.received = np.zeros(0, np.float64)

    @staticmethod
    def keep_older(policy, older: int, received) -> np.ndarray:
        """The budget - recent older tokens that received the most attention (ties: older)."""
        heavy = np.argsort(-received[:older], kind="stable")[:policy.budget - policy.window]
        return np.sort(heavy)

    def kept_older(self, keys: np.ndarray, start: int, window: int) -> np.ndarray:
        """Held tokens older than the window: the heavy hitters chosen before this step."""
        return (np.arange(len(keys)) < len(self.positions)) & (keys < start - window)

    def observe(self, weights: np.ndarray):
        """Add this step's attention weights [..., T, Tk] to what each key received."""
        if self.staged is not None:
            self.staged[2][:] += weights.reshape(-1, weights.shape[-1]).sum(axis=0)

    def _received(self, step: np.ndarray, T: int):
        self._candidates = np.concatenate([self.received, np.zeros(T)]) + step
        return self._candidates

    def _kept(self, keep: np.ndarray):
        self.received = self._candidates[keep]
        del self._candidates

    def rollback_floor(self, length: int) -> int:
        return length

    def floor_reason(self, length: int, n: int) -> str:
        return (f"cache (policy {self.policy.name!r}) cannot roll back: what it keeps, and the "
                "attention it counted, depend on every query it saw")

    def copy(self, length: int, slots: int, shared: dict) -> HeavyHitterLayer:
        twin = super().copy(length, slots, shared)
        twin.received = self.received.copy()
        return twin


__all__ = ["HeavyHitterLayer"]
