"""toykv.steptime: a cache filled with stand-in entries, and steps timed at chosen contexts."""
import numpy as np
import pytest

from toykv import ModelConfig, ToyTransformer, source_toy
from toykv.sizing import kv_cache_bytes
from toykv.steptime import (blas_threads, fill_cache, limit_blas_threads, step_seconds,
                            step_time_curve)

MLA = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64,
                  attention="mla", kv_lora_rank=16, rope_head_dim=4, max_seq_len=2048)


@pytest.mark.parametrize("config, dtype, value_bytes, scale_bytes", [
    (source_toy(), "float32", 4, 0),
    (source_toy(n_kv_heads=2), "int8", 1, 4),
    (source_toy(sliding_window=100), "float16", 2, 0),
    (MLA, "int8", 1, 4),
])
def test_fill_cache_holds_what_a_prefill_would(config, dtype, value_bytes, scale_bytes):
    model = ToyTransformer(config)
    cache = model.new_cache(kv_dtype=dtype)
    fill_cache(cache, 600)                       # more than one chunk, past the window
    assert len(cache) == 600
    assert cache.nbytes == kv_cache_bytes(config, 600, bytes_per_value=value_bytes,
                                          scale_bytes=scale_bytes)
    logits = model.forward([3], cache)          # a step runs on it
    assert np.isfinite(logits).all() and len(cache) == 601


def test_fill_cache_appends_to_what_is_there():
    model = ToyTransformer(source_toy())
    cache = model.new_cache()
    model.forward([1, 2, 3], cache)
    kept = cache.stored(0, "k").copy()
    fill_cache(cache, 10)
    assert len(cache) == 13
    assert np.array_equal(cache.stored(0, "k")[:3], kept)     # the real entries stay


def test_fill_cache_refuses_bad_counts():
    model = ToyTransformer(source_toy(max_seq_len=64))
    cache = model.new_cache()
    with pytest.raises(ValueError, match="max_seq_len"):
        fill_cache(cache, 65)
    with pytest.raises(ValueError, match="tokens"):
        fill_cache(cache, -1)
    with pytest.raises(ValueError, match="tokens"):
        fill_cache(cache, 2.0)


def test_step_seconds_times_single_steps():
    model = ToyTransformer(source_toy())
    cache = model.new_cache()
    fill_cache(cache, 50)
    seconds = step_seconds(model, cache, steps=4)
    assert seconds.shape == (4,) and np.all(seconds > 0)
    assert len(cache) == 54
    with pytest.raises(ValueError, match="steps"):
        step_seconds(model, cache, steps=0)


def test_step_time_curve_runs_steps_at_the_given_contexts():
    model = ToyTransformer(source_toy())
    seen = []
    forward = model.forward

    def recording(ids, cache=None):              # the context each step runs at
        if len(ids) == 1:
            seen.append(len(cache) + 1)
        return forward(ids, cache)

    model.forward = recording
    medians = step_time_curve(model, [10, 100, 400], steps=3)
    assert medians.shape == (3,) and np.all(medians > 0)
    assert seen == [1, 10, 11, 12, 100, 101, 102, 400, 401, 402]    # warm-up, then 3 each


@pytest.mark.parametrize("contexts, match", [
    ([100, 50], "rise"), ([10, 12], "rise"), ([], "empty"), ([1], "contexts"),
    ([2045], "max_seq_len"), ([10.0], "contexts")])
def test_step_time_curve_refuses_bad_contexts(contexts, match):
    model = ToyTransformer(source_toy())
    with pytest.raises(ValueError, match=match):
        step_time_curve(model, contexts, steps=5)


def test_blas_thread_limits():
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def blas_threads_now():
        return {p["num_threads"] for p in threadpoolctl.threadpool_info()
                if p["user_api"] == "blas"}

    np.ones(4) @ np.ones(4)                       # make sure BLAS is loaded
    before = blas_threads_now()
    with blas_threads(1):
        assert blas_threads_now() == {1}
    assert blas_threads_now() == before
    limiter = limit_blas_threads(1)
    try:
        assert blas_threads_now() == {1}
    finally:
        limiter.restore_original_limits()
    assert blas_threads_now() == before
    with pytest.raises(ValueError, match="blas_threads"):
        limit_blas_threads(0)
