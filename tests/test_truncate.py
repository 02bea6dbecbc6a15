"""KVCache.truncate: a cache rolled back to n tokens is a cache that never held the rest.

Expected values come from a second cache that was only ever fed the kept tokens, with the
exact backend, so the two must agree bit for bit: stored values, len, nbytes, and the logits
of whatever follows.
"""
import numpy as np
import pytest
from conftest import make_model
from conftest import token_ids as ids
from test_cache_steps import assert_same, snapshot

KINDS = ["mha", "gqa", "mla_absorbed", "mla_expanded", "sliding", "mixed"]
DTYPES = ["float32", "float16", "int8"]


def same_bits(a, b):
    return np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_truncated_cache_continues_as_one_that_never_held_the_rest(kind, dtype):
    model = make_model(kind, exact=True)
    kept, dropped, after = ids(2, seed=1), ids(2, seed=2), ids(5, seed=3)   # 4 <= window
    rolled, fresh = model.new_cache(kv_dtype=dtype), model.new_cache(kv_dtype=dtype)
    model.forward(kept + dropped, rolled)
    before = rolled.nbytes
    rolled.truncate(len(kept))
    model.forward(kept, fresh)
    assert_same(snapshot(rolled), snapshot(fresh))          # len, nbytes, every value
    assert rolled.nbytes < before
    assert same_bits(model.forward(after, rolled), model.forward(after, fresh))
    assert_same(snapshot(rolled), snapshot(fresh))          # past the window too (sliding)
    for token in ids(3, seed=4):                            # and step by step
        assert same_bits(model.forward([token], rolled), model.forward([token], fresh))


@pytest.mark.parametrize("kind", ["mha", "sliding"])
def test_a_batched_cache_is_truncated_to_one_length_for_every_row(kind):
    model = make_model(kind, exact=True)
    rng = np.random.default_rng(0)
    kept, dropped, after = (rng.integers(0, 64, (3, n)) for n in (2, 2, 3))
    rolled, fresh = model.new_cache(batch=3), model.new_cache(batch=3)
    model.forward(np.concatenate([kept, dropped], axis=1), rolled)
    rolled.truncate(2)
    model.forward(kept, fresh)
    assert len(rolled) == 2 and rolled.nbytes == fresh.nbytes
    assert same_bits(model.forward(after, rolled), model.forward(after, fresh))
    with pytest.raises(ValueError, match="one length n for every row"):
        rolled.truncate([1, 2, 3])


def test_truncate_to_zero_and_to_the_length():
    model = make_model("gqa", exact=True)
    cache = model.new_cache()
    model.forward(ids(6), cache)
    state = snapshot(cache)
    cache.truncate(6)                                       # nothing dropped
    assert_same(snapshot(cache), state)
    cache.truncate(0)
    assert len(cache) == 0 and cache.nbytes == 0
    assert same_bits(model.forward(ids(3, seed=5), cache),
                     model.forward(ids(3, seed=5), model.new_cache()))


def test_a_ring_that_wrapped_refuses_to_roll_back_and_changes_nothing():
    model = make_model("mixed", exact=True)                 # window 4, then a full layer
    cache = model.new_cache()
    model.forward(ids(3), cache)
    assert cache.rollback_floor() == 0                      # not wrapped yet
    model.forward(ids(3, seed=1), cache)                    # 6 tokens in a ring of 4
    assert cache.rollback_floor() == 6
    state = snapshot(cache)
    with pytest.raises(ValueError, match="ring of 4 slots has wrapped.*roll back to is 6"):
        cache.truncate(5)
    assert_same(snapshot(cache), state)
    cache.truncate(6)                                       # keeping everything is fine


@pytest.mark.parametrize("bad, match", [(7, r"in \[0, 6\]"), (-1, r"in \[0, 6\]"),
                                        (2.0, "integer"), (True, "integer"),
                                        (np.array([2]), "one length")])
def test_bad_lengths_are_refused_and_change_nothing(bad, match):
    model = make_model("mha")
    cache = model.new_cache()
    model.forward(ids(6), cache)
    state = snapshot(cache)
    with pytest.raises(ValueError, match=match):
        cache.truncate(bad)
    assert_same(snapshot(cache), state)


def test_truncate_during_a_step_is_refused():
    model = make_model("mha")
    cache = model.new_cache()
    model.forward(ids(4), cache)
    shape = cache.config.layers[0].entry_shapes["k"]
    cache.update(0, k=np.zeros((1, *shape), np.float32), v=np.zeros((1, *shape), np.float32))
    with pytest.raises(ValueError, match="during a step"):
        cache.truncate(2)
    cache.discard()
    cache.truncate(2)
    assert len(cache) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_rollback_floor_is_what_truncate_accepts(kind):
    """For every kind the floor is true: truncate to it works, to one less is refused and
    changes nothing."""
    model = make_model(kind, exact=True)
    for n in (3, 6, 9):
        cache = model.new_cache()
        model.forward(ids(n), cache)
        floor = cache.rollback_floor()
        if floor > 0:
            state = snapshot(cache)
            with pytest.raises(ValueError, match="the shortest length it can roll back to"):
                cache.truncate(floor - 1)
            assert_same(snapshot(cache), state)
        cache.truncate(floor)
        assert len(cache) == floor
