"""toykv.layers: one description of a layer, read by the model, the cache, sizing, flops,
variants and steptime. Expected values are written out by hand from the shapes (not taken
from the description itself), and each reader is checked against the description it reads.
"""
import math
from dataclasses import replace

import numpy as np
import pytest
from conftest import BASE, VARIANTS, config, make_model

from toykv import ModelConfig, ToyTransformer, flops, sizing, source_toy
from toykv.layers import KV_DTYPE_BYTES, check_absorb, check_kv_dtype, describe, groups
from toykv.model import weight_shapes


def test_one_spec_per_layer_shared_by_layers_of_a_kind():
    c = config("mixed")                                  # sliding, full
    specs = c.layers
    assert specs == describe(c) and len(specs) == c.n_layers
    assert [s.kind for s in specs] == ["sliding", "full"]
    assert specs[0].is_sliding and not specs[1].is_sliding
    assert specs[0].window == 4 and specs[1].window is None
    assert c.layers is c.layers                          # built once per config
    uniform = config("gqa")
    assert uniform.layers[0] is uniform.layers[1]
    assert groups(uniform) == [(uniform.layers[0], 2)]


def test_entries_and_weights_by_hand():
    D, H, hd, F = 32, 4, 8, 64                           # BASE
    gqa = config("gqa").layers[0]                        # 2 KV heads
    assert gqa.entry_shapes == {"k": (2, hd), "v": (2, hd)}
    assert gqa.weight_shapes == {"attn_norm": (D,), "mlp_norm": (D,), "w_gate": (D, F),
                                 "w_up": (D, F), "w_down": (F, D), "wo": (H * hd, D),
                                 "wq": (D, H * hd), "wk": (D, 2 * hd), "wv": (D, 2 * hd)}
    assert gqa.rope_dim == hd and gqa.values_per_token == 2 * 2 * hd
    assert gqa.scales_per_token == 2 * 2                 # one per K/V row of d_h values
    mla = config("mla_expanded").layers[0]               # r = 8, d_h^R = 4
    assert mla.entry_shapes == {"c_kv": (8,), "k_rope": (4,)}
    assert mla.weight_shapes["wq"] == (D, H * (hd + 4))
    assert mla.weight_shapes["w_dkv"] == (D, 8 + 4) and mla.weight_shapes["kv_norm"] == (8,)
    assert mla.rope_dim == 4 and mla.values_per_token == 12 and mla.scales_per_token == 2


@pytest.mark.parametrize("kind, window, contexts", [
    ("full", None, {0: 0, 3: 3, 100: 100}), ("sliding", 4, {0: 0, 3: 3, 4: 4, 100: 4})])
def test_held_and_mask_sizes(kind, window, contexts):
    c = ModelConfig(**BASE, sliding_window=window, layer_types=(kind, kind)) if window else \
        ModelConfig(**BASE)
    spec = c.layers[0]
    for context, held in contexts.items():
        assert spec.held(context) == held
        assert spec.mask_sizes(1, context) == (held + 1, context - held)   # keys, first


def test_linear_layer_holds_a_fixed_state():
    c = ModelConfig(**BASE, layer_types=("linear", "full"), linear_state_values=7)
    linear = c.layers[0]
    assert linear.held(1000) == 0 and linear.entries == ()
    assert linear.cache_values(1000) == 7 and linear.cache_scales(1000) == 0
    assert sizing.kv_cache_bytes(c, 10, bytes_per_value=1) == 7 + 10 * 2 * 4 * 8
    with pytest.raises(ValueError, match="linear"):
        flops.forward_flops(c, 3)                        # no formula rather than a wrong one


def test_allowed_is_none_only_when_nothing_is_masked():
    full, sliding = config("mha").layers[0], config("sliding").layers[0]      # w = 4
    assert full.allowed(np.array([5]), np.arange(6)) is None                  # a decode step
    causal = full.allowed(np.arange(3), np.arange(3))
    np.testing.assert_array_equal(causal, np.tril(np.ones((3, 3), bool)))
    assert sliding.allowed(np.array([3]), np.arange(4)) is None              # window not full
    window = sliding.allowed(np.array([6]), np.arange(2, 7))                  # 5 keys, w = 4
    np.testing.assert_array_equal(window, [[False, True, True, True, True]])


@pytest.mark.parametrize("name", VARIANTS)
def test_the_readers_agree_with_the_description(name):
    model = make_model(name)
    c = model.config
    for layer, spec in zip(model.layers, c.layers):          # the model's weights
        assert {k: a.shape for k, a in layer.items()} == spec.weight_shapes
    assert weight_shapes(c)["layers"] == [spec.weight_shapes for spec in c.layers]
    cache = model.new_cache()
    model.forward(list(range(9)), cache)
    for i, spec in enumerate(c.layers):                      # the cache's arrays and held
        if spec.shares_kv:                                   # kv_sharing: holds nothing
            assert spec.entry_shapes == {} and not cache.layers[i].arrays
            with pytest.raises(ValueError, match="holds no keys or values"):
                cache.stored(i, cache.names[0])
            continue
        assert {n: cache.stored(i, n).shape[1:] for n in cache.names} == spec.entry_shapes
        assert cache.held(i) == spec.held(9) == len(cache.stored(i, cache.names[0]))
    params = sum(math.prod(a.shape) for layer in model.layers for a in layer.values())
    assert sizing.param_count(c, blocks_only=True) == params  # sizing reads the same shapes


def test_flops_by_hand_for_kv_heads_and_both_mla_forms():
    D, H, hd, F, T, Tk = 32, 4, 8, 64, 3, 10
    mlp, wo = 3 * 2 * T * D * F, 2 * T * H * hd * D
    gqa = config("gqa").layers[0]                             # H_kv = 2
    assert gqa.flops(T, Tk) == (2 * T * D * H * hd + 2 * 2 * T * D * 2 * hd
                                + 2 * 2 * H * T * Tk * hd + wo + mlp)
    mla, r, rd = config("mla_expanded").layers[0], 8, 4
    proj = 2 * T * D * H * (hd + rd) + 2 * T * D * (r + rd)
    rope = 2 * H * T * Tk * rd
    absorbed = 2 * H * T * hd * r + 2 * 2 * H * T * Tk * r + 2 * H * T * r * hd
    expanded = 2 * 2 * Tk * r * H * hd + 2 * 2 * H * T * Tk * hd
    assert mla.flops(T, Tk, absorb=True) == proj + rope + absorbed + wo + mlp
    assert mla.flops(T, Tk, absorb=False) == proj + rope + expanded + wo + mlp
    assert mla.rebuilt_values(False) == 2 * H * hd and mla.rebuilt_values(True) == 0
    assert gqa.rebuilt_values(False) == 0


def test_kv_dtype_names_numpy_dtypes_and_refuses_the_rest():
    assert tuple(KV_DTYPE_BYTES) == ("float32", "float16", "int8")
    assert check_kv_dtype(np.dtype("float16")) == "float16"
    assert check_kv_dtype(np.int8) == "int8" and check_kv_dtype("float32") == "float32"
    for bad in ("bfloat16", np.dtype("float64"), 2, None, ["int8"]):
        with pytest.raises(ValueError, match="kv_dtype must be one of"):
            check_kv_dtype(bad)
    cache = make_model("gqa").new_cache(kv_dtype=np.dtype("float16"))
    assert cache.kv_dtype == "float16" and cache.layers[0]["k"].dtype == np.float16


def test_absorb_is_a_bool_and_for_mla_only():
    assert check_absorb(config("mla_absorbed"), True) is True
    for bad in ("True", 1, None):
        with pytest.raises(ValueError, match="absorb must be True or False"):
            check_absorb(config("mla_absorbed"), bad)
    with pytest.raises(ValueError, match="absorb=True is for attention='mla' only"):
        check_absorb(source_toy(), True)



def test_lowrank_and_shared_layers_by_hand():
    D, H, hd, F, T, Tk, r = 32, 4, 8, 64, 3, 10, 12
    low = config("lowrank").layers[0]                         # 2 KV heads rebuilt from r = 12
    assert low.entry_shapes == {"c_kv": (r,)} and low.rope_dim == hd
    attention = ("wq", "w_dkv", "w_uk", "w_uv")
    assert {k: low.weight_shapes[k] for k in attention} == {
        "wq": (D, H * hd), "w_dkv": (D, r), "w_uk": (r, 2 * hd), "w_uv": (r, 2 * hd)}
    assert "wk" not in low.weight_shapes and "wv" not in low.weight_shapes
    assert low.values_per_token == r and low.scales_per_token == 1
    mlp, wo = 3 * 2 * T * D * F, 2 * T * H * hd * D
    rebuild = 2 * 2 * Tk * r * 2 * hd                          # K and V of every held latent
    assert low.flops(T, Tk) == (2 * T * D * H * hd + 2 * T * D * r + rebuild
                                + 2 * 2 * H * T * Tk * hd + wo + mlp)
    assert low.rebuilt_values() == 2 * 2 * hd
    shared = config("shared")                                 # GQA, pairs of layers
    first, second = shared.layers
    assert not first.shares_kv and second.shares_kv
    assert second.entries == () and "wk" not in second.weight_shapes
    assert "wv" not in second.weight_shapes and second.values_per_token == 0
    assert second.flops(T, Tk) == first.flops(T, Tk) - 2 * 2 * T * D * 2 * hd
    latent = config("lowrank_shared").layers[1]
    assert latent.shares_kv and set(latent.weight_shapes) - set(low.weight_shapes) == set()
    assert "w_dkv" not in latent.weight_shapes and "w_uk" in latent.weight_shapes


# -- the attention kind is described once (toykv.layers.ATTENTION) ------------------------------
def test_the_attention_kind_is_branched_on_in_few_files():
    """A new attention kind is its AttentionKind entry (and its forward, config fields and
    tests): code elsewhere reads the description instead of comparing names with 'mla'."""
    import re
    from pathlib import Path
    root = Path(__file__).resolve().parent.parent / "toykv"
    pattern = re.compile(r"""[!=]==?\s*["']mla["']|["']mla["']\s*[!=]==?""")
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*")
                   if p.suffix in (".py", ".js") and pattern.search(p.read_text()))
    assert len(files) <= 3, files
    assert pattern.search("if config.attention == 'mla':") and pattern.search('x === "mla"')


def test_every_attention_kind_describes_what_others_read():
    from toykv.layers import ATTENTION
    from toykv.sizing import kv_projection_params
    from toykv.variants import with_attention
    base = config("mha")
    for name, kind in ATTENTION.items():
        swapped = with_attention(base, name, n_kv_heads=2, kv_lora_rank=8, rope_head_dim=4)
        spec = swapped.layers[0]
        assert swapped.attention == name and isinstance(kind.label, str) and kind.label
        assert kind.label == name.upper() or not kind.variant      # chapter 7's: MHA, ..., MLA
        assert set(kind.projections) <= set(spec.weight_shapes)          # sizing reads them
        assert callable(getattr(ToyTransformer, kind.forward))
        latent = kind.latent or "kv_lora_rank" in kind.fields      # MLA's, or 'lowrank''s
        assert (kind.heads_text(swapped) == str(swapped.n_kv_heads)) != latent
        shared = kv_projection_params(replace(swapped, n_layers=2), kv_sharing=2)
        assert shared == sum(np.prod(spec.weight_shapes[w]) for w in kind.projections)
