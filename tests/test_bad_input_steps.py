"""Issue 35's classes of bad input at serving's counts and measurements, the step timers,
speculative decoding and prefix reuse (chapters 10 and 11): refused with the argument named,
nothing touched changed (a cache's length and values, a pool's blocks, a draft's cache), no
hang; k of 1 and 64 and numpy arrays where lists belong keep working.
"""
import numpy as np
import pytest
from bad_input_helpers import cases, refused, refused_case, same, state, works
from conftest import make_model, token_ids

from toykv import CachePolicy, roofline, serving, speculative as spec, stepcost, steptime
from toykv.generate import generate
from toykv.paged import OutOfBlocks
from toykv.prefix import compare_reuse, suffix_after

MODEL = make_model("gqa")
CONFIG = MODEL.config
H100 = roofline.hardware("h100-sxm")


def filled(model=MODEL, n=6, **options):
    cache = model.new_cache(**options)
    model.forward(token_ids(n), cache)
    return cache


def serving_cases():
    return [
        (lambda: serving.batch_cache_bytes(CONFIG, ["1", "2"], 1), "lengths", ()),
        (lambda: serving.batch_cache_bytes(CONFIG, ["1", 2], 1), "lengths", ()),
        (lambda: serving.batch_cache_bytes(CONFIG, [1.5, 2], 1), "lengths", ()),
        (lambda: serving.batch_cache_bytes(CONFIG, [[1, 2], [3]], 1), "lengths", ()),
        (lambda: serving.batch_cache_bytes(CONFIG, [0, 1], 1), "lengths", ()),
        (lambda: serving.batch_cache_bytes(CONFIG, None, 1), "lengths", ()),
        (lambda: serving.batch_cache_bytes(CONFIG, [True, False], 1), "lengths", ()),
        (lambda: serving.batch_cache_bytes(CONFIG, {"a": 1}, 1), "lengths", ()),
        (lambda: serving.batch_cache_bytes(CONFIG, [1, 2], 0), "batch", ()),
        (lambda: serving.batch_cache_bytes(CONFIG, [1, 2], 3), "batch", ()),
        (lambda: serving.batch_cache_bytes(CONFIG, [1, 2], 1, bytes_per_value="2"),
         "bytes_per_value", ()),
        (lambda: serving.batch_cache_bytes(MODEL, [1, 2], 1), "config", ()),
        (lambda: serving.request_lengths(10, 5.0, 20), "median", ()),
        (lambda: serving.request_lengths(10, 50, 20), "median", ()),
        (lambda: serving.request_lengths(10, 5, 20, sigma=float("nan")), "sigma", ()),
        (lambda: serving.request_lengths(10, 5, 20, sigma=-1), "sigma", ()),
        (lambda: serving.request_lengths(10, 5, 20, seed=1.5), "seed", ()),
        (lambda: serving.request_lengths(0, 5, 20), "n", ()),
    ]


def stepcost_cases():
    return [
        (lambda: stepcost.decode_step_split(MODEL, 10), "config", ()),
        (lambda: stepcost.decode_step_split(CONFIG, 0), "context", ()),
        (lambda: stepcost.decode_step_split(CONFIG, 10, batch=1.5), "batch", ()),
        (lambda: stepcost.decode_step_split(CONFIG, 10, bytes_per_param="2"),
         "bytes_per_param", ()),
        (lambda: stepcost.decode_step_split(CONFIG, 10, bytes_per_value=float("nan")),
         "bytes_per_value", ()),
        (lambda: stepcost.decode_step_split(CONFIG, 10, absorb="yes"), "absorb", ()),
        (lambda: stepcost.decode_step_bounds(CONFIG, "h100-sxm", 10), "hw", ()),
        (lambda: stepcost.decode_step_cost(CONFIG, 0), "context", ()),
        (lambda: stepcost.decode_step_cost(CONFIG, 10, kv_dtype="int4"), "kv_dtype", ()),
        (lambda: stepcost.decode_step_cost(CONFIG, 10, absorb=True), "mla", ()),
        (lambda: stepcost.decode_step_cost(MODEL, 10), "config", ()),
        (lambda: stepcost.cache_intensity(CONFIG, context=0), "context", ()),
        (lambda: stepcost.cache_intensity(CONFIG, context="10"), "context", ()),
        (lambda: stepcost.cache_intensity(CONFIG, kv_dtype="int4"), "kv_dtype", ()),
        (lambda: stepcost.verify_cost(MODEL, 10, 4), "config", ()),
        (lambda: stepcost.verify_cost(CONFIG, -1, 4), "context", ()),
        (lambda: stepcost.verify_cost(CONFIG, 10, 65), "k", ()),
        (lambda: stepcost.prefill_cost(MODEL, 4), "config", ()),
        (lambda: stepcost.prefill_cost(CONFIG, 0), "prompt_len", ()),
        (lambda: stepcost.prefill_cost(CONFIG, 4, bytes_per_param="4"), "bytes_per_param", ()),
    ]


def steptime_cases():
    cache = filled()
    renumbered = make_model("gqa", max_seq_len=512)
    rcache = renumbered.new_cache(policy=CachePolicy("sinks", 300, positions="renumbered"))
    full = filled(n=60)
    return [
        (lambda: steptime.fill_cache(cache, -1), "tokens", (cache,)),
        (lambda: steptime.fill_cache(cache, 1.5), "tokens", (cache,)),
        (lambda: steptime.fill_cache(cache, 10**9), "max_seq_len", (cache,)),
        (lambda: steptime.fill_cache(cache, 4, seed=-1), "seed", (cache,)),
        (lambda: steptime.fill_cache(rcache, 400), "renumbered", (rcache,)),
        (lambda: steptime.fill_cache("cache", 4), "cache", ()),
        (lambda: steptime.measure_step_seconds(MODEL, cache, steps=0), "steps", (cache,)),
        (lambda: steptime.measure_step_seconds(MODEL, "cache"), "cache", ()),
        (lambda: steptime.measure_step_seconds(MODEL, cache, token=-1), "token", (cache,)),
        (lambda: steptime.measure_step_seconds(MODEL, full, steps=5), "max_seq_len", (full,)),
        (lambda: steptime.step_time_curve(MODEL, [10, 12], steps=7), "contexts", ()),
        (lambda: steptime.step_time_curve(MODEL, "12"), "contexts", ()),
        (lambda: steptime.step_time_curve(MODEL, [10.5]), "contexts", ()),
        (lambda: steptime.step_time_curve(MODEL, []), "contexts", ()),
        (lambda: steptime.step_time_curve(MODEL, [10], batch=0), "batch", ()),
        (lambda: steptime.step_time_curve(MODEL, [10], batch=1.5), "batch", ()),
        (lambda: steptime.step_time_curve(MODEL, [10], kv_dtype="int4"), "kv_dtype", ()),
        (lambda: steptime.step_time_curve(MODEL, [10], threads=0), "threads", ()),
        (lambda: steptime.step_time_curve(MODEL, [10], seed=-1), "seed", ()),
        (lambda: steptime.step_time_curve(MODEL, [10], steps=10**9), "steps", ()),
        (lambda: steptime.step_time_curve(MODEL, [60]), "max_seq_len", ()),
        (lambda: steptime.prefill_time_curve(MODEL, [0]), "prompt_lens", ()),
        (lambda: steptime.prefill_time_curve(MODEL, [4], threads=-1), "threads", ()),
        (lambda: steptime.limit_blas_threads(0), "blas_threads", ()),
        (lambda: steptime.measure_decode(CONFIG, 10), "model", ()),
        (lambda: steptime.measure_decode(MODEL, 1), "context", ()),
        (lambda: steptime.measure_decode(MODEL, 10, threads=0), "threads", ()),
        (lambda: steptime.measure_decode(MODEL, 10, threads=1.5), "threads", ()),
        (lambda: steptime.measure_decode(MODEL, 10, steps=10**9), "steps", ()),
        (lambda: steptime.measure_decode(MODEL, 10**6), "max_seq_len", ()),
        (lambda: steptime.measure_decode(MODEL, 10, batch=0), "batch", ()),
        (lambda: steptime.measure_prefill(MODEL, 0), "prompt_len", ()),
        (lambda: steptime.measure_prefill(MODEL, 10**6), "prompt_len", ()),
        (lambda: steptime.measure_prefill(MODEL, 8, repeats=10**9), "repeats", ()),
        (lambda: steptime.measure_prefill(MODEL, 8, threads="1"), "threads", ()),
    ]


@pytest.mark.parametrize("make, i", cases(serving_cases) + cases(stepcost_cases)
                         + cases(steptime_cases))
def test_serving_step_costs_and_step_timers_refuse_and_change_nothing(make, i):
    refused_case(make, i)


# -- speculative decoding --------------------------------------------------------------------
def wrapped_sliding():
    model = make_model("sliding")                   # a window of 4: the ring wraps at 5 tokens
    return model, filled(model, 9)


def proposer_cases():
    look = spec.PromptLookup()
    draft = spec.DraftModel(make_model("gqa", seed=1), k=3)
    draft(token_ids(5), 3)                          # its cache holds the text so far
    return [
        (lambda: spec.PromptLookup(k=0), "k", ()),
        (lambda: spec.PromptLookup(k=65), "k", ()),
        (lambda: spec.PromptLookup(k=1.5), "k", ()),
        (lambda: spec.PromptLookup(max_ngram=0), "max_ngram", ()),
        (lambda: spec.PromptLookup(max_ngram=2, min_ngram=3), "min_ngram", ()),
        (lambda: look("abc", 2), "tokens", ()),
        (lambda: look(12, 2), "tokens", ()),
        (lambda: look([1, 2, 1], -1), "k", ()),
        (lambda: look([1, 2, 1], 1.5), "k", ()),
        (lambda: look([1.5, 2, 1], 2), "tokens", ()),
        (lambda: spec.DraftModel(CONFIG), "draft", ()),
        (lambda: spec.DraftModel(MODEL, k=0), "k", ()),
        (lambda: spec.DraftModel(MODEL, kv_dtype="int4"), "kv_dtype", ()),
        (lambda: draft([], 3), "tokens", (draft,)),
        (lambda: draft(token_ids(5)[:3] + [99], 3), "tokens", (draft,)),
        (lambda: draft(token_ids(5) + [1], -1), "k", (draft,)),
        (lambda: draft(token_ids(5) + [1], 1.5), "k", (draft,)),
        (lambda: draft("12345", 3), "tokens", (draft,)),
        (lambda: spec.skip_layers(CONFIG, [0]), "model", ()),
        (lambda: spec.skip_layers(MODEL, 5), "keep", ()),
        (lambda: spec.skip_layers(MODEL, [1, 0]), "keep", ()),
        (lambda: spec.skip_layers(MODEL, [0, 5]), "keep", ()),
        (lambda: spec.skip_layers(MODEL, "01"), "keep", ()),
        (lambda: spec.skip_layers(MODEL, range(10**12)), "keep", ()),
        (lambda: spec.skip_layers(MODEL, []), "keep", ()),
        (lambda: spec.check_proposal([1, 2], 1.5, 64), "k", ()),
        (lambda: spec.check_proposal([1, 2], -1, 64), "k", ()),
        (lambda: spec.check_proposal([1, 2], 4, 0), "vocab_size", ()),
        (lambda: spec.check_proposal([1, 99], 4, 64), "proposal", ()),
    ]


def verify_cases():
    window = filled(policy=CachePolicy("window", 4))
    sliding, wrapped = wrapped_sliding()
    cache = filled()
    near_full = filled(n=62)
    batched = MODEL.new_cache(batch=2)
    pool = MODEL.new_paged_cache(num_blocks=2, block_size=4)
    seq = pool.new_sequence()
    MODEL.forward(token_ids(7), seq)
    return [
        (lambda: spec.verify_step(MODEL, window, 1, [2, 3]), "roll", (window,)),
        (lambda: spec.verify_step(sliding, wrapped, 1, [2, 3, 4]), "roll", (wrapped,)),
        (lambda: spec.verify_step(MODEL, cache, 1.5, [1]), "last", (cache,)),
        (lambda: spec.verify_step(MODEL, cache, 99, [1]), "last", (cache,)),
        (lambda: spec.verify_step(MODEL, cache, 1, "12"), "proposal", (cache,)),
        (lambda: spec.verify_step(MODEL, cache, 1, [1.5]), "proposal", (cache,)),
        (lambda: spec.verify_step(MODEL, cache, 1, [1] * 65), "proposal", (cache,)),
        (lambda: spec.verify_step(MODEL, cache, 1, np.array([[1, 2]])), "proposal", (cache,)),
        (lambda: spec.verify_step(CONFIG, cache, 1, [1]), "model", (cache,)),
        (lambda: spec.verify_step(MODEL, "cache", 1, [1]), "cache", ()),
        (lambda: spec.verify_step(MODEL, near_full, 1, [1, 2, 3]), "max_seq_len",
         (near_full,)),
        (lambda: spec.verify_step(MODEL, batched, 1, [1]), "batch", (batched,)),
        (lambda: spec.verify_step(MODEL, seq, 1, [2, 3]), "block", (pool, seq), OutOfBlocks),
    ]


def run_cases():
    ids = token_ids(8)
    look = spec.PromptLookup(k=4)
    window = filled(policy=CachePolicy("window", 8))
    h2o = filled(policy=CachePolicy("h2o", 8))
    pool = MODEL.new_paged_cache(num_blocks=3, block_size=4)
    seq = pool.new_sequence()
    MODEL.forward(token_ids(10), seq)
    return [
        (lambda: spec.speculative_steps(MODEL, ids, 10, look, cache=window), "roll", (window,)),
        (lambda: spec.speculative_generate(MODEL, ids, 10, look, cache=h2o), "roll", (h2o,)),
        (lambda: generate(MODEL, ids, 10, cache=window, speculative=look), "roll", (window,)),
        (lambda: spec.speculative_steps(MODEL, ids, 5, "proposer"), "proposer", ()),
        (lambda: spec.speculative_steps(MODEL, ids, 5, look, k=0), "k", ()),
        (lambda: spec.speculative_steps(MODEL, ids, 5, look, k=65), "k", ()),
        (lambda: spec.speculative_steps(MODEL, ids, 5, lambda t, k: [], k=None), "k", ()),
        (lambda: spec.speculative_steps(MODEL, ids, -1, look), "max_new_tokens", ()),
        (lambda: spec.speculative_steps(MODEL, ids, 10**9, look), "max_new_tokens", ()),
        (lambda: spec.speculative_steps(MODEL, "12", 5, look), "token_ids", ()),
        (lambda: spec.speculative_generate(MODEL, [1], 6, look, cache=seq), "block",
         (pool, seq), OutOfBlocks),
        (lambda: spec.acceptance("abc"), "steps", ()),
        (lambda: spec.acceptance([1, 2]), "steps", ()),
        (lambda: spec.acceptance(None), "steps", ()),
        (lambda: spec.expected_tokens_per_step(1.5, 4), "alpha", ()),
        (lambda: spec.expected_tokens_per_step(float("nan"), 4), "alpha", ()),
        (lambda: spec.expected_tokens_per_step(0.5, -1), "k", ()),
        (lambda: spec.expected_tokens_per_step(0.5, 2.0), "k", ()),
        (lambda: spec.expected_speedup(0.5, 4, draft_cost=-1), "draft_cost", ()),
        (lambda: spec.expected_speedup(0.5, 4, verify_ratio=0), "verify_ratio", ()),
        (lambda: spec.expected_speedup(0.5, 1.5), "k", ()),
    ]


@pytest.mark.parametrize("make, i", cases(proposer_cases) + cases(verify_cases)
                         + cases(run_cases))
def test_speculation_refuses_and_changes_nothing(make, i):
    refused_case(make, i)


def test_a_huge_max_ngram_proposes_at_once_what_a_small_one_does():
    tokens = token_ids(200) + token_ids(200)[:20]
    huge = works(lambda: spec.PromptLookup(k=4, max_ngram=10**9)(tokens, 4))
    assert huge == spec.PromptLookup(k=4, max_ngram=len(tokens))(tokens, 4) != []


def test_k_of_1_and_64_and_numpy_proposals_work():
    ids = token_ids(16) + token_ids(16)[:4]
    plain = generate(MODEL, ids, 20)
    for k in (1, 64):
        assert works(lambda: generate(MODEL, ids, 20, speculative=spec.PromptLookup(k=k))) \
            == plain
        draft = spec.DraftModel(MODEL, k=k)
        assert works(lambda: spec.speculative_generate(MODEL, ids, 20, draft)) == plain
    assert spec.PromptLookup()(np.array(ids), 0) == []            # room for nothing: none
    a, b = filled(), filled()
    from_list = spec.verify_step(MODEL, a, 3, [5, 6])
    from_array = spec.verify_step(MODEL, b, 3, np.array([5, 6]))
    assert from_list.tokens == from_array.tokens and len(a) == len(b)
    assert same(state(a), state(b))


def test_speculation_with_a_policy_budget_above_max_seq_len_works():
    ids = token_ids(16) + token_ids(16)[:4]
    cache = MODEL.new_cache(policy=CachePolicy("window", 10**6))
    out = works(lambda: generate(MODEL, ids, 20, cache=cache, speculative=spec.PromptLookup()))
    assert out == generate(MODEL, ids, 20)


# -- prefix reuse ------------------------------------------------------------------------
def prefix_cases():
    prefix, prompt = token_ids(8), token_ids(8) + [1, 2, 3]
    pool = MODEL.new_paged_cache(num_blocks=4, block_size=4)
    seq = pool.new_sequence(prefix)
    MODEL.forward(prefix, seq)
    other = filled(make_model("gqa", seed=3), 8)
    cache = filled(n=8)
    return [
        (lambda: compare_reuse(MODEL, prefix, seq, prompt, 20), "block", (pool, seq),
         OutOfBlocks),
        (lambda: compare_reuse(MODEL, prefix, other, prompt, 3), "model", (other,)),
        (lambda: compare_reuse(MODEL, prefix, cache, prompt, 0), "max_new_tokens", (cache,)),
        (lambda: compare_reuse(MODEL, prefix, cache, prompt, 60), "max_seq_len", (cache,)),
        (lambda: compare_reuse(MODEL, prefix, cache, prompt, 3, stop_ids=[99]), "stop_ids",
         (cache,)),
        (lambda: compare_reuse(CONFIG, prefix, cache, prompt, 3), "model", (cache,)),
        (lambda: suffix_after("12", [1]), "prompt_ids", ()),
        (lambda: suffix_after([1, 2], [1.5]), "prefix_ids", ()),
    ]


@pytest.mark.parametrize("make, i", cases(prefix_cases))
def test_prefix_reuse_refuses_and_changes_nothing(make, i):
    refused_case(make, i)


def test_prefix_reuse_from_a_pool_gives_back_every_block_it_took():
    prefix, prompt = token_ids(8), token_ids(8) + [1, 2, 3]
    pool = MODEL.new_paged_cache(num_blocks=12, block_size=4)
    seq = pool.new_sequence(prefix)
    MODEL.forward(prefix, seq)
    held, free = list(pool.manager.ref_count), sorted(pool.manager.free)
    before = len(seq), list(seq.table), seq.stored(1, "k")
    out = works(lambda: compare_reuse(MODEL, prefix, seq, prompt, 4))
    assert out["same_tokens"] and pool.manager.ref_count == held
    assert sorted(pool.manager.free) == free and same((len(seq), list(seq.table),
                                                       seq.stored(1, "k")), before)
