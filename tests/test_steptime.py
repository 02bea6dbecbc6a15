"""toykv.steptime: a cache filled with stand-in entries, and steps timed at chosen contexts."""
import numpy as np
import pytest

from toykv import ModelConfig, ToyTransformer, source_toy
from toykv.sizing import kv_cache_bytes
from toykv.stepcost import decode_step_split
from toykv.steptime import (blas_threads, fill_cache, limit_blas_threads, measure_decode,
                            measure_prefill, measure_step_seconds, step_time_curve)

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
    seconds = measure_step_seconds(model, cache, steps=4)
    assert seconds.shape == (4,) and np.all(seconds > 0)
    assert len(cache) == 54
    with pytest.raises(ValueError, match="steps"):
        measure_step_seconds(model, cache, steps=0)


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


# -- batched caches and prefill timing (chapters 5 and 6) ------------------------------------
def test_fill_cache_fills_every_sequence_of_a_batch():
    config = source_toy(n_kv_heads=2)
    model = ToyTransformer(config)
    cache = model.new_cache(batch=3)
    fill_cache(cache, 300)
    assert len(cache) == 300
    assert cache.nbytes == kv_cache_bytes(config, 300, batch=3, bytes_per_value=4)
    keys = cache.stored(1, "k")                                   # [3, 300, H_kv, d_h]
    assert keys.shape == (3, 300, 2, 16)
    assert np.array_equal(keys[0], keys[2])                       # the same stand-ins
    seconds = measure_step_seconds(model, cache, steps=2)
    assert seconds.shape == (2,) and len(cache) == 302


def test_step_time_curve_steps_a_batch():
    model = ToyTransformer(source_toy())
    shapes = []
    forward = model.forward

    def recording(ids, cache=None):
        shapes.append((np.shape(ids), cache.batch, len(cache)))
        return forward(ids, cache)

    model.forward = recording
    step_time_curve(model, [20], steps=2, batch=4)
    assert shapes == [((4, 1), 4, 0), ((4, 1), 4, 19), ((4, 1), 4, 20)]   # warm-up, 2 steps
    with pytest.raises(ValueError, match="batch"):
        step_time_curve(model, [20], steps=2, batch=0)


def test_prefill_time_curve_runs_each_prompt_into_a_fresh_cache():
    from toykv.steptime import prefill_time_curve
    model = ToyTransformer(source_toy())
    seen = []
    forward = model.forward

    def recording(ids, cache=None):
        seen.append((len(ids), len(cache)))
        return forward(ids, cache)

    model.forward = recording
    medians = prefill_time_curve(model, [8, 64], repeats=2)
    assert medians.shape == (2,) and np.all(medians > 0)
    assert seen == [(1, 0), (8, 0), (8, 0), (64, 0), (64, 0)]     # warm-up, then fresh caches
    for bad, match in (([], "empty"), ([0], "prompt_lens"), ([4096], "prompt_lens"),
                       ([8.0], "prompt_lens")):
        with pytest.raises(ValueError, match=match):
            prefill_time_curve(model, bad)
    with pytest.raises(ValueError, match="repeats"):
        prefill_time_curve(model, [8], repeats=0)


def test_measured_points_pair_counts_with_time():
    model = ToyTransformer(source_toy(max_seq_len=128))
    decode = measure_decode(model, 40, batch=3, steps=2)
    split = decode_step_split(model.config, 40, 3, 4, 4)["total"]
    assert decode["flops"] == split["flops"] and decode["bytes"] == split["bytes"]
    assert decode["seconds"] > 0
    assert decode["flops_per_s"] == pytest.approx(decode["flops"] / decode["seconds"])
    assert decode["tokens_per_s"] == pytest.approx(3 / decode["seconds"])
    prefill = measure_prefill(model, 30, repeats=2)
    assert prefill["flops"] == 30 * decode_step_split(model.config, 1, 1)["weights"][
        "flops"] + 2 * 30 * 30 * 4 * model.config.n_layers * model.config.d_model // 2
    assert prefill["tokens_per_s"] == pytest.approx(30 / prefill["seconds"])
    with pytest.raises(ValueError, match="context"):
        measure_decode(model, 1)


def test_measure_decode_refuses_what_it_cannot_count_before_timing():
    model = ToyTransformer(MLA)                          # expanded: rebuilds keys each step
    flops = model.flops
    with pytest.raises(ValueError, match="absorb=True"):
        measure_decode(model, 40, steps=2)
    assert model.flops == flops                          # refused before any step ran
