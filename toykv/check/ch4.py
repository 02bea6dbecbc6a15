"""Self-checks for chapter 4, How big is the cache (book/04_cache_size.ipynb).

Expected values come from toykv.sizing on toykv.zoo's verified configs (and toykv.hfconfig
for a pasted config.json); the hints recognise the sizing mistakes the chapter names: query
heads for KV heads, head_dim taken as hidden_size / n_heads, the factor 2 for K and V,
bytes per value, GB for GiB, a window ignored.
"""
from __future__ import annotations

import dataclasses

from .. import sizing, zoo
from ..hfconfig import from_hf_config
from ._core import answer_check

GB, GiB = 10**9, 2**30


def ch4_ex1(answer):
    """answer: bf16 KV bytes per token of Llama 3.1 405B."""
    c = zoo.get("llama-3.1-405b").config
    expected = sizing.kv_bytes_per_token(c)
    with_query_heads = sizing.kv_bytes_per_token(dataclasses.replace(c, n_kv_heads=c.n_heads))
    return answer_check(answer, expected, hints=[
        (with_query_heads, "only the KV heads are cached: use 8, not the 128 query heads."),
        (expected // 2, "count both the key and the value (the factor 2), and 2 bytes per "
                        "bf16 value."),
        (2 * expected, "bf16 takes 2 bytes per value, not 4."),
        (expected / 1024, "give bytes, not KiB."),
    ], what="a whole number of bytes")


def _fits(gpu_bytes: int, context: int = 32_768) -> tuple[int, int]:
    """Sequences of `context` tokens of Llama 3.1 8B that fit beside its bf16 weights:
    (bf16 cache, fp8 cache)."""
    model = zoo.get("llama-3.1-8b")
    return tuple(sizing.sequences_that_fit(model, context, gpu_bytes, bytes_per_value=b)
                 for b in (2, 1))


def ch4_ex2(answer):
    """answer: (sequences of 32,768 tokens that fit beside Llama 3.1 8B's bf16 weights on an
    "80 GB" GPU (80 GiB) with a bf16 cache, the same with an fp8 cache)."""
    expected = _fits(80 * GiB)
    model = zoo.get("llama-3.1-8b")
    no_weights = tuple(80 * GiB // sizing.kv_cache_bytes(model.config, 32_768,
                                                         bytes_per_value=b) for b in (2, 1))
    return answer_check(answer, expected, hints=[
        (_fits(80 * GB), "a GPU sold as 80 GB has 80 GiB of memory (2^30 bytes each): "
                         "use 80 x 2^30 bytes."),
        (no_weights, "the weights (16.06 GB in bf16) take their share of the memory first."),
        ((expected[1], expected[0]), "the pair is (bf16 cache, fp8 cache)."),
    ], wrong="Give a pair (bf16, fp8) of whole sequences.",
       what="a pair (bf16, fp8) of whole numbers of sequences")


def ch4_ex3(answer):
    """answer: how many times smaller Mistral 7B's cache of 32,768 tokens is with its
    4,096-token window than without it."""
    c = zoo.get("mistral-7b-v0.1").config
    full = sizing.kv_cache_bytes(dataclasses.replace(c, sliding_window=None), 32_768)
    expected = full / sizing.kv_cache_bytes(c, 32_768)
    return answer_check(answer, expected, rel=1e-9, hints=[
        (1 / expected, "give how many times smaller: the bytes without the window divided by "
                       "the bytes with it."),
        (1, "the window keeps only the last 4,096 tokens in every layer."),
    ], what="a factor (a number)")


def _gemma2(**changes):
    return dataclasses.replace(zoo.get("gemma-2-9b").config, **changes)


def ch4_ex4(answer):
    """answer: (bf16 KV bytes per token of Gemma 2 9B inside the window, bytes of one
    sequence of 8,192 tokens)."""
    def sized(c):
        return sizing.kv_bytes_per_token(c), sizing.kv_cache_bytes(c, 8192)

    c = _gemma2()
    expected = sized(c)
    naive = sized(_gemma2(head_dim=c.d_model // c.n_heads))
    # (a) is a count of bytes; (b) may be given rounded, as "2.11 GB" = 2.11e9 bytes
    return answer_check(answer, expected, rel=(0, 1e-3), hints=[
        (naive, "head_dim is given in config.json (256); hidden_size / num_attention_heads "
                "(224) is not the head size for this model."),
        ((expected[0], expected[0] * 8192), "half the layers slide over 4,096 tokens: for an "
                                            "8,192-token sequence they hold only 4,096."),
        (sized(_gemma2(n_kv_heads=c.n_heads)), "only the 8 KV heads are cached, not the 16 "
                                               "query heads."),
        ((expected[0] // 2, expected[1] // 2), "count both K and V (the factor 2) and 2 bytes "
                                               "per bf16 value."),
        ((expected[0], expected[1] / GB), "give bytes, not GB."),
        ((expected[0], expected[1] / GiB), "give bytes, not GiB."),
    ], wrong="Give a pair (bytes per token, bytes of the sequence).",
       what="a pair (bytes per token, bytes of the sequence)")


SMOLLM2_CONFIG = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
                  "num_hidden_layers": 30, "num_attention_heads": 9,
                  "num_key_value_heads": 3, "vocab_size": 49152,
                  "max_position_embeddings": 8192, "tie_word_embeddings": True}


def ch4_ex5(answer):
    """answer: bf16 KV bytes per token of SmolLM2-135M changed to multi-query attention."""
    mqa = from_hf_config({**SMOLLM2_CONFIG, "num_key_value_heads": 1})
    expected = sizing.kv_bytes_per_token(mqa.config)
    as_given = sizing.kv_bytes_per_token(from_hf_config(SMOLLM2_CONFIG).config)
    with_query = sizing.kv_bytes_per_token(
        from_hf_config({**SMOLLM2_CONFIG, "num_key_value_heads": 9}).config)
    return answer_check(answer, expected, hints=[
        (as_given, "that is the model as published, with 3 KV heads; multi-query attention "
                   "keeps one."),
        (with_query, "multi-query attention keeps one KV head, not one per query head."),
        (expected // 2, "count both K and V (the factor 2) and 2 bytes per bf16 value."),
    ], what="a whole number of bytes")


__all__ = ["ch4_ex1", "ch4_ex2", "ch4_ex3", "ch4_ex4", "ch4_ex5"]
