"""Shrinking a trained model's cache without training: fewer KV heads, a low-rank latent, and
layers that share a cache (chapter 13).

Each conversion takes a loaded ToyTransformer whose layers each cache their own keys and values
per KV head (MHA, GQA or MQA) and returns a new model of the target shape, made from its weights
by a rule a reader can follow; nothing is trained. The given model is left as it was. The new
one reuses, without copying, the arrays it keeps unchanged where it can (the embedding, W_O,
W_down): editing such an array in place edits both models.

- pool_kv_heads: each group of KV heads becomes one, its W_K and W_V the group's mean, the
  initialisation GQA starts its uptraining from (ainslie2023gqa);
- low_rank_kv: W_K and W_V side by side, factored through a latent of r values per token, which
  the cache holds ('lowrank' attention). The r directions kept are the largest of the weights
  themselves (their SVD, as MHA2MLA factors them, ji2025mha2mla) or, given calibration text, of
  the keys and values the layer makes on it (PCA of them, as TransMLA does, meng2025transmla):
  kv_directions finds them once for every rank;
- share_kv_layers: groups of s adjacent layers attend to the first one's keys and values; the
  others lose their K/V projections (cross-layer attention, brandon2024cla, trains this from
  scratch).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import validate
from .model import ToyTransformer, check_model


def weights_of(model) -> dict:
    """The model's weights as ToyTransformer(weights=...) takes them: {'embed', 'final_norm',
    'lm_head', 'layers': a {name: array} per layer}, the arrays themselves (not copies)."""
    model = check_model(model)
    return {"embed": model.embed, "final_norm": model.final_norm, "lm_head": model.lm_head,
            "layers": [dict(layer) for layer in model.layers]}


def _check_kv_heads_model(model, what: str):
    """Conversions start from layers that each cache K and V per KV head."""
    c = check_model(model).config
    if c.attention not in ("mha", "gqa", "mqa") or c.kv_sharing > 1:
        raise ValueError(f"{what} converts a model whose layers each cache keys and values per "
                         f"KV head (MHA, GQA, MQA, kv_sharing=1), got attention="
                         f"{c.attention!r} with kv_sharing={c.kv_sharing}")
    return c


def pool_kv_heads(model, n_kv_heads: int = 1) -> ToyTransformer:
    """The model with n_kv_heads KV heads: each new head's W_K and W_V columns are the mean of
    those of the G old heads it replaces (ainslie2023gqa, section 2.1), so the query heads that
    shared any of them now share it. n_kv_heads=1 is MQA; the model's own count changes nothing."""
    c = _check_kv_heads_model(model, "pool_kv_heads")
    n_kv_heads = validate.count("n_kv_heads", n_kv_heads, 1, c.n_kv_heads)
    if c.n_kv_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads must divide the model's {c.n_kv_heads} KV heads, got "
                         f"{n_kv_heads}")
    D, hd, G = c.d_model, c.head_dim, c.n_kv_heads // n_kv_heads
    weights = weights_of(model)
    for layer in weights["layers"]:
        for name in ("wk", "wv"):                      # [D, H_kv d_h], head j at j d_h..
            heads = layer[name].reshape(D, n_kv_heads, G, hd)
            layer[name] = heads.mean(axis=2).reshape(D, n_kv_heads * hd)
    return ToyTransformer(replace(c, n_kv_heads=n_kv_heads, attention=None), weights=weights,
                          exact=model.exact)


def attention_inputs(model, token_ids) -> list[np.ndarray]:
    """What each layer's attention reads when the model reads token_ids [T]: the normed
    h [T, D] per layer, from the model's own steps run layer by layer (through a cache of
    the pass, dropped after it)."""
    model = check_model(model)
    ids, batched = model.check_ids(token_ids)
    if batched:
        raise ValueError(f"token_ids must be one sequence [T], got shape {ids.shape}")
    positions = np.arange(ids.shape[1])
    if len(positions) > model.config.max_seq_len:
        raise ValueError(f"{len(positions)} tokens exceed max_seq_len "
                         f"{model.config.max_seq_len}")
    rope, cache = model.rope(positions), model.new_cache(capacity=len(positions))
    x, inputs = model.embed[ids[0]], []                                  # [T, D]
    for i, layer in enumerate(model.layers):
        inputs.append(model.rms_norm(x, layer["attn_norm"]))
        x = x + model.attend(inputs[-1], layer, i, positions, cache, rope)
        x = x + model.mlp(model.rms_norm(x, layer["mlp_norm"]), layer)
    cache.discard()
    return inputs


def kv_directions(model, calibration=None) -> list[np.ndarray]:
    """Per layer, orthonormal directions of W_KV = [W_K | W_V]'s outputs,
    largest first: the eigenvectors of W_KV^T W_KV (the weights' SVD,
    ji2025mha2mla) or, given calibration (attention_inputs of some text),
    of Y^T Y for the keys and values Y = h W_KV the layer makes on it (PCA,
    meng2025transmla). One eigendecomposition serves every rank.
    [n_layers] of [2 H_kv d_h, 2 H_kv d_h], float64"""
    c = _check_kv_heads_model(model, "kv_directions")
    if calibration is not None:
        _check_inputs(calibration, c)
    directions = []
    for i, layer in enumerate(model.layers):
        w_kv = np.concatenate([layer["wk"], layer["wv"]], axis=1)
        w_kv = w_kv.astype(np.float64)          # [D, 2 H_kv d_h]
        if calibration is None:
            gram = w_kv.T @ w_kv                # [2 H_kv d_h, 2 H_kv d_h]
        else:
            kv = calibration[i] @ w_kv          # [T, 2 H_kv d_h], before RoPE
            gram = kv.T @ kv
        _, vectors = np.linalg.eigh(gram)       # ascending eigenvalues
        directions.append(vectors[:, ::-1])     # largest first
    return directions


def low_rank_kv(model, rank: int, calibration=None,
                directions=None) -> ToyTransformer:
    """The model with a latent of `rank` values per token and layer in its
    cache ('lowrank'). W_KV = [W_K | W_V] is projected on r orthonormal
    directions P of its outputs: W_DKV = W_KV P makes the latent, P^T
    rebuilds the keys and values. P: the first r of kv_directions(model,
    calibration), or of `directions` if given (found once for many r)."""
    c = _check_kv_heads_model(model, "low_rank_kv")
    width = 2 * c.n_kv_heads * c.head_dim         # values a token caches now
    rank = validate.count("rank", rank, 1, min(c.d_model, width))
    if directions is None:
        directions = kv_directions(model, calibration)
    else:
        _check_directions(directions, calibration, c)
    weights = weights_of(model)
    for layer, vectors in zip(weights["layers"], directions):
        w_kv = np.concatenate([layer.pop("wk"), layer.pop("wv")], axis=1)
        basis = vectors[:, :rank]               # [2 H_kv d_h, r], largest
        w_dkv = w_kv.astype(np.float64) @ basis                  # [D, r]
        layer["w_dkv"] = w_dkv.astype(np.float32)
        layer["w_uk"] = basis.T[:, :width // 2].astype(np.float32)
        layer["w_uv"] = basis.T[:, width // 2:].astype(np.float32)
    config = replace(c, attention="lowrank", kv_lora_rank=rank)
    return ToyTransformer(config, weights=weights, exact=model.exact)


def _check_per_layer(arrays, config, name: str, made_by: str, shape: str) -> None:
    """arrays: a list (or tuple) of one array per layer, as made_by returns it."""
    if not isinstance(arrays, (list, tuple)) or len(arrays) != config.n_layers:
        got = len(arrays) if isinstance(arrays, (list, tuple)) else type(arrays).__name__
        raise ValueError(f"{name} must be {made_by}: a list of n_layers={config.n_layers} "
                         f"arrays {shape}, got {got}")


def _check_directions(directions, calibration, config):
    """directions: kv_directions of a model of this shape, one orthonormal square matrix per
    layer (given instead of calibration, which they already include)."""
    if calibration is not None:
        raise ValueError("give calibration or directions, not both: directions = "
                         "kv_directions(model, calibration) already include the calibration")
    width = 2 * config.n_kv_heads * config.head_dim
    _check_per_layer(directions, config, "directions", "kv_directions(model, ...)",
                     f"[{width}, {width}]")
    for i, p in enumerate(directions):
        if (not isinstance(p, np.ndarray) or p.shape != (width, width) or p.dtype.kind != "f"
                or not np.isfinite(p).all()
                or not np.allclose(p.T @ p, np.eye(width), atol=1e-6)):
            raise ValueError(f"directions[{i}] must be an orthonormal float array [{width}, "
                             f"{width}] (kv_directions), got "
                             f"{getattr(p, 'shape', type(p).__name__)}")


def _check_inputs(calibration, config):
    """calibration: one finite array h [T, D] per layer, as attention_inputs gives them."""
    _check_per_layer(calibration, config, "calibration", "attention_inputs(model, token_ids)",
                     "[T, D]")
    for i, h in enumerate(calibration):
        if (not isinstance(h, np.ndarray) or h.ndim != 2 or h.shape[1] != config.d_model
                or h.dtype.kind != "f" or not np.isfinite(h).all()):
            raise ValueError(f"calibration[{i}] must be a finite float array [T, "
                             f"D={config.d_model}], got {getattr(h, 'shape', type(h).__name__)}")


def share_kv_layers(model, s: int) -> ToyTransformer:
    """The model with kv_sharing = s: of each kind's layers, taken s at a time in order, the
    first keeps its keys and values and the other s - 1 attend to them, their own K/V
    projections dropped (brandon2024cla). s = 1 changes nothing."""
    c = check_model(model).config
    if c.kv_sharing > 1:
        raise ValueError(f"share_kv_layers takes a model whose layers each store their own "
                         f"cache, got kv_sharing={c.kv_sharing}")
    config = replace(c, kv_sharing=validate.count("s", s, 1, c.n_layers))
    weights = weights_of(model)
    weights["layers"] = [{name: layer[name] for name in spec.weight_shapes}
                         for layer, spec in zip(weights["layers"], config.layers)]
    return ToyTransformer(config, weights=weights, exact=model.exact)


__all__ = ["weights_of", "pool_kv_heads", "attention_inputs", "kv_directions", "low_rank_kv",
           "share_kv_layers"]
