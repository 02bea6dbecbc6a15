"""Issue 18's classes of bad input, in the model, the cache and the maths around them: floats
and strings never read as token ids or counts, string flags never taken as True, every count
bounded before any work, Python ints where int64 would wrap, NaN refused, lists as arrays.
"""
import itertools

import numpy as np
import pytest
from conftest import make_model
from conftest import token_ids as ids

from toykv import flops, generate, longctx, serving, sizing, steptime, zoo
from toykv.kvquant import compare_cache, forced_logits
from toykv.longctx import depth_model, fit_two_bandwidths
from toykv.ops import Ops

MODEL = make_model("gqa")


@pytest.mark.parametrize("call", [
    lambda: forced_logits(MODEL, [1.7, 2.2, 3.0], 1),
    lambda: forced_logits(MODEL, "123", 1),
    lambda: compare_cache(MODEL, [1.0, 2.0], 2, "int8"),
    lambda: compare_cache(MODEL, "12", 2, "int8"),
    lambda: generate(MODEL, "12", 2),
    lambda: generate(MODEL, [1, 2], 2.0),
    lambda: MODEL.forward(np.array([1.0, 2.0])),
    lambda: steptime.measure_step_seconds(MODEL, MODEL.new_cache(), steps=2, token=1.0),
    lambda: steptime.measure_step_seconds(MODEL, MODEL.new_cache(), steps="3"),
    lambda: steptime.fill_cache(MODEL.new_cache(), 2.0),
    lambda: steptime.prefill_time_curve(MODEL, "12"),
    lambda: steptime.prefill_time_curve(MODEL, [1.5]),
    lambda: flops.forward_flops(MODEL.config, 2.0),
    lambda: flops.generation_flops(MODEL.config, 3, "4"),
    lambda: sizing.kv_cache_bytes(MODEL.config, "100"),
    lambda: sizing.kv_share(MODEL.config, ["1000", "2000"]),
    lambda: sizing.kv_share(MODEL.config, [1000.0, 2000.0]),
    lambda: serving.request_lengths(10.0, 5, 20),
    lambda: serving.batch_cache_bytes(MODEL.config, [1.0, 2.0], 1),
    lambda: fit_two_bandwidths(1e6, ["1", "2", "3"], [0.1, 0.2, 0.3]),
    lambda: MODEL.new_cache().stored(0.0, "k"),
    lambda: MODEL.new_cache().held(1.0),
    lambda: steptime.fill_cache(MODEL.new_cache(), 2, seed=1.5),
    lambda: steptime.prefill_time_curve(MODEL, [2], seed="0"),
])
def test_floats_and_strings_are_not_ids_or_counts(call):
    with pytest.raises(ValueError):
        call()


@pytest.mark.parametrize("call, name", [
    (lambda: Ops("False"), "exact"),
    (lambda: make_model("gqa", exact="False"), "exact"),
    (lambda: generate(MODEL, [1], 2, use_cache="False"), "use_cache"),
    (lambda: sizing.param_count(MODEL.config, blocks_only="False"), "blocks_only"),
    (lambda: depth_model(zoo.get("llama-3.1-8b"), 4, blocks_only="no"), "blocks_only"),
    (lambda: flops.forward_flops(MODEL.config, 1, absorb="False"), "absorb"),
    (lambda: flops.generation_flops(MODEL.config, 3, 2, use_cache="no"), "use_cache"),
])
def test_string_flags_are_not_true(call, name):
    with pytest.raises(ValueError, match=f"{name} must be True or False"):
        call()


@pytest.mark.parametrize("call, words", [
    (lambda: serving.request_lengths(10**12, 5, 20), "n must be"),
    (lambda: steptime.measure_step_seconds(MODEL, MODEL.new_cache(), steps=10**9), "steps"),
    (lambda: steptime.step_time_curve(MODEL, [10], steps=10**9), "steps"),
    (lambda: steptime.prefill_time_curve(MODEL, [4], repeats=10**9), "repeats"),
    (lambda: steptime.prefill_time_curve(MODEL, itertools.repeat(1)), "MAX_POINTS"),
    (lambda: steptime.prefill_time_curve(MODEL, [1] * 10**4), "MAX_POINTS"),
    (lambda: flops.generation_flops(MODEL.config, 3, 10**12), "new_tokens"),
    (lambda: compare_cache(MODEL, [1, 2], 10**9, "int8"), "n_new"),
])
def test_absurd_counts_are_refused_before_any_work(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_the_bounds_are_documented_where_they_apply():
    assert "MAX_REQUESTS" in serving.request_lengths.__doc__
    for fn in (steptime.measure_step_seconds, steptime.step_time_curve, steptime.prefill_time_curve):
        assert "MAX_STEPS" in fn.__doc__
    assert "MAX_STEPS" in flops.generation_flops.__doc__


def test_batch_cache_bytes_counts_past_int64_exactly():
    config = zoo.get("llama-3.1-405b").config
    per_request = sizing.kv_cache_bytes(config, 10**12)          # 5.2e17 bytes each
    totals = serving.batch_cache_bytes(config, [10**12] * 64, 32)
    assert totals.tolist() == [32 * per_request] * 2 and 32 * per_request > 2**63
    small = serving.batch_cache_bytes(config, [100, 200], 2)
    assert small.dtype == np.int64 and small.tolist() == [
        sizing.kv_cache_bytes(config, 100) + sizing.kv_cache_bytes(config, 200)]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_fit_two_bandwidths_refuses_nan_and_inf(bad):
    with pytest.raises(ValueError, match="finite"):
        fit_two_bandwidths(1e8, [1e6, 2e6, 3e6], [0.01, bad, 0.03])
    with pytest.raises(ValueError, match="finite"):
        fit_two_bandwidths(1e8, [1e6, bad, 3e6], [0.01, 0.02, 0.03])


def test_kv_share_takes_a_list_as_it_takes_an_array():
    model = zoo.get("llama-3.1-8b")
    from_list = sizing.kv_share(model, [1000, 2000])
    assert from_list.tolist() == sizing.kv_share(model, np.array([1000, 2000])).tolist()
    assert from_list.tolist() == [sizing.kv_share(model, 1000), sizing.kv_share(model, 2000)]
    assert longctx.share_curve(model, (1000, 2000))[0].tolist() == from_list.tolist()


@pytest.mark.parametrize("call", [
    lambda: sizing.kv_cache_bytes(MODEL, 10),
    lambda: flops.forward_flops(MODEL, 1),
    lambda: sizing.kv_share(MODEL, 10),
    lambda: longctx.step_bytes(MODEL, 10),
])
def test_a_model_where_a_config_belongs_says_to_pass_its_config(call):
    with pytest.raises(ValueError, match=r"\.config"):
        call()


@pytest.mark.parametrize("call, words", [
    (lambda: steptime.fill_cache(MODEL, 5), "cache must be a toykv.KVCache"),
    (lambda: steptime.measure_step_seconds(MODEL.new_cache(), MODEL), "model must be"),
    (lambda: forced_logits(MODEL.config, ids(3), 1), "model must be"),
    (lambda: steptime.measure_decode(MODEL.config, 10), "model must be"),
])
def test_a_cache_or_config_where_a_model_belongs_is_named(call, words):
    with pytest.raises(ValueError, match=words):
        call()
