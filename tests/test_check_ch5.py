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
