"""toykv.variants: the four attention variants of one toy, and what a decode step moves."""
from dataclasses import replace

import numpy as np
import pytest

from toykv import ModelConfig, ToyTransformer, source_toy, zoo
from toykv.layers import KV_DTYPE_BYTES
from toykv.sizing import decode_step_bytes as step_bytes
from toykv.sizing import weight_bytes_read as read_bytes
from toykv.variants import TOY_VARIANT_SHAPES, attention_variants, long_context_toy


def decode_step_bytes(config, context, kv_dtype="float32", absorb=False):
    """The one count (sizing.decode_step_bytes) for toykv's float32 model and a kv_dtype cache."""
    value, scale = KV_DTYPE_BYTES[kv_dtype]
    return step_bytes(config, context, 1, value, 4, scale, expanded=not absorb)


def weight_bytes_read(config, bytes_per_param=4):
    return read_bytes(config, bytes_per_param)

BASE = source_toy(max_seq_len=256)                       # 8 heads of 16, 2 layers
SHAPES = {"gqa_kv_heads": 2, "kv_lora_rank": 32, "rope_head_dim": 8}


@pytest.fixture(scope="module")
def variants():
    return attention_variants(BASE, **SHAPES)


def test_variants_share_everything_but_attention(variants):
    assert set(variants) == {"mha", "gqa", "mqa", "mla"}
    for config in variants.values():
        for field in ("d_model", "n_layers", "n_heads", "head_dim", "d_ff", "vocab_size",
                      "max_seq_len"):
            assert getattr(config, field) == getattr(BASE, field)
    assert [variants[k].n_kv_heads for k in ("mha", "gqa", "mqa")] == [8, 2, 1]
    assert [variants[k].attention for k in ("mha", "gqa", "mqa", "mla")] == \
        ["mha", "gqa", "mqa", "mla"]
    assert (variants["mla"].kv_lora_rank, variants["mla"].rope_head_dim) == (32, 8)


def test_variants_from_a_gqa_base_keep_a_given_head_dim():
    base = ModelConfig(vocab_size=64, d_model=64, n_layers=1, n_heads=4, n_kv_heads=2,
                       head_dim=32, d_ff=64)
    out = attention_variants(base, gqa_kv_heads=2, kv_lora_rank=16, rope_head_dim=4)
    assert out["mha"].n_kv_heads == 4 and out["mha"].head_dim == 32
    assert out["mla"].head_dim == 32


@pytest.mark.parametrize("kwargs, match", [
    ({"gqa_kv_heads": 3}, "divide n_heads"),
    ({"gqa_kv_heads": 1}, "gqa_kv_heads"),
    ({"gqa_kv_heads": 8}, "gqa_kv_heads"),
    ({"gqa_kv_heads": 2.0}, "gqa_kv_heads"),
    ({"kv_lora_rank": 0}, "kv_lora_rank"),
    ({"rope_head_dim": 1}, "rope_head_dim"),
])
def test_variants_refuse_bad_shapes(kwargs, match):
    with pytest.raises(ValueError, match=match):
        attention_variants(BASE, **{**SHAPES, **kwargs})


def test_variants_need_room_for_gqa_and_a_config():
    with pytest.raises(ValueError, match="n_heads >= 4"):
        attention_variants(source_toy(n_heads=2, d_model=32), **SHAPES)
    with pytest.raises(ValueError, match="ModelConfig"):
        attention_variants({"n_heads": 8}, **SHAPES)


def _array_bytes(model):
    """Every weight array a toykv model holds, as the bench counts them."""
    arrays = [model.embed, model.final_norm] + [a for layer in model.layers
                                                for a in layer.values()]
    if model.lm_head is not None:
        arrays.append(model.lm_head)
    return sum(a.nbytes for a in arrays)


@pytest.mark.parametrize("name", ["mha", "gqa", "mqa", "mla"])
def test_weight_bytes_read_counts_the_models_arrays(variants, name):
    model = ToyTransformer(variants[name])                 # tied: the table is the head
    assert weight_bytes_read(variants[name]) == _array_bytes(model)


def test_weight_bytes_read_untied_reads_one_embedding_row():
    config = replace(BASE, tie_embeddings=False)
    model = ToyTransformer(config)
    one_row = config.d_model * 4
    assert weight_bytes_read(config) == _array_bytes(model) - model.embed.nbytes + one_row
    assert weight_bytes_read(config, bytes_per_param=2) * 2 == weight_bytes_read(config)


@pytest.mark.parametrize("name", ["mha", "gqa", "mqa", "mla"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_step_cache_bytes_equal_a_filled_cache(variants, name, dtype):
    config = variants[name]
    model = ToyTransformer(config)
    cache = model.new_cache(kv_dtype=dtype)
    model.forward(list(range(20)), cache)              # a step at context 20 reads 20 entries
    assert decode_step_bytes(config, 20, kv_dtype=dtype)["kv"] == cache.nbytes


def test_step_bytes_expanded_mla_by_hand(variants):
    config = variants["mla"]
    parts = decode_step_bytes(config, 100)
    H, hd, L = config.n_heads, config.head_dim, config.n_layers
    assert parts["expanded"] == L * 100 * (2 * H * hd * 4) * 2     # K and V, written + read
    assert decode_step_bytes(config, 100, absorb=True)["expanded"] == 0
    assert parts["total"] == parts["weights"] + parts["kv"] + parts["expanded"]
    assert parts["share"] == parts["kv"] / parts["total"]


def test_step_bytes_sliding_layers_stop_at_the_window():
    config = source_toy(sliding_window=16)
    model = ToyTransformer(config)
    cache = model.new_cache()
    model.forward(list(range(40)), cache)
    assert decode_step_bytes(config, 40)["kv"] == cache.nbytes
    assert decode_step_bytes(config, 40)["total"] == decode_step_bytes(config, 16)["total"]


@pytest.mark.parametrize("kwargs, match", [
    ({"tokens": -1}, "tokens"), ({"expanded": 1}, "expanded"),
    ({"bytes_per_value": "4"}, "bytes_per_value")])
def test_step_bytes_refuse_bad_input(variants, kwargs, match):
    args = {"tokens": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        step_bytes(variants["mha"], **args)


def test_long_context_toy_is_bigger_than_a_cpu_cache():
    config = long_context_toy()
    weights = weight_bytes_read(config)
    assert weights > 100e6                                       # above a 32 MiB L3
    mha = attention_variants(config, **TOY_VARIANT_SHAPES)["mha"]
    kv = decode_step_bytes(mha, 16384)["kv"]
    assert round(kv / weights, 1) == 3.4                         # the docstring's claim
    with pytest.raises(ValueError, match="max_seq_len"):
        long_context_toy(max_seq_len=0)


def test_toy_mla_equals_gqa_with_2_25_heads():
    from toykv.sizing import kv_bytes_per_token
    out = attention_variants(long_context_toy(), **TOY_VARIANT_SHAPES)
    assert kv_bytes_per_token(out["mla"]) / kv_bytes_per_token(out["mqa"]) == 2.25
    assert np.isclose(kv_bytes_per_token(out["mha"]) / kv_bytes_per_token(out["gqa"]), 4)


def test_a_served_mla_model_counts_no_rebuilt_keys():
    """sizing's one count leaves MLA's expanded bytes out unless asked: a served DeepSeek
    attends absorbed, and its KV share is the cache's over the cache and weights alone."""
    ds3 = zoo.get("deepseek-v3")
    served = step_bytes(ds3, 1_000_000)
    assert served["expanded"] == 0 and served["total"] == served["weights"] + served["kv"]
    assert step_bytes(ds3, 1_000_000, expanded=True)["expanded"] > 0
