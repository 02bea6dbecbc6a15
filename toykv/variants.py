"""One toy, four attention variants, and the bytes and FLOPs one decode step of each costs.

Chapter 7 builds MHA, GQA, MQA and MLA from one base config: same d_model, depth, query heads
and MLP, so only the attention (and with it the cache) differs. What a cached step moves is
sizing.decode_step_bytes's count (every weight once, the whole cache once, and for MLA's
expanded form the keys and values it rebuilds from the latents, written, then read back);
decode_step_cost and cache_intensity set it beside the step's FLOPs.
"""
from __future__ import annotations

from dataclasses import replace

from . import sizing, validate
from .config import ATTENTION_KINDS, ModelConfig, check_config, long_context_toy
from .flops import cached_step_flops
from .layers import ATTENTION, KV_DTYPE_BYTES, check_absorb, check_kv_dtype

# chapter 7's four, 'mha', 'gqa', 'mqa', 'mla' ('lowrank' is a conversion's, toykv.convert)
VARIANTS = tuple(name for name, kind in ATTENTION.items() if kind.variant)
WEIGHT_BYTES = 4                      # toykv's weights are float32
# the variants of chapters 7 and 8: GQA with G = 4, MLA with DeepSeek-V2's ratios to head_dim
# (kv_lora_rank = 4 d_h, rope_head_dim = d_h / 2)
TOY_VARIANT_SHAPES = {"gqa_kv_heads": 3, "kv_lora_rank": 256, "rope_head_dim": 32}


def with_attention(config: ModelConfig, variant: str, n_kv_heads: int | None = None,
                   kv_lora_rank: int | None = None, rope_head_dim: int | None = None
                   ) -> ModelConfig:
    """config with its attention swapped for `variant` ('mha', 'gqa', 'mqa', 'mla' or
    'lowrank'), all else kept (d_model, layers, query heads, head_dim, MLP, window): the one way
    toykv swaps the attention. GQA needs n_kv_heads (1 < n_kv_heads < n_heads, dividing it),
    MLA kv_lora_rank and rope_head_dim, 'lowrank' kv_lora_rank (it keeps the config's KV
    heads); ValueError if the variant does not fit the heads."""
    check_config(config)
    validate.choice("variant", variant, ATTENTION_KINDS)
    kind, H = ATTENTION[variant], config.n_heads
    plain = replace(config, attention=None, n_kv_heads=None, kv_lora_rank=None,
                    rope_head_dim=None)
    given = {"kv_lora_rank": kv_lora_rank, "rope_head_dim": rope_head_dim}
    fields = {name: validate.count(name, given[name], 2 if name == "rope_head_dim" else 1)
              for name in kind.fields}                # its own fields (MLA's latent)
    if kind.latent:
        return replace(plain, attention=variant, **fields)
    if kind.kv_heads is None:                         # GQA: between one head and every head
        if H < 4:
            raise ValueError(f"GQA needs n_heads >= 4 (1 < n_kv_heads < n_heads), got "
                             f"n_heads={H}")
        n_kv_heads = validate.count("gqa_kv_heads", n_kv_heads, 2, H - 1)
        if H % n_kv_heads:
            raise ValueError(f"gqa_kv_heads must divide n_heads ({H}), got {n_kv_heads}")
    else:
        n_kv_heads = kind.kv_heads(config)
    named = {"attention": variant} if fields else {}  # MHA, GQA, MQA: named by their heads
    return replace(plain, n_kv_heads=n_kv_heads, **named, **fields)


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


def _float32_step_bytes(config: ModelConfig, context: int, kv_dtype: str = "float32",
                       absorb: bool = False) -> int:
    """Total bytes of one decode step of a toykv model (float32 weights, a kv_dtype cache),
    by the one count, sizing.decode_step_bytes."""
    check_config(config)
    context = validate.count("context", context, 1)
    value_bytes, scale_bytes = KV_DTYPE_BYTES[check_kv_dtype(kv_dtype)]
    check_absorb(config, absorb)
    return sizing.decode_step_bytes(config, context, 1, value_bytes, WEIGHT_BYTES, scale_bytes,
                                    expanded=not absorb)["total"]


def decode_step_cost(config: ModelConfig, context: int, kv_dtype: str = "float32",
                     absorb: bool = False) -> dict:
    """FLOPs (toykv.flops) and bytes (sizing.decode_step_bytes: float32 weights, a kv_dtype
    cache) of one decode step of a toykv model, and their ratio.

    {'flops', 'bytes', 'intensity'}: intensity is FLOPs per byte moved.
    """
    nbytes = _float32_step_bytes(config, context, kv_dtype, absorb)
    flops = cached_step_flops(config, context, absorb)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}


def cache_intensity(config: ModelConfig, absorb: bool = False, kv_dtype: str = "float32",
                    context: int = 4096) -> float:
    """FLOPs per byte of the step's work over the cache: what one more cached position adds to a
    decode step's FLOPs (toykv.flops) over what it adds to the bytes moved
    (sizing.decode_step_bytes, float32 weights)."""
    more = _float32_step_bytes(config, context + 1, kv_dtype, absorb)
    extra_bytes = more - _float32_step_bytes(config, context, kv_dtype, absorb)
    if extra_bytes == 0:
        raise ValueError(f"one more position adds no bytes at context {context} "
                         "(every layer slides and the window is full): take a smaller context")
    extra_flops = (cached_step_flops(config, context + 1, absorb)
                   - cached_step_flops(config, context, absorb))
    return extra_flops / extra_bytes


__all__ = ["cache_intensity", "VARIANTS", "KV_DTYPE_BYTES", "TOY_VARIANT_SHAPES",
           "long_context_toy", "with_attention", "attention_variants", "decode_step_cost"]
