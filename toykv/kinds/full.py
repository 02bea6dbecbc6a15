"""The full cache: a full-attention layer keeps every position, position p in slot p.

Capacity: the layer allocates `slots` positions up front (the cache's default is max_seq_len,
as Hugging Face's StaticCache does, so a step only writes) and grows geometrically, doubling
(as a DynamicCache grows), when more arrive, never beyond max_slots. A step writes its tokens
after the held ones: those slots are invisible until commit, so a failed step has nothing to
undo. Rollback just forgets the dropped positions: their slots are written before they are read
again.
"""
from __future__ import annotations

import numpy as np

from .. import validate
from .base import CacheLayer, Codec, Seen


class FullLayer(CacheLayer):
    """A full-attention layer's cache: position p in slot p, every position kept.

    arrays[name] is [(B,) slots, ...]; `batched` views them with a batch axis in front ([1, ...]
    for one sequence), the shape the methods read and write.
    """

    def __init__(self, spec, codec: Codec, rows: int | None, slots: int, max_slots: int,
                 new=np.zeros):
        self.spec, self.codec, self.rows, self.max_slots = spec, codec, rows, max_slots
        self._allocate(self._zeros(slots, new), slots)
        self.staged = None                                  # a step's (start, T, ring writes)

    def _zeros(self, slots: int, new=np.zeros) -> dict:
        lead = () if self.rows is None else (self.rows,)
        arrays = {}
        for name, shape in self.spec.entries:                # [(B,) slots, ...]
            arrays.update(self.codec.zeros(name, (*lead, slots, *shape), shape, new))
        return arrays

    def _allocate(self, arrays: dict, slots: int):
        """Hold these arrays of `slots` positions (and their batched views)."""
        self.arrays, self.slots = arrays, slots
        self.batched = {name: a if self.rows is not None else a[None] for name, a in
                        arrays.items()}

    # -- what it holds ----------------------------------------------------------------
    def held(self, length: int) -> int:
        return self.spec.held(length)

    def nbytes(self, length: int) -> int:
        return self.held(length) * sum(a.nbytes for a in self.arrays.values()) // self.slots

    def read(self, name: str, first: int, end: int) -> np.ndarray:
        """Positions first..end-1 as float32 [B, end - first, ...] (a view where it can be)."""
        slots = self.slots
        index = slice(first, end) if end <= slots else np.arange(first, end) % slots  # wrapped
        scale = self.batched.get(name + "_scale")
        return self.codec.decode(self.batched[name][:, index],
                                 None if scale is None else scale[:, index])

    def stored(self, name: str, length: int) -> np.ndarray:
        return self.read(name, length - self.held(length), length)

    def grow(self, need: int):
        """Make room for `need` slots (doubling, at most max_slots), keeping what is stored.
        Only called before the layer's positions wrap around, so slot = position."""
        if need <= self.slots:
            return
        slots = min(self.max_slots, max(need, 2 * self.slots))
        validate.fits_in_memory(f"a cache layer of {slots} positions",
                                sum(a.nbytes for a in self.arrays.values()) // self.slots * slots,
                                "give the model a smaller max_seq_len")
        old, views = self.slots, self.batched
        self._allocate(self._zeros(slots, np.empty), slots)  # slots past `old`: written first
        for name, view in views.items():
            self.batched[name][:, :old] = view

    def write(self, new: dict, first: int):
        """Store new entries [B, T, ...] in slots first..first + T - 1 (encoded)."""
        T = next(iter(new.values())).shape[1]
        for name, values in new.items():
            stored, scale = self.codec.encode(values)
            self.batched[name][:, first:first + T] = stored
            if scale is not None:
                self.batched[name + "_scale"][:, first:first + T] = scale

    # -- a step ----------------------------------------------------------------------
    def append(self, new: dict, start: int) -> Seen:
        """Write the new tokens after the `start` held ones; they attend over every position,
        as stored and read back (a view), causally."""
        T = next(iter(new.values())).shape[1]
        end = start + T
        if end > self.slots:
            self.grow(end)
        self.write(new, start)
        self.staged = (start, T, None)                      # written; counted at commit
        keys, queries = np.arange(end), np.arange(start, end)
        return Seen({name: self.read(name, 0, end) for name in new}, keys,
                    self.spec.allowed(queries, keys), queries)

    # -- copies ------------------------------------------------------------------------
    def copy(self, length: int, slots: int, shared: dict) -> FullLayer:
        held = self.held(length)
        twin = type(self)(self.spec, self.codec, self.rows, max(slots, self._copy_slots(length)),
                          self.max_slots, np.empty)         # the slots past held: written first
        for name in self.arrays:
            twin.batched[name][:, :held] = self.batched[name][:, :held]
        return twin

    def _copy_slots(self, length: int) -> int:
        return self.held(length)


__all__ = ["FullLayer"]
