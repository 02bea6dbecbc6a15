"""Ops.matmul's few-row products (a batch of decode steps, a verify step) and the weight layout
they read: the same products as BLAS's, each row the bits of that row alone up to FEW_ROWS."""
import numpy as np
import pytest

import toykv.ops as ops
from toykv import ToyTransformer
from toykv.config import source_toy
from toykv.model import embedding_layout, weight_layout
from toykv.ops import Ops, blocked_matmul, few_rows


def column_major(k, n, seed=0):
    return np.asfortranarray(np.random.default_rng(seed).standard_normal((k, n), np.float32))


@pytest.mark.parametrize("k, n", [(64, 100), (576, 960), (1536, 576), (33, 4097)])
@pytest.mark.parametrize("m", [2, 5, ops.FEW_ROWS, ops.FEW_ROWS + 1, 20])
def test_blocked_matmul_is_the_matrix_product(k, n, m):
    """Blocks of columns (several when n is wide or k tall, a ragged last one) give the product
    to float32 rounding, for one product per row and for a product per block."""
    b = column_major(k, n)
    a = np.random.default_rng(1).standard_normal((m, k), np.float32)
    out = blocked_matmul(a, b)
    assert out.shape == (m, n) and out.dtype == np.float32
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("k, n", [(576, 960), (1536, 576), (576, 49152), (33, 4097)])
def test_up_to_few_rows_each_row_is_that_row_alone(k, n):
    """A verify step's or a batch's weight products give each row exactly what a decode step of
    that row gives (blocks start at multiples of 64 columns, where BLAS's kernels group them)."""
    b = column_major(k, n, seed=2)
    assert ops.BLOCK_BYTES // (4 * k) < n                              # several blocks
    for m in range(2, ops.FEW_ROWS + 1):
        a = np.random.default_rng(m).standard_normal((m, k), np.float32)
        out = blocked_matmul(a, b)
        for i in range(m):
            assert np.array_equal(out[i], (a[i:i + 1] @ b)[0]), (m, i)


def test_ops_takes_few_rows_over_column_major_weights_only(monkeypatch):
    """Ops.matmul routes 2..BLOCKED_ROWS rows times a column-major matrix to blocked_matmul and
    counts its FLOPs; one row, many rows, a row-major b and a batch of matrices go to BLAS."""
    calls = []
    monkeypatch.setattr(ops, "blocked_matmul", lambda a, b: calls.append(a.shape) or a @ b)
    b = column_major(16, 8)
    o = Ops()
    for m in (1, 2, ops.BLOCKED_ROWS, ops.BLOCKED_ROWS + 1):
        o.matmul(np.ones((m, 16), np.float32), b)
    o.matmul(np.ones((3, 16), np.float32), np.ascontiguousarray(b))     # row-major
    o.matmul(np.ones((2, 3, 16), np.float32), b)                        # a batch of matrices
    assert calls == [(2, 16), (ops.BLOCKED_ROWS, 16)]
    assert o.flops == 2 * 16 * 8 * (1 + 2 + 2 * ops.BLOCKED_ROWS + 1 + 3 + 6)
    assert few_rows(np.ones((2, 16)), b) and not few_rows(np.ones((2, 16)), b.T.T.copy())


def test_weights_are_column_major_and_the_embedding_row_major():
    """Every projection (the fused ones and their views too) is stored column-major, as the
    few-row product reads it; the embedding row-major, so the tied head (its transpose) is
    column-major like the rest."""
    model = ToyTransformer(source_toy(), seed=0)
    assert model.embed.flags.c_contiguous and model.embed.T.flags.f_contiguous
    for layer in model.layers:
        for name, w in layer.items():
            assert w.ndim == 1 or w.flags.f_contiguous, name
        assert all(m.flags.f_contiguous for m in layer.fused.values())
    assert weight_layout(np.ones((3, 5))).flags.f_contiguous
    assert embedding_layout(np.ones((5, 3))).flags.c_contiguous
    loaded = ToyTransformer(source_toy(), weights={
        "embed": np.asfortranarray(model.embed), "final_norm": model.final_norm,
        "lm_head": None, "layers": [dict(layer) for layer in model.layers]})
    assert loaded.embed.flags.c_contiguous and np.array_equal(loaded.embed, model.embed)


def test_a_verify_step_reads_the_weights_as_decode_steps_do():
    """Five tokens in one pass and the same five one at a time: the weight products agree bit
    for bit (only attention's sums, over other shapes, may round differently), so the logits
    agree to float32 rounding; with exact=True they are equal."""
    for exact in (False, True):
        model = ToyTransformer(source_toy(), seed=1, exact=exact)
        one, five = model.new_cache(), model.new_cache()
        model.forward(list(range(9)), one)
        model.forward(list(range(9)), five)
        steps = np.concatenate([model.forward([t], one) for t in (3, 1, 4, 1, 5)])
        together = model.forward([3, 1, 4, 1, 5], five)
        if exact:
            assert np.array_equal(steps, together)
        else:
            np.testing.assert_allclose(steps, together, rtol=1e-5, atol=1e-5)
