"""toykv.check.ch7: official answers pass, typical mistakes get their hint, None is unanswered.
Exercises 5 and 6 take functions: right ones written independently here, wrong ones with the
typical bugs."""
import numpy as np
import pytest

from toykv.check import NOT_ANSWERED, ch7_ex1, ch7_ex2, ch7_ex3, ch7_ex4, ch7_ex5, ch7_ex6

# official answers, worked out by hand from the exercises' statements
EX1 = 32 * (2 * 4 * 128 + 2 * 4 * 4)              # int8 values + float32 scales, 32 layers
EX2 = 2 * 64 * 128 / (512 + 64)                    # Kimi K2: MHA / MLA per layer
EX3 = 52 * 1024 // 10 + 1                          # 10 global, 52 local layers, window 1024
H, D, R, RD = 128, 128, 512, 64                    # DeepSeek-V2
EX4 = (4 * R * H * D + 4 * H * D + 2 * H * RD) / (4 * R * H + 2 * H * RD)


@pytest.mark.parametrize("check, answer", [
    (ch7_ex1, EX1), (ch7_ex2, EX2), (ch7_ex2, 28.4), (ch7_ex3, EX3), (ch7_ex4, EX4),
    (ch7_ex4, 121),
    # as the solutions print or state them, and integral floats or numpy numbers as counts
    (ch7_ex1, float(EX1)), (ch7_ex1, np.int64(EX1)), (ch7_ex2, 28.44), (ch7_ex3, float(EX3)),
    (ch7_ex3, np.float64(EX3)), (ch7_ex4, 120.8), (ch7_ex4, 120)])
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


# -- exercises 5 and 6: functions, run against toykv's own MLA layer and sliding ring ---------
def _softmax(scores, axis=-1):
    p = np.exp(scores - scores.max(axis=axis, keepdims=True))
    return p / p.sum(axis=axis, keepdims=True)


def absorbed(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, scale=None, rope=True, axis=-1,
             heads_last=False, project=True):
    """A student's absorbed MLA step, with switches for the typical bugs."""
    H, hd = q_nope.shape
    r, rd = c_kv.shape[1], q_rope.shape[1]
    split = (lambda w: w.reshape(r, hd, H).transpose(0, 2, 1)) if heads_last else \
        (lambda w: w.reshape(r, H, hd))
    q_lat = np.einsum("hd,rhd->hr", q_nope, split(w_uk))            # [H, r]
    scores = q_lat @ c_kv.T + (q_rope @ k_rope.T if rope else 0)     # [H, S]
    p = _softmax(scores / np.sqrt(scale or hd + rd), axis)
    mixed = p @ c_kv                                                 # [H, r]
    return np.einsum("hr,rhd->hd", mixed, split(w_uv)) if project else mixed


def expanded(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv):
    """The same step the expanded way, head by head with plain loops: the right outputs, but
    the exercise asks to build no per-head key or value."""
    H, hd = q_nope.shape
    out = np.zeros((H, hd))
    for h in range(H):
        k = c_kv @ w_uk[:, h * hd:(h + 1) * hd]                      # [S, d_h]
        v = c_kv @ w_uv[:, h * hd:(h + 1) * hd]
        s = (k @ q_nope[h] + k_rope @ q_rope[h]) / np.sqrt(hd + q_rope.shape[1])
        out[h] = _softmax(s) @ v
    return out


def ring_positions(n_seen, window):
    """Slot s of the ring holds the latest position p < n_seen with p % window == s."""
    return [max(p for p in range(n_seen) if p % window == s) for s in range(min(n_seen, window))]


@pytest.mark.parametrize("check, answer", [
    (ch7_ex5, absorbed),
    (ch7_ex5, lambda *a: absorbed(*a).astype(np.float32)),
    (ch7_ex6, ring_positions), (ch7_ex6, lambda n, w: np.array(ring_positions(n, w))),
    (ch7_ex6, lambda n, w: tuple(float(p) for p in ring_positions(n, w)))])
def test_right_functions_pass(check, answer, capsys):
    assert check(answer)
    assert capsys.readouterr().out.startswith("Right.")


@pytest.mark.parametrize("check, wrong, hint", [
    (ch7_ex5, expanded, "expanded way"),
    (ch7_ex5, lambda q, qr, c, kr, wk, wv: np.einsum(          # all heads' keys at once
        "hs,shd->hd", _softmax((np.einsum("hd,shd->hs", q, np.einsum(
            "sr,rhd->shd", c, wk.reshape(len(wk), *q.shape))) + qr @ kr.T)
            / np.sqrt(q.shape[1] + qr.shape[1])),
        np.einsum("sr,rhd->shd", c, wv.reshape(len(wv), *q.shape))), "expanded way"),
    (ch7_ex5, lambda *a: absorbed(*a, rope=False), "rotary part"),
    (ch7_ex5, lambda *a: absorbed(*a, scale=a[0].shape[1]), "sqrt(d_h + d_h^R)"),
    (ch7_ex5, lambda *a: absorbed(*a, axis=0), "over the positions"),
    (ch7_ex5, lambda *a: absorbed(*a, heads_last=True), "(r, H, d_h)"),
    (ch7_ex5, lambda *a: absorbed(*a, project=False), "W_UV^(a)"),
    (ch7_ex5, lambda *a: np.zeros_like(a[0]), "q_lat"),
    (ch7_ex5, lambda *a: np.zeros(3), "shape (H, d_h)"),
    (ch7_ex5, lambda *a: 1 / 0, "ZeroDivisionError"),
    (ch7_ex5, 7, "absorbed_attention function itself"),
    (ch7_ex6, lambda n, w: list(range(max(0, n - w), n)), "oldest first"),
    (ch7_ex6, lambda n, w: [p + 1 for p in ring_positions(n, w)], "count from 0"),
    (ch7_ex6, lambda n, w: [n - 1 - (n - 1 - s) % w for s in range(w)], "min(n_seen, window)"),
    (ch7_ex6, lambda n, w: [0] * min(n, w), "latest position"),
    (ch7_ex6, lambda n, w: [p + 0.4 for p in ring_positions(n, w)], "whole number"),
    (ch7_ex6, lambda n, w: [p + 0.5 for p in ring_positions(n, w)], "whole number"),
    (ch7_ex6, lambda n, w: [], "one position per slot"),
    (ch7_ex6, lambda n, w: 1 / 0, "ZeroDivisionError"),
    (ch7_ex6, "ring", "ring_positions function itself"),
])
def test_typical_wrong_functions_get_their_hint(check, wrong, hint, capsys):
    assert not check(wrong)
    out = capsys.readouterr().out
    assert out.startswith("Not right yet") and hint in out


@pytest.mark.parametrize("check", [ch7_ex5, ch7_ex6])
def test_function_checks_unanswered(check, capsys):
    assert not check(None)
    assert capsys.readouterr().out.strip() == NOT_ANSWERED
