"""KV-cache sizing: exact byte counts from a ModelConfig, and the KV share of a decode step.

For MHA/GQA/MQA the cache of B sequences of S tokens holds M_KV = 2 L H_kv d_h S b B bytes
(K and V per KV head per layer; source_lecture_memory_bound); MLA stores r + d_h^R values
per token and layer (deepseek2024v2, Table 1). Sliding layers stop at w = sliding_window
tokens; linear-attention layers hold a fixed state. Each layer says what it holds and weighs
(toykv.layers: config.layers); this module adds them up. Every count is an exact Python int.
kv_sharing = s > 1 sizes cross-layer KV sharing (brandon2024cla, characterai2024inference):
of each kind's layers, one in s stores K and V and the next s - 1 reuse them. Sharing cuts the
bytes a cache holds, not the bytes a decode step reads from it: every layer attends over the
cache it uses after the layer before it has finished, so a shared cache is read once by each
layer that uses it (austin2025scaling, the inference chapter). decode_step_bytes tells the two
apart ('kv' read, 'kv_stored' held); sequences_that_fit counts what is held. A config built
with kv_sharing = s (one the model runs) describes those layers itself; its count is the same.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from . import validate
from .config import ModelConfig, check_config
from .layers import ATTENTION


# -- argument checks: toykv.validate, the one policy for numbers ----------------------
def _whole(count, size, what):
    """count values of `size` bytes each, as a whole number of bytes."""
    total = count * size
    if total.denominator != 1:
        raise ValueError(f"{what}: {count} values x {float(size)} bytes = {float(total)} bytes, "
                         "not a whole number of bytes")
    return int(total)


# -- cross-layer KV sharing --------------------------------------------------------------


def kv_layer_groups(config: ModelConfig, kv_sharing=1) -> list[tuple]:
    """(spec, layers that store their own cache) per distinct layer of config. With
    kv_sharing = s, a kind's layers in order are taken s at a time: the first stores K and V,
    the other s - 1 attend to them (CLA, brandon2024cla), so ceil(n / s) of n layers store.
    Linear-attention layers keep their own state. s = 1: every layer stores (no sharing).
    A config that shares already (config.kv_sharing > 1) has layers that store nothing."""
    check_config(config)
    s = validate.count("kv_sharing", kv_sharing, 1, config.n_layers)
    if s > 1 and config.kv_sharing > 1:
        raise ValueError(f"kv_sharing={s} on a config that already shares (its kv_sharing is "
                         f"{config.kv_sharing}): give kv_sharing=1, the config counts it")
    return [(spec, n if spec.kind == "linear" else math.ceil(n / s))
            for spec, n in config.layer_groups]


def read_config(config: ModelConfig) -> ModelConfig:
    """The config whose cache a decode step reads: every layer reads the cache it attends to,
    so a config that shares (config.kv_sharing > 1) reads what its unshared twin holds."""
    return config if config.kv_sharing == 1 else replace(config, kv_sharing=1)


def kv_projection_params(config: ModelConfig, kv_sharing=1) -> int:
    """Parameters that cross-layer sharing removes: the K/V projections (MLA: the latent's
    down-projection and norm) of every layer that reuses another layer's cache."""
    stores = dict(kv_layer_groups(config, kv_sharing))
    return sum((n - stores[spec]) * math.prod(spec.weight_shapes[name])
               for spec, n in config.layer_groups if spec.kind != "linear" and not spec.shares_kv
               for name in ATTENTION[spec.attention].projections)


# -- per-token and whole-cache sizes ---------------------------------------------
def kv_values_per_token(config: ModelConfig, kv_sharing=1) -> int:
    """Values one token adds to the cache, summed over the layers whose cache grows (full,
    sliding) and that store their own (kv_sharing: kv_layer_groups)."""
    return sum(n * spec.values_per_token for spec, n in kv_layer_groups(config, kv_sharing))


def kv_bytes_per_token(config: ModelConfig, bytes_per_value=2, kv_sharing=1) -> int:
    """Bytes one token adds to the cache: kv_values_per_token x b (b = bytes_per_value)."""
    size = validate.exact_number("bytes_per_value", bytes_per_value)
    return _whole(kv_values_per_token(config, kv_sharing), size, "kv_bytes_per_token")


def kv_cache_bytes(config: ModelConfig, tokens, batch=1, bytes_per_value=2, scale_bytes=0,
                   kv_sharing=1) -> int:
    """M_KV: bytes of the cache for B = `batch` sequences of S = `tokens` tokens each.

    MHA/GQA/MQA with every layer full: 2 L H_kv d_h S b B, b = bytes_per_value. Sliding layers
    store min(S, w) tokens, linear layers a fixed state of linear_state_values values, MLA
    layers r + d_h^R values per token. scale_bytes > 0 adds one scale of that many bytes per
    stored token, layer and K/V head (int8 caches keep a float32 scale: 4). kv_sharing = s:
    only the layers that store their own cache count (kv_layer_groups; L becomes L / s).
    """
    groups = kv_layer_groups(config, kv_sharing)
    tokens = validate.count("tokens", tokens, 0)
    batch = validate.count("batch", batch, 1)
    size = validate.exact_number("bytes_per_value", bytes_per_value)
    scale = validate.exact_number("scale_bytes", scale_bytes, allow_zero=True)
    values = sum(n * spec.cache_values(tokens) for spec, n in groups)
    scales = sum(n * spec.cache_scales(tokens) for spec, n in groups)
    per_sequence = _whole(values, size, "kv_cache_bytes") + _whole(scales, scale, "scale bytes")
    return batch * per_sequence


# -- parameters and weights --------------------------------------------------------
def param_count(config: ModelConfig, blocks_only: bool = False) -> int:
    """Parameters of a dense toykv model: embedding, untied head, n_layers blocks, final norm.

    blocks_only=True counts just the n_layers blocks (norms, attention, SwiGLU MLP, as each
    layer's LayerSpec lists them): the part that grows with depth, for the layer-depth argument.
    """
    c = check_config(config)
    validate.flag("blocks_only", blocks_only)
    blocks = sum(n * spec.params for spec, n in c.layer_groups)
    if blocks_only:
        return blocks
    embeddings = c.vocab_size * c.d_model * (1 if c.tie_embeddings else 2)
    return embeddings + blocks + c.d_model


def weight_bytes(params, bytes_per_param=2) -> int:
    """M_W = N b_w: bytes of `params` weights at bytes_per_param each (2 for bf16, 0.5 for
    4-bit). For the arrays of a ToyTransformer in memory, see its weight_nbytes."""
    params = validate.count("params", params, 0)
    size = validate.exact_number("bytes_per_param", bytes_per_param)
    return _whole(params, size, "weight_bytes")


def model_parts(model) -> tuple[ModelConfig, int]:
    """(config, active params) of a ZooModel or a ModelConfig (then all its params are active)."""
    if isinstance(model, ModelConfig):
        return model, param_count(model)
    config, active = getattr(model, "config", None), getattr(model, "active_params", None)
    if not isinstance(config, ModelConfig) or active is None:
        hint = " (for a ToyTransformer or a cache, pass its .config)" \
            if isinstance(config, ModelConfig) else ""
        raise ValueError(f"model must be a toykv.zoo.ZooModel or a ModelConfig, "
                         f"got {type(model).__name__}{hint}")
    return config, active


# -- what a decode step reads: the course's one rule --------------------------------
WEIGHT_RULES = ("read", "active")


def weight_bytes_read(model, bytes_per_param=2, batch=1) -> int:
    """Bytes of weights one decode step of `batch` sequences reads, by the course's one rule:
    every active weight once for the whole batch, except an untied input embedding, which is
    looked up (one row per sequence; the output head is read whole). A tied table is read
    whole as the output head. model: a ZooModel (its active params) or a ModelConfig."""
    config, active = model_parts(model)
    batch = validate.count("batch", batch, 1)
    params = active
    if not config.tie_embeddings:                  # the table, minus the rows looked up
        params -= (config.vocab_size - min(batch, config.vocab_size)) * config.d_model
    return weight_bytes(params, bytes_per_param)


def _step_weights(model, bytes_per_param, batch, weights: str, kv_sharing=1) -> int:
    """Weight bytes of a decode step by `weights`: 'read' (the rule) or 'active' (all), less
    the K/V projections that cross-layer sharing removes (kv_projection_params)."""
    validate.choice("weights", weights, WEIGHT_RULES)
    dropped = kv_projection_params(model_parts(model)[0], kv_sharing)
    if weights == "read":
        total = weight_bytes_read(model, bytes_per_param, batch)
    else:
        validate.count("batch", batch, 1)
        total = weight_bytes(model_parts(model)[1], bytes_per_param)
    return total - weight_bytes(dropped, bytes_per_param)


def decode_step_bytes(model, tokens, batch=1, bytes_per_value=2, bytes_per_param=2,
                      scale_bytes=0, weights: str = "read", kv_sharing=1,
                      expanded: bool = False) -> dict:
    """Bytes one decode step reads at `tokens` of context per sequence (the new token
    included), for `batch` sequences: the course's one count of a step's bytes.
    {'weights': read once for the batch, 'kv': every sequence's cache as the layers read it,
    'kv_stored': the cache they hold, 'expanded', 'total', 'share': kv / total}. Exact
    integers, except the share.
    expanded=True counts what MLA's expanded form (toykv's absorb=False) writes and reads back
    of the keys and values it rebuilds from the latents: 2 H d_h float32 values per held
    position (toykv computes in float32), 0 for every other attention kind. A served MLA model
    attends in its absorbed form and rebuilds nothing (the default).

    weights='read' is the course's rule (weight_bytes_read); weights='active' counts every
    active parameter, an untied input embedding whole: the convention of source_essay_kv_share.
    kv_sharing = s > 1: cross-layer KV sharing. Fewer layers store a cache ('kv_stored') and the
    reusing layers have no K/V projections, but every layer still reads the cache it attends
    to, so 'kv' is the unshared cache's bytes. A config that shares (config.kv_sharing = s,
    one toykv's model runs) counts the same: 'kv_stored' is then its cache.nbytes.
    scale_bytes: per token, layer and K/V head (an int8 cache's float32 scale: 4).
    toykv's own float32 model: bytes_per_value=4, bytes_per_param=4.
    """
    config, _ = model_parts(model)
    validate.flag("expanded", expanded)
    w = _step_weights(model, bytes_per_param, batch, weights, kv_sharing)
    kv = kv_cache_bytes(read_config(config), tokens, batch, bytes_per_value,
                        scale_bytes)                                              # every layer
    stored = kv_cache_bytes(config, tokens, batch, bytes_per_value, scale_bytes, kv_sharing)
    rebuilt = 0 if not expanded else sum(n * spec.rebuilt_values(False) * spec.held(tokens)
                                         for spec, n in config.layer_groups)   # MLA only
    rebuilt = 2 * 4 * rebuilt * validate.count("batch", batch, 1)   # float32, written + read
    total = w + kv + rebuilt
    return {"weights": w, "kv": kv, "kv_stored": stored, "expanded": rebuilt, "total": total,
            "share": kv / total if total else 0.0}


# -- the KV share of a decode step -------------------------------------------------
def kv_share(model, tokens, batch=1, bytes_per_value=2, bytes_per_param=2,
             weights: str = "read", kv_sharing=1):
    """KV bytes / (KV bytes + weight bytes) read by one decode step (decode_step_bytes).

    The weights are read once per step for the whole batch; every sequence's cache is read.
    tokens: an int (returns a float), or an array, list or tuple of ints (returns an array of
    the same shape). weights='active': the source essay's convention (decode_step_bytes).
    kv_sharing: cross-layer KV sharing, as in decode_step_bytes (each layer still reads the
    cache it attends to; only the reusing layers' K/V projections drop out of the weights).
    """
    config, _ = model_parts(model)
    w = _step_weights(model, bytes_per_param, batch, weights, kv_sharing)

    def share(n):
        kv = kv_cache_bytes(read_config(config), n, batch, bytes_per_value)   # every layer
        return kv / (kv + w) if kv + w else 0.0

    if isinstance(tokens, (np.ndarray, list, tuple)):      # many contexts: as many shares
        array = np.asarray(tokens)
        if array.dtype.kind not in "iu":
            raise ValueError(f"tokens must be integers, got dtype {array.dtype}"
                             + ("" if array.size else " (an empty list)"))
        return np.array([share(int(n)) for n in array.ravel()]).reshape(array.shape)
    return share(tokens)


def relative_decode_speed(model, tokens, batch=1, bytes_per_value=2, bytes_per_param=2,
                          weights: str = "read", kv_sharing=1):
    """Decode speed relative to an empty cache when bandwidth bound: 1 - kv_share."""
    return 1 - kv_share(model, tokens, batch, bytes_per_value, bytes_per_param, weights,
                        kv_sharing)


def sequences_that_fit(model, tokens, memory_bytes, bytes_per_value=2, bytes_per_param=2,
                       kv_sharing=1) -> int:
    """The memory ceiling on batch size: how many sequences of `tokens` tokens have room for
    their cache beside all the weights (a MoE model keeps every expert in memory) in
    memory_bytes. 0 when the weights alone do not fit. kv_sharing = s: the cache held is
    the storing layers' (kv_layer_groups), and the reusing layers hold no K/V projections."""
    config, _ = model_parts(model)
    total = model.total_params if hasattr(model, "total_params") else param_count(config)
    memory = validate.exact_number("memory_bytes", memory_bytes)
    total -= kv_projection_params(config, kv_sharing)
    room = memory - weight_bytes(total, bytes_per_param)
    per_sequence = kv_cache_bytes(config, tokens, 1, bytes_per_value, kv_sharing=kv_sharing)
    if per_sequence == 0:
        raise ValueError("a sequence of tokens=0 has no cache: give tokens >= 1")
    return max(0, int(room // per_sequence))


def max_tokens_per_second(bandwidth_bytes_per_s, bytes_per_step) -> float:
    """The bandwidth bound on decode: steps per second <= bandwidth / bytes read per step."""
    bandwidth = validate.exact_number("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    step = validate.exact_number("bytes_per_step", bytes_per_step)
    return float(bandwidth / step)


__all__ = ["kv_layer_groups", "read_config", "kv_projection_params", "kv_values_per_token",
           "kv_bytes_per_token", "kv_cache_bytes", "param_count", "weight_bytes", "model_parts",
           "weight_bytes_read", "decode_step_bytes", "kv_share",
           "relative_decode_speed", "max_tokens_per_second", "sequences_that_fit"]
