"""What eviction kinds share: a layer that keeps some of the positions it saw, packed in order.

The held tokens sit in slots 0..n-1 in position order, with `positions` [n] their original
positions. A step writes its tokens after the held ones (invisible until commit, as a full
layer's); commit keeps what the kind's rule chooses (`choose`) and packs it into slots
0..n'-1. Each query of a multi-token step sees what the rule would hold when it arrived
(`narrow`), so a step of T tokens gives what T steps of one token give where the rule allows.

Positions: keys are cached after RoPE, at their original positions (positions='original').
positions='renumbered' is StreamingLLM's choice (xiao2024streamingllm): a key is rotated by its
place in the cache instead, so the kept tokens read as one unbroken sequence; since RoPE is a
rotation, a stored key moves there by being rotated by the difference. Renumbering happens
once per step, so a step of several tokens is refused once the budget is reached.
"""
from __future__ import annotations

import numpy as np

from ..rope import apply_rope, rope_cos_sin
from .base import Seen
from .full import FullLayer


def rotate(x: np.ndarray, delta: np.ndarray, theta: float) -> np.ndarray:
    """x [..., n, heads, d] (or [..., n, d]) turned by RoPE's angle for delta [n] positions."""
    cos, sin = rope_cos_sin(delta, x.shape[-1], theta)       # [n, d]
    if x.ndim == 4:                                          # [B, n, heads, d]
        cos, sin = cos[:, None], sin[:, None]
    return apply_rope(x, cos, sin)


class KeptLayer(FullLayer):
    """A layer that keeps the positions its rule chooses, at most policy.budget of them
    (None: all), packed in slots 0..n-1. Subclasses give the rule (`keep_older`), which older
    held tokens a query of a multi-token step still sees (`kept_older`), and the CachePolicy
    names they keep for (`policies`)."""

    policies: tuple = ()

    def __init__(self, spec, codec, rows, slots, max_slots, new=np.zeros, policy=None,
                 theta=10000.0):
        self.policy, self.theta = policy, theta
        if policy.budget is not None:
            slots = min(slots, policy.budget + 64)           # room for the budget and a chunk
        super().__init__(spec, codec, rows, slots, max_slots, new)
        self.positions = np.zeros(0, np.int64)

    # -- the rule -----------------------------------------------------------------------
    @classmethod
    def choose(cls, policy, positions: np.ndarray, received) -> np.ndarray:
        """Indices (ascending) of the candidates to keep, given their positions [n]
        (ascending) and the attention each received [n] (None where no kind counts it): all
        within the budget, else the older ones the kind keeps and the window."""
        n = len(positions)
        if policy.budget is None or n <= policy.budget:
            return np.arange(n)
        older = n - policy.window                                # the window: always kept
        return np.concatenate([cls.keep_older(policy, older, received), np.arange(older, n)])

    @staticmethod
    def keep_older(policy, older: int, received) -> np.ndarray:
        """Indices (ascending) among the `older` candidates before the window to keep."""
        raise NotImplementedError

    def kept_older(self, keys: np.ndarray, start: int, window: int) -> np.ndarray:
        """Bool [Tk]: keys older than a query's window that it still sees."""
        raise NotImplementedError

    # -- what it holds ----------------------------------------------------------------
    def held(self, length: int) -> int:
        return length if self.policy.budget is None else min(length, self.policy.budget)

    def held_positions(self, length: int) -> np.ndarray:
        return self.positions.copy()

    def stored(self, name: str, length: int) -> np.ndarray:
        return self.read(name, 0, len(self.positions))

    # -- a step ----------------------------------------------------------------------
    def check_step(self, start: int, T: int):
        """Renumbered positions are numbered once per step: several tokens at once are the
        policy only while nothing needs numbering (the budget not reached)."""
        budget = self.policy.budget
        if (self.policy.positions == "renumbered" and T > 1 and budget is not None
                and start + T > budget):
            raise ValueError(f"a cache with renumbered positions takes one token per step once "
                             f"it reaches its budget ({budget}): a step of {T} tokens after "
                             f"{start} would number them once for all (feed one at a time)")

    def append(self, new: dict, start: int) -> Seen:
        """The held tokens then the new ones (renumbered: the held keys turned to their places
        just before the new tokens), each query narrowed to what the rule would hold."""
        T = next(iter(new.values())).shape[1]
        n = len(self.positions)
        self.grow(n + T)
        self.write(new, n)
        self.staged = (start, T, np.zeros(n + T))                # + attention received
        out = {name: self.read(name, 0, n + T) for name in new}
        positions = np.concatenate([self.positions, np.arange(start, start + T)])
        if self.policy.positions == "renumbered" and n:
            place = np.arange(n) + start - n                   # just before the new tokens
            key = self.spec.rotated             # None: keys are turned after reading (lowrank)
            if key is not None:
                out[key] = out[key].copy()
                out[key][:, :n] = rotate(out[key][:, :n], place - self.positions, self.theta)
            positions[:n] = place
        queries = np.arange(start, start + T)
        allowed = self.spec.allowed(queries, positions)
        return Seen(out, positions, self.narrow(queries, positions, allowed), queries)

    def narrow(self, queries: np.ndarray, keys: np.ndarray, allowed):
        """The step's mask [T, Tk] narrowed so each query sees what the rule keeps when it
        arrives: its window and the older tokens the rule still holds."""
        window = self.policy.window
        if window is None or len(queries) == 1 or self.policy.positions == "renumbered":
            return allowed                                   # numbered once per step
        start = queries[0]
        mine = (keys[None, :] >= queries[:, None] - window) | \
            self.kept_older(keys, start, window)[None, :]
        causal = keys[None, :] <= queries[:, None]
        return mine & causal if allowed is None else mine & allowed

    def commit(self, start: int, T: int, ids=None):
        """Keep what the rule chooses of the held and the new tokens, packed in order."""
        if self.staged is None:
            return
        received = self.staged[2]
        self.staged = None
        positions = np.concatenate([self.positions, np.arange(start, start + T)])
        keep = self.choose(self.policy, positions, self._received(received, T))
        if len(keep) < len(positions):
            for array in self.batched.values():
                array[:, :len(keep)] = array[:, keep]
        self.positions = positions[keep]
        self._kept(keep)

    def _received(self, step: np.ndarray, T: int):
        """What the rule needs of the attention received (None: nothing)."""
        return None

    def _kept(self, keep: np.ndarray):
        """After commit: the rule kept the candidates `keep`."""

    # -- rollback: only while nothing was evicted ----------------------------------------
    def rollback_floor(self, length: int) -> int:
        budget = self.policy.budget
        return 0 if budget is None or length <= budget else length

    def floor_reason(self, length: int, n: int) -> str:
        return (f"cache (policy {self.policy.name!r}, budget {self.policy.budget}) cannot roll "
                "back: it has evicted tokens, which cannot come back")

    def crop(self, n: int, length: int):
        self.positions = self.positions[:n]

    # -- copies ------------------------------------------------------------------------
    def copy(self, length: int, slots: int, shared: dict) -> KeptLayer:
        held = len(self.positions)
        twin = type(self)(self.spec, self.codec, self.rows, max(slots, held), self.max_slots,
                          np.empty, self.policy, self.theta)
        twin.grow(held)
        for name in self.arrays:
            twin.batched[name][:, :held] = self.batched[name][:, :held]
        twin.positions = self.positions.copy()
        return twin


__all__ = ["KeptLayer", "rotate"]
