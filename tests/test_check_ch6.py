"""toykv.check.ch6: official answers pass, typical mistakes get their hint, None is unanswered."""
import numpy as np
import pytest

from check_helpers import assert_hint, assert_right
from toykv import serving
from toykv.check import NOT_ANSWERED, ch6_ex1, ch6_ex2, ch6_ex3, ch6_ex4, ch6_ex5

GiB, MiB = 2**30, 2**20
L4_REPORTS = 23_034 * MiB                           # nvidia-smi's total for an L4 ("24 GB")
H100_REPORTS = 81_559 * MiB                         # and for an H100 80GB
# official answers, worked out by hand from the exercises' statements
EX1 = 2 * 8.03e9 * 2000 / 989.5e12 * 1e3           # ms: 2 FLOPs per parameter per token
ROOM = L4_REPORTS - 2 * 8.2e9                       # Qwen3-8B bf16 weights on the L4
PER_SEQ = 2 * 36 * 8 * 128 * 2 * 4096
EX2 = int(ROOM // PER_SEQ)
EX3 = (22_048 // 1792, 41_920 // 1792)


def _plan(percentile):
    """The chapter's mix, planned for a length percentile: (batch, fraction out of memory)."""
    lengths = serving.request_lengths(n=20_000, median=1000, max_len=8192, sigma=1.0, seed=0)
    room = H100_REPORTS - 2 * 8_030_000_000
    per_token = 2 * 32 * 8 * 128 * 2
    length = int(np.percentile(lengths, percentile))
    batch = int(room // (per_token * length))
    full = len(lengths) // batch * batch
    need = lengths[:full].reshape(-1, batch).sum(axis=1) * per_token
    return batch, float(np.mean(need > room))


@pytest.mark.parametrize("check, answer", [(ch6_ex1, EX1), (ch6_ex2, EX2), (ch6_ex3, EX3),
                                           (ch6_ex4, _plan(90))])
def test_official_answers_pass(check, answer, capsys):
    assert_right(check, answer, capsys)


@pytest.mark.parametrize("check", [ch6_ex1, ch6_ex2, ch6_ex3, ch6_ex4])
def test_none_is_not_answered(check, capsys):
    assert not check(None)
    assert capsys.readouterr().out.strip() == NOT_ANSWERED


@pytest.mark.parametrize("check, wrong, hint, expected", [
    (ch6_ex1, 2 * 8.03e9 / 3.35e12 * 1e3, "read the weights", ()),
    (ch6_ex1, EX1 / 2, "sparsity", ()),
    (ch6_ex1, EX1 / 1e3, "milliseconds", ()),
    (ch6_ex2, int((24 * GiB - 2 * 8.2e9) // PER_SEQ), "reports 23,034 MiB", EX2),
    (ch6_ex2, int(ROOM // (4 * PER_SEQ)), "KV heads", EX2),
    (ch6_ex2, int(L4_REPORTS // PER_SEQ), "weights", EX2),
    (ch6_ex2, round(ROOM / PER_SEQ), "round the number of sequences down", EX2),
    (ch6_ex3, (22_048 // 1536, 41_920 // 1536), "output tokens", EX3),
    (ch6_ex3, (EX3[1], EX3[0]), "(bf16, fp8)", EX3),
    (ch6_ex4, _plan(99), "99th", ()),
    (ch6_ex4, _plan(50), "median", ()),
])
def test_typical_mistakes_get_their_hint(check, wrong, hint, expected, capsys):
    assert_hint(check, wrong, hint, capsys, expected)


def test_wrong_types_are_named(capsys):
    assert not ch6_ex1("32")
    assert "milliseconds" in capsys.readouterr().out
    assert ch6_ex2(float(EX2))                          # an integral float is the count
    assert not ch6_ex2(EX2 + 0.5)
    assert "whole number" in capsys.readouterr().out


def _ex5(memory, peak, bandwidth, n=8.03e9, cache_batch=None, add=False):
    """Exercise 5 by hand: Llama 3.1 8B, bf16, 1,024 tokens, at the batch that fits (ms)."""
    kv = 2 * 32 * 8 * 128 * 2 * 1024                    # one sequence's cache
    batch = int((memory - 2 * n) // kv)
    weights = (2 * batch * n / peak, 2 * n / bandwidth)
    cache = (batch if cache_batch is None else cache_batch) * kv / bandwidth
    return 1e3 * (cache + (sum(weights) if add else max(weights))), batch


A100 = (81_920 * MiB, 312e12, 2039e9)                 # reports 80 GiB
L4 = (L4_REPORTS, 121e12, 300e9)


@pytest.mark.parametrize("name, gpu", [("a100-80gb-sxm", A100), ("l4", L4),
                                       ("mi300x", (192 * GiB, 1307.4e12, 5.3e12))])
def test_ex5_by_hand_passes_on_every_gpu(name, gpu, capsys):
    ms, _ = _ex5(*gpu)
    assert_right(ch6_ex5, (name, ms), capsys)
    assert_right(ch6_ex5, [name, np.float64(round(ms, 1))], capsys)   # rounded, numpy
    assert not ch6_ex5((name, 1.1 * ms))                               # 10% off


def test_ex5_typical_mistakes_get_their_hint(capsys):
    ms, batch = _ex5(*A100)
    kv = 2 * 32 * 8 * 128 * 2 * 1024
    one_max = 1e3 * max(2 * batch * 8.03e9 / A100[1], (2 * 8.03e9 + batch * kv) / A100[2])
    for wrong, hint in [(one_max, "one max"), (_ex5(*A100, cache_batch=1)[0], "B x M_KV"),
                        (_ex5(*A100, add=True)[0], "not their sum"), (ms / 1e3, "milliseconds"),
                        (batch / (ms / 1e3), "tokens per second"),
                        (_ex5(80e9, *A100[1:])[0], "memory the card reports"),
                        (1e3 * (batch * kv + 2 * 8.03e9) / A100[2], "products take longer")]:
        assert_hint(ch6_ex5, ("a100-80gb-sxm", wrong), hint, capsys)


def test_ex5_form_and_names(capsys):
    assert not ch6_ex5(None)
    assert capsys.readouterr().out.strip() == NOT_ANSWERED
    for bad, text in [(59.2, "pair"), (("a100", 59.2), "not a preset"),
                      (("lecture", 1.0), "no memory size"), (("h100-sxm", 28.7), "another"),
                      (("l4", "82"), "milliseconds")]:
        assert not ch6_ex5(bad)
        assert text in capsys.readouterr().out
    ch6_ex5(("h100-sxm", 28.7))                         # refused: not offered as a choice
    out = capsys.readouterr().out
    assert "h100-sxm" not in out.split("the name one of")[1]
