"""The sliding ring: a sliding-window layer keeps the last w = sliding_window positions, in a
ring of w slots, so its memory stops growing (Mistral's rolling buffer, jiang2023mistral).

It grows like a full layer until it has w slots and only then wraps, so a slot is reused only
once the ring is whole. Its writes wait for commit: they overwrite positions still in the
window, and a failed step must not lose them. A ring that has wrapped cannot roll back: each
new position overwrote the oldest, which a shorter cache would still see.
"""
from __future__ import annotations

import numpy as np

from .base import Seen
from .full import FullLayer


class SlidingLayer(FullLayer):
    """A sliding-window layer's cache: a ring of at most w slots, position p in slot p % slots."""

    def append(self, new: dict, start: int) -> Seen:
        """The window held before this step followed by the new tokens, as stored and read back
        (so a token reads the same however it arrived), with the window's mask; the newest
        min(T, slots) are staged for commit (a prefill longer than the window needs the old
        window, which the writes overwrite)."""
        T = next(iter(new.values())).shape[1]
        self.grow(min(start + T, self.max_slots))
        first = start - self.held(start)
        encoded = {name: self.codec.encode(values) for name, values in new.items()}
        out = {name: np.concatenate([self.read(name, first, start),
                                     self.codec.decode(*encoded[name])], axis=1)
               for name in new}
        keep = min(T, self.slots)                        # a ring keeps at most slots of them
        self.staged = (start, T, {name: (np.array(stored[:, T - keep:]),     # kept apart from
                                         None if scale is None else scale[:, T - keep:])
                                  for name, (stored, scale) in encoded.items()})  # the input
        keys, queries = np.arange(first, start + T), np.arange(start, start + T)
        return Seen(out, keys, self.spec.allowed(queries, keys), queries)

    def commit(self, start: int, T: int, ids=None):
        """Write the staged tokens into their ring slots."""
        if self.staged is None or self.staged[2] is None:
            self.staged = None
            return
        _, _, rows = self.staged
        self.staged = None
        keep = next(iter(rows.values()))[0].shape[1]
        first_slot = (start + T - keep) % self.slots
        slots = (slice(first_slot, first_slot + keep) if first_slot + keep <= self.slots
                 else np.arange(first_slot, first_slot + keep) % self.slots)   # wrapping
        for name, (stored, scale) in rows.items():
            self.batched[name][:, slots] = stored
            if scale is not None:
                self.batched[name + "_scale"][:, slots] = scale

    def _copy_slots(self, length: int) -> int:
        """A ring that has wrapped is copied whole, slot for slot."""
        return self.slots if length > self.slots else self.held(length)

    def _slots_at(self, length: int) -> int:
        """Slots the ring has once it holds `length` tokens (it grows up to max_slots)."""
        return max(self.slots, min(length, self.max_slots))

    def rollback_floor(self, length: int) -> int:
        """A ring holds positions length - slots .. length - 1; a length n needs its last
        held(n) positions back, so n - held(n) >= length - slots. Before the ring has wrapped
        that is every n >= 0; once it has (slots = w), only n = length."""
        slots = self._slots_at(length)
        if length <= slots:
            return 0
        return length - slots + self.spec.window

    def floor_reason(self, length: int, n: int) -> str:
        return (f"sliding-window ring of {self._slots_at(length)} slots has wrapped, and its "
                f"writes overwrote positions a cache of {n} tokens would still hold")


__all__ = ["SlidingLayer"]
