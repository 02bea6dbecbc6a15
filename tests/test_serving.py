"""toykv.serving: request mixes and the cache a batch of them needs (a step's costs:
tests/test_stepcost.py, counted; tests/test_steptime.py, measured)."""
import numpy as np
import pytest

from toykv import serving, sizing, source_toy


def test_request_lengths_are_seeded_and_clipped():
    a = serving.request_lengths(5000, 500, 4000, sigma=1.0, seed=3)
    assert np.array_equal(a, serving.request_lengths(5000, 500, 4000, sigma=1.0, seed=3))
    assert a.min() >= 1 and a.max() == 4000                   # the tail is clipped
    assert abs(np.median(a) / 500 - 1) < 0.1
    assert np.all(serving.request_lengths(10, 7, 100, sigma=0) == 7)
    for bad in (dict(n=0), dict(median=0), dict(median=5000), dict(sigma=-1.0)):
        args = dict(n=10, median=100, max_len=1000) | bad
        with pytest.raises(ValueError, match=next(iter(bad))):
            serving.request_lengths(**args)


def test_batch_cache_bytes_sums_full_batches():
    c = source_toy(n_kv_heads=2)
    lengths = [10, 20, 30, 40, 50]
    got = serving.batch_cache_bytes(c, lengths, 2)
    per_token = 2 * c.n_layers * 2 * c.head_dim * 2                   # bf16
    assert got.tolist() == [30 * per_token, 70 * per_token]           # the 50 is left out
    windowed = source_toy(sliding_window=16)
    assert serving.batch_cache_bytes(windowed, [100, 8], 2).tolist() == [
        sizing.kv_cache_bytes(windowed, 16) + sizing.kv_cache_bytes(windowed, 8)]
    with pytest.raises(ValueError, match="no full batch"):
        serving.batch_cache_bytes(c, [1, 2], 3)
    with pytest.raises(ValueError, match="lengths"):
        serving.batch_cache_bytes(c, [1, 0], 1)
