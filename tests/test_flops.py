"""toykv.flops formulas against the FLOPs the model's counter actually counts."""
import numpy as np
import pytest
from conftest import BASE, VARIANTS, batch_ids, counted
from conftest import make_model as variant_model

from toykv import ModelConfig, ToyTransformer, decode_steps, source_toy
from toykv.flops import (attention_flops, cached_step_flops, forward_flops, full_pass_flops,
                         generation_flops, source_cached_step_flops, source_full_pass_flops)

FLOP_VARIANTS = {**VARIANTS,
                 "head_dim_given": (dict(head_dim=12, n_kv_heads=2, tie_embeddings=False), False)}


def make_model(name):
    changes, absorb = FLOP_VARIANTS[name]
    return ToyTransformer(ModelConfig(**{**BASE, **changes}), absorb=absorb), absorb


@pytest.mark.parametrize("name", FLOP_VARIANTS)
def test_counter_equals_formula_for_prefill_chunks_and_decode(name):
    model, absorb = make_model(name)
    cfg, cache = model.config, model.new_cache()
    assert counted(model, list(range(9)), cache) == forward_flops(cfg, 9, 0, absorb)
    assert counted(model, list(range(6)), cache) == forward_flops(cfg, 6, 9, absorb)
    for context in range(16, 24):                   # decode steps, windows wrapping
        assert counted(model, [context], cache) == cached_step_flops(cfg, context, absorb)
    assert counted(model, list(range(20))) == full_pass_flops(cfg, 20, absorb)


@pytest.mark.parametrize("name", FLOP_VARIANTS)
@pytest.mark.parametrize("use_cache", [True, False])
def test_generation_flops_match_each_step(name, use_cache):
    model, absorb = make_model(name)
    steps = list(decode_steps(model, [3, 1, 4, 1, 5], 10, use_cache=use_cache))
    expected = generation_flops(model.config, 5, 10, use_cache=use_cache, absorb=absorb)
    assert [s.flops for s in steps] == expected


def test_mla_absorbed_decode_step_counts_differ_as_the_formulas_say():
    # one decode step at context 13: expanded re-expands all 13 latents, absorbed does not
    counts = {}
    for absorb in (False, True):
        model, _ = make_model("mla_absorbed" if absorb else "mla_expanded")
        cache = model.new_cache()
        model.forward(list(range(12)), cache)
        counts[absorb] = counted(model, [5], cache)
        assert counts[absorb] == cached_step_flops(model.config, 13, absorb)
    assert counts[True] < counts[False]


@pytest.mark.parametrize("S", [1, 32, 512])
def test_full_pass_is_source_formula_plus_swiglu_third_matrix(S):
    cfg = source_toy()
    swiglu_extra = cfg.n_layers * 2 * S * cfg.d_model * cfg.d_ff
    assert full_pass_flops(cfg, S) == source_full_pass_flops(cfg, S) + swiglu_extra


@pytest.mark.parametrize("S", [1, 33, 512])
def test_cached_step_is_source_formula_plus_swiglu_third_matrix(S):
    cfg = source_toy()
    swiglu_extra = cfg.n_layers * 2 * cfg.d_model * cfg.d_ff
    assert cached_step_flops(cfg, S) == source_cached_step_flops(cfg, S) + swiglu_extra


def test_source_toy_counter_matches_formula():
    model = ToyTransformer(source_toy())
    assert counted(model, list(range(32))) == full_pass_flops(model.config, 32)


def test_gqa_and_mqa_shrink_only_the_kv_projections():
    mha, mqa = source_toy(), source_toy(n_kv_heads=1)
    D, hd, S = mha.d_model, mha.head_dim, 64
    saved = mha.n_layers * 2 * (2 * S * D * (mha.n_kv_heads - 1) * hd)     # K and V projections
    assert full_pass_flops(mha, S) - full_pass_flops(mqa, S) == saved


@pytest.mark.parametrize("n", [1, 5, 12])
def test_token_passes_n_squared_over_two_without_cache_n_with(n):
    model, _ = make_model("mha")
    uncached = sum(s.tokens_in for s in decode_steps(model, [7], n, use_cache=False))
    cached = sum(s.tokens_in for s in decode_steps(model, [7], n, use_cache=True))
    assert uncached == n * (n + 1) // 2
    assert cached == n


def test_uncached_generation_costs_more_and_grows_faster():
    cfg = source_toy()
    cached = generation_flops(cfg, 32, 64, use_cache=True)
    uncached = generation_flops(cfg, 32, 64, use_cache=False)
    assert cached[0] == uncached[0]                         # the same prefill
    assert all(u > c for u, c in zip(uncached[1:], cached[1:]))
    steps = np.diff(cached[1:])                             # grows by the attention term only
    assert np.all(steps == cfg.n_layers * 4 * cfg.n_heads * cfg.head_dim)


# -- batches ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", FLOP_VARIANTS)
def test_counter_equals_formula_for_batched_passes(name):
    model, absorb = make_model(name)
    cfg, B = model.config, 3
    cache = model.new_cache(batch=B)
    assert counted(model, batch_ids(B, 9), cache) == forward_flops(cfg, 9, 0, absorb, batch=B)
    for context in range(10, 16):                   # decode steps, windows wrapping
        assert counted(model, batch_ids(B, 1, seed=context), cache) == \
            cached_step_flops(cfg, context, absorb, batch=B)
    assert counted(model, batch_ids(B, 20)) == full_pass_flops(cfg, 20, absorb, batch=B)


@pytest.mark.parametrize("name", ["mha", "mla_absorbed", "mixed"])
def test_a_batch_costs_batch_times_one_sequence_on_the_counter(name):
    model, ids = variant_model(name), batch_ids(4, 7)
    alone = sum(counted(model, row) for row in ids)               # four separate passes
    assert counted(model, ids) == alone
    assert forward_flops(model.config, 7, 0, model.absorb, batch=4) == alone
    steps = generation_flops(model.config, 5, 6, absorb=model.absorb, batch=4)
    assert steps == [4 * s for s in generation_flops(model.config, 5, 6, absorb=model.absorb)]


@pytest.mark.parametrize("call, name", [
    (lambda c: forward_flops(c, 0), "n_new"), (lambda c: forward_flops(c, 1.0), "n_new"),
    (lambda c: forward_flops(c, 1, -1), "n_cached"),
    (lambda c: forward_flops(c, 1, True), "n_cached"),
    (lambda c: forward_flops(c, 1, batch=0), "batch"),
    (lambda c: forward_flops(c, 1, batch=2.0), "batch"),
    (lambda c: forward_flops(c, 1, batch=True), "batch"),
    (lambda c: forward_flops(c, 1, absorb=1), "absorb"),
    (lambda c: full_pass_flops(c, 0), "seq_len"), (lambda c: cached_step_flops(c, 0), "context"),
    (lambda c: generation_flops(c, 0, 3), "prompt_len"),
    (lambda c: generation_flops(c, 4, -1), "new_tokens"),
    (lambda c: generation_flops(c, 4, 3, use_cache="yes"), "use_cache"),
    (lambda c: source_full_pass_flops(c, 2.5), "seq_len"),
    (lambda c: forward_flops("toy", 1), "config"),
])
def test_formulas_reject_bad_arguments(call, name):
    with pytest.raises(ValueError, match=name):
        call(source_toy())


def test_numpy_integers_are_counts_and_zero_new_tokens_is_no_step():
    assert forward_flops(source_toy(), np.int64(3), np.int32(2), batch=np.int64(2)) == \
        forward_flops(source_toy(), 3, 2, batch=2)
    assert generation_flops(source_toy(), 4, 0) == []


@pytest.mark.parametrize("changes", [{}, dict(n_kv_heads=2), dict(n_kv_heads=1)])
@pytest.mark.parametrize("n_new, n_cached, batch", [(1, 0, 1), (1, 30, 1), (8, 0, 1), (3, 5, 4)])
def test_attention_flops_by_hand(changes, n_new, n_cached, batch):
    c = ModelConfig(**{**BASE, **changes})
    keys = n_cached + n_new                      # the held keys and the new ones
    by_hand = batch * c.n_layers * 4 * c.n_heads * c.head_dim * n_new * keys   # q.k, p.v
    assert attention_flops(c, n_new, n_cached, batch=batch) == by_hand
    weights_only = forward_flops(c, n_new, 0, batch=batch) - attention_flops(c, n_new, 0,
                                                                             batch=batch)
    assert forward_flops(c, n_new, n_cached, batch=batch) - by_hand == weights_only


def test_attention_flops_sliding_and_refusals():
    c = ModelConfig(**{**BASE, "sliding_window": 4})
    assert attention_flops(c, 1, 30) == c.n_layers * 4 * c.n_heads * c.head_dim * (4 + 1)
    for bad in (dict(n_new=0), dict(n_cached=-1), dict(batch=0), dict(absorb="yes")):
        args = dict(n_new=1, n_cached=0) | bad
        with pytest.raises(ValueError, match=next(iter(bad))):
            attention_flops(c, **args)
