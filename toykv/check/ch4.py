"""Self-checks for chapter 4, How big is the cache (book/04_cache_size.ipynb).

Expected values come from toykv.sizing on toykv.zoo's verified configs (and toykv.hfconfig
for a pasted config.json); the hints recognise the sizing mistakes the chapter names: query
heads for KV heads, head_dim taken as hidden_size / n_heads, the factor 2 for K and V,
bytes per value, GB for GiB, a window ignored.
"""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .. import sizing, zoo
from ..config import source_toy
from ..hfconfig import from_hf_config
from ..model import ToyTransformer
from ._core import answer_check, function_check

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
    A100 80GB, which reports 80 GiB, with a bf16 cache, the same with an fp8 cache)."""
    expected = _fits(80 * GiB)
    model = zoo.get("llama-3.1-8b")
    no_weights = tuple(80 * GiB // sizing.kv_cache_bytes(model.config, 32_768,
                                                         bytes_per_value=b) for b in (2, 1))
    return answer_check(answer, expected, hints=[
        (_fits(80 * GB), "the A100 80GB reports 81,920 MiB, that is 80 GiB (2^30 bytes "
                         "each), not 80 x 10^9 bytes: use 80 x 2^30 bytes."),
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


# -- exercise 6: kv_cache_bytes with sliding layers, written by the student ---------------------
EX6_TOY = dict(n_kv_heads=2, sliding_window=8, layer_types=("sliding", "full"), max_seq_len=64)
EX6_TOY_RUNS = [(tokens, kv_dtype, batch) for tokens in (5, 8, 20)
                for kv_dtype in ("float32", "float16") for batch in (1, 3)]
BYTES = {"float32": 4, "float16": 2}


def ex6_zoo_models() -> list[str]:
    """The zoo's models whose layers are full or sliding attention with keys and values (no
    MLA latent, no linear layers): the ones the exercise's formula covers."""
    return [name for name in zoo.names() if zoo.get(name).config.attention != "mla"
            and set(zoo.get(name).config.layer_kinds) <= {"full", "sliding"}]


@functools.cache
def _ex6_toy_model() -> ToyTransformer:
    """The exercise's toy: one sliding and one full layer, window 8, 2 KV heads."""
    return ToyTransformer(source_toy(**EX6_TOY), seed=0)


@functools.lru_cache(maxsize=None)
def _held_by_toy(tokens: int, kv_dtype: str, batch: int) -> int:
    """cache.nbytes of the exercise's toy after a prefill of `tokens` random tokens into a
    cache of `batch` sequences: toykv's arrays."""
    model = _ex6_toy_model()
    config = model.config
    cache = model.new_cache(kv_dtype=kv_dtype, batch=None if batch == 1 else batch)
    shape = (tokens,) if batch == 1 else (batch, tokens)
    model.forward(np.random.default_rng(0).integers(0, config.vocab_size, shape), cache)
    return cache.nbytes


def _ex6_cases():
    """(where, config, tokens, batch, bytes_per_value, expected): the toy's caches, measured,
    then every zoo model the formula covers at 1,000 and 32,768 tokens and its maximum."""
    toy = source_toy(**EX6_TOY)
    for tokens, kv_dtype, batch in EX6_TOY_RUNS:
        yield (f"the toy with a window of 8 ({tokens} tokens, {kv_dtype}, batch {batch})", toy,
               tokens, batch, BYTES[kv_dtype], _held_by_toy(tokens, kv_dtype, batch))
    for name in ex6_zoo_models():
        c = zoo.get(name).config
        for tokens in (1000, 32_768, c.max_seq_len):
            yield (f"{name} at {tokens:,} tokens", c, tokens, 1, 2,
                   sizing.kv_cache_bytes(c, tokens))


def _ex6_mistakes(c, tokens, batch, b) -> dict:
    """What the usual slips give (for the hints only)."""
    w = c.sliding_window

    def size(kv=c.n_kv_heads, hd=c.head_dim, kv_factor=2, held=None, batch=batch, b=b):
        held = held or (lambda kind: min(tokens, w) if kind == "sliding" else tokens)
        return batch * b * kv_factor * kv * hd * sum(held(kind) for kind in c.layer_kinds)

    slips = {"window ignored": size(held=lambda kind: tokens),
             "query heads": size(kv=c.n_heads), "no factor 2": size(kv_factor=1),
             "batch ignored": size(batch=1), "bytes fixed": size(b=2),
             "head_dim from D / H": size(hd=c.d_model // c.n_heads)}
    if w is not None:
        slips["window everywhere"] = size(held=lambda kind: min(tokens, w))
        slips["always the window"] = size(held=lambda kind: w if kind == "sliding" else tokens)
        slips["window - 1"] = size(held=lambda kind: min(tokens, w - 1) if kind == "sliding"
                                   else tokens)
    return slips


EX6_HINTS = [
    ("window ignored", "a sliding layer keeps only the last sliding_window tokens: it holds "
                       "min(tokens, sliding_window), a full layer all of them."),
    ("window everywhere", "only the layers whose kind is 'sliding' stop at the window "
                          "(config.layer_kinds); the full layers keep every token."),
    ("always the window", "a sliding layer holds min(tokens, sliding_window): before the "
                          "window fills, it holds only the tokens seen so far."),
    ("window - 1", "toykv's ring buffer keeps the last sliding_window tokens (Hugging Face's "
                   "DynamicSlidingWindowLayer keeps sliding_window - 1 and adds the new one)."),
    ("query heads", "only the KV heads are cached: config.n_kv_heads, not n_heads."),
    ("no factor 2", "count both the key and the value of every KV head (the factor 2)."),
    ("batch ignored", "every sequence of the batch has its own cache: multiply by batch."),
    ("bytes fixed", "use bytes_per_value (4 for a float32 cache, 2 for float16 and bf16), "
                    "not a fixed 2."),
    ("head_dim from D / H", "use config.head_dim: some models' heads are not "
                            "d_model / n_heads wide (Gemma, Qwen3)."),
]


def ch4_ex6(answer):
    """answer: your kv_cache_bytes(config, tokens, batch=1, bytes_per_value=2) function. The
    check compares it with cache.nbytes of a toy with a sliding and a full layer (float32 and
    float16, batch 1 and 3) and with toykv.sizing on every zoo model with full and sliding
    layers."""
    cases = ((where, (c, tokens), dict(batch=batch, bytes_per_value=b), expected,
              _ex6_mistakes(c, tokens, batch, b))
             for where, c, tokens, batch, b, expected in _ex6_cases())
    return function_check(
        answer, cases, EX6_HINTS, what="a whole number of bytes", name="my_kv_cache_bytes",
        right="Equal to cache.nbytes and toykv.sizing in every case.",
        wrong=lambda where: f"On {where} your count differs; compare each factor with "
                            "2 x H_kv x d_h x b per token and layer.")


__all__ = ["ch4_ex1", "ch4_ex2", "ch4_ex3", "ch4_ex4", "ch4_ex5", "ch4_ex6", "ex6_zoo_models"]
