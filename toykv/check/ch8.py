"""Self-checks for chapter 8's exercises (the KV share at long context). Each prints right or a hint.

Expected values are computed here with toykv, so the check and the chapter cannot drift.
"""
from __future__ import annotations

from dataclasses import replace

from ..longctx import crossover_context, depth_model, step_bytes
from ..sizing import kv_share, relative_decode_speed
from ..zoo import get
from ._core import answer_check

GB, GiB = 10**9, 2**30


def ch8_ex1(answer):
    """Smallest context at which Llama 3.1 8B's bf16 KV share reaches one half."""
    model = get("llama-3.1-8b")
    expected = crossover_context(model)
    query_heads = replace(model, config=replace(model.config, n_kv_heads=model.config.n_heads))
    hints = [
        (expected - 1, "at that context the cache is still a little smaller than the weights."),
        (crossover_context(model, weights="active"),
         "that counts every active weight, the source essay's convention; a decode step reads "
         "only the looked-up row of Llama's untied input embedding (sizing.weight_bytes_read)."),
        (crossover_context(model, bytes_per_param=1),
         "the weights are bf16: 2 bytes per parameter, not 1."),
        (crossover_context(model, bytes_per_value=1),
         "the cache is bf16 too: 2 bytes per value."),
        (crossover_context(query_heads),
         "you used the 32 query heads; the cache holds the 8 KV heads."),
    ]
    return answer_check(answer, expected, hints,
                        what="a whole number of tokens")


def ch8_ex2(answer):
    """Relative decode speed of 16 sequences of 32,768 tokens on Llama 3.1 8B (bf16)."""
    model = get("llama-3.1-8b")
    expected = relative_decode_speed(model, 32768, batch=16)
    hints = [
        (relative_decode_speed(model, 32768),
         "that is the speed of one sequence (or of sixteen that each read the weights): the "
         "weights are read once per step for the batch, every sequence's cache in full."),
        (kv_share(model, 32768, batch=16), "that is the KV share; the speed is 1 - share."),
        (relative_decode_speed(model, 32768, batch=16, weights="active"),
         "that counts the whole untied input embedding; a step reads only its looked-up rows."),
    ]
    return answer_check(answer, expected, hints, rel=0.005,
                        what="a ratio between 0 and 1")


def ch8_ex3(answer):
    """KV share at 32,768 tokens of Qwen3-0.6B's shapes with 7 layers, all parameters counted."""
    config = get("qwen3-0.6b").config
    expected = kv_share(depth_model(config, 7), 32768)
    hints = [
        (kv_share(depth_model(config, 7, blocks_only=True), 32768),
         "that is the blocks-only share, the same at every depth; count the embeddings too."),
        (kv_share(depth_model(config, 28), 32768),
         "that is the 28-layer model; rebuild it with 7 layers."),
        (kv_share(get("qwen3-0.6b"), 32768),
         "that uses the zoo's published 0.6B parameters at 28 layers; rebuild with 7 layers."),
    ]
    return answer_check(answer, expected, hints, rel=0.002,
                        what="a share between 0 and 1")


def ch8_ex4(answer):
    """GiB one decode step of MiniMax M2 reads at 10^6 tokens (bf16, batch 1)."""
    parts = step_bytes(get("minimax-m2"), 10**6)
    expected = parts["total"] / GiB
    hints = [
        (parts["total"] / GB, "that is in GB (10^9 bytes); the question asks GiB (2^30 bytes)."),
        (parts["kv"] / GiB, "that is the cache alone; a step also reads the active weights."),
        (step_bytes(get("minimax-m2"), 2**20)["total"] / GiB,
         "1M tokens means 10^6 here, not 2^20."),
        ((parts["kv"] / GiB) + parts["weights"] / GB,
         "you mixed GiB for the cache with GB for the weights."),
    ]
    return answer_check(answer, expected, hints, rel=0.001,
                        what="a number of GiB")


__all__ = ["ch8_ex1", "ch8_ex2", "ch8_ex3", "ch8_ex4"]
