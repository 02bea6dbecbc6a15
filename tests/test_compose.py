"""Every cache kind crossed with every operation: each cell is exact (bit for bit, exact=True,
against an independent reference holding the same tokens) or a clear refusal that changes
nothing (a snapshot before and after).

Kinds: full, sliding ring, window, sinks, heavy hitters, quantized storage, paged blocks; and
the same kinds under the 'lowrank' attention kind (a latent cache) and with layers that share a
cache (kv_sharing), where they compose (a kind refuses them when the cache is made otherwise,
test_compositions_refused_when_made).
Operations: truncate (rollback), copy (fork), batched rows, speculative verification,
perplexity (quality.next_token_losses) and kvquant's measurements.
References: a cache of the same kind fed only the kept tokens, a fresh cache fed everything,
each row run alone, toykv.generate, an uncached pass (or one token per step for a policy, or
the quantization done by hand on a plain cache), the plain cache's keys.
"""
import numpy as np
import pytest
from conftest import make_model
from conftest import token_ids as ids

from toykv import CachePolicy, generate
from toykv.kvquant import QuantScheme, key_channel_spread, key_error, round_trip
from toykv.quality import next_token_losses
from toykv.speculative import speculative_generate, verify_step

SCHEME = QuantScheme(bits=4, keys="channel", group=4, residual=4)
BLOCK = 4
MAKERS = {      # cache kind -> how to make an empty cache of it, model -> cache
    "full": lambda m: m.new_cache(),
    "sliding": lambda m: m.new_cache(),                                  # window 4
    "window": lambda m: m.new_cache(policy=CachePolicy("window", 8)),
    "sinks": lambda m: m.new_cache(policy=CachePolicy("sinks", 8, sinks=2)),
    "h2o": lambda m: m.new_cache(policy=CachePolicy("h2o", 8)),
    "quantized": lambda m: m.new_cache(quant=SCHEME),
    "paged": lambda m: m.new_paged_cache(32, BLOCK).new_sequence(),
}
# kind -> (model variant, its cache kind); 'lowrank': the latent attention kind, 'shared':
# pairs of layers sharing a cache (kv_sharing=2), each beside the kinds it composes with
KINDS = {kind: ("sliding" if kind == "sliding" else "gqa", kind) for kind in MAKERS} | {
    "lowrank": ("lowrank", "full"),
    "lowrank sinks": ("lowrank", "sinks"),
    "lowrank paged": ("lowrank", "paged"),
    "shared": ("shared", "full"),
    "shared sliding": ("shared sliding", "sliding"),
    "shared quantized": ("shared", "quantized"),
    "shared paged": ("shared", "paged"),
    "lowrank shared": ("lowrank_shared", "full"),
}
MODELS = {}


def model_of(kind):
    name = KINDS[kind][0]
    if name not in MODELS:
        MODELS[name] = make_model("shared", exact=True, sliding_window=4) if \
            name == "shared sliding" else make_model(name, exact=True)
    return MODELS[name]


def rule(kind):
    """The cache kind whose rule decides what the operations do."""
    return KINDS[kind][1]


def stores(cache):
    """The layers that hold keys and values (kv_sharing: not those reusing another's)."""
    return sorted(set(cache.config.kv_sources))


def new(kind):
    return MAKERS[rule(kind)](model_of(kind))


def fed(kind, tokens):
    cache = new(kind)
    model_of(kind).forward(tokens, cache)
    return cache


def snapshot(cache):
    """Everything a refusal must leave alone: length, bytes, held positions and values, and a
    pool's bookkeeping and arrays."""
    state = [len(cache), cache.nbytes]
    for i in range(cache.config.n_layers):
        state.append(cache.positions(i).tolist())
    for i in stores(cache):
        state += [np.array(cache.stored(i, n)).tobytes() for n in cache.names]
    table = getattr(cache.layers[0], "table", None)
    if table is not None:
        manager, arrays = table.pool.snapshot()
        state += [manager, [a.tobytes() for layer in arrays for a in layer.values()],
                  list(table.block_table)]
    return state


def same(a, b):
    return np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def refused(cache, call, match):
    before = snapshot(cache)
    with pytest.raises(ValueError, match=match):
        call()
    assert snapshot(cache) == before


# -- truncate: the cache that never held the dropped tokens, or a refusal ----------------------
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n, extra", [(6, 2), (6, 5)])
def test_truncate(kind, n, extra):
    model, tokens = model_of(kind), ids(n + extra)
    cache = fed(kind, tokens)
    if cache.rollback_floor() > n:
        refused(cache, lambda: cache.truncate(n), "the shortest length it can roll back to")
        return
    cache.truncate(n)
    fresh = fed(kind, tokens[:n])
    assert snapshot(cache)[:-3 if rule(kind) == "paged" else None] == \
        snapshot(fresh)[:-3 if rule(kind) == "paged" else None]
    more = ids(3, seed=9)
    assert same(model.forward(more, cache), model.forward(more, fresh))


# -- copy / fork: a twin that goes on alone, as a fresh cache fed everything ------------------
@pytest.mark.parametrize("kind", KINDS)
def test_copy(kind):
    model, tokens, more = model_of(kind), ids(7), ids(3, seed=5)
    cache = fed(kind, tokens)
    twin = cache.fork() if rule(kind) == "paged" else cache.copy()
    fresh = fed(kind, tokens)
    out_twin = model.forward(more, twin)
    assert same(out_twin, model.forward(more, fresh))
    assert same(model.forward(more[::-1], cache), model.forward(more[::-1], fed(kind, tokens)))


# -- batched rows: each row exactly itself run alone, or a refusal -----------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_batched_rows(kind):
    model = model_of(kind)
    rows = np.array([ids(9, seed=1), ids(9, seed=2)])
    batched = {"full": lambda: model.new_cache(batch=2),
               "sliding": lambda: model.new_cache(batch=2),
               "quantized": lambda: model.new_cache(batch=2, quant=SCHEME)}.get(rule(kind))
    if batched is None:                           # a policy or a pool's sequence: one row
        cache = new(kind)
        refused(cache, lambda: model.forward(rows, cache), "one sequence")
        if rule(kind) != "paged":
            with pytest.raises(ValueError, match="one sequence"):
                model.new_cache(batch=2, policy=cache.policy)
        return
    cache = batched()
    out = model.forward(rows[:, :6], cache)
    out = np.concatenate([out, model.forward(rows[:, 6:], cache)], axis=1)
    for r in range(2):
        alone = new(kind)
        step = np.concatenate([model.forward(rows[r, :6], alone), model.forward(rows[r, 6:],
                                                                                alone)])
        assert same(out[r], step)
        assert all(same(cache.stored(i, n)[r], alone.stored(i, n))
                   for i in stores(cache) for n in cache.names)


# -- speculative verification: greedy's tokens and greedy's cache, or a refusal ---------------
def oracle(model, prompt, n):
    """A proposer that proposes two of greedy's next tokens and then two wrong ones: every
    verify step rejects proposals, and some complete a block before they are rolled back."""
    truth = prompt + generate(model, prompt, n)

    def propose(tokens, k):
        i = len(tokens)
        good = truth[i:i + 2]
        return (good + [(t + 1) % 64 for t in truth[i + 2:i + 4]])[:k]
    return propose


@pytest.mark.parametrize("kind", KINDS)
def test_speculative_verification(kind):
    model, prompt = model_of(kind), ids(5)
    plain_cache = new(kind)
    if rule(kind) in ("full", "paged"):
        plain = generate(model, prompt, 12, cache=plain_cache)
        cache = new(kind)
        spec = speculative_generate(model, prompt, 12, oracle(model, prompt, 12), k=4,
                                    cache=cache)
        assert spec == plain
        assert snapshot(cache)[:-3 if rule(kind) == "paged" else None] == \
            snapshot(plain_cache)[:-3 if rule(kind) == "paged" else None]
        return
    cache = fed(kind, prompt)       # cannot roll back, or steps that do not split: refused
    words = "one-token steps" if rule(kind) == "quantized" else "could not"
    refused(cache, lambda: speculative_generate(model, [3], 12, oracle(model, [3], 12), k=4,
                                                cache=cache), words)
    if rule(kind) != "sliding":                   # a ring that has not wrapped still can
        refused(cache, lambda: verify_step(model, cache, 3, [1, 2, 3]), "could not|one-token")


def test_verify_on_a_paged_sequence_that_completes_a_block():
    """The issue's case: rejected proposals complete a block; the sequence keeps 6 tokens, its
    blocks and hashes are those of the sequence that never saw them."""
    model = model_of("paged")
    pool = model.new_paged_cache(8, BLOCK)
    seq, plain = pool.new_sequence(), model.new_cache()
    prompt = ids(5)
    model.forward(prompt, seq)
    model.forward(prompt, plain)
    verified = verify_step(model, seq, 7, [60, 61, 62, 63])      # positions 5..9: block 1 full
    assert len(seq) == 6 + verified.accepted and verified.accepted < 4
    assert len(seq.table) == 2 and pool.manager.num_used == 2
    assert seq.rollback_floor() == 0
    assert same(model.forward([1], seq), model.forward([7] + verified.tokens[:-1] + [1],
                                                       plain)[-1:])


# -- perplexity: the kind's own reference, bit for bit -----------------------------------------
def by_hand_quantized(model, tokens, chunk):
    """Losses of a plain float32 cache whose due groups are rewritten by hand (round_trip)
    before each step: the quantized kind's arithmetic, written independently."""
    cache, done, logits = model.new_cache(), 0, []
    for first in range(0, len(tokens), chunk):
        due = SCHEME.quantized(len(cache))
        for layer in (layer for layer in cache.layers if "k" in layer):   # those that store
            for g in range(done, due, SCHEME.group):
                layer["k"][g:g + SCHEME.group] = round_trip(layer["k"][g:g + SCHEME.group],
                                                            SCHEME.bits, SCHEME.keys)
                layer["v"][g:g + SCHEME.group] = round_trip(layer["v"][g:g + SCHEME.group],
                                                            SCHEME.bits, "token")
        done = max(done, due)
        logits.append(model.forward(tokens[first:first + chunk], cache))
    z = np.concatenate(logits)[:-1].astype(np.float64)
    top = z.max(axis=1)
    total = top + np.log(np.exp(z - top[:, None]).sum(axis=1))
    return total - z[np.arange(len(z)), tokens[1:]]


@pytest.mark.parametrize("kind", KINDS)
def test_perplexity(kind):
    model, tokens = model_of(kind), ids(30)
    losses = next_token_losses(model, tokens, chunk=7, cache=new(kind))
    if rule(kind) in ("full", "sliding", "paged"):
        reference = next_token_losses(model, tokens)                 # one uncached pass
    elif rule(kind) in ("window", "sinks"):
        reference = next_token_losses(model, tokens, chunk=1, cache=new(kind))
    elif rule(kind) == "h2o":          # one token per step, each step's logits by hand
        cache, rows = new(kind), []
        for t in tokens:
            rows.append(model.forward([t], cache)[0])
        z = np.array(rows[:-1], np.float64)
        top = z.max(axis=1)
        reference = top + np.log(np.exp(z - top[:, None]).sum(axis=1)) - \
            z[np.arange(len(z)), tokens[1:]]
    else:
        reference = by_hand_quantized(model, tokens, 7)
    assert same(losses, reference)


# -- kvquant's measurements: the plain cache's keys, or a refusal ------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_kvquant_measurements(kind):
    model, tokens = model_of(kind), ids(20)
    cache = fed(kind, tokens)
    if rule(kind) in ("full", "paged") and model.config.attention == "gqa" and \
            model.config.kv_sharing == 1:
        plain = model.new_cache()
        model.forward(tokens, plain)
        assert same(key_channel_spread(cache), key_channel_spread(plain))
        scheme = QuantScheme(8, "token", 4, 4)
        assert same(key_error(cache, scheme), key_error(plain, scheme))
        return
    if rule(kind) == "sliding" or model.config.attention != "gqa":
        match = "attention='gqa'|full-attention"
    elif model.config.kv_sharing > 1:
        match = "kv_sharing=2"
    elif rule(kind) == "quantized":
        match = "float32"
    else:
        match = "holds every token"
    refused(cache, lambda: key_channel_spread(cache), match)
    refused(cache, lambda: key_error(cache, SCHEME), match)


def test_compositions_refused_when_made():
    """What does not compose is refused when the cache is made, before it exists: a policy
    chooses tokens per layer from that layer's attention (layers that share a cache would
    read another's choice), a quantized scheme is for keys and values per KV head (not a
    latent), a pool holds every position (no sliding ring)."""
    shared, low = make_model("shared"), make_model("lowrank")
    for policy in (CachePolicy("window", 8), CachePolicy("sinks", 8), CachePolicy("h2o", 8),
                   CachePolicy()):
        with pytest.raises(ValueError, match="kv_sharing=2"):
            shared.new_cache(policy=policy)
    with pytest.raises(ValueError, match="caching k and v"):
        low.new_cache(quant=SCHEME)
    with pytest.raises(ValueError, match="sliding-window layers"):
        make_model("shared", sliding_window=4).new_paged_cache(8, BLOCK)


def test_runs_into_a_pool_refuse_up_front_when_its_blocks_cannot_hold_them():
    """Several steps checked at once (issue 35): generate, fill_cache and timed steps into a
    pool's sequence that would run out of blocks part-way change nothing."""
    from toykv import paged, steptime
    model = model_of("paged")
    pool = model.new_paged_cache(3, BLOCK)                   # 12 tokens at most
    seq = pool.new_sequence()
    model.forward(ids(5), seq)
    for call in (lambda: generate(model, [1, 2], 8, cache=seq),
                 lambda: steptime.fill_cache(seq, 9),
                 lambda: steptime.measure_step_seconds(model, seq, steps=9)):
        before = snapshot(seq)
        with pytest.raises(paged.OutOfBlocks):
            call()
        assert snapshot(seq) == before
    seq.finish()
    with pytest.raises(ValueError, match="finished"):
        seq.stored(0, "k")


def test_a_renumbered_cache_still_generates_a_token_at_a_time():
    model = model_of("sinks")
    cache = model.new_cache(policy=CachePolicy("sinks", 6, sinks=2, positions="renumbered"))
    assert len(generate(model, [3], 10, cache=cache)) == 10 and len(cache) == 10
