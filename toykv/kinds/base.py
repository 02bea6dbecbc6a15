"""What every cache kind is: one layer's cache, as an object with a few methods (the protocol).

A kind takes a step's new keys and values and returns what the step's queries attend over
(`append` -> Seen: every key and value, their positions, which query may see which key), says
what it holds and what that weighs (`held`, `held_positions`, `nbytes`), is told where the
attention went if it wants to know (`observe`: H2O counts it), keeps or forgets the step
(`commit`, `discard`), and crops back to n tokens, or says up front how far it can
(`rollback_floor`, `crop`). KVCache (toykv.cache) holds one per model layer and calls them; the
model calls the cache, never a kind. Hugging Face's cache layers (DynamicLayer,
DynamicSlidingWindowLayer, QuantizedLayer in cache_utils.py) are the same idea.

Values are stored by a Codec: as float32 or float16, or as int8 with one float32 scale per row
of d_h values (kv_dtype); every kind stores through one.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np


def head_major(shape: tuple, dtype, new=np.zeros) -> np.ndarray:
    """Zeros of shape [..., capacity, H_kv, d_h], stored in memory as [..., H_kv, capacity, d_h]
    (a transposed view): each KV head's keys are one contiguous block, which attention reads as
    a plain matrix, instead of pieces of d_h values H_kv d_h apart. Indexing sees the shape.
    new=np.empty leaves them unset (for slots written before they are read)."""
    *lead, capacity, heads, dim = shape
    return new((*lead, heads, capacity, dim), dtype).swapaxes(-3, -2)


class Codec:
    """How values are stored in one kv_dtype: as float32 or float16, or as int8 with a scale."""

    def __init__(self, kv_dtype: str):
        self.kv_dtype = kv_dtype

    def zeros(self, name: str, shape: tuple, token_shape: tuple, new=np.zeros) -> dict:
        """The arrays of one entry, shape = [(B,) slots, *token_shape] (K and V head-major),
        plus its int8 scales (one per row of d_h values); new=np.empty: left unset."""
        arrays = {name: head_major(shape, self.kv_dtype, new) if len(token_shape) == 2
                  else new(shape, self.kv_dtype)}
        if self.kv_dtype == "int8":
            arrays[name + "_scale"] = new(shape[:-1], np.float32)
        return arrays

    def encode(self, values: np.ndarray):
        """(values as stored, int8 scales or None). int8 is symmetric: scale = max|x| / 127."""
        if self.kv_dtype != "int8":
            return values.astype(self.kv_dtype, copy=False), None
        scale = np.abs(values).max(axis=-1) / 127.0
        scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
        return np.clip(np.rint(values / scale[..., None]), -127, 127).astype(np.int8), scale

    def decode(self, stored: np.ndarray, scale) -> np.ndarray:
        """float32 values from encode's output."""
        if scale is None:
            return stored.astype(np.float32, copy=False)
        return stored.astype(np.float32) * scale[..., None]


@dataclass
class Seen:
    """What one step's queries attend over, in one layer: `kv` every key and value (float32,
    [(B,) Tk, ...] per entry name), `positions` [Tk] of those keys (ascending), `mask` [T, Tk]
    (True: that query may see that key; None: every query sees every key), `queries` [T] the
    new tokens' positions. `observe`, if set, is shown the step's attention weights (an H2O
    cache counts them); `layer` and `batch` say whose they are (for watch_attention).
    `rows`, if set, makes the softmax go one query at a time: rows.visible(t) says which keys
    query t sees (bool [Tk]) and rows.saw(t, weights [..., Tk]) is shown its weights before
    query t + 1 asks (H2O's heavy hitters change after every query: its step stays exact)."""
    kv: dict
    positions: np.ndarray
    mask: np.ndarray | None
    queries: np.ndarray
    observe: object = None
    rows: object = None
    layer: int | None = None
    batch: int | None = None


class CacheLayer(Mapping):
    """The protocol every cache kind follows, with the defaults most kinds keep.

    As a mapping it is the layer's arrays by name ('k', 'v' or MLA's 'c_kv', 'k_rope', and
    their '_scale' arrays for int8), to read or edit in place. Methods take the cache's length
    (`start`, `length`) and new values [B, T, ...] (one sequence: B = 1); the cache checks them.
    """

    spec = None                                     # the layer's toykv.layers.LayerSpec
    # what the step in progress attends over, as append returned it (KVCache keeps it until the
    # step is committed or discarded): a layer that shares this one's cache reads it
    seen = None
    # a step of T tokens gives exactly what T steps of one token give (speculative
    # verification needs it: its step must be greedy's steps)
    steps_split = True

    # -- what it holds ----------------------------------------------------------------
    def held(self, length: int) -> int:
        """Positions held once `length` tokens have gone through the layer."""
        raise NotImplementedError

    def held_positions(self, length: int) -> np.ndarray:
        """The positions held at `length`, ascending. [held]"""
        return np.arange(length - self.held(length), length)

    def nbytes(self, length: int) -> int:
        """Bytes held at `length` (values and int8 scales), every sequence."""
        raise NotImplementedError

    @property
    def allocated_nbytes(self) -> int:
        """Bytes this layer has allocated, held or not."""
        return sum(a.nbytes for a in self.arrays.values())

    def stored(self, name: str, length: int) -> np.ndarray:
        """The values of entry `name` held at `length`, in position order, float32
        [B, held, ...] (a view where it can be)."""
        raise NotImplementedError

    # -- a step ----------------------------------------------------------------------
    def check_step(self, start: int, T: int):
        """Refuse, before any work, a step of T tokens after `start` this layer cannot take
        (a ValueError, or toykv.paged.OutOfBlocks); changes nothing."""

    def check_room(self, start: int, T: int):
        """Refuse, before any work, T more tokens after `start` however many steps bring them
        (a pool too small for them); changes nothing."""

    def append(self, new: dict, start: int) -> Seen:
        """Stage the new tokens' entries [B, T, ...] after the `start` tokens gone by, and
        return what the step attends over. Invisible until commit."""
        raise NotImplementedError

    def commit(self, start: int, T: int, ids=None):
        """The step is done: its T tokens (ids [B, T], when known) are kept."""
        self.staged = None

    def discard(self):
        """The step failed: the layer is exactly as it was before append."""
        self.staged = None

    # -- rollback, copies, the end ------------------------------------------------------
    def rollback_floor(self, length: int) -> int:
        """The shortest length crop accepts once the layer holds `length` tokens (after a step
        that brings it there: speculative decoding asks before the step)."""
        return 0

    def floor_reason(self, length: int, n: int) -> str:
        """Why this layer, holding `length` tokens, cannot go back to n: the words after
        "layer i's" in a refusal."""
        return f"cache ({type(self).__name__}) cannot roll back to {n} tokens"

    def crop(self, n: int, length: int):
        """Keep the first n of `length` tokens (rollback_floor(length) <= n <= length)."""

    def copy(self, length: int, slots: int, shared: dict) -> CacheLayer:
        """A layer holding the same positions, with room for `slots` (at least what is held),
        that fills on its own. shared: one dict per cache copy, for what layers share (a
        paged sequence's block table is forked once, not once per layer)."""
        raise NotImplementedError

    def blocks_needed(self, length: int, T: int) -> int:
        """Free blocks of a shared pool a step of T tokens takes (0: it has its own arrays)."""
        return 0

    def finish(self):
        """No more steps: give back what a shared pool lent (nothing, for most kinds)."""

    # -- the mapping of its arrays ------------------------------------------------------
    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __iter__(self):
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)


__all__ = ["CacheLayer", "Seen", "Codec", "head_major"]
