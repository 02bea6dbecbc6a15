"""toykv.check.ch12: official answers pass, typical mistakes get their hint, junk a verdict.

Exercises 1 and 4 take a function: the right one is written here by hand (the H2O rule from its
definition; the hidden tokens from Llama-style shapes), each typical mistake as a function."""
import numpy as np
import pytest
from check_helpers import said

from toykv import zoo
from toykv.check import NOT_ANSWERED, ch12_ex1, ch12_ex2, ch12_ex3, ch12_ex4

# Llama 3.1 8B: bf16 weights a step reads (8.03B less its untied input table but one row),
# and its cache per token: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes
W8, KV8 = 2 * (8_030_000_000 - 128_255 * 4_096), 2 * 32 * 8 * 128 * 2
EX2 = KV8 * 4096 / (KV8 * 4096 + W8)
EX3 = 2 * 8 * 128 * 2 * 32768 / 32e9 * 1e3           # one layer, ms


def keep(received, budget, recent):
    """By hand: the last `recent`, and the budget - recent most attended older ones (ties:
    the older), ascending; everything when within the budget."""
    n = len(received)
    if n <= budget:
        return list(range(n))
    order = sorted(range(n - recent), key=lambda i: (-received[i], i))
    return sorted(order[:budget - recent]) + list(range(n - recent, n))


def keep_top(received, budget, recent):
    return sorted(int(i) for i in np.argsort(-np.asarray(received), kind="stable")[:budget])


def keep_by_score(received, budget, recent):
    n = len(received)
    if n <= budget:
        return list(range(n))
    order = sorted(range(n - recent), key=lambda i: (-received[i], i))
    return order[:budget - recent] + list(range(n - recent, n))


def keep_sinks(received, budget, recent):
    n = len(received)
    return list(range(n)) if n <= budget else \
        list(range(budget - recent)) + list(range(n - recent, n))


def hidden(config, link, hbm):
    """By hand: a layer's weights (attention and MLP projections and its two norms)."""
    c = config
    attn = c.d_model * c.n_heads * c.head_dim * 2 + 2 * c.d_model * c.n_kv_heads * c.head_dim
    layer = 2 * (attn + 3 * c.d_model * c.d_ff + 2 * c.d_model)
    per_token = 2 * c.n_kv_heads * c.head_dim * 2
    return int(layer / hbm * link / per_token)


def hidden_swapped(config, link, hbm):
    return hidden(config, hbm, link)


def test_official_answers_pass(capsys):
    for check, answer in [(ch12_ex1, keep), (ch12_ex2, EX2), (ch12_ex3, EX3), (ch12_ex3, 4.2),
                          (ch12_ex4, hidden)]:
        assert check(answer)
        assert said(capsys).startswith("Right.")


def test_the_hand_rule_gives_the_exercise_its_answer():
    from toykv.check.ch12 import ex1_received
    assert keep(list(ex1_received()), 6, 3) == [0, 3, 7, 9, 10, 11]
    assert hidden(zoo.get("llama-3.1-8b").config, 32e9, 3.35e12) == 1017


@pytest.mark.parametrize("check, answer, words", [
    (ch12_ex1, keep_top, "most attended tokens overall"),
    (ch12_ex1, keep_by_score, "ascending order"),
    (ch12_ex1, keep_sinks, "sinks"),
    (ch12_ex1, lambda r, b, w: [0, 1, 2, 3, 4, 5], "exercise 1's twelve tokens"),
    (ch12_ex1, lambda r, b, w: keep(r, b, w) if b == 6 else [0], "another case"),
    (ch12_ex2, KV8 * 131072 / (KV8 * 131072 + W8), "full cache"),
    (ch12_ex2, 1 - EX2, "weights' part"),
    (ch12_ex2, 100 * EX2, "not a percentage"),
    (ch12_ex2, 3.47, "not a percentage"),
    (ch12_ex2, KV8 * 4096 / (KV8 * 4096 + 2 * 8_030_261_248), "input embedding"),
    (ch12_ex2, 0.0323, "input embedding"),
    (ch12_ex3, EX3 * 32, "every layer"),
    (ch12_ex3, EX3 / 1e3, "milliseconds"),
    (ch12_ex4, hidden_swapped, "comes over the link"),
    (ch12_ex4, lambda c, link, hbm: hidden(c, link, hbm) // c.n_layers, "own cache"),
    (ch12_ex4, lambda c, link, hbm: 7, "one layer's bf16 weights"),
])
def test_typical_mistakes_get_their_hint(check, answer, words, capsys):
    assert not check(answer)
    assert words in said(capsys)


def test_a_function_that_fails_or_returns_junk_gets_a_verdict(capsys):
    def broken(*args):
        raise ZeroDivisionError("oops")

    for check in (ch12_ex1, ch12_ex4):
        assert not check(broken)
        assert "raised ZeroDivisionError" in said(capsys)
        assert not check(lambda *args: "many")
        assert "Not right yet" in said(capsys)
        assert not check(42)
        assert "function itself" in said(capsys)


@pytest.mark.parametrize("check", [ch12_ex1, ch12_ex2, ch12_ex3, ch12_ex4])
@pytest.mark.parametrize("junk", ["7", 10**400, float("nan"), [[1]], 3 + 1j, (1, 2)])
def test_junk_gets_a_verdict(check, junk, capsys):
    assert not check(junk)
    assert said(capsys).startswith("Not right yet")
    assert not check(None)
    assert NOT_ANSWERED in said(capsys)
