"""A cache never loses state: a step is all or nothing, stored values are read-only, a refused
forward claims nothing, and capacity grows (and copies are as small) as documented.

Expected values come from caches that never failed and fresh caches fed the same tokens,
with the exact backend (bit for bit) wherever two paths should agree.
"""
import numpy as np
import pytest
from conftest import VARIANTS, make_model
from conftest import token_ids as ids

from toykv import KVCache, decode_steps, source_toy

KINDS = ["mha", "gqa", "mla_absorbed", "mla_expanded", "sliding", "mixed"]
DTYPES = ["float32", "float16", "int8"]


def snapshot(cache):
    """len, nbytes and every layer's held values (copies), to compare before and after."""
    held = [{name: np.array(cache.stored(i, name)) for name in cache.names}
            for i in sorted(set(cache.config.kv_sources))]          # the layers that store
    return len(cache), cache.nbytes, held


def assert_same(a, b):
    assert a[:2] == b[:2]
    for la, lb in zip(a[2], b[2]):
        for name in la:
            assert np.array_equal(la[name].view(np.uint8), lb[name].view(np.uint8)), name


class Boom(RuntimeError):
    pass


def fail_at(model, where, monkeypatch):
    """Make the next forward pass raise: 'layer 0' right after layer 0 appended to the cache
    (in its softmax), or 'last layer' in the last layer's MLP."""
    if where == "layer 0":
        real = model.softmax
        calls = []

        def softmax(*args):
            calls.append(1)
            if len(calls) == 1:
                raise Boom
            return real(*args)
        monkeypatch.setattr(model, "softmax", softmax)
    else:
        real = model.mlp
        calls = []

        def mlp(*args):
            calls.append(1)
            if len(calls) == model.config.n_layers:
                raise Boom
            return real(*args)
        monkeypatch.setattr(model, "mlp", mlp)


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("kv_dtype", DTYPES)
@pytest.mark.parametrize("where", ["layer 0", "last layer"])
@pytest.mark.parametrize("batch", [None, 2])
def test_a_failed_forward_leaves_every_cache_as_it_was(name, kv_dtype, where, batch,
                                                       monkeypatch):
    model = make_model(name, exact=True)
    prompt = ids(7) if batch is None else np.array([ids(7, seed=s) for s in range(batch)])
    step = [5, 6] if batch is None else np.array([[5, 6]] * batch)
    cache, clean = (model.new_cache(batch=batch, kv_dtype=kv_dtype) for _ in range(2))
    model.forward(prompt, cache)                    # 7 tokens: the window of 4 has wrapped
    model.forward(prompt, clean)
    before = snapshot(cache)
    with monkeypatch.context() as patch:
        fail_at(model, where, patch)
        with pytest.raises(Boom):
            model.forward(step, cache)
    assert_same(snapshot(cache), before)            # length, bytes and every held value
    retry = model.forward(step, cache)              # and the retry is the step never failed
    assert np.array_equal(retry, model.forward(step, clean))
    assert_same(snapshot(cache), snapshot(clean))


@pytest.mark.parametrize("name", ["gqa", "sliding", "mla_absorbed"])
def test_a_refused_update_or_advance_changes_nothing(name):
    model = make_model(name)
    cache = model.new_cache()
    model.forward(ids(6), cache)
    before = snapshot(cache)
    shapes = model.config.layers[0].entry_shapes
    good = {n: np.ones((2, *s), np.float32) for n, s in shapes.items()}
    bad = {n: np.ones((3 if i else 2, *s), np.float32) for i, (n, s) in enumerate(shapes.items())}
    with pytest.raises(ValueError, match="same number of tokens"):
        cache.update(0, **bad)
    cache.update(0, **good)                        # staged for 2 tokens ...
    with pytest.raises(ValueError, match="advance by the tokens given"):
        cache.advance(1)                           # ... so advancing by 1 is refused
    cache.discard()
    assert_same(snapshot(cache), before)


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("kv_dtype", DTYPES)
@pytest.mark.parametrize("batch", [None, 2])
def test_stored_values_are_read_only_for_every_kind(name, kv_dtype, batch):
    model = make_model(name)
    cache = model.new_cache(batch=batch, kv_dtype=kv_dtype)
    model.forward(ids(9) if batch is None else np.array([ids(9)] * batch), cache)
    before = snapshot(cache)
    for i in sorted(set(model.config.kv_sources)):                  # the layers that store
        for key in cache.names:
            values = cache.stored(i, key)
            with pytest.raises(ValueError, match="read-only"):
                values *= 0
    assert_same(snapshot(cache), before)


# -- a refused forward claims nothing; the wrong object is named --------------------------------

def refusals(model, cache):
    yield lambda: model.forward([1, 99], cache)                       # an id outside vocab
    yield lambda: model.forward([[1, 2], [3, 4]], cache)              # a batch, one sequence
    yield lambda: model.forward(list(range(65)), cache)               # past max_seq_len
    yield lambda: decode_steps(model, [1, 2], 64, cache=cache)        # cannot fit


def test_a_refused_forward_never_claims_an_unowned_cache():
    a, b = make_model("gqa"), make_model("gqa")
    cache = KVCache(a.config)                        # made by hand: owned by its first user
    for refused in refusals(a, cache):
        with pytest.raises(ValueError):
            refused()
        assert cache._owner is None and len(cache) == 0
    b.forward([1, 2], cache)                         # b may still take it
    assert cache.owned_by(b) and len(cache) == 2


@pytest.mark.parametrize("call, words", [
    (lambda m, c: m.forward([1], c.config), "cache must be a toykv.KVCache, got ModelConfig"),
    (lambda m, c: m.forward([1], m), "cache must be a toykv.KVCache, got ToyTransformer"),
    (lambda m, c: decode_steps(m, [1], 2, cache=m.config), "got ModelConfig"),
    (lambda m, c: decode_steps(m.config, [1], 2), "model must be a toykv.ToyTransformer"),
    (lambda m, c: decode_steps(c, [1], 2), "model must be a toykv.ToyTransformer, got KVCache"),
    (lambda m, c: KVCache(m), "use model.new_cache()"),
])
def test_a_config_model_or_cache_in_the_wrong_place_is_named(call, words):
    model = make_model("gqa")
    cache = model.new_cache()
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        call(model, cache)


# -- capacity: allocated up front, grown by doubling; copies hold what is held -----------------

def test_a_small_cache_grows_by_doubling_and_gives_the_same_logits():
    model = make_model("mixed", exact=True)          # sliding (w = 4), full
    grown, static = model.new_cache(capacity=1), model.new_cache()
    seen = []
    for t in ids(20):
        assert np.array_equal(model.forward([t], grown), model.forward([t], static))
        seen.append(tuple(grown.capacity))
        assert grown.nbytes == static.nbytes <= grown.allocated_nbytes
    assert list(dict.fromkeys(c for c, _ in seen)) == [1, 2, 4]      # the ring stops at w
    assert sorted({c for _, c in seen}) == [1, 2, 4, 8, 16, 32]       # the full layer doubles
    assert static.capacity == [4, 64] and grown.allocated_nbytes < static.allocated_nbytes


def test_capacity_is_checked():
    model = make_model("mha")
    for bad in (0, 65, 2.0, "8"):
        with pytest.raises(ValueError, match="capacity"):
            model.new_cache(capacity=bad)


def test_a_copy_allocates_what_it_holds_not_the_whole_context():
    model = make_model("gqa", exact=True, max_seq_len=2048)
    cache = model.new_cache()
    model.forward(ids(100), cache)
    twin = cache.copy()                              # default: twice what it holds
    assert twin.capacity == [200, 200] and cache.capacity == [2048, 2048]
    assert twin.allocated_nbytes == 2 * cache.nbytes == cache.allocated_nbytes * 200 // 2048
    exact = cache.copy(capacity=100)                 # at least what it holds: 100
    assert exact.capacity == [100, 100] and cache.copy(capacity=3).capacity == [100, 100]
    for copy in (twin, exact):                       # both go on generating, growing as needed
        more = ids(150, seed=3)
        fresh = model.new_cache()
        model.forward(ids(100), fresh)
        assert np.array_equal(model.forward(more, copy), model.forward(more, fresh))
    assert exact.capacity == [250, 250]              # 100 -> at least 250: grown once


def test_a_wrapped_ring_is_copied_whole():
    model = make_model("sliding", exact=True)        # w = 4
    cache = model.new_cache()
    model.forward(ids(11), cache)
    twin = cache.copy(capacity=1)
    assert twin.capacity == [4, 4]
    assert np.array_equal(model.forward([3], twin), model.forward([3], cache))


def test_the_default_cache_is_allocated_up_front_as_chapters_show():
    cache = make_model("mha").new_cache()
    assert cache.capacity == [64, 64] and cache.layers[0]["k"].shape == (64, 4, 8)
    assert source_toy().max_seq_len == 2048
