"""One toy, four attention variants, and the bytes and FLOPs one decode step of each costs.

Chapter 7 builds MHA, GQA, MQA and MLA from one base config: same d_model, depth, query heads
and MLP, so only the attention (and with it the cache) differs. decode_step_bytes counts what a
cached step moves: every weight once, the whole cache once, and for MLA's expanded form the
keys and values it rebuilds from the latents (written, then read back).
"""
from __future__ import annotations

from dataclasses import replace

from . import validate
from .config import ModelConfig
from .flops import cached_step_flops
from .sizing import kv_cache_bytes, param_count

VARIANTS = ("mha", "gqa", "mqa", "mla")
# bytes per stored value, and bytes of the float32 scale stored per token, head and K or V
KV_DTYPE_BYTES = {"float32": (4, 0), "float16": (2, 0), "int8": (1, 4)}
WEIGHT_BYTES = 4                      # toykv's weights are float32
# the variants of chapters 7 and 8: GQA with G = 4, MLA with DeepSeek-V2's ratios to head_dim
# (kv_lora_rank = 4 d_h, rope_head_dim = d_h / 2)
TOY_VARIANT_SHAPES = {"gqa_kv_heads": 3, "kv_lora_rank": 256, "rope_head_dim": 32}


def long_context_toy(max_seq_len: int = 16_448) -> ModelConfig:
    """Chapters 7 and 8's toy: 4 layers, d_model 768, 12 heads of 64, d_ff 2048, vocab 2048.

    About 30M parameters, 120 MB in float32: well above a CPU's last-level cache, so a decode
    step streams its weights from memory. Its MHA cache at 16,384 tokens is 3.4 times that.
    """
    return ModelConfig(vocab_size=2048, d_model=768, n_layers=4, n_heads=12, d_ff=2048,
                       max_seq_len=validate.count("max_seq_len", max_seq_len, 1))


def _check_config(config):
    if not isinstance(config, ModelConfig):
        raise ValueError(f"config must be a toykv.ModelConfig, got {type(config).__name__}")


def attention_variants(config: ModelConfig, gqa_kv_heads: int, kv_lora_rank: int,
                       rope_head_dim: int) -> dict[str, ModelConfig]:
    """config with each attention variant: {'mha', 'gqa', 'mqa', 'mla'} -> ModelConfig.

    Everything but the attention is kept (d_model, layers, query heads, head_dim, MLP, window).
    GQA gets gqa_kv_heads KV heads; MLA caches kv_lora_rank latent values and a shared rotary
    key of rope_head_dim values per token and layer.
    """
    _check_config(config)
    H = config.n_heads
    if H < 4:
        raise ValueError(f"GQA needs n_heads >= 4 (1 < n_kv_heads < n_heads), got n_heads={H}")
    g = validate.count("gqa_kv_heads", gqa_kv_heads, 2, H - 1)
    if H % g:
        raise ValueError(f"gqa_kv_heads must divide n_heads ({H}), got {g}")
    r = validate.count("kv_lora_rank", kv_lora_rank, 1)
    rd = validate.count("rope_head_dim", rope_head_dim, 2)
    plain = replace(config, attention=None, n_kv_heads=None, kv_lora_rank=None,
                    rope_head_dim=None)
    return {"mha": replace(plain, n_kv_heads=H),
            "gqa": replace(plain, n_kv_heads=g),
            "mqa": replace(plain, n_kv_heads=1),
            "mla": replace(plain, attention="mla", kv_lora_rank=r, rope_head_dim=rd)}


def weight_bytes_read(config: ModelConfig, bytes_per_param=WEIGHT_BYTES) -> int:
    """Bytes of weights one decode step reads: every block, the final norm and the output head.

    The input embedding is looked up (one row), so an untied table is not read whole; a tied
    table is, as the output head.
    """
    _check_config(config)
    size = validate.exact_number("bytes_per_param", bytes_per_param)
    params = param_count(config)
    if not config.tie_embeddings:
        params -= (config.vocab_size - 1) * config.d_model     # the table minus the row read
    total = params * size
    if total.denominator != 1:
        raise ValueError(f"{params} params x {float(size)} bytes is not a whole number of bytes")
    return int(total)


def _held(config, context):
    """Positions each layer attends over at this context: all, or the window (sliding)."""
    return [min(context, config.sliding_window) if kind == "sliding" else context
            for kind in config.layer_kinds]


def decode_step_bytes(config: ModelConfig, context: int, kv_dtype: str = "float32",
                      absorb: bool = False) -> dict[str, int]:
    """Bytes one decode step at `context` tokens (the new one included) moves, by kind.

    weights: weight_bytes_read (float32); cache: the cache of `context` tokens in kv_dtype
    (int8 with its float32 scales); expanded: MLA without absorb rebuilds K and V of every
    held position and head (2 * H * head_dim float32 values each), writes them and reads them
    back. The scores (H values per position) are left out. total: the sum.
    """
    _check_config(config)
    context = validate.count("context", context, 1)
    validate.choice("kv_dtype", kv_dtype, tuple(KV_DTYPE_BYTES))
    validate.flag("absorb", absorb)
    if absorb and config.attention != "mla":
        raise ValueError(f"absorb=True is for attention='mla' only, got {config.attention!r}")
    value_bytes, scale_bytes = KV_DTYPE_BYTES[kv_dtype]
    parts = {"weights": weight_bytes_read(config),
             "cache": kv_cache_bytes(config, context, bytes_per_value=value_bytes,
                                     scale_bytes=scale_bytes),
             "expanded": 0}
    if config.attention == "mla" and not absorb:
        per_position = 2 * config.n_heads * config.head_dim * 4          # K and V, float32
        parts["expanded"] = 2 * per_position * sum(_held(config, context))  # write + read
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


__all__ = ["cache_intensity", "VARIANTS", "KV_DTYPE_BYTES", "TOY_VARIANT_SHAPES", "long_context_toy", "attention_variants", "weight_bytes_read",
           "decode_step_bytes", "decode_step_cost"]
