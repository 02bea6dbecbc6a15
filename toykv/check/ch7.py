"""Self-checks for chapter 7's exercises (shrinking the cache). Each prints right or a hint.

Expected values are computed here with toykv, so the check and the chapter cannot drift.
"""
from __future__ import annotations

from dataclasses import replace

from ..config import ModelConfig
from ..flops import cached_step_flops
from ..sizing import kv_bytes_per_token, kv_cache_bytes
from ..zoo import get
from ._core import answer_check


def _ex1_config():
    """The exercise's model: 32 layers, 32 query heads of 128, 4 KV heads."""
    return ModelConfig(vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=4,
                       d_ff=14336)


def ch7_ex1(answer):
    """Bytes one token adds to an int8 cache with float32 scales (32 layers, 4 KV heads of 128)."""
    c = _ex1_config()
    int8 = lambda config: kv_cache_bytes(config, 1, bytes_per_value=1, scale_bytes=4)
    one_scale = kv_cache_bytes(c, 1, bytes_per_value=1) + c.n_layers * 2 * 4
    hints = [
        (kv_cache_bytes(c, 1, bytes_per_value=1),
         "that is the int8 values alone: add a 4-byte scale per position, KV head, and K or V."),
        (int8(replace(c, n_kv_heads=c.n_heads)),
         "you used the 32 query heads; the cache stores the 4 KV heads."),
        (int8(c) // 2, "a token stores a key and a value in every layer: the factor 2."),
        (kv_cache_bytes(c, 1, bytes_per_value=2),
         "that is 2 bytes per value (bf16) without scales; int8 stores 1 byte per value."),
        (one_scale, "the scales are per KV head: 2 x 4 of them per layer, not 2."),
    ]
    return answer_check(answer, int8(c), hints,
                        what="a whole number of bytes")


def ch7_ex2(answer):
    """How many times smaller Kimi K2's MLA cache is than MHA with its 64 heads of 128."""

    def mha_over_mla(config):
        mha = replace(config, attention=None, n_kv_heads=config.n_heads, kv_lora_rank=None,
                      rope_head_dim=None)
        return kv_bytes_per_token(mha) / kv_bytes_per_token(config)

    k2 = get("kimi-k2").config
    expected = mha_over_mla(k2)
    hints = [
        (mha_over_mla(get("deepseek-v2").config),
         "that is DeepSeek-V2's factor, with 128 heads; Kimi K2 has 64."),
        (expected / 2, "MHA caches a key and a value per head: 2 x 64 x 128 values per layer."),
        (1 / expected, "that is MLA / MHA; the question asks MHA / MLA."),
        (2 * k2.n_heads * k2.head_dim / k2.kv_lora_rank,
         "the MLA cache also holds the 64-value rotary key beside the 512-value latent."),
    ]
    return answer_check(answer, expected, hints, rel=0.005,
                        what="a ratio (a number)")


def ch7_ex3(answer):
    """Smallest context at which Gemma 3 27B's global layers hold more cache than its local ones."""
    c = get("gemma-3-27b").config
    n_global, n_local = c.layer_kinds.count("full"), c.layer_kinds.count("sliding")
    w = c.sliding_window
    expected = n_local * w // n_global + 1              # past the window: n_global S > n_local w
    hints = [
        (expected - 1, f"at that context the global layers still hold a little less than the "
                       f"local ones ({n_global} x {expected - 1:,} <= {n_local} x {w:,})."),
        (5 * w, "that assumes 5 local layers per global one exactly; count the layers: layers "
                "5, 11, ..., 59 are global."),
        ((c.n_layers - 11) * w // 11 + 1, "62 layers hold 10 global ones (5, 11, ..., 59), not 11."),
        (w, "the window is where the local layers stop growing, not where the global ones pass "
            "them."),
    ]
    return answer_check(answer, expected, hints,
                        what="a whole number of tokens")


def ch7_ex4(answer):
    """DeepSeek-V2: FLOPs per extra cached position, expanded over absorbed (toykv.flops)."""
    c = get("deepseek-v2").config
    per_position = {absorb: cached_step_flops(c, 1001, absorb) - cached_step_flops(c, 1000, absorb)
                    for absorb in (False, True)}
    expected = per_position[False] / per_position[True]
    hints = [
        (c.head_dim, "that is the hand value d_h; toykv also counts the scores both forms share "
                     "(use the difference of flops.cached_step_flops at two contexts)."),
        (1 / expected, "that is absorbed / expanded; the question asks expanded / absorbed."),
    ]
    return answer_check(answer, expected, hints, rel=0.01,
                        what="a ratio (a number)")


__all__ = ["ch7_ex1", "ch7_ex2", "ch7_ex3", "ch7_ex4"]
