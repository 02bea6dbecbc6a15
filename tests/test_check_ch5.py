"""toykv.check.ch5: official answers pass, typical mistakes get their hint, None is unanswered."""
import pytest

from check_helpers import assert_hint, assert_right
from toykv.check import NOT_ANSWERED, ch5_ex1, ch5_ex2, ch5_ex3, ch5_ex4

GB = 10**9
# official answers, worked out by hand from the exercises' statements
EX1 = 296                                            # 989.5 / 3.35 = 295.4, rounded up
W70, KV70 = 70.55e9 * 2, 327_680 * 32_768           # Llama 3.1 70B, bf16
EX2 = 5.3e12 / (W70 + KV70)                          # the essay's convention: all parameters
W70_READ = W70 - 2 * (128_256 - 1) * 8192           # the one rule: one embedding row looked up
EX2_READ = 5.3e12 / (W70_READ + KV70)
W8 = 2 * (8_030_000_000 - (128_256 - 1) * 4096)     # Llama 3.1 8B weights read per step
KV8 = 2 * 32 * 8 * 128 * 2                          # bytes per token
EX3 = int(W8 // (KV8 * 32_768)) + 1
EX4 = (W8 + KV8 * 8192) / (W8 / 4 + KV8 * 8192)


@pytest.mark.parametrize("check, answer", [(ch5_ex1, EX1), (ch5_ex2, EX2), (ch5_ex2, 34.9),
                                           (ch5_ex2, EX2_READ), (ch5_ex2, 35.39),
                                           (ch5_ex3, EX3), (ch5_ex4, EX4), (ch5_ex4, 3.33)])
def test_official_answers_pass(check, answer, capsys):
    assert_right(check, answer, capsys)


@pytest.mark.parametrize("check", [ch5_ex1, ch5_ex2, ch5_ex3, ch5_ex4])
def test_none_is_not_answered(check, capsys):
    assert not check(None)
    assert capsys.readouterr().out.strip() == NOT_ANSWERED


@pytest.mark.parametrize("check, wrong, hint, expected", [
    (ch5_ex1, 295, "round up", EX1),
    (ch5_ex1, 591, "sparse peak", EX1),
    (ch5_ex1, 148, "B FLOPs per byte", EX1),
    (ch5_ex2, 5.3e12 / W70, "weights alone", ()),
    (ch5_ex2, 5.3e12 / (W70 + 8 * KV70), "KV heads", ()),
    (ch5_ex2, 1 / EX2, "seconds per token", ()),
    (ch5_ex3, EX3 - 1, "one more", EX3),
    (ch5_ex3, int(W8 // (4 * KV8 * 32_768)) + 1, "KV heads", EX3),
    (ch5_ex3, int(W8 // (KV8 / 2 * 32_768)) + 1, "factor 2", EX3),
    (ch5_ex4, 4.0, "weights alone", ()),
    (ch5_ex4, 1 / EX4, "bf16 over 4-bit", ()),
    (ch5_ex4, 2.0, "a quarter", ()),
])
def test_typical_mistakes_get_their_hint(check, wrong, hint, expected, capsys):
    assert_hint(check, wrong, hint, capsys, expected)


@pytest.mark.parametrize("check, expected", [(ch5_ex2, EX2), (ch5_ex4, EX4)])
def test_the_expected_ratio_is_never_printed(check, expected, capsys):
    assert not check(1.0)
    out = capsys.readouterr().out
    for text in (f"{expected:.1f}", f"{expected:.2f}", f"{expected:.3f}"):
        assert text not in out


def test_wrong_types_are_named(capsys):
    assert ch5_ex1(296.0)                               # an integral float is the count
    assert not ch5_ex1(296.5)
    assert "whole number" in capsys.readouterr().out
    assert not ch5_ex2("34.9")
    assert "tokens per second" in capsys.readouterr().out


# -- exercise 5: decode_bound, a function the check runs -------------------------------------
from toykv import flops, sizing  # noqa: E402
from toykv.check import ch5_ex5  # noqa: E402


def _parts(config, S, B):
    """A step's FLOPs and bytes, by the exercise's recipe (bf16 weights and cache)."""
    return (B * flops.cached_step_flops(config, S),
            sizing.weight_bytes_read(config, batch=B), sizing.kv_cache_bytes(config, S, B))


def bound_right(config, S, B, hw):
    f, w, kv = _parts(config, S, B)
    return B / max(f / hw.peak_flops, (w + kv) / hw.bandwidth)


def bound_cache_once(config, S, B, hw):
    f, w, _ = _parts(config, S, B)
    return B / max(f / hw.peak_flops, (w + sizing.kv_cache_bytes(config, S)) / hw.bandwidth)


def bound_no_cache(config, S, B, hw):
    f, w, _ = _parts(config, S, B)
    return B / max(f / hw.peak_flops, w / hw.bandwidth)


def bound_bytes_only(config, S, B, hw):
    _, w, kv = _parts(config, S, B)
    return B * hw.bandwidth / (w + kv)


def bound_min(config, S, B, hw):
    f, w, kv = _parts(config, S, B)
    return B / min(f / hw.peak_flops, (w + kv) / hw.bandwidth)


def bound_sum(config, S, B, hw):
    f, w, kv = _parts(config, S, B)
    return B / (f / hw.peak_flops + (w + kv) / hw.bandwidth)


def bound_per_sequence(config, S, B, hw):
    return bound_right(config, S, B, hw) / B


def bound_seconds(config, S, B, hw):
    return B / bound_right(config, S, B, hw)


def test_ex5_a_right_function_passes(capsys):
    assert_right(ch5_ex5, bound_right, capsys)
    import numpy as np                                     # a numpy number is a number too
    assert_right(ch5_ex5, lambda *args: np.float64(bound_right(*args)), capsys)


@pytest.mark.parametrize("fn, hint", [
    (bound_cache_once, "its own cache"), (bound_no_cache, "cache too"),
    (bound_bytes_only, "past the ridge point"), (bound_min, "not the smaller"),
    (bound_sum, "not their sum"), (bound_per_sequence, "one sequence's tokens"),
    (bound_seconds, "the step's time"), (lambda *args: 1.0, "B / max("),
])
def test_ex5_typical_mistakes_get_their_hint(fn, hint, capsys):
    assert_hint(ch5_ex5, fn, hint, capsys)


def test_ex5_broken_functions_get_a_verdict(capsys):
    def raises(config, S, B, hw):
        raise ZeroDivisionError("oops")
    assert_hint(ch5_ex5, raises, "ZeroDivisionError", capsys)
    assert_hint(ch5_ex5, lambda *args: "12", capsys=capsys, text="a number of tokens")
    assert_hint(ch5_ex5, lambda *args: float("nan"), capsys=capsys, text="a number of tokens")
    assert_hint(ch5_ex5, 42.0, "decode_bound function itself", capsys)
    assert not ch5_ex5(None)
    assert capsys.readouterr().out.strip() == NOT_ANSWERED
