"""RoPE (su2024roformer), as Hugging Face's Llama applies it: pairs (i, i + d/2) of a query or
key turned by its position's angle (rotate_half). The model rotates queries and keys with it;
a cache that renumbers its kept keys (toykv.kinds.kept) turns them by a difference of positions.
"""
from __future__ import annotations

import numpy as np

from . import validate


def rope_cos_sin(positions, head_dim: int, theta: float):
    """cos and sin of RoPE's angles at `positions`: [len(positions), head_dim] each.

    Position p turns pair (i, i + d_h/2) by p / theta^(2i/d_h), the d_h/2 angles repeated
    twice as Hugging Face's Llama lays them out. Built for the positions asked for only.
    """
    head_dim = int(head_dim)      # a plain int keeps the division in float32, as in HF
    inv_freq = (1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32)
                                / head_dim)).astype(np.float32)          # [d_h/2]
    freqs = np.asarray(positions).astype(np.float32)[:, None] * inv_freq  # [T, d_h/2]
    angles = np.concatenate([freqs, freqs], axis=-1).astype(np.float64)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


class RopeTable:
    """model.cos or model.sin as if a [max_seq_len, d] table. `table[positions]` keeps the rows
    of positions 0, 1, 2, ... built so far and extends them by doubling as a sequence grows, so
    a decode step just indexes; a position far beyond them is computed alone. A config with
    10**8 positions allocates nothing up front."""

    def __init__(self, part: int, n_positions: int, head_dim: int, theta: float):
        self.part, self.n_positions, self.head_dim, self.theta = part, n_positions, head_dim, theta
        self._rows = np.zeros((0, head_dim), np.float32)       # positions 0..len-1, built

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_positions, self.head_dim)

    def __len__(self) -> int:
        return self.n_positions

    def __getitem__(self, index):
        if isinstance(index, slice):                  # forward's case: positions start..stop-1
            start, stop, step = index.indices(self.n_positions)
            if step == 1 and self._extend(stop, max(stop - start, 0)):
                return self._rows[start:stop].copy()
            positions = np.arange(start, stop, step)
        else:
            positions = np.asarray(index)
            if positions.dtype.kind not in "iu":
                raise IndexError(f"RoPE table positions must be integers, got {positions.dtype}")
            if positions.size and (positions.min() < -self.n_positions
                                   or positions.max() >= self.n_positions):
                raise IndexError(f"position outside [0, max_seq_len={self.n_positions})")
            positions = positions % self.n_positions
        if not positions.size or self._extend(int(positions.max()) + 1, positions.size):
            return self._rows[positions]
        rows = rope_cos_sin(positions.ravel(), self.head_dim, self.theta)[self.part]
        return rows.reshape(*positions.shape, self.head_dim)   # far positions: computed alone

    def _extend(self, need: int, asked: int) -> bool:
        """Build rows 0..need-1 if that costs at most about twice what is built or asked for
        (a growing sequence, a prefill); True when rows 0..need-1 are there."""
        if need <= len(self._rows):
            return True
        if need > 2 * max(len(self._rows), asked, 128):
            return False
        n = min(self.n_positions, max(need, 2 * len(self._rows), 256))
        self._rows = rope_cos_sin(np.arange(n), self.head_dim, self.theta)[self.part]
        return True

    def copy(self) -> np.ndarray:
        """The whole table as a plain [max_seq_len, d] array, to edit (chapter 3 plants a bug)."""
        return np.array(self)

    def __array__(self, dtype=None, copy=None):
        validate.fits_in_memory("the whole RoPE table", 16 * self.n_positions * self.head_dim,
                                "index it with the positions you need instead")
        table = self[:]
        return table if dtype is None else table.astype(dtype)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate pairs (i, i + d/2) of x [..., T, d] by each position's angle (cos, sin [T, d])."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)   # rotate_half
    return x * cos + rotated * sin


__all__ = ["rope_cos_sin", "RopeTable", "apply_rope"]
