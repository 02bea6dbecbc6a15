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
