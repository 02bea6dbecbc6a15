"""The two backends: BLAS matmuls, or every reduction in one fixed order.

Why the default backend's cached logits differ from a full recomputation by ~1e-7:
BLAS kernels split a dot product into blocks and SIMD lanes whose layout depends on
the matrix shapes, and numpy sums with pairwise blocks. A cached step multiplies a
1-row matrix, a full pass an S-row one, so the same dot product is added up in a
different order and rounds differently. Nothing about the cache is approximate.
With exact=True each output element is summed term by term, k = 0, 1, 2, ..., the
same way whatever the number of rows, so both paths give identical bits.
"""
from __future__ import annotations

import math

import numpy as np

from . import validate


class Ops:
    """Matrix products and sums, with a running count of matmul FLOPs (2 per multiply-add)."""

    def __init__(self, exact: bool = False):
        self.exact = validate.flag("exact", exact)
        self.flops = 0

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a [..., m, k] @ b [..., k, n] -> [..., m, n], batch dims broadcast. A few rows times
        a weight matrix go one block of its columns at a time (blocked_matmul). A large b
        shared by several of a's matrices (attention's keys, shared by the query heads of a
        group) is read once for all of them (stacked_matmul); a small one, once per matrix,
        which BLAS does faster for the few rows of a decode step."""
        k = a.shape[-1]
        if b.shape[-2] != k:
            raise ValueError(f"matmul: a has {k} columns but b has {b.shape[-2]} rows")
        if self.exact:
            out = fixed_order_matmul(a, b)
        elif few_rows(a, b):
            out = blocked_matmul(a, b)
        elif shared_operand(a, b):
            out = stacked_matmul(a, b)
        else:
            out = np.matmul(a, b)
        self.flops += 2 * out.size * k                  # out.size = batch * m * n
        return out

    def sum_last(self, x: np.ndarray) -> np.ndarray:
        """Sum over the last axis, keepdims. [..., n] -> [..., 1]"""
        if not self.exact:
            return x.sum(axis=-1, keepdims=True)
        return np.cumsum(x, axis=-1)[..., -1:]          # a running sum: strictly front to back


FEW_OUTPUTS = 512     # up to this many outputs, fixed_order_matmul's running sums are faster
SHARED_BYTES = 1 << 20   # a shared matrix this large is read once, for every matrix it serves
FEW_ROWS = 7          # up to this many rows, one matrix-vector product per row is fastest
BLOCKED_ROWS = 64     # up to this many rows, a product is taken over blocks of b's columns
BLOCK_BYTES = 512 << 10  # columns of b taken together: a block this size stays in L2 cache


def shared_operand(a: np.ndarray, b: np.ndarray) -> bool:
    """True when b [..., 1, k, n] serves G > 1 matrices of a [..., G, m, k] (a broadcast axis
    just before the matrices) and one matrix of b holds at least SHARED_BYTES: re-reading it
    for each of a's matrices would stream it from memory G times."""
    return (a.ndim >= 3 and b.ndim == a.ndim and b.shape[-3] == 1 and a.shape[-3] > 1
            and b.shape[-2] * b.shape[-1] * b.itemsize >= SHARED_BYTES)


def few_rows(a: np.ndarray, b: np.ndarray) -> bool:
    """True for a [m, k] @ b [k, n] with 2 <= m <= BLOCKED_ROWS rows (a batch of decode steps,
    a verify step, a short prompt) and b column-major, as every weight is (model.weight_layout)."""
    return (a.ndim == 2 and b.ndim == 2 and 2 <= a.shape[0] <= BLOCKED_ROWS
            and b.flags.f_contiguous)


def blocked_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a [m, k] @ b [k, n] for a few rows, one block of b's columns at a time (BLOCK_BYTES, so
    the block stays in cache while every row uses it): b streams from memory once. Up to
    FEW_ROWS rows, one matrix-vector product per row (each row then gets the bits a product of
    that row alone gives); beyond, one matrix product per block. BLAS's matrix product over the
    whole of b packs it first and fills a register tile wider than a few rows: 2 to 7 rows cost
    2.2-3.5 times one row, against 1.4-2.8 here (BENCHMARKS.md). -> [m, n]"""
    m, k = a.shape
    n = b.shape[1]
    out = np.empty((m, 1, n), np.result_type(a, b))                 # [m, 1, n]
    rows = a[:, None, :] if m <= FEW_ROWS else a                    # [m, 1, k] or [m, k]
    width = block_columns(b)
    for j in range(0, n, width):
        block = out[:, :, j:j + width] if m <= FEW_ROWS else out[:, 0, j:j + width]
        np.matmul(rows, b[:, j:j + width], out=block)
    return out[:, 0, :]


def block_columns(b: np.ndarray) -> int:
    """Columns of b [k, n] that blocked_matmul takes together: about BLOCK_BYTES, a multiple
    of 64."""
    return max(64, BLOCK_BYTES // (b.itemsize * b.shape[0]) // 64 * 64)


def stacked_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a [..., G, m, k] @ b [..., 1, k, n] as one product per matrix of b: a's G matrices
    stacked as the rows [..., G m, k], so b is read once. -> [..., G, m, n]"""
    *lead, G, m, k = a.shape
    out = np.matmul(a.reshape(*lead, G * m, k), b[..., 0, :, :])     # [..., G m, n]
    return out.reshape(*lead, G, m, b.shape[-1])


def fixed_order_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a [..., m, k] @ b [..., k, n] with each output summed term by term, k = 0, 1, 2, ...

    Two ways to the same bits: few outputs (a decode step) form all m n k products and take
    running sums along k (np.cumsum adds strictly in order); many outputs add one term of
    every output at a time, k times.
    """
    k = a.shape[-1]
    batch = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    if batch * a.shape[-2] * b.shape[-1] <= FEW_OUTPUTS:
        terms = a[..., :, None, :] * np.swapaxes(b, -1, -2)[..., None, :, :]  # [..., m, n, k]
        return np.ascontiguousarray(np.cumsum(terms, axis=-1)[..., -1])   # [..., m, n]
    b = np.ascontiguousarray(b)                         # its rows are read one by one
    out = a[..., :, 0:1] * b[..., 0:1, :]               # [..., m, n]
    for i in range(1, k):                               # fixed order: term 0, 1, 2, ...
        out += a[..., :, i:i + 1] * b[..., i:i + 1, :]
    return out
