"""The self-checks of chapter 4: the official answers pass, typical mistakes get their hint,
None says "not answered yet", and the expected answer is never printed.

Expected values are hand products of the published shapes (toykv.zoo's sources), not toykv.sizing.
"""
from __future__ import annotations

import pytest

from toykv import check
from toykv.check._core import NOT_ANSWERED

from check_helpers import assert_hint, assert_right, said

GB, GiB = 10**9, 2**30


def kv(layers, kv_heads, head_dim, tokens=1, b=2):
    return 2 * layers * kv_heads * head_dim * tokens * b


EX1 = kv(126, 8, 128)                                          # Llama 3.1 405B
WEIGHTS_8B = 2 * 8_030_000_000


def fits(gpu):
    return tuple((gpu - WEIGHTS_8B) // kv(32, 8, 128, 32_768, b) for b in (2, 1))


EX2 = fits(80 * GiB)
EX3 = 32_768 / 4096
EX4 = (kv(42, 8, 256), kv(21, 8, 256, 8192) + kv(21, 8, 256, 4096))   # Gemma 2 9B
EX5 = kv(30, 1, 64)                                                   # SmolLM2, MQA


@pytest.mark.parametrize("fn", [check.ch4_ex1, check.ch4_ex2, check.ch4_ex3, check.ch4_ex4,
                                check.ch4_ex5, check.ch4_ex6])
def test_none_is_not_answered(fn, capsys):
    assert not fn(None)
    assert NOT_ANSWERED in said(capsys)


def test_ex1(capsys):
    assert_right(check.ch4_ex1, EX1, capsys)
    assert_hint(check.ch4_ex1, kv(126, 128, 128), "KV heads", capsys, EX1)
    assert_hint(check.ch4_ex1, EX1 // 2, "factor 2", capsys, EX1)
    assert_hint(check.ch4_ex1, 2 * EX1, "not 4", capsys, EX1)


def test_ex2(capsys):
    assert EX2 == (16, 32)
    assert_right(check.ch4_ex2, EX2, capsys)
    assert_hint(check.ch4_ex2, fits(80 * GB), "80 GiB", capsys, EX2)
    no_weights = tuple(80 * GiB // kv(32, 8, 128, 32_768, b) for b in (2, 1))
    assert_hint(check.ch4_ex2, no_weights, "weights", capsys, EX2)
    assert_hint(check.ch4_ex2, EX2[::-1], "(bf16 cache, fp8 cache)", capsys, EX2)


def test_ex3(capsys):
    assert_right(check.ch4_ex3, EX3, capsys)
    assert_hint(check.ch4_ex3, 1 / EX3, "how many times smaller", capsys, EX3)


def test_ex4(capsys):
    assert_right(check.ch4_ex4, EX4, capsys)
    naive = (kv(42, 8, 224), kv(21, 8, 224, 8192) + kv(21, 8, 224, 4096))
    assert_hint(check.ch4_ex4, naive, "hidden_size / num_attention_heads", capsys, EX4)
    assert_hint(check.ch4_ex4, (EX4[0], EX4[0] * 8192), "slide over 4,096", capsys, EX4)
    assert_hint(check.ch4_ex4, (EX4[0], EX4[1] / GB), "not GB", capsys, EX4)
    assert_hint(check.ch4_ex4, (2 * EX4[0], 2 * EX4[1]), "16 query heads", capsys, EX4)


def test_ex5(capsys):
    assert_right(check.ch4_ex5, EX5, capsys)
    assert_hint(check.ch4_ex5, kv(30, 3, 64), "3 KV heads", capsys, EX5)
    assert_hint(check.ch4_ex5, kv(30, 9, 64), "not one per query head", capsys, EX5)



# -- exercise 6: the student's kv_cache_bytes, sliding layers included -------------------------
def by_hand(config, tokens, batch=1, bytes_per_value=2, held=None, kv_heads=None,
            head_dim=None, factor=2):
    """The exercise's function written out (with a slip when an argument says so)."""
    held = held or (lambda kind: min(tokens, config.sliding_window) if kind == "sliding"
                    else tokens)
    per_token = (factor * (kv_heads or config.n_kv_heads) * (head_dim or config.head_dim)
                 * bytes_per_value)
    return batch * per_token * sum(held(kind) for kind in config.layer_kinds)


def test_ex6_the_exercise_toy_holds_what_the_hand_count_says():
    # one sliding (w = 8) and one full layer, 2 KV heads of 16, float32: 2 x 2 x 16 x 4 = 256
    # bytes per layer and token; after 20 tokens the layers hold 8 and 20 tokens
    from toykv.check.ch4 import _held_by_toy
    assert _held_by_toy(20, "float32", 1) == 256 * (8 + 20)
    assert _held_by_toy(5, "float16", 3) == 3 * 128 * (5 + 5)


def test_ex6_the_function_written_out_passes(capsys):
    assert_right(check.ch4_ex6, by_hand, capsys)
    gemma2 = __import__("toykv").zoo.get("gemma-2-9b").config
    assert by_hand(gemma2, 8192) == EX4[1]                        # as exercise 4 counts it


@pytest.mark.parametrize("slip, hint", [
    (lambda c, t, batch=1, bytes_per_value=2: by_hand(c, t, batch, bytes_per_value,
                                                      held=lambda kind: t), "min(tokens"),
    (lambda c, t, batch=1, bytes_per_value=2: by_hand(
        c, t, batch, bytes_per_value,
        held=lambda kind: min(t, c.sliding_window) if c.sliding_window else t), "'sliding'"),
    (lambda c, t, batch=1, bytes_per_value=2: by_hand(
        c, t, batch, bytes_per_value,
        held=lambda kind: c.sliding_window if kind == "sliding" else t), "tokens seen so far"),
    (lambda c, t, batch=1, bytes_per_value=2: by_hand(
        c, t, batch, bytes_per_value,
        held=lambda kind: min(t, c.sliding_window - 1) if kind == "sliding" else t),
     "DynamicSlidingWindowLayer"),
    (lambda c, t, batch=1, bytes_per_value=2: by_hand(c, t, batch, bytes_per_value,
                                                      kv_heads=c.n_heads), "n_kv_heads"),
    (lambda c, t, batch=1, bytes_per_value=2: by_hand(c, t, batch, bytes_per_value,
                                                      factor=1), "factor 2"),
    (lambda c, t, batch=1, bytes_per_value=2: by_hand(c, t, 1, bytes_per_value), "batch"),
    (lambda c, t, batch=1, bytes_per_value=2: by_hand(c, t, batch, 2), "bytes_per_value"),
    (lambda c, t, batch=1, bytes_per_value=2: by_hand(
        c, t, batch, bytes_per_value, head_dim=c.d_model // c.n_heads), "config.head_dim"),
])
def test_ex6_typical_slips_get_their_hint(slip, hint, capsys):
    assert_hint(check.ch4_ex6, slip, hint, capsys)


def test_ex6_what_is_not_a_working_function_gets_a_message(capsys):
    for answer, text in [(lambda c, t: 0, "raised TypeError"), (7680, "function itself"),
                         (lambda c, t, batch=1, bytes_per_value=2: 1.5, "whole number of bytes"),
                         (lambda c, t, batch=1, bytes_per_value=2: by_hand(c, t) + 1,
                          "your count differs")]:
        assert not check.ch4_ex6(answer)
        out = said(capsys)
        assert out.startswith("Not right yet") and text in out and out.count("\n") == 1, out
