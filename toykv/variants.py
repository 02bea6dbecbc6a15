"""One toy and four attention variants of it, each swapped in by with_attention.

Chapter 7 builds MHA, GQA, MQA and MLA from one base config: same d_model, depth, query heads
and MLP, so only the attention (and with it the cache) differs. What a decode step of each
costs is counted in toykv.stepcost (decode_step_cost, cache_intensity).
"""
from __future__ import annotations

from dataclasses import replace

from . import validate
from .config import ATTENTION_KINDS, ModelConfig, check_config, long_context_toy
from .layers import ATTENTION, KV_DTYPE_BYTES

# chapter 7's four, 'mha', 'gqa', 'mqa', 'mla' ('lowrank' is a conversion's, toykv.convert)
VARIANTS = tuple(name for name, kind in ATTENTION.items() if kind.variant)
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


__all__ = ["VARIANTS", "KV_DTYPE_BYTES", "TOY_VARIANT_SHAPES", "long_context_toy",
           "with_attention", "attention_variants"]
