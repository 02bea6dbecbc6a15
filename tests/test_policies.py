"""Cache policies (toykv.policies): each keeps exactly the tokens it claims, holds them bit for
bit as a full cache does, counts its bytes truly, and refuses bad input without changing
anything. Expected values come from a cache without a policy, uncached passes, and counts by
hand."""
import numpy as np
import pytest
from conftest import config, make_model
from conftest import token_ids as ids
from test_cache_steps import Boom, assert_same, fail_at, snapshot

from toykv import CachePolicy, ToyTransformer
from toykv.kinds.kept import rotate as _rotate
from toykv.quality import next_token_losses, perplexity
from toykv.sizing import kv_bytes_per_token

POLICIES = [CachePolicy("window", 8), CachePolicy("sinks", 8), CachePolicy("sinks", 8, sinks=2),
            CachePolicy("h2o", 8), CachePolicy("h2o", 8, recent=3)]


def stream(model, tokens, policy, chunk=1):
    cache = model.new_cache(policy=policy)
    for start in range(0, len(tokens), chunk):
        model(tokens[start:start + chunk], cache)
    return cache


@pytest.mark.parametrize("chunk", [1, 7])
@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_each_policy_keeps_the_tokens_it_claims(policy, chunk):
    model, n = make_model("gqa", exact=True), 30
    cache = stream(model, ids(n), policy, chunk)
    for layer in cache.layers:
        kept = list(layer.positions)
        assert len(kept) == cache.held(0) == 8 and kept == sorted(kept)
        if policy.name == "window":
            assert kept == list(range(22, 30))
        elif policy.name == "sinks":
            s = policy.sinks
            assert kept == list(range(s)) + list(range(30 - 8 + s, 30))
        else:                                          # the recent ones, and older heavy ones
            r = policy.recent
            assert kept[-r:] == list(range(30 - r, 30)) and max(kept[:-r]) < 30 - r


def test_heavy_hitters_are_the_most_attended_older_tokens():
    policy = CachePolicy("h2o", 5, recent=2)
    received = np.array([9.0, 1, 7, 3, 8, 0, 2, 5])           # older than the last 2: 0..5
    keep = policy.keep(np.arange(10, 18), received)
    assert list(keep) == [0, 2, 4, 6, 7]                      # 9, 7, 8; then the last two


@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_held_values_and_bytes_are_a_full_caches_at_those_positions(policy):
    model, tokens = make_model("gqa", exact=True), ids(25)
    cache, full = stream(model, tokens, policy, 4), model.new_cache()
    model(tokens, full)
    kept = cache.layers[0].positions           # layer 0's entries depend on token and position
    for name in cache.names:                   # only (deeper ones on what it attended to)
        assert np.array_equal(cache.stored(0, name), full.stored(0, name)[kept])
    totals = 8 * 8 * model.config.n_layers if policy.name == "h2o" else 0   # float64 each
    assert cache.nbytes == 8 * kv_bytes_per_token(model.config, bytes_per_value=4) + totals
    assert full.nbytes == 25 * kv_bytes_per_token(model.config, bytes_per_value=4)


def test_chunks_give_what_one_token_per_step_gives_for_every_policy():
    model, tokens = make_model("gqa", exact=True), ids(40)
    for policy in POLICIES:
        one = next_token_losses(model, tokens, policy, chunk=1)
        for chunk in (3, 16, 40):
            assert np.array_equal(next_token_losses(model, tokens, policy, chunk), one)


@pytest.mark.parametrize("variant", ["mha", "gqa", "mqa", "mla_absorbed"])
@pytest.mark.parametrize("policy", [CachePolicy("h2o", 8), CachePolicy("h2o", 5, recent=1),
                                    CachePolicy("h2o", 9, recent=7)], ids=repr)
def test_a_heavy_hitter_step_of_many_tokens_is_that_many_one_token_steps(variant, policy):
    """H2O's choice changes after every query; a step of several tokens goes query by query,
    so its logits, its held positions and its attention totals are the one-token steps' bits,
    step after step (a step that starts below the budget and ends past it too)."""
    model, tokens = make_model(variant, exact=True), ids(37)
    one = model.new_cache(policy=policy)
    logits = np.concatenate([model([t], one) for t in tokens])
    for chunk in (2, 6, 37):
        many = model.new_cache(policy=policy)
        got = np.concatenate([model(tokens[i:i + chunk], many)
                              for i in range(0, len(tokens), chunk)])
        assert np.array_equal(got, logits)
        for a, b in zip(one.layers, many.layers):
            assert np.array_equal(a.positions, b.positions)
            assert np.array_equal(a.received, b.received)
        for layer in range(model.config.n_layers):
            for name in one.names:
                assert np.array_equal(one.stored(layer, name), many.stored(layer, name))
        assert many.nbytes == one.nbytes


def test_policy_full_is_the_plain_cache_and_one_uncached_pass():
    model, tokens = make_model("gqa", exact=True), ids(30)
    uncached = next_token_losses(model, tokens)
    assert np.array_equal(next_token_losses(model, tokens, CachePolicy("full"), 7), uncached)
    window = next_token_losses(model, tokens, CachePolicy("window", 4), 7)
    assert not np.array_equal(window, uncached)
    assert perplexity(uncached) == pytest.approx(np.exp(uncached.mean()))


def test_rotating_a_key_by_a_difference_moves_it():
    x = np.random.default_rng(0).standard_normal((1, 5, 2, 16)).astype(np.float32)
    there = _rotate(_rotate(x, np.arange(5), 10000.0), np.full(5, 3), 10000.0)
    assert np.allclose(there, _rotate(x, np.arange(5) + 3, 10000.0), atol=1e-5)


def test_renumbered_positions_are_the_kept_tokens_read_as_one_sequence():
    """One layer: its keys depend only on each token and its position, so a renumbered cache
    (StreamingLLM's) gives the next token what an uncached pass over the kept tokens gives,
    and a cache at original positions does not."""
    model = make_model("gqa", n_layers=1)
    tokens = ids(20)
    policy = CachePolicy("sinks", 8, sinks=2, positions="renumbered")
    cache = stream(model, tokens[:-1], policy)
    kept = [tokens[p] for p in cache.layers[0].positions] + [tokens[-1]]
    step = model([tokens[-1]], cache)[-1]
    assert np.allclose(step, model(kept)[-1], atol=1e-4)
    original = stream(model, tokens[:-1], CachePolicy("sinks", 8, sinks=2))
    assert not np.allclose(model([tokens[-1]], original)[-1], model(kept)[-1], atol=1e-3)


@pytest.mark.parametrize("policy", POLICIES, ids=repr)
def test_a_failed_step_changes_nothing_and_a_copy_goes_on_alike(policy, monkeypatch):
    model = make_model("gqa", exact=True)
    cache, clean = stream(model, ids(12), policy), stream(model, ids(12), policy)
    before = snapshot(cache), [(lay.positions.copy(), getattr(lay, "received", None))
                               for lay in cache.layers]
    with monkeypatch.context() as patch:
        fail_at(model, "last layer", patch)
        with pytest.raises(Boom):
            model([5, 6], cache)
    assert_same(snapshot(cache), before[0])
    for layer, (positions, received) in zip(cache.layers, before[1]):
        assert np.array_equal(layer.positions, positions)
        assert received is None or np.array_equal(layer.received, received)
    twin = cache.copy()
    step = model([5, 6], clean)
    assert np.array_equal(model([5, 6], cache), step)        # the retry: as if never failed
    assert np.array_equal(model([5, 6], twin), step)         # the copy: the same step


@pytest.mark.parametrize("kwargs, words", [
    (dict(name="lru", budget=8), "unknown cache policy 'lru'"),
    (dict(name="window"), "needs a budget"),
    (dict(name="sinks", budget=4), "must exceed the 4 sink tokens"),
    (dict(name="sinks", budget=3, sinks=5), "must exceed the 5 sink tokens"),
    (dict(name="full", budget=8), "keeps every token"),
    (dict(name="window", budget=0), "budget"),
    (dict(name="h2o", budget=4, recent=5), "at most the budget"),
    (dict(name="window", budget=8, sinks=2), "option of policy 'sinks'"),
    (dict(name="window", budget=8, positions="shifted"), "positions"),
])
def test_bad_policies_are_refused_in_words(kwargs, words):
    with pytest.raises(ValueError, match=words):
        CachePolicy(**kwargs)


def test_caches_a_policy_cannot_serve_are_refused():
    with pytest.raises(ValueError, match="one sequence"):
        make_model("gqa").new_cache(batch=2, policy=CachePolicy("window", 4))
    with pytest.raises(ValueError, match="full-attention layers only"):
        make_model("sliding").new_cache(policy=CachePolicy("window", 4))
    with pytest.raises(ValueError, match="CachePolicy"):
        make_model("gqa").new_cache(policy=8)
    with pytest.raises(ValueError, match="unknown cache policy"):
        make_model("gqa").new_cache(policy="windows")


def test_policies_work_for_mla_and_int8():
    model, tokens = make_model("mla_absorbed", exact=True), ids(20)
    for policy in (CachePolicy("sinks", 8), CachePolicy("h2o", 8),
                   CachePolicy("sinks", 8, positions="renumbered")):
        cache = model.new_cache(kv_dtype="int8", policy=policy)
        for t in tokens:                    # renumbered: one token per step past the budget
            model([t], cache)
        model([3], cache)
        assert [len(layer.positions) for layer in cache.layers] == [8, 8]
        totals = 8 * model.config.n_layers if policy.name == "h2o" else 0
        assert cache.nbytes == 8 * (kv_bytes_per_token(model.config, bytes_per_value=1)
                                    + 4 * model.config.n_layers * 2 + totals)


@pytest.mark.parametrize("kind", ["window", "sinks", "h2o"])
def test_a_policy_cache_refuses_to_roll_back_and_keeps_its_state(kind):
    """Evicted tokens cannot come back, and H2O's counts include the dropped queries' attention:
    truncate must refuse (a silent wrong cache otherwise), changing nothing."""
    model = make_model("mha")
    cache = model.new_cache(policy=CachePolicy(kind, 8))
    model.forward(ids(12), cache)
    before = snapshot(cache)
    for n in (3, 11):
        with pytest.raises(ValueError, match="cannot roll back"):
            cache.truncate(n)
        assert_same(before, snapshot(cache))


def test_the_sample_text_is_the_prose_of_chapters_1_and_2_and_ships_with_toykv():
    """Chapter 12 reads it where no repository is beside the notebook (Colab, a student copy):
    it comes from the package, and pyproject ships its folder."""
    import tomllib
    from pathlib import Path

    from toykv.quality import sample_text
    text = sample_text()
    assert text.startswith("# ") and len(text) > 20_000
    assert "\n\n# " in text                       # the second chapter's title follows
    root = Path(__file__).resolve().parent.parent
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "data/*.md" in data["package-data"]["toykv"]


def test_a_policy_refuses_layers_that_share_a_cache():
    with pytest.raises(ValueError, match="kv_sharing=2"):
        make_model("shared").new_cache(policy=CachePolicy("window", 4))


def test_lowrank_under_every_policy_is_its_gqa_twin():
    """'lowrank' turns its rebuilt keys at the positions the cache gives, so a policy (renumbered
    positions too) keeps what it keeps for the GQA model whose W_K = W_DKV W_UK, W_V = W_DKV W_UV
    (h2o chooses by attention that differs by rounding: same budget, logits close)."""
    low = make_model("lowrank")
    twin = ToyTransformer(config("gqa"), weights=gqa_weights(low))
    tokens = ids(20)
    for policy in (CachePolicy("window", 8), CachePolicy("sinks", 8),
                   CachePolicy("sinks", 8, positions="renumbered")):
        got = [stream_logits(m, tokens, policy) for m in (low, twin)]
        np.testing.assert_allclose(got[0], got[1], atol=1e-4)


def gqa_weights(low):
    """The weights of the GQA model that 'lowrank' model `low` computes."""
    layers = []
    for layer in low.layers:
        w = {k: a for k, a in layer.items() if k not in ("w_dkv", "w_uk", "w_uv")}
        layers.append(w | {"wk": layer["w_dkv"] @ layer["w_uk"],
                           "wv": layer["w_dkv"] @ layer["w_uv"]})
    return {"embed": low.embed, "final_norm": low.final_norm, "lm_head": low.lm_head,
            "layers": layers}


def stream_logits(model, tokens, policy):
    cache = model.new_cache(policy=policy)
    return np.concatenate([model(tokens[:5], cache)] + [model([t], cache) for t in tokens[5:]])
