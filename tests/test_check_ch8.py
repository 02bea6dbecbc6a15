"""toykv.check.ch8: official answers pass, typical mistakes get their hint, None is unanswered."""
import pytest

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
