"""KVCache.copy: the same tokens in a cache of its own, bound to the same model.

Prefix reuse (chapter 9) fills one cache with a shared prompt and continues a copy per
request. The copy must hold what the original holds, change nothing in the original when it
is filled further, continue exactly as a fresh cache fed the same tokens would, and belong to
the same model only. Expected values come from independent runs (fresh caches, full passes).
"""
import numpy as np
import pytest
from conftest import VARIANTS, make_model, ref_forward
from conftest import token_ids as ids

PREFIX, SUFFIX = ids(12, seed=1), ids(5, seed=2)


def filled(model, tokens, **kw):
    cache = model.new_cache(**kw)
    model.forward(tokens, cache)
    return cache


def held(cache):
    """Every storing layer's values (kv_sharing: not the reusing ones), in position order."""
    return [{name: cache.stored(i, name) for name in cache.names}
            for i in sorted(set(cache.config.kv_sources))]


def assert_same(a, b):
    for la, lb in zip(held(a), held(b)):
        for name in la:
            np.testing.assert_array_equal(la[name], lb[name])


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("kv_dtype", ["float32", "float16", "int8"])
def test_copy_holds_the_same_tokens(name, kv_dtype):
    model = make_model(name)
    cache = filled(model, PREFIX, kv_dtype=kv_dtype)
    twin = cache.copy()
    assert twin is not cache and len(twin) == len(cache) == len(PREFIX)
    assert twin.nbytes == cache.nbytes and twin.kv_dtype == kv_dtype
    assert twin.batch is None                        # room for twice what it holds, per layer:
    assert twin.capacity == [min(2 * len(PREFIX), spec.window or 10**9)
                             for spec in model.config.layers]
    assert_same(twin, cache)
    for mine, theirs in zip(cache.layers, twin.layers):      # arrays of its own
        for key in mine:
            assert not np.shares_memory(mine[key], theirs[key])


@pytest.mark.parametrize("name", VARIANTS)
def test_copy_continues_like_a_fresh_cache_and_leaves_the_original(name):
    model = make_model(name, exact=True)        # exact: chunked and one-pass prefills agree
    cache = filled(model, PREFIX)
    before = held(cache)
    twin = cache.copy()
    got = model.forward(SUFFIX, twin)
    fresh = filled(model, PREFIX)
    expected = model.forward(SUFFIX, fresh)
    np.testing.assert_array_equal(got, expected)
    assert len(twin) == len(PREFIX) + len(SUFFIX) and len(cache) == len(PREFIX)
    for la, lb in zip(before, held(cache)):                  # the original is untouched
        for key in la:
            np.testing.assert_array_equal(la[key], lb[key])


def test_copy_matches_an_independent_full_pass():
    model = make_model("gqa")
    twin = filled(model, PREFIX).copy()
    logits = model.forward(SUFFIX, twin)
    reference = ref_forward(model, PREFIX + SUFFIX)[len(PREFIX):]
    np.testing.assert_allclose(logits, reference, rtol=1e-4, atol=1e-4)


def test_copies_are_independent_of_each_other():
    model = make_model("mha", exact=True)
    cache = filled(model, PREFIX)
    a, b = cache.copy(), cache.copy()
    out_a = model.forward(SUFFIX, a)
    out_b = model.forward(SUFFIX[::-1], b)
    np.testing.assert_array_equal(out_a, model.forward(SUFFIX, cache.copy()))
    assert not np.array_equal(out_a, out_b)
    assert len(a) == len(b) == len(PREFIX) + len(SUFFIX)


def test_copy_of_a_wrapped_sliding_ring():
    model = make_model("mixed", exact=True)                  # window 4, one full layer
    cache = filled(model, ids(11, seed=3))                   # ring wrapped (11 > 4)
    twin = cache.copy()
    assert_same(twin, cache)
    assert twin.nbytes == cache.nbytes
    np.testing.assert_array_equal(model.forward([7], twin), model.forward([7], cache))


def test_copy_of_a_batched_cache():
    model = make_model("gqa", exact=True)
    rows = np.array([ids(6, seed=4), ids(6, seed=5)])        # [2, 6]
    cache = filled(model, rows, batch=2)
    twin = cache.copy()
    assert twin.batch == 2 and twin.nbytes == cache.nbytes
    step = np.array([[3], [9]])                              # [2, 1]
    np.testing.assert_array_equal(model.forward(step, twin), model.forward(step, cache))


def test_copy_of_an_empty_cache():
    model = make_model("mqa")
    twin = model.new_cache().copy()
    assert len(twin) == 0 and twin.nbytes == 0
    model.forward(PREFIX, twin)                              # usable as a new cache
    assert len(twin) == len(PREFIX)


def test_copy_copies_only_the_held_slots():
    model = make_model("mha")
    cache = filled(model, PREFIX)
    for arrays in cache.layers:                  # stray values past the held slots
        for array in arrays.values():
            array[len(PREFIX):] = 1.0
    twin = cache.copy(capacity=len(PREFIX))      # room for exactly what is held
    assert twin.allocated_nbytes == twin.nbytes == cache.nbytes
    for arrays, mine in zip(twin.layers, cache.layers):
        for name, array in arrays.items():       # the held slots, and nothing else
            np.testing.assert_array_equal(array, mine[name][:len(PREFIX)])


def test_copy_belongs_to_the_same_model():
    model = make_model("gqa")
    twin = filled(model, PREFIX).copy()
    other = make_model("gqa", seed=1)                        # equal config, other weights
    with pytest.raises(ValueError, match="belongs to another ToyTransformer"):
        other.forward([1], twin)
    model.forward([1], twin)                                 # its own model: fine
