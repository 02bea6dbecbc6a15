"""Every assert in a chapter that reads a measured time is one the timing rule allows.

The rule (README, "A busy machine"): a chapter orders two measured times only where toykv's
counted bytes or FLOPs put them at least 3x apart, and then by at most 1.5x; every other sentence
about a measurement is chosen from the numbers. tests/timing_claims.py finds the asserts that read
a measurement; each must be listed here, under its chapter, as one of:

- ORDER: an order of two measured quantities, with the counted ratio that justifies it (>= 3) and
  the factor the assert claims (<= 1.5, and the factor the assert's own constants give);
- COUNTED: the operands are counted (FLOPs, bytes, tokens), read from a table that also holds
  measurements, which the finder cannot tell apart;
- MODEL: a modelled bound on measured machine figures, true for any figures (an identity);
- MACHINE: a measured property of the machine against a constant far from it on any CPU the
  course runs on.
A new timing assert needs a line here; a line whose assert is gone fails too.
"""
from __future__ import annotations

import ast

import pytest

from timing_claims import ROOT, chapters, timing_asserts

ORDER, COUNTED, MODEL, MACHINE = "order", "counted", "model", "machine"

ALLOWED = {
    "02": {
        "took[False] > 1.5 * took[True]": (
            ORDER, 10.7, 1.5, "SmolLM2's answer without a cache counts 10.7x the FLOPs of the "
            "answer with one (asserted >= 3 in the cell)"),
        "total_at[False][512] > 1.5 * total_at[True][512]": (
            ORDER, 270, 1.5, "the uncached run to 512 tokens counts 270x the cached run's FLOPs "
            "(asserted >= 3)"),
        "medians[False][-1] > 1.5 * medians[False][0]": (
            ORDER, 13.7, 1.5, "the uncached steps of the last 64-token window count 13.7x the "
            "FLOPs of the first window's (medians; asserted >= 3)"),
        "slowdown[False] > 1.5 * slowdown[True]": (
            ORDER, 10.1, 1.5, "counted growths from the first window to the last: 13.7x "
            "uncached against 1.36x cached (asserted >= 3 apart)"),
        "last[False] > 1.5 * last[True]": (
            ORDER, 511, 1.5, "a full pass of 511 tokens counts 511x the FLOPs of a cached step "
            "at context 511 (both checked against the run's steps)"),
        "rate['from memory', 256] > 1.5 * rate['from memory', 1]": (
            ORDER, 228, 1.5, "FLOP rates of x @ W, W 4,096 x 4,096 float32: the one-row product "
            "moves 228x the bytes per FLOP of the 256-row one (asserted >= 3)"),
    },
    "05": {
        "here.ridge_point > 1": (
            MACHINE, "a core's float32 vector arithmetic outruns its read bandwidth: about 10 "
            "FLOPs per byte measured; 1 would need a core with no SIMD"),
        "decode[0]['intensity'] < 1 < here.ridge_point": (
            MACHINE, "decode's counted 0.5 FLOPs per byte, and the ridge as above"),
        "all((a['intensity'] < b['intensity'] for a, b in zip(decode, decode[1:])))": (
            COUNTED, "counted intensities of batches 1, 4, 16, 64"),
        "3 * intensity[0] < intensity[1] and 3 * intensity[1] < intensity[2]": (
            COUNTED, "counted intensities: 0.5, 20 and 132 FLOPs per byte"),
        "rate['prefill'] > 1.5 * rate[1] and rate[64] > 1.5 * rate[1]": (
            ORDER, 40, 1.5, "FLOP rates; counted intensity of batch 64 and of the prefill "
            "over decode's: 40x and 264x (asserted in the cell)"),
    },
    "06": {
        "best['prefill'] > 1.5 * best['long']": (
            ORDER, 114, 1.5, "a 256-token prefill counts 115x the FLOPs of a step at 8,192"),
        "best['prefill'] / prompt_lens[-1] < best['short']": (
            ORDER, 256, 1, "a decode step reads all the weights, a prefill token 1/256 of them"),
        "tps[short][-1] > tps[short][0]": (
            ORDER, 38, 1, "64 steps of one sequence read 39x the bytes of one step of 64"),
        "latency[short][-1] > latency[short][0]": (
            ORDER, 64, 1, "a step of 64 sequences counts 64x the FLOPs of a step of one"),
        "gain[long_] < gain[short]": (
            MODEL, "the bound's batching gain, smaller where each sequence brings more cache, "
            "for any peak and bandwidth"),
        "lo <= t['serial'] <= hi": (
            MODEL, "max(a, b) <= a + b <= 2 max(a, b), for any measured peak and bandwidth"),
    },
    "07": {
        "last['MQA'] < last['MHA']": (
            ORDER, 3.8, 1, "MHA's step reads 3.8x MQA's bytes at 16,384 tokens (asserted)"),
        "1.5 * last['MLA absorbed'] < last['MLA expanded']": (
            ORDER, 5.2, 1.5, "expanded MLA reads 5.2x absorbed MLA's bytes, 57x its FLOPs"),
        "last[label] > first[label]": (
            ORDER, 4.1, 1, "only for the variants whose step reads >= 3x the bytes at 16,384 "
            "tokens as at 256 (MHA 4.1x, expanded MLA 7.7x; the cell asserts which)"),
        "ratio['MQA'] > 1": (ORDER, 3.8, 1, "MHA's step over MQA's, as above"),
    },
    "08": {
        "best[contexts[-1]] > 1.5 * best[contexts[0]]": (
            ORDER, 4.3, 1.5, "the step at 16,384 reads 4.4x the bytes of the step at 16"),
        "best[contexts[-1]] > best[contexts[1]]": (
            ORDER, 3.6, 1, "the step at 16,384 reads 3.6x the bytes of the step at 1,024"),
    },
    "09": {
        "1.5 * min(reused_t) < min(fresh_t)": (
            ORDER, 14, 1.5, "the reused prefill counts at least 14x fewer FLOPs (asserted > 3)"),
        "d['intensity'] < hw.ridge_point < p['intensity']": (
            MACHINE, "counted 0.5 (decode) and about 120 (prefill) FLOPs per byte either side "
            "of a core's ridge, about 10 measured"),
        "p['intensity'] > 3 * d['intensity']": (COUNTED, "counted intensities"),
        "p_flops / best['prefill'] > 1.5 * f_step / best['decode']": (
            ORDER, 200, 1.5, "FLOP rates; the prefill's counted intensity is hundreds of "
            "times decode's (asserted > 3)"),
    },
    "11": {
        "quote['stats']['tokens_per_step'] > 4 > story['stats']['tokens_per_step']": (
            COUNTED, "tokens per verify step, counted"),
        "len(quote['tokens']) > 3 * (quote['stats']['verify_steps'] + 1)": (
            COUNTED, "tokens and passes, counted"),
        "quote['best']['spec'] < quote['best']['plain']": (
            ORDER, 6.7, 1, "plain decoding reads the weights once per token (40), speculation "
            "once per pass (6): asserted > 3 in the cell"),
        "quote['stats']['tokens_per_step'] <= quote['formula'] + 1e-09": (
            COUNTED, "tokens per step against the formula"),
        "quote['stats']['acceptance_rate'] == 1": (
            COUNTED, "proposals kept over proposals made, counted"),
        "all((len(s.proposed) == K_LOOKUP for s in verify_steps[:-1]))": (
            COUNTED, "tokens proposed per verify step, counted"),
        "len(verify_steps[-1].proposed) < K_LOOKUP": (
            COUNTED, "tokens proposed in the last verify step, counted"),
        "busy[128][1] > 3 * busy[128][512] and busy[2048][1024] > 3": (
            COUNTED, "the formula's speed-ups on roofline bounds from toykv's counted FLOPs "
            "and bytes and an A100's datasheet figures: no measurement"),
        "[t for s in steps for t in s.tokens] == story['tokens']": (
            COUNTED, "token ids"),
        "all((s.rolled_back_bytes == s.rolled_back * per_token for s in story['steps']))": (
            COUNTED, "bytes of the rolled-back entries"),
    },
}

# Chapters whose timing asserts break the rule and await a rewrite, listed until it lands (a
# chapter's asserts go here rather than into ALLOWED); none at present.
PENDING: dict = {}

CHAPTERS = chapters()


def _number(path) -> str:
    return path.name[:2]


def claimed_factor(text: str) -> float:
    """The largest factor an assert's own constants claim: 1.5 * a < b and a > b / 0.9 claim
    1.5 and 1.11; a < b claims 1."""
    factor = 1.0
    for node in ast.walk(ast.parse(text, mode="eval")):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div)):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and isinstance(side.value, (int, float)) \
                        and side.value > 0:
                    factor = max(factor, side.value, 1 / side.value)
    return factor


def test_the_finder_sees_every_chapter():
    assert len(CHAPTERS) >= 12
    assert all(path.exists() for path in CHAPTERS)


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.name for p in CHAPTERS])
def test_timing_asserts_are_allowed(path):
    found = timing_asserts(path)
    allowed = ALLOWED.get(_number(path), {})
    pending = PENDING.get(_number(path), [])
    unlisted = [text for text in found if text not in allowed and text not in pending]
    assert not unlisted, (
        f"{path.name}: asserts that read a measured time, not in tests/test_timing_claims.py's "
        "list (order two times only where counted bytes or FLOPs put them >= 3x apart, by at "
        "most 1.5x; add a line with the counted ratio):\n" + "\n".join(unlisted))
    stale = [text for text in list(allowed) + pending if text not in found]
    assert not stale, f"{path.name}: listed asserts that are gone (remove them): {stale}"


@pytest.mark.parametrize("chapter,text", [(c, t) for c, entries in ALLOWED.items()
                                          for t in entries])
def test_each_allowed_assert_keeps_the_rule(chapter, text):
    kind, *rest = ALLOWED[chapter][text]
    assert kind in (ORDER, COUNTED, MODEL, MACHINE)
    if kind == ORDER:
        counted, factor, why = rest
        assert counted >= 3, f"chapter {chapter}: {text}: counted ratio {counted} < 3 ({why})"
        assert factor <= 1.5, f"chapter {chapter}: {text}: claims {factor}x > 1.5x"
        assert claimed_factor(text) == pytest.approx(factor), (
            f"chapter {chapter}: {text}: its constants claim {claimed_factor(text):.3g}x, the "
            f"list says {factor}x")
    else:
        assert len(rest) == 1 and rest[0], f"chapter {chapter}: {text}: say why it is {kind}"


def test_no_chapter_is_pending():
    assert not any(PENDING.values())


def test_claimed_factor_reads_the_constants():
    assert claimed_factor("1.5 * a < b") == 1.5
    assert claimed_factor("a > b / 0.9") == pytest.approx(1 / 0.9)
    assert claimed_factor("a < 0.5 * b") == 2
    assert claimed_factor("a[1] < b[2]") == 1


def test_the_finder_follows_a_measurement():
    """A small chapter: measured names reach asserts through assignments, loops, tables and
    functions; counted ones, and a name reassigned from a count, do not."""
    code = '''
import time
from toykv import timing, flops
best = timing.best_seconds({"a": f, "b": g})
ratio = best["a"] / best["b"]
table = {}
for k, v in best.items():
    table[k] = v * 2
def measure():
    return time.perf_counter()
t = measure()
count = flops.forward_flops(c, 8)
steps = [s.seconds for s in run]
assert ratio > 1
assert table["a"] < 3
assert t > 0
assert count == 16
assert max(steps) < 1
best = 3
assert best == 3
assert [k for k in ("a", "b")] == ["a", "b"]
'''
    import tempfile
    import json
    from pathlib import Path
    nb = {"cells": [{"cell_type": "code", "source": code.splitlines(keepends=True),
                     "metadata": {}, "outputs": []}], "metadata": {}, "nbformat": 4,
          "nbformat_minor": 5}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "99_fixture.ipynb"
        path.write_text(json.dumps(nb))
        found = timing_asserts(path)
    assert found == ["ratio > 1", "table['a'] < 3", "t > 0", "max(steps) < 1"]


def test_root_is_the_repository():
    assert (ROOT / "_toc.yml").exists()
