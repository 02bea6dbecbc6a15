"""toykv.quality's yardsticks of a change (chapter 13) and kvquant.quantized_logits: logits of a
text through any cache equal one pass where the cache keeps everything; compare() gives the
perplexity, top-1 agreement and KL divergence worked out here by hand on small distributions;
a quantized text equals the same text decoded one token at a time."""
import numpy as np
import pytest
from conftest import make_model, token_ids

from toykv import CachePolicy, kvquant
from toykv.quality import compare, log_probs, next_token_losses, perplexity, text_logits


def test_text_logits_through_any_full_cache_equal_one_pass():
    model = make_model("gqa", exact=True)
    ids = token_ids(30)
    one_pass = text_logits(model, ids)
    np.testing.assert_array_equal(one_pass, model(ids))
    for cache, chunk in ((model.new_cache(), 7), (model.new_cache(policy=CachePolicy()), 64)):
        np.testing.assert_array_equal(text_logits(model, ids, cache, chunk), one_pass)
    f16 = text_logits(model, ids, model.new_cache(kv_dtype="float16"), 30)
    assert 0 < np.abs(f16 - one_pass).max() < 1e-2                # rounded keys, values


def test_text_logits_refuse_a_used_or_foreign_cache():
    model, other = make_model("gqa"), make_model("gqa")
    used = model.new_cache()
    model(token_ids(3), used)
    with pytest.raises(ValueError, match="must be empty, it holds 3"):
        text_logits(model, token_ids(5), used)
    with pytest.raises(ValueError, match="another ToyTransformer"):
        text_logits(model, token_ids(5), _claimed(other))
    with pytest.raises(ValueError, match="chunk"):
        text_logits(model, token_ids(5), model.new_cache(), chunk=0)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        text_logits(model, [1])


def _claimed(model):
    cache = model.new_cache()
    model([1], cache)
    cache.truncate(0)                                         # empty, but the other model's
    return cache


def test_next_token_losses_are_unchanged_by_the_refactoring():
    model = make_model("mha")
    ids = token_ids(20)
    by_pass = next_token_losses(model, ids)
    by_cache = next_token_losses(model, ids, CachePolicy(), chunk=6)
    np.testing.assert_allclose(by_cache, by_pass, atol=1e-4)


def test_log_probs_are_normalised_log_softmax():
    logits = np.array([[0.0, 1.0, 2.0], [1000.0, 1000.0, -1000.0]], np.float32)
    lp = log_probs(logits)
    np.testing.assert_allclose(np.exp(lp).sum(axis=1), 1.0)
    np.testing.assert_allclose(lp[0], [0, 1, 2] - np.log(1 + np.e + np.e ** 2))
    np.testing.assert_allclose(lp[1], [np.log(0.5), np.log(0.5), -2000 - np.log(2)])
    for bad in (np.zeros(3), np.zeros((2, 0)), np.array([[np.nan, 1.0]])):
        with pytest.raises(ValueError, match="finite 2-D"):
            log_probs(bad)


def test_compare_by_hand():
    """Two positions, three tokens: each number written out from the distributions."""
    p = np.array([[0.5, 0.25, 0.25], [0.1, 0.2, 0.7]])          # the original's
    q = np.array([[0.25, 0.5, 0.25], [0.1, 0.2, 0.7]])          # the changed model's
    ids = np.array([0, 2])                                       # token 2 follows position 0
    got = compare(log_probs(np.log(p)), np.log(q), ids, rows=1)
    kl = (0.5 * np.log(0.5 / 0.25) + 0.25 * np.log(0.25 / 0.5)) / 2    # the second: 0
    assert got["kl"] == pytest.approx(kl)
    assert got["top1"] == 0.5                                    # token 0 vs token 1, then 2 = 2
    assert got["perplexity"] == pytest.approx(1 / 0.25)          # q(token 2 | position 0)
    same = compare(log_probs(np.log(p)), np.log(p), ids)
    assert same == {"perplexity": pytest.approx(4.0), "top1": 1.0, "kl": pytest.approx(0.0)}


def test_compare_row_blocks_change_nothing_and_bad_shapes_are_refused():
    rng = np.random.default_rng(0)
    ref, new = rng.standard_normal((11, 7)), rng.standard_normal((11, 7))
    ids = rng.integers(0, 7, 11)
    one, many = compare(log_probs(ref), new, ids, rows=1), compare(log_probs(ref), new, ids)
    assert one == pytest.approx(many)
    assert many["perplexity"] == pytest.approx(perplexity(
        -log_probs(new)[np.arange(10), ids[1:]]))
    with pytest.raises(ValueError, match="same N"):
        compare(log_probs(ref), new[:5], ids)
    with pytest.raises(ValueError, match="same N"):
        compare(log_probs(ref), new, ids[:5])
    with pytest.raises(ValueError, match="rows"):
        compare(log_probs(ref), new, ids, rows=0)


@pytest.mark.parametrize("scheme", [kvquant.QuantScheme(4, group=4, residual=4),
                                    kvquant.QuantScheme(2, "token", group=4, residual=8),
                                    kvquant.QuantScheme(8, group=4, residual=2)], ids=repr)
def test_a_quantized_text_is_the_text_decoded_one_token_at_a_time(scheme):
    """The reference: a float32 cache fed one token per step, whose groups the scheme holds
    quantized are rewritten by hand (round_trip) before each step."""
    model = make_model("gqa", exact=True)
    ids = token_ids(26)
    cache, done, rows = model.new_cache(), 0, []
    for t in ids:                                                # one token per step
        due, g = scheme.quantized(len(cache)), scheme.group
        for layer in cache.layers:
            for first in range(done, due, g):
                layer["k"][first:first + g] = kvquant.round_trip(layer["k"][first:first + g],
                                                                 scheme.bits, scheme.keys)
                layer["v"][first:first + g] = kvquant.round_trip(layer["v"][first:first + g],
                                                                 scheme.bits, "token")
        done = max(done, due)
        rows.append(model.forward([t], cache))
    got = kvquant.quantized_logits(model, ids, scheme)
    np.testing.assert_array_equal(got, np.concatenate(rows))
    assert np.abs(got - model(ids)).max() > 0                    # something was quantized


def test_quantized_logits_refuse_what_they_cannot_run():
    with pytest.raises(ValueError, match="QuantScheme"):
        kvquant.quantized_logits(make_model("gqa"), token_ids(5), 4)
    with pytest.raises(ValueError, match="full-attention layers caching k and v"):
        kvquant.quantized_logits(make_model("lowrank"), token_ids(5), kvquant.QuantScheme())
    with pytest.raises(ValueError, match="at least one token"):
        kvquant.quantized_logits(make_model("gqa"), [], kvquant.QuantScheme())
