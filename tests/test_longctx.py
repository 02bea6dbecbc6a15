"""toykv.longctx: bytes of a decode step, share curves, the crossover, depth, two bandwidths."""
import numpy as np
import pytest

from toykv import source_toy, zoo
from toykv.longctx import (crossover_context, depth_model, fit_two_bandwidths, share_curve,
                           step_bytes)
from toykv.sizing import kv_share

LLAMA8 = zoo.get("llama-3.1-8b")
LLAMA70 = zoo.get("llama-3.3-70b").config


def test_step_bytes_by_hand():
    parts = step_bytes(LLAMA8, 8192)
    # bf16 active weights but the untied 128,256 x 4,096 input table, of which one row is read
    assert parts["weights"] == 2 * (8_030_000_000 - 128_255 * 4_096)
    assert step_bytes(LLAMA8, 8192, weights="active")["weights"] == 2 * 8_030_000_000
    assert parts["kv"] == 2 * 32 * 8 * 128 * 2 * 8192              # K and V, 32 layers
    assert parts["total"] == parts["weights"] + parts["kv"]
    assert parts["share"] == parts["kv"] / parts["total"]
    batch = step_bytes(LLAMA8, 8192, batch=4)       # weights read once, 4 rows looked up
    assert batch["weights"] == parts["weights"] + 2 * 3 * 4_096
    assert batch["kv"] == 4 * parts["kv"]


def test_share_curve_marks_the_published_maximum():
    contexts = [1000, 131072, 131073, 10**6]
    shares, within = share_curve(LLAMA8, contexts)
    assert within.tolist() == [True, True, False, False]
    assert np.all(np.diff(shares) > 0)
    # by hand: 131,072 bytes of bf16 cache per token (2 x 32 layers x 8 heads x 128 x 2) against
    # the bf16 weights a step reads: 8.03B, the published count the zoo carries, less the
    # untied input table but one row
    kv = 131_072 * np.array(contexts)
    read = 2 * (8_030_000_000 - 128_255 * 4_096)
    np.testing.assert_allclose(shares, kv / (kv + read), rtol=1e-12)
    essay, _ = share_curve(LLAMA8, contexts, weights="active")     # every active weight
    np.testing.assert_allclose(essay, kv / (kv + 2 * 8_030_000_000), rtol=1e-12)
    assert round(float(essay[-1]), 3) == 0.891    # at 10^6 tokens, the essay's figure
    with pytest.raises(ValueError, match="contexts"):
        share_curve(LLAMA8, [1.5])


def test_crossover_context_is_the_first_context_at_the_level():
    # half: 131,072 S >= 15,009,335,040 bytes read  <=>  S >= 114,512.1
    assert crossover_context(LLAMA8) == 114_513
    # the essay's convention, all 8.03B bf16 weights: S >= 122,528.08
    assert crossover_context(LLAMA8, weights="active") == 122_529
    S = crossover_context(LLAMA8, share=0.9)
    assert kv_share(LLAMA8, S) >= 0.9 > kv_share(LLAMA8, S - 1)
    assert crossover_context(zoo.get("mistral-7b-v0.1")) is None    # the cache stops growing
    assert crossover_context(LLAMA8, share=0.99, limit=10**6) is None
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(ValueError, match="share"):
            crossover_context(LLAMA8, share=bad)


def _share_by_hand(config, tokens):
    """k S / (k S + c): per-layer cache bytes k per token and per-block weight bytes c (bf16)."""
    D, H, Hkv, hd, F = (config.d_model, config.n_heads, config.n_kv_heads, config.head_dim,
                        config.d_ff)
    k = 2 * Hkv * hd * 2
    c = (2 * D + D * H * hd + 2 * D * Hkv * hd + H * hd * D + 3 * D * F) * 2
    return k * tokens / (k * tokens + c)


@pytest.mark.parametrize("layers", [80, 40, 20, 10, 1])
def test_blocks_only_share_does_not_depend_on_depth(layers):
    model = depth_model(LLAMA70, layers, blocks_only=True)
    assert model.config.n_layers == layers
    assert np.isclose(kv_share(model, 10**6), _share_by_hand(LLAMA70, 10**6), rtol=1e-12)
    assert kv_share(model, 10**6) == kv_share(depth_model(LLAMA70, 80, blocks_only=True), 10**6)


def test_embeddings_make_shallow_models_lower():
    shares = [kv_share(depth_model(LLAMA70, n), 10**6) for n in (80, 40, 20, 10)]
    assert shares == sorted(shares, reverse=True)
    assert shares[-1] < _share_by_hand(LLAMA70, 10**6)


def test_depth_model_refuses_moe_and_patterns():
    with pytest.raises(ValueError, match="mixture of experts"):
        depth_model(zoo.get("deepseek-v3"), 10)
    with pytest.raises(ValueError, match="layer_types"):
        depth_model(zoo.get("gemma-3-27b"), 10)
    with pytest.raises(ValueError, match="n_layers"):
        depth_model(LLAMA70, 0)
    assert depth_model(source_toy(), 3).config.n_layers == 3       # a plain config works


def test_fit_two_bandwidths_recovers_known_bandwidths():
    weights, beta_w, beta_kv = 1e8, 12e9, 3e9
    kv = np.array([1e5, 1e8, 2e8, 3e8, 4e8])
    seconds = weights / beta_w + kv / beta_kv
    fit = fit_two_bandwidths(weights, kv, seconds)
    assert np.isclose(fit["beta_weights"], beta_w, rtol=1e-9)
    assert np.isclose(fit["beta_kv"], beta_kv, rtol=1e-9)
    assert np.allclose(fit["seconds"], seconds, rtol=1e-9)
    assert np.allclose(fit["relative_speed"], seconds[0] / seconds, rtol=1e-9)


def test_fit_two_bandwidths_refuses_what_it_cannot_fit():
    kv = np.array([0.0, 1e8, 2e8])
    with pytest.raises(ValueError, match="do not grow"):
        fit_two_bandwidths(1e8, kv, np.array([0.03, 0.02, 0.01]))
    with pytest.raises(ValueError, match="same length"):
        fit_two_bandwidths(1e8, kv, np.array([0.01, 0.02]))
    with pytest.raises(ValueError, match="shortest"):
        fit_two_bandwidths(1e8, kv[::-1], np.array([0.03, 0.02, 0.01]))
    with pytest.raises(ValueError, match="weight_bytes_read"):
        fit_two_bandwidths(0, kv, np.array([0.01, 0.02, 0.03]))


def test_compressed_cache_bytes_by_hand():
    from toykv.longctx import compressed_cache_bytes
    # two window-only layers, one pooling every 4 tokens, one every 128: S = 1000, w = 128
    rows = 128 + 128 + (128 + 250) + (128 + 7)
    assert compressed_cache_bytes([None, None, 4, 128], 1000, 128, 512) == rows * 512 * 2
    assert compressed_cache_bytes([None], 50, 128, 8, bytes_per_value=4) == 50 * 8 * 4
    assert compressed_cache_bytes([1], 10, 0, 3) == 10 * 3 * 2       # ratio 1: every token
    assert compressed_cache_bytes([2], 4, 0, 1, bytes_per_value=0.5) == 1   # 2 rows of 4 bits


@pytest.mark.parametrize("args, match", [
    (([], 10, 4, 8), "ratios"), (([0], 10, 4, 8), "ratio"), (([2.0], 10, 4, 8), "ratio"),
    (([None], -1, 4, 8), "tokens"), (([None], 10, -4, 8), "window"), (([None], 10, 4, 0),
                                                                      "row_values"),
    (([2], 3, 0, 1, 0.5), "whole number of bytes"),
])
def test_compressed_cache_bytes_refuses_bad_input(args, match):
    from toykv.longctx import compressed_cache_bytes
    with pytest.raises(ValueError, match=match):
        compressed_cache_bytes(*args)
