"""One toy, four attention variants, and the bytes and FLOPs one decode step of each costs.

Chapter 7 builds MHA, GQA, MQA and MLA from one base config: same d_model, depth, query heads
and MLP, so only the attention (and with it the cache) differs. decode_step_bytes counts what a
cached step moves: every weight once, the whole cache once, and for MLA's expanded form the
keys and values it rebuilds from the latents (written, then read back).
"""
from __future__ import annotations

from dataclasses import replace

from . import sizing, validate
from .config import ModelConfig, check_config, long_context_toy
from .flops import cached_step_flops
from .layers import KV_DTYPE_BYTES, check_absorb, check_kv_dtype
from .sizing import kv_cache_bytes

VARIANTS = ("mha", "gqa", "mqa", "mla")   # chapter 7's four ('lowrank' is a conversion's)
WEIGHT_BYTES = 4                      # toykv's weights are float32
# the variants of chapters 7 and 8: GQA with G = 4, MLA with DeepSeek-V2's ratios to head_dim
# (kv_lora_rank = 4 d_h, rope_head_dim = d_h / 2)
TOY_VARIANT_SHAPES = {"gqa_kv_heads": 3, "kv_lora_rank": 256, "rope_head_dim": 32}


def with_attention(config: ModelConfig, variant: str, n_kv_heads: int | None = None,
                   kv_lora_rank: int | None = None, rope_head_dim: int | None = None
                   ) -> ModelConfig:
    """config with its attention swapped for `variant` ('mha', 'gqa', 'mqa' or 'mla'), all
    else kept (d_model, layers, query heads, head_dim, MLP, window): the one way toykv swaps
    the attention. GQA needs n_kv_heads (1 < n_kv_heads < n_heads, dividing it), MLA
    kv_lora_rank and rope_head_dim; ValueError if the variant does not fit the heads."""
    check_config(config)
    validate.choice("variant", variant, VARIANTS)
    H = config.n_heads
    plain = replace(config, attention=None, n_kv_heads=None, kv_lora_rank=None,
                    rope_head_dim=None)
    if variant == "mla":
        return replace(plain, attention="mla",
                       kv_lora_rank=validate.count("kv_lora_rank", kv_lora_rank, 1),
                       rope_head_dim=validate.count("rope_head_dim", rope_head_dim, 2))
    if variant == "gqa":
        if H < 4:
            raise ValueError(f"GQA needs n_heads >= 4 (1 < n_kv_heads < n_heads), got "
                             f"n_heads={H}")
        n_kv_heads = validate.count("gqa_kv_heads", n_kv_heads, 2, H - 1)
        if H % n_kv_heads:
            raise ValueError(f"gqa_kv_heads must divide n_heads ({H}), got {n_kv_heads}")
    return replace(plain, n_kv_heads={"mha": H, "gqa": n_kv_heads, "mqa": 1}[variant])


def attention_variants(config: ModelConfig, gqa_kv_heads: int, kv_lora_rank: int,
                       rope_head_dim: int) -> dict[str, ModelConfig]:
    """config with each attention variant: {'mha', 'gqa', 'mqa', 'mla'} -> ModelConfig.

    Everything but the attention is kept (d_model, layers, query heads, head_dim, MLP, window).
    GQA gets gqa_kv_heads KV heads; MLA caches kv_lora_rank latent values and a shared rotary
    key of rope_head_dim values per token and layer (with_attention, for each).
    """
    check_config(config)
    with_attention(config, "gqa", gqa_kv_heads)                  # its checks first, in order
    return {variant: with_attention(config, variant, gqa_kv_heads, kv_lora_rank, rope_head_dim)
            for variant in VARIANTS}


def weight_bytes_read(config: ModelConfig, bytes_per_param=WEIGHT_BYTES) -> int:
    """Bytes of weights one decode step of a toykv model reads, float32 by default: the course's
    one rule, sizing.weight_bytes_read (an untied input embedding is one looked-up row)."""
    check_config(config)
    return sizing.weight_bytes_read(config, bytes_per_param)


def decode_step_bytes(config: ModelConfig, context: int, kv_dtype: str = "float32",
                      absorb: bool = False) -> dict[str, int]:
    """Bytes one decode step at `context` tokens (the new one included) moves, by kind.

    weights: weight_bytes_read (float32); cache: the cache of `context` tokens in kv_dtype
    (int8 with its float32 scales); expanded: MLA without absorb rebuilds K and V of every
    held position and head (2 * H * head_dim float32 values each), writes them and reads them
    back. The scores (H values per position) are left out. total: the sum.
    """
    check_config(config)
    context = validate.count("context", context, 1)
    kv_dtype = check_kv_dtype(kv_dtype)
    check_absorb(config, absorb)
    value_bytes, scale_bytes = KV_DTYPE_BYTES[kv_dtype]
    rebuilt = sum(n * spec.rebuilt_values(absorb) * spec.held(context)   # MLA expanded only
                  for spec, n in config.layer_groups)
    parts = {"weights": weight_bytes_read(config),
             "cache": kv_cache_bytes(config, context, bytes_per_value=value_bytes,
                                     scale_bytes=scale_bytes),
             "expanded": 2 * 4 * rebuilt}                           # float32, written + read
    parts["total"] = sum(parts.values())
    return parts


def decode_step_cost(config: ModelConfig, context: int, kv_dtype: str = "float32",
                     absorb: bool = False) -> dict:
    """FLOPs (toykv.flops) and bytes (decode_step_bytes) of one decode step, and their ratio.

    {'flops', 'bytes', 'intensity'}: intensity is FLOPs per byte moved.
    """
    nbytes = decode_step_bytes(config, context, kv_dtype, absorb)["total"]
    flops = cached_step_flops(config, context, absorb)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}


def cache_intensity(config: ModelConfig, absorb: bool = False, kv_dtype: str = "float32",
                    context: int = 4096) -> float:
    """FLOPs per byte of the step's work over the cache: what one more cached position adds to a
    decode step's FLOPs (toykv.flops) over what it adds to the bytes moved (decode_step_bytes)."""
    more = decode_step_bytes(config, context + 1, kv_dtype, absorb)["total"]
    extra_bytes = more - decode_step_bytes(config, context, kv_dtype, absorb)["total"]
    if extra_bytes == 0:
        raise ValueError(f"one more position adds no bytes at context {context} "
                         "(every layer slides and the window is full): take a smaller context")
    extra_flops = (cached_step_flops(config, context + 1, absorb)
                   - cached_step_flops(config, context, absorb))
    return extra_flops / extra_bytes


__all__ = ["cache_intensity", "VARIANTS", "KV_DTYPE_BYTES", "TOY_VARIANT_SHAPES",
           "long_context_toy", "with_attention", "attention_variants", "weight_bytes_read",
           "decode_step_bytes", "decode_step_cost"]
