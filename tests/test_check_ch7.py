"""toykv.check.ch7: official answers pass, typical mistakes get their hint, None is unanswered."""
import pytest

from toykv.check import NOT_ANSWERED, ch7_ex1, ch7_ex2, ch7_ex3, ch7_ex4

# official answers, worked out by hand from the exercises' statements
EX1 = 32 * (2 * 4 * 128 + 2 * 4 * 4)              # int8 values + float32 scales, 32 layers
EX2 = 2 * 64 * 128 / (512 + 64)                    # Kimi K2: MHA / MLA per layer
EX3 = 52 * 1024 // 10 + 1                          # 10 global, 52 local layers, window 1024
H, D, R, RD = 128, 128, 512, 64                    # DeepSeek-V2
EX4 = (4 * R * H * D + 4 * H * D + 2 * H * RD) / (4 * R * H + 2 * H * RD)


@pytest.mark.parametrize("check, answer", [(ch7_ex1, EX1), (ch7_ex2, EX2), (ch7_ex2, 28.4),
                                           (ch7_ex3, EX3), (ch7_ex4, EX4), (ch7_ex4, 121)])
def test_official_answers_pass(check, answer, capsys):
    assert check(answer)
    assert capsys.readouterr().out.startswith("Right.")


@pytest.mark.parametrize("check", [ch7_ex1, ch7_ex2, ch7_ex3, ch7_ex4])
def test_none_is_not_answered(check, capsys):
    assert not check(None)
    assert capsys.readouterr().out.strip() == NOT_ANSWERED


@pytest.mark.parametrize("check, wrong, hint", [
    (ch7_ex1, 32 * 2 * 4 * 128, "values alone"),
    (ch7_ex1, 32 * (2 * 32 * 128 + 2 * 32 * 4), "query heads"),
    (ch7_ex1, EX1 // 2, "factor 2"),
    (ch7_ex1, 32 * 2 * 4 * 128 * 2, "2 bytes per value"),
    (ch7_ex1, 32 * (2 * 4 * 128 + 2 * 4), "per KV head"),
    (ch7_ex2, 2 * 128 * 128 / 576, "DeepSeek-V2"),
    (ch7_ex2, 64 * 128 / 576, "key and a value"),
    (ch7_ex2, 576 / (2 * 64 * 128), "MLA / MHA"),
    (ch7_ex2, 2 * 64 * 128 / 512, "rotary key"),
    (ch7_ex3, EX3 - 1, "a little less"),
    (ch7_ex3, 5 * 1024, "5 local layers per global"),
    (ch7_ex3, 51 * 1024 // 11 + 1, "not 11"),
    (ch7_ex3, 1024, "window"),
    (ch7_ex4, 128, "hand value"),
    (ch7_ex4, 1 / EX4, "absorbed / expanded"),
])
def test_typical_mistakes_get_their_hint(check, wrong, hint, capsys):
    assert not check(wrong)
    out = capsys.readouterr().out
    assert out.startswith("Not right yet. Hint:") and hint in out


@pytest.mark.parametrize("check, answer, expected", [
    (ch7_ex1, 1, EX1), (ch7_ex2, 1.0, EX2), (ch7_ex3, 1, EX3), (ch7_ex4, 1.0, EX4)])
def test_the_expected_value_is_never_printed(check, answer, expected, capsys):
    assert not check(answer)
    out = capsys.readouterr().out
    for text in (f"{expected}", f"{expected:,}", f"{expected:.1f}", f"{expected:.2f}"):
        assert text not in out


def test_wrong_types_are_named(capsys):
    assert not ch7_ex1("33792")
    assert "number of bytes" in capsys.readouterr().out
    assert ch7_ex3(5325.0)                              # an integral float is the count
    assert not ch7_ex3(5325.5)
    assert "whole number" in capsys.readouterr().out
