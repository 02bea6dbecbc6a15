"""toykv.check.ch12: official answers pass, typical mistakes get their hint, junk a verdict."""
import pytest

from toykv.check import NOT_ANSWERED, ch12_ex1, ch12_ex2, ch12_ex3

# Llama 3.1 8B: bf16 weights a step reads (8.03B less its untied input table but one row),
# and its cache per token: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes
W8, KV8 = 2 * (8_030_000_000 - 128_255 * 4_096), 2 * 32 * 8 * 128 * 2
EX2 = KV8 * 4096 / (KV8 * 4096 + W8)
EX3 = 2 * 8 * 128 * 2 * 32768 / 32e9 * 1e3           # one layer, ms


@pytest.mark.parametrize("check, answer", [
    (ch12_ex1, (0, 3, 7, 9, 10, 11)),               # received 5, 3, 4 among tokens 0..8
    (ch12_ex1, [0, 3, 7, 9, 10, 11]), (ch12_ex2, EX2), (ch12_ex3, EX3), (ch12_ex3, 4.2)])
def test_official_answers_pass(check, answer, capsys):
    assert check(answer)
    assert capsys.readouterr().out.startswith("Right.")


@pytest.mark.parametrize("check, answer, words", [
    (ch12_ex1, (0, 3, 4, 5, 7, 9), "6 most attended"),
    (ch12_ex1, (0, 7, 3, 9, 10, 11), "ascending order"),
    (ch12_ex1, (0, 1, 2, 9, 10, 11), "sinks"),
    (ch12_ex2, KV8 * 131072 / (KV8 * 131072 + W8), "full cache"),
    (ch12_ex2, 1 - EX2, "weights' part"),
    (ch12_ex3, EX3 * 32, "every layer"),
    (ch12_ex3, EX3 / 1e3, "milliseconds"),
])
def test_typical_mistakes_get_their_hint(check, answer, words, capsys):
    assert not check(answer)
    assert words in capsys.readouterr().out


@pytest.mark.parametrize("check", [ch12_ex1, ch12_ex2, ch12_ex3])
@pytest.mark.parametrize("junk", ["7", 10**400, float("nan"), [[1]], 3 + 1j, (1, 2)])
def test_junk_gets_a_verdict(check, junk, capsys):
    assert not check(junk)
    assert capsys.readouterr().out.startswith("Not right yet")
    assert not check(None)
    assert NOT_ANSWERED in capsys.readouterr().out
