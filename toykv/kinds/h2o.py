"""Heavy hitters (H2O, zhang2023h2o): keep the last `recent` tokens and the older tokens that
received the most attention so far, summed over queries and heads, within a budget. H2O
chooses per head; this kind chooses per layer.

It needs the attention weights of each query: after every query it adds that query's weights
to what each key received and, over the budget, evicts the lightest older token. The next
query's keys therefore depend on the weights of the one before it, so a step of several tokens
goes one query at a time inside the softmax (`Seen.rows`: `visible`, then `saw`): each query
sees exactly what the cache would hold had the tokens come one per step, and the step ends
holding what those steps would hold. With exact=True a step of T tokens gives the bits of T
one-token steps (tests/test_policies.py). The products stay whole-step products; only the
softmax and the bookkeeping go query by query.

With no budget (CachePolicy('full')) it keeps every token and only counts, which is what
toykv.quality.attention_share reads. What it keeps depends on every query it saw, so it never
rolls back. `nbytes` counts the totals it holds beside the keys and values: one float64 per
held token and layer.
"""
from __future__ import annotations

import numpy as np

from .kept import KeptLayer


class HeavyHitterLayer(KeptLayer):
    """A layer that keeps the recent tokens and the heaviest older ones; `received` [n] is the
    attention each held token has received."""

    policies = ("h2o",)                          # and 'full', counting (CachePolicy.kind)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.received = np.zeros(0, np.float64)
        self._step = None                        # a step's candidates, query by query

    @staticmethod
    def keep_older(policy, older: int, received) -> np.ndarray:
        """The budget - recent older tokens that received the most attention (ties: older)."""
        heavy = np.argsort(-received[:older], kind="stable")[:policy.budget - policy.window]
        return np.sort(heavy)

    def nbytes(self, length: int) -> int:
        """The held keys and values, and one float64 total per held token."""
        held = len(self.positions)
        return super().nbytes(length) + held * (self.rows or 1) * self.received.itemsize

    # -- a step ------------------------------------------------------------------------
    def append(self, new: dict, start: int):
        """The held tokens then the new ones; with a budget, each query sees the held
        tokens still kept when it arrives (rows), not a mask fixed for the whole step."""
        if self.policy.budget is None:
            return super().append(new, start)
        seen = super().append(new, start)        # narrow() below leaves the mask causal
        n, T = len(self.positions), len(seen.queries)
        self._step = {"n": n, "live": np.arange(n + T) < n,
                      "positions": np.concatenate([self.positions, np.arange(start, start + T)]),
                      "received": np.concatenate([self.received, np.zeros(T)])}
        seen.rows = self
        return seen

    def narrow(self, queries, keys, allowed):
        if self.policy.budget is None:
            return super().narrow(queries, keys, allowed)
        return allowed                                      # rows decide, query by query

    def visible(self, t: int) -> np.ndarray:
        """Bool [n + T]: the keys query t of the step sees: the tokens held when it arrives,
        and itself."""
        step = self._step
        seen = step["live"].copy()
        seen[step["n"] + t] = True
        return seen

    def saw(self, t: int, weights: np.ndarray):
        """Query t's weights [..., n + T]: add them to what each key received, hold query t's
        token, and evict down to the budget as a one-token step's commit would."""
        step = self._step
        step["received"] += weights.reshape(-1, weights.shape[-1]).sum(axis=0)
        live = step["live"]
        live[step["n"] + t] = True
        index = np.flatnonzero(live)
        keep = self.choose(self.policy, step["positions"][index], step["received"][index])
        if len(keep) < len(index):
            live[index] = False
            live[index[keep]] = True

    def observe(self, weights: np.ndarray):
        """Add this step's attention weights [..., T, Tk] to what each key received (a step
        with no budget: only counting)."""
        if self.staged is not None:
            self.staged[2][:] += weights.reshape(-1, weights.shape[-1]).sum(axis=0)

    def commit(self, start: int, T: int, ids=None):
        step, self._step = self._step, None
        if step is None:
            return super().commit(start, T, ids)
        if self.staged is None:
            return
        self.staged = None
        keep = np.flatnonzero(step["live"])
        if len(keep) < len(step["live"]):
            for array in self.batched.values():
                array[:, :len(keep)] = array[:, keep]
        self.positions = step["positions"][keep]
        self.received = step["received"][keep]

    def discard(self):
        self._step = None
        super().discard()

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
