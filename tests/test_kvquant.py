"""toykv.kvquant: the same tokens through a float32 cache and a smaller one."""
import numpy as np
import pytest

from toykv import ToyTransformer, decode_steps, source_toy
from toykv.kvquant import compare_cache, forced_logits

MODEL = ToyTransformer(source_toy(), seed=0)
PROMPT = [int(t) for t in np.random.default_rng(0).integers(0, 512, 12)]


def test_forced_logits_follow_the_given_tokens():
    steps = list(decode_steps(MODEL, PROMPT, 10))                   # greedy, float32
    path = PROMPT + [s.token for s in steps[:-1]]
    forced = forced_logits(MODEL, path, len(PROMPT))
    assert forced.shape == (10, 512)
    assert np.array_equal(forced, np.stack([s.logits for s in steps]))


def test_forced_logits_match_a_full_forward_pass():
    path = PROMPT + [5, 6, 7]
    forced = forced_logits(MODEL, path, len(PROMPT), kv_dtype="float32")
    full = MODEL.forward(path)                                       # no cache at all
    assert np.allclose(forced, full[len(PROMPT) - 1:], atol=1e-4)


def test_a_float32_cache_against_itself_is_exact():
    out = compare_cache(MODEL, PROMPT, 20, "float32")
    assert not out["max_error"].any()
    assert out["top1_same"].all() and out["free_same"].all()
    assert out["first_divergence"] is None


@pytest.mark.parametrize("dtype, low, high", [("float16", 1e-5, 1e-2), ("int8", 1e-3, 0.2)])
def test_smaller_caches_have_small_nonzero_errors(dtype, low, high):
    out = compare_cache(MODEL, PROMPT, 20, dtype)
    assert out["max_error"].shape == (20,)
    assert low < out["max_error"].max() < high
    # the prefill's logits already read the rounded cache
    assert out["max_error"][0] > 0


def test_int8_error_is_larger_than_float16():
    e8 = compare_cache(MODEL, PROMPT, 20, "int8")["max_error"].max()
    e16 = compare_cache(MODEL, PROMPT, 20, "float16")["max_error"].max()
    assert e8 > 10 * e16


def test_top2_margin_is_float32s_lead_and_bounds_every_flip():
    out = compare_cache(MODEL, PROMPT, 30, "int8")
    ref = [s.logits for s in decode_steps(MODEL, PROMPT, 30)]
    by_hand = [float(np.sort(l)[-1] - np.sort(l)[-2]) for l in ref]
    assert np.allclose(out["top2_margin"], by_hand, rtol=0, atol=1e-6)
    assert (out["top2_margin"] >= 0).all()
    flips = ~out["top1_same"]          # a flip needs both logits moved by half the lead
    assert (out["top2_margin"][flips] <= 2 * out["max_error"][flips]).all()


def test_first_divergence_is_the_first_differing_token():
    out = compare_cache(MODEL, PROMPT, 30, "int8")
    same = out["free_same"]
    if out["first_divergence"] is None:
        assert same.all()
    else:
        first = out["first_divergence"]
        assert same[:first].all() and not same[first]


@pytest.mark.parametrize("call, match", [
    (lambda: forced_logits(MODEL, PROMPT, 0), "prompt_len"),
    (lambda: forced_logits(MODEL, PROMPT, 13), "prompt_len"),
    (lambda: forced_logits(MODEL, PROMPT, 3, kv_dtype="bf16"), "kv_dtype"),
    (lambda: compare_cache(MODEL, PROMPT, 0, "int8"), "n_new"),
    (lambda: compare_cache(MODEL, PROMPT, 3, "int4"), "kv_dtype"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# -- quantized schemes: 8/4/2 bits, keys per token or per channel, a float32 residual ---------
from toykv.kvquant import (QuantScheme, compare_schemes, key_channel_spread,  # noqa: E402
                           key_error, round_trip)

EXACT = ToyTransformer(source_toy(n_kv_heads=2), seed=1, exact=True)
RNG = np.random.default_rng(3)


def by_hand_step(x, bits, axis):
    """The quantization step s = (max - min) / (2^bits - 1) along axis, in float64."""
    x = x.astype(np.float64)
    return (x.max(axis=axis, keepdims=True) - x.min(axis=axis, keepdims=True)) / (2**bits - 1)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("per, axis", [("token", -1), ("channel", 0)])
def test_round_trip_error_is_at_most_half_a_step(bits, per, axis):
    x = RNG.normal(size=(32, 3, 16)).astype(np.float32) * RNG.uniform(0.1, 5, 16)
    back = round_trip(x, bits, per)
    assert back.shape == x.shape and back.dtype == np.float32
    bound = by_hand_step(x, bits, axis) / 2 + 1e-6 * np.abs(x).max()   # float32 rounding
    assert (np.abs(back - x) <= bound).all()
    levels = {len(np.unique(np.round((r - r.min()) / s))) for r, s in
              zip(back.reshape(-1, 16), by_hand_step(x, bits, -1).reshape(-1))} \
        if per == "token" else {0}
    assert max(levels) <= 2**bits                           # at most 2^bits codes per row
    assert np.array_equal(round_trip(x, bits, per), back)   # bit for bit, every call


def test_round_trip_keeps_a_constant_row_and_the_extremes():
    x = np.array([[1.5, 1.5, 1.5, 1.5], [-2.0, 0.3, 4.0, 1.0]], dtype=np.float32)
    back = round_trip(x, 4, "token")
    assert np.array_equal(back[0], x[0])                    # one value: no step at all
    assert back[1].min() == np.float32(-2.0) and abs(back[1].max() - 4.0) < 1e-6


def test_per_channel_scales_follow_an_outlier_channel():
    x = RNG.normal(size=(64, 16)).astype(np.float32)
    x[:, 3] *= 20                                            # one channel 20 times larger
    others = np.arange(16) != 3                              # the channels it does not own
    err = {per: np.linalg.norm((round_trip(x, 4, per) - x)[:, others])
           for per in ("token", "channel")}
    assert err["channel"] < err["token"] / 3                 # per token, it sets every step


def test_scheme_quantizes_whole_groups_older_than_the_residual():
    s = QuantScheme(bits=4, keys="channel", group=8, residual=5)
    assert [s.quantized(n) for n in (0, 5, 12, 13, 20, 21, 29)] == [0, 0, 0, 8, 8, 16, 24]
    assert s.name == "int4, keys per channel"


def test_nbytes_by_hand():
    c = EXACT.config                                 # 2 layers, 2 KV heads of 16
    rows, dh = 2 * 2, 16
    s = QuantScheme(bits=4, keys="channel", group=8, residual=5)
    # 29 tokens: 24 quantized (3 groups), 5 float32
    codes = 2 * 24 * dh // 2                         # K and V, half a byte each
    scales = 8 * (3 * dh + 24)                       # (scale, zero) float32: keys per channel
    assert s.nbytes(c, 29) == rows * (codes + scales + 2 * 5 * dh * 4)   # and values per token
    t = QuantScheme(bits=8, keys="token", group=8, residual=5)
    assert t.nbytes(c, 29) == rows * (2 * 24 * dh + 8 * 48 + 2 * 5 * dh * 4)
    assert s.nbytes(c, 4) == rows * 2 * 4 * dh * 4   # all residual: the float32 bytes


def test_a_quantized_cache_holds_the_due_groups_quantized_and_the_rest_as_given():
    """QuantizedLayer: after a step, the groups the scheme holds quantized at that length read
    back as round_trip of the float32 cache's values; the residual is the float32 values."""
    ids = [int(t) for t in RNG.integers(0, 512, 31)]
    s = QuantScheme(bits=4, keys="channel", group=8, residual=5)
    plain, cache = EXACT.new_cache(), EXACT.new_cache(quant=s)
    EXACT.forward(ids[:30], plain)
    EXACT.forward(ids[:30], cache)                       # one prefill: it read float32
    for i in range(EXACT.config.n_layers):
        mine, ref = cache.stored(i, "k"), plain.stored(i, "k")
        assert np.array_equal(mine[24:30], ref[24:30])                    # the residual
        assert np.array_equal(mine[8:16], round_trip(ref[8:16], 4, "channel"))
        assert np.array_equal(cache.stored(i, "v")[8:16],
                              round_trip(plain.stored(i, "v")[8:16], 4, "token"))
    assert cache.nbytes == s.nbytes(EXACT.config, 30) < plain.nbytes
    assert cache.rollback_floor() == 24 + 5              # its quantized groups cannot go back
    with pytest.raises(ValueError, match="quantized groups"):
        cache.truncate(28)
    assert len(cache) == 30
    assert not np.array_equal(EXACT.forward(ids[30:], cache), EXACT.forward(ids[30:], plain))


def test_key_statistics():
    ids = [int(t) for t in RNG.integers(0, 512, 40)]
    cache = EXACT.new_cache()
    EXACT.forward(ids, cache)
    spread = key_channel_spread(cache)
    assert spread.shape == (2,) and (spread >= 1).all()
    e8, e4 = (key_error(cache, QuantScheme(b, "token", 8, 0)) for b in (8, 4))
    assert (0 < e8).all() and (e8 < e4).all() and (e4 < 0.2).all()
    keys = np.array(cache.layers[0]["k"][:40])
    assert np.array_equal(keys, cache.layers[0]["k"][:40])               # unchanged
    k = keys.astype(np.float32)
    back = np.concatenate([round_trip(k[i:i + 8], 8, "token") for i in range(0, 40, 8)])
    assert np.isclose(e8[0], np.linalg.norm(back - k) / np.linalg.norm(k))


def prefix_and_prompt():
    prefix = [int(t) for t in np.random.default_rng(5).integers(0, 512, 40)]
    cache = EXACT.new_cache()
    EXACT.forward(prefix, cache)
    return cache, [7, 8, 9]


def test_compare_schemes_follows_float32_and_is_reproducible():
    cache, prompt = prefix_and_prompt()
    schemes = [QuantScheme(8, "channel", 8, 8), QuantScheme(4, "token", 8, 8),
               QuantScheme(4, "channel", 8, 1000)]              # the last quantizes nothing
    out = compare_schemes(EXACT, cache, prompt, 12, schemes)
    steps = list(decode_steps(EXACT, prompt, 12, cache=cache.copy()))
    assert out["tokens"] == [s.token for s in steps]             # row 0: float32's answer
    assert len(cache) == 40                                       # the prefix is untouched
    assert out["tokens_held"] == 40 + 3 + 11
    assert not out["max_error"][2].any() and out["top1_same"][2].all()
    assert out["nbytes"][2] == cache.copy().nbytes // 40 * 54     # float32, all residual
    # the prefill attends the float32 keys and values (they are quantized after it, as in
    # Hugging Face's quantized cache); every later step reads quantized groups
    assert out["max_error"][1][0] == 0 and (out["max_error"][1][1:] > 0).all()
    assert out["max_error"][1].max() < 0.5 * out["scale"]
    flips = ~out["top1_same"][1]
    assert (out["top2_margin"][flips] <= 2 * out["max_error"][1][flips]).all()
    again = compare_schemes(EXACT, cache, prompt, 12, schemes)
    assert all(np.array_equal(a, b) for a, b in zip(out["max_error"], again["max_error"]))


@pytest.mark.parametrize("call, match", [
    (lambda: round_trip(np.ones((4, 4)), 3), "bits"),
    (lambda: round_trip(np.ones((4, 4)), 4, "head"), "per"),
    (lambda: round_trip(np.ones(4), 4), "x must be"),
    (lambda: QuantScheme(bits=16), "bits"),
    (lambda: QuantScheme(keys="row"), "keys"),
    (lambda: QuantScheme(group=0), "group"),
    (lambda: QuantScheme(residual=-1), "residual"),
    (lambda: QuantScheme().nbytes(source_toy(attention="mla", kv_lora_rank=8,
                                             rope_head_dim=4), 10), "full-attention"),
    (lambda: QuantScheme().nbytes(source_toy(sliding_window=8), 10), "full-attention"),
    (lambda: EXACT.new_cache(kv_dtype="int8", quant=QuantScheme()), "float32"),
    (lambda: EXACT.new_cache(quant="int4"), "QuantScheme"),
    (lambda: EXACT.new_cache(batch=2, quant=[QuantScheme()]), "1 schemes for 2 rows"),
    (lambda: ToyTransformer(source_toy(sliding_window=8)).new_cache(quant=QuantScheme()),
     "full-attention"),
    (lambda: EXACT.new_cache(quant=QuantScheme(), policy="full"), "one of policy, quant"),
    (lambda: key_error(EXACT.new_cache(kv_dtype="int8"), QuantScheme()), "float32"),
    (lambda: key_error(EXACT.new_cache(), QuantScheme()), "nothing to quantize"),
    (lambda: compare_schemes(EXACT, prefix_and_prompt()[0], [1], 3, []), "schemes"),
    (lambda: compare_schemes(EXACT, prefix_and_prompt()[0], [], 3, [QuantScheme()]),
     "prompt_ids"),
    (lambda: compare_schemes(EXACT, MODEL.new_cache(), [1], 3, [QuantScheme()]),
     "prefix_cache"),
])
def test_bad_input_of_the_schemes_is_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()
