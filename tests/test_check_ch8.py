"""toykv.check.ch8: official answers pass, typical mistakes get their hint, None is unanswered."""
import pytest

from check_helpers import assert_hint, assert_right
from toykv.check import NOT_ANSWERED, ch8_ex1, ch8_ex2, ch8_ex3, ch8_ex4

# Llama 3.1 8B: the bf16 weights a step reads (8.03B less its untied 128,256 x 4,096 input
# table but the row looked up), and its cache per token
W8, KV8 = 2 * (8_030_000_000 - 128_255 * 4_096), 2 * 32 * 8 * 128 * 2
W8_ALL = 2 * 8_030_000_000                           # the essay's convention: every weight
EX1 = -(-W8 // KV8)                                  # first S with KV8 * S >= W8
KV_32K = KV8 * 32768
EX2 = W8 / (W8 + 16 * KV_32K)                        # weights once, 16 caches
MM2_W = 2 * (10 * 10**9 - 200_063 * 3_072)          # MiniMax M2: 10B active, untied 200,064 x 3,072
MM2 = 2 * 62 * 8 * 128 * 2 * 10**6 + MM2_W           # bytes per step at 10^6
EX4 = MM2 / 2**30


@pytest.mark.parametrize("check, answer", [(ch8_ex1, EX1), (ch8_ex2, EX2), (ch8_ex2, 0.18),
                                           (ch8_ex4, EX4), (ch8_ex4, 254.0)])
def test_official_answers_pass(check, answer, capsys):
    assert check(answer)
    assert capsys.readouterr().out.startswith("Right.")


def test_ex1_the_parameters_counted_from_the_shapes_are_right_too(capsys):
    # chapters 5 and 6 count Llama 3.1 8B's parameters from its shapes: 8,030,261,248
    counted = 2 * (8_030_261_248 - 128_255 * 4_096)
    assert ch8_ex1(-(-counted // KV8))
    assert capsys.readouterr().out.startswith("Right.")
    assert -(-counted // KV8) == EX1 + 4


def test_ex3_official_answer_by_hand(capsys):
    # Qwen3-0.6B shapes with 7 layers: all parameters, bf16 both sides, 32,768 tokens
    D, H, Hkv, hd, F, V = 1024, 16, 8, 128, 3072, 151936
    block = 2 * D + D * H * hd + 2 * D * Hkv * hd + H * hd * D + 3 * D * F
    params = V * D + 7 * block + D                   # tied embeddings, final norm
    kv = 2 * 7 * Hkv * hd * 2 * 32768
    assert ch8_ex3(kv / (kv + 2 * params))
    assert capsys.readouterr().out.startswith("Right.")


@pytest.mark.parametrize("check", [ch8_ex1, ch8_ex2, ch8_ex3, ch8_ex4])
def test_none_is_not_answered(check, capsys):
    assert not check(None)
    assert capsys.readouterr().out.strip() == NOT_ANSWERED


@pytest.mark.parametrize("check, wrong, hint", [
    (ch8_ex1, EX1 - 1, "a little smaller"),
    (ch8_ex1, -(-W8_ALL // KV8), "every active weight"),
    (ch8_ex1, -(-(W8 // 2) // KV8), "2 bytes per parameter"),
    (ch8_ex1, -(-W8 // (KV8 // 2)), "2 bytes per value"),
    (ch8_ex1, -(-W8 // (4 * KV8)), "query heads"),
    (ch8_ex2, W8 / (W8 + KV_32K), "one sequence"),
    (ch8_ex2, 16 * KV_32K / (W8 + 16 * KV_32K), "1 - share"),
    (ch8_ex4, MM2 / 10**9, "GB"),
    (ch8_ex4, (MM2 - MM2_W) / 2**30, "cache alone"),
    (ch8_ex4, (2 * 62 * 8 * 128 * 2 * 2**20 + MM2_W) / 2**30, "2^20"),
    (ch8_ex4, (MM2 - MM2_W) / 2**30 + MM2_W / 10**9, "mixed GiB"),
])
def test_typical_mistakes_get_their_hint(check, wrong, hint, capsys):
    assert not check(wrong)
    out = capsys.readouterr().out
    assert out.startswith("Not right yet. Hint:") and hint in out


def test_ex3_hints(capsys):
    D, H, Hkv, hd, F = 1024, 16, 8, 128, 3072
    block = 2 * D + D * H * hd + 2 * D * Hkv * hd + H * hd * D + 3 * D * F
    kv_per_layer = 2 * Hkv * hd * 2 * 32768
    blocks_only = kv_per_layer / (kv_per_layer + 2 * block)      # any depth
    assert not ch8_ex3(blocks_only)
    assert "blocks-only" in capsys.readouterr().out


@pytest.mark.parametrize("check, answer, expected", [
    (ch8_ex1, 1, EX1), (ch8_ex2, 0.5, EX2), (ch8_ex4, 1.0, EX4)])
def test_the_expected_value_is_never_printed(check, answer, expected, capsys):
    assert not check(answer)
    out = capsys.readouterr().out
    for text in (f"{expected}", f"{expected:,}", f"{expected:.1f}", f"{expected:.3f}"):
        assert text not in out


def test_wrong_types_are_named(capsys):
    assert ch8_ex1(114513.0)                            # an integral float is the count
    assert not ch8_ex1(114512.5)
    assert "whole number" in capsys.readouterr().out
    assert not ch8_ex4("254")
    assert "GiB" in capsys.readouterr().out


# -- exercise 5: two_bandwidths, a function the check runs ------------------------------------
import numpy as np  # noqa: E402

from toykv import longctx  # noqa: E402
from toykv.check import ch8_ex5  # noqa: E402


def fit_right(w, kv, t):
    kv = np.asarray(kv, dtype=float)
    A = np.stack([np.full_like(kv, w), kv], axis=1)
    (per_w, per_kv), *_ = np.linalg.lstsq(A, np.asarray(t, dtype=float), rcond=None)
    return 1 / per_w, 1 / per_kv


def fit_by_toykv(w, kv, t):                  # anchored, relative errors: exact data, same answer
    fit = longctx.fit_two_bandwidths(w, kv, t)
    return fit["beta_weights"], fit["beta_kv"]


def fit_first_step(w, kv, t):                # the shortest step's cache forgotten
    return w / t[0], (kv[-1] - kv[0]) / (t[-1] - t[0])


def fit_one(w, kv, t):                       # one bandwidth for every byte
    total = w + np.asarray(kv)
    beta = float(total @ t / (np.asarray(t) @ t))
    return beta, beta


@pytest.mark.parametrize("fn", [fit_right, fit_by_toykv, lambda *a: list(fit_right(*a)),
                                lambda *a: np.array(fit_right(*a))])
def test_ex5_right_functions_pass(fn, capsys):
    assert_right(ch8_ex5, fn, capsys)


@pytest.mark.parametrize("fn, hint", [
    (lambda *a: fit_right(*a)[::-1], "weights' bandwidth first"),
    (lambda *a: tuple(1 / x for x in fit_right(*a)), "seconds per byte"),
    (fit_first_step, "reads its cache too"), (fit_one, "one bandwidth for every byte"),
    (lambda *a: (1e9, 1e9 + 1), "np.linalg.lstsq"),
])
def test_ex5_typical_mistakes_get_their_hint(fn, hint, capsys):
    assert_hint(ch8_ex5, fn, hint, capsys)


def test_ex5_broken_functions_get_a_verdict(capsys):
    def raises(w, kv, t):
        raise ValueError("no")
    assert_hint(ch8_ex5, raises, "ValueError", capsys)
    assert_hint(ch8_ex5, lambda *a: {"w": 1.0}, "a pair of numbers", capsys)
    assert_hint(ch8_ex5, lambda *a: (1.0, float("inf")), "a pair of numbers", capsys)
    assert_hint(ch8_ex5, 3.0, "two_bandwidths function itself", capsys)
