"""Issue 35's classes of bad input at cache policies, quality and quantized caches (chapter 12
and chapter 9's schemes): refused with the argument named, no cache changed by a refused call,
no silent NaN or float where a count belongs; a budget equal to the text and one above
max_seq_len keep working.
"""
import numpy as np
import pytest
from bad_input_helpers import cases, refused_case, works
from conftest import make_model, token_ids

from toykv import CachePolicy, quality
from toykv.kvquant import (QuantScheme, compare_schemes, key_channel_spread, key_error,
                           round_trip)
from toykv.paged import OutOfBlocks
from toykv.policies import check_policy

MODEL = make_model("gqa")
CONFIG = MODEL.config
RECEIVED = np.linspace(1.0, 2.0, 12)


def filled(model=MODEL, n=6, **options):
    cache = model.new_cache(**options)
    model.forward(token_ids(n), cache)
    return cache


def policy_cases():
    h2o = CachePolicy("h2o", 6, recent=3)
    window = CachePolicy("window", 8)
    return [
        (lambda: CachePolicy("window", 4.0), "budget", ()),
        (lambda: CachePolicy("window", True), "budget", ()),
        (lambda: CachePolicy("window", -1), "budget", ()),
        (lambda: CachePolicy("window", "8"), "budget", ()),
        (lambda: CachePolicy("window"), "budget", ()),
        (lambda: CachePolicy("lru", 8), "lru", ()),
        (lambda: CachePolicy(["window"], 8), "policy", ()),
        (lambda: CachePolicy("full", 8), "budget", ()),
        (lambda: CachePolicy("sinks", 8, sinks=1.5), "sinks", ()),
        (lambda: CachePolicy("sinks", 4, sinks=4), "budget", ()),
        (lambda: CachePolicy("h2o", 8, recent=0), "recent", ()),
        (lambda: CachePolicy("h2o", 8, recent=9), "recent", ()),
        (lambda: CachePolicy("window", 8, sinks=2), "sinks", ()),
        (lambda: CachePolicy("window", 8, positions="new"), "positions", ()),
        (lambda: window.held(-5), "length", ()),
        (lambda: window.held(1.5), "length", ()),
        (lambda: window.held("3"), "length", ()),
        (lambda: h2o.keep("abc", RECEIVED), "positions", ()),
        (lambda: h2o.keep(np.arange(12), None), "received", ()),
        (lambda: h2o.keep(np.arange(12), np.ones(5)), "received", ()),
        (lambda: h2o.keep(np.arange(12), np.full(12, np.nan)), "received", ()),
        (lambda: h2o.keep(np.arange(12)[::-1], RECEIVED), "positions", ()),
        (lambda: h2o.keep(np.arange(12.0), RECEIVED), "positions", ()),
        (lambda: h2o.keep(np.arange(12), list("abcdefghijkl")), "received", ()),
        (lambda: window.keep(np.arange(12).reshape(3, 4), None), "positions", ()),
        (lambda: MODEL.new_cache(policy="h2o"), "budget", ()),
        (lambda: MODEL.new_cache(policy=5), "policy", ()),
        (lambda: MODEL.new_cache(policy=window, batch=2), "batch", ()),
        (lambda: make_model("sliding").new_cache(policy=window), "policy", ()),
        (lambda: check_policy(window, MODEL, None), "config", ()),
    ]


def quality_cases():
    logits = np.random.default_rng(0).standard_normal((3, 8))
    chunked = make_model("gqa", max_seq_len=512)
    renumbered = chunked.new_cache(policy=CachePolicy("sinks", 100, positions="renumbered"))
    pool = MODEL.new_paged_cache(num_blocks=2, block_size=4)
    seq = pool.new_sequence()
    empty_full = MODEL.new_cache(policy=CachePolicy("full"))
    with_text = filled(policy=CachePolicy("full"))
    return [
        (lambda: quality.token_losses(logits, [-1, 0, 1]), "targets", ()),
        (lambda: quality.token_losses(logits, [1.5, 0, 1]), "targets", ()),
        (lambda: quality.token_losses(logits, [0, 1]), "targets", ()),
        (lambda: quality.token_losses(logits, [0, 1, 8]), "targets", ()),
        (lambda: quality.token_losses(logits[0], [0]), "logits", ()),
        (lambda: quality.token_losses(np.where(logits > 1, np.nan, logits), [0, 1, 2]),
         "logits", ()),
        (lambda: quality.token_losses(np.full((3, 8), np.inf), [0, 1, 2]), "logits", ()),
        (lambda: quality.token_losses([["a", "b"]], [0]), "logits", ()),
        (lambda: quality.token_losses(np.zeros((2, 0)), [0, 0]), "logits", ()),
        (lambda: quality.next_token_losses(CONFIG, token_ids(8)), "model", ()),
        (lambda: quality.next_token_losses(MODEL, [1]), "token_ids", ()),
        (lambda: quality.next_token_losses(MODEL, "1234"), "token_ids", ()),
        (lambda: quality.next_token_losses(MODEL, token_ids(8), CachePolicy("window", 4),
                                           chunk=0), "chunk", ()),
        (lambda: quality.next_token_losses(MODEL, token_ids(8), CachePolicy("window", 4),
                                           chunk=1.5), "chunk", ()),
        (lambda: quality.next_token_losses(MODEL, token_ids(8), "lru"), "lru", ()),
        (lambda: quality.next_token_losses(MODEL, token_ids(8), 5), "policy", ()),
        (lambda: quality.next_token_losses(MODEL, token_ids(8), cache=with_text), "cache",
         (with_text,)),
        (lambda: quality.next_token_losses(MODEL, token_ids(8), CachePolicy("window", 4),
                                           cache=empty_full), "cache", (empty_full,)),
        (lambda: quality.next_token_losses(MODEL, token_ids(8), cache=MODEL.new_cache(batch=2)),
         "batch", ()),
        (lambda: quality.next_token_losses(MODEL, token_ids(12), cache=seq), "block",
         (pool, seq), OutOfBlocks),
        (lambda: quality.next_token_losses(chunked, token_ids(300), cache=renumbered),
         "renumbered", (renumbered,)),
        (lambda: quality.next_token_losses(MODEL, token_ids(80), CachePolicy("window", 4)),
         "token_ids", ()),
        (lambda: quality.perplexity(["a", "b"]), "losses", ()),
        (lambda: quality.perplexity([]), "losses", ()),
        (lambda: quality.perplexity([np.nan]), "losses", ()),
        (lambda: quality.perplexity([[1.0, 2.0]]), "losses", ()),
        (lambda: quality.perplexity("12"), "losses", ()),
        (lambda: quality.perplexity(None), "losses", ()),
        (lambda: quality.perplexity([1e6]), "losses", ()),
        (lambda: quality.attention_share(empty_full), "cache", (empty_full,)),
        (lambda: quality.attention_share(with_text, first=0), "first", (with_text,)),
        (lambda: quality.attention_share(with_text, first=1.5), "first", (with_text,)),
        (lambda: quality.attention_share(filled()), "cache", ()),
        (lambda: quality.attention_share("cache"), "cache", ()),
    ]


def kvquant_cases():
    x = np.random.default_rng(0).standard_normal((8, 2, 8)).astype(np.float32)
    with_inf = x.copy()
    with_inf[3, 1, 2] = np.inf
    scheme = QuantScheme(4, group=2, residual=2)
    cache = filled(n=8)
    int8 = filled(n=8, kv_dtype="int8")
    window = filled(n=8, policy=CachePolicy("window", 4))
    other = filled(make_model("gqa", seed=4), 8)
    return [
        (lambda: round_trip(with_inf, 4), "x", ()),
        (lambda: round_trip(np.where(x > 1, np.nan, x), 4), "x", ()),
        (lambda: round_trip(x, 4.0), "bits", ()),
        (lambda: round_trip(x, True), "bits", ()),
        (lambda: round_trip(x, 3), "bits", ()),
        (lambda: round_trip(x, 4, "head"), "per", ()),
        (lambda: round_trip([], 4), "x", ()),
        (lambda: round_trip(np.zeros((0, 4), np.float32), 4), "x", ()),
        (lambda: round_trip(x.astype(str), 4), "x", ()),
        (lambda: QuantScheme(bits=4.0), "bits", ()),
        (lambda: QuantScheme(bits="4"), "bits", ()),
        (lambda: QuantScheme(keys="head"), "keys", ()),
        (lambda: QuantScheme(group=0), "group", ()),
        (lambda: QuantScheme(group=1.5), "group", ()),
        (lambda: QuantScheme(residual=-1), "residual", ()),
        (lambda: scheme.quantized(-1), "tokens", ()),
        (lambda: scheme.layer_nbytes(-1, 8, 10), "n_kv_heads", ()),
        (lambda: scheme.layer_nbytes(2, 1.5, 10), "head_dim", ()),
        (lambda: scheme.layer_nbytes(2, 8, 1.5), "tokens", ()),
        (lambda: scheme.nbytes(MODEL, 10), "config", ()),
        (lambda: key_error(cache, "int4"), "scheme", (cache,)),
        (lambda: key_error("cache", scheme), "cache", ()),
        (lambda: key_error(int8, scheme), "kv_dtype", (int8,)),
        (lambda: key_channel_spread(MODEL.new_cache()), "empty", ()),
        (lambda: key_channel_spread(window), "holds", (window,)),
        (lambda: compare_schemes(MODEL, int8, [1], 2, [scheme]), "kv_dtype", (int8,)),
        (lambda: compare_schemes(MODEL, cache, [1], 2, scheme), "schemes", (cache,)),
        (lambda: compare_schemes(MODEL, cache, [1], 2, []), "schemes", (cache,)),
        (lambda: compare_schemes(MODEL, cache, [1], 2, ["int4"]), "schemes", (cache,)),
        (lambda: compare_schemes(MODEL, cache, [1], 0, [scheme]), "n_new", (cache,)),
        (lambda: compare_schemes(MODEL, cache, [1], 1.5, [scheme]), "n_new", (cache,)),
        (lambda: compare_schemes(MODEL, cache, [], 2, [scheme]), "prompt_ids", (cache,)),
        (lambda: compare_schemes(CONFIG, cache, [1], 2, [scheme]), "model", (cache,)),
        (lambda: compare_schemes(MODEL, other, [1], 2, [scheme]), "prefix_cache", (other,)),
        (lambda: compare_schemes(MODEL, window, [1], 2, [scheme]), "holds", (window,)),
    ]


@pytest.mark.parametrize("make, i", cases(policy_cases) + cases(quality_cases)
                         + cases(kvquant_cases))
def test_policies_quality_and_schemes_refuse_and_change_nothing(make, i):
    refused_case(make, i)


def test_a_budget_equal_to_the_text_and_one_above_max_seq_len_keep_everything():
    ids = token_ids(16)
    plain = quality.next_token_losses(MODEL, ids)
    for budget in (16, 10**6):
        for name in ("window", "sinks", "h2o"):
            cache = MODEL.new_cache(policy=CachePolicy(name, budget))
            losses = works(lambda: quality.next_token_losses(MODEL, ids, cache=cache,
                                                             chunk=1))
            assert np.allclose(losses, plain, atol=1e-4) and len(cache.positions(0)) == 16


def test_numbers_stay_integers_and_numpy_inputs_work():
    scheme = works(lambda: QuantScheme(bits=np.int64(4), group=np.int64(2), residual=2))
    assert type(scheme.nbytes(CONFIG, 10)) is int
    assert type(QuantScheme(bits=4).layer_nbytes(np.int64(2), 8, 40)) is int
    assert works(lambda: CachePolicy("window", np.int64(8)).held(np.int64(20))) == 8
    x = np.random.default_rng(0).standard_normal((4, 8))
    assert np.array_equal(round_trip(x.tolist(), 8), round_trip(x, 8))
    received = np.linspace(1.0, 2.0, 12)
    rule = CachePolicy("h2o", 6, recent=3)
    assert list(rule.keep(list(range(12)), list(received))) == list(rule.keep(np.arange(12),
                                                                             received))
