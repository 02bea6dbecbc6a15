"""size_report: every number the size calculator shows, from one pure function.

The SizeCalculator widget only reads its controls, calls size_report and formats the
SizeReport it gets back, so the numbers are tested here, without a widget. The sizes come
from toykv.sizing; this module adds what only the calculator needs (the counterfactual
attention variants, GPU memory in GiB, the curve against context) and checks every input
with toykv.validate. (It lives beside the widget for now; it can move to toykv.sizing.)

GPU memory is in GiB (2^30 bytes), as the card reports it (nvidia-smi's total): an A100 80GB
reports 80 GiB, an H100 80GB 79.6 GiB (book/notation.md). Bandwidths stay decimal (GB/s).
"""
from __future__ import annotations

import dataclasses
import itertools
import os
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .. import hfconfig, sizing, validate, variants, zoo
from ..config import check_config
from ..layers import ATTENTION, attention_kind

GiB = 2 ** 30
PASTED_NAME = "pasted config.json"
VARIANTS = (("as built", "as built"), ("MHA", "mha"), ("GQA", "gqa"), ("MQA", "mqa"),
            ("MLA (DeepSeek-V2 latent 512 + 64)", "mla"))
MLA_LATENT = dict(kv_lora_rank=512, rope_head_dim=64)     # DeepSeek-V2, arXiv:2405.04434 Table 1
PRECISIONS = (("fp32 (4 bytes)", 4), ("bf16 (2 bytes)", 2), ("fp8 (1 byte)", 1),
              ("int4 (0.5 bytes)", 0.5))
CONTEXTS = tuple(sorted([2 ** k for k in range(10, 23)] + [10 ** 6]))   # 1,024 ... 4,194,304
BYTES_PER_PARAM = 2                                           # weights at bf16
CURVE_CONTEXTS = tuple(int(n) for n in np.unique(
    np.geomspace(CONTEXTS[0], CONTEXTS[-1], 64).round().astype(int)))
MAX_COUNT = 10 ** 9          # batch and context: past a billion no figure means anything
MAX_CURVE_POINTS = 1000      # contexts of the curve, at most (the default has 64)
GPU_MEMORY_GIB = (0.01, 10 ** 6)   # 10 MiB to about a PiB: every figure stays a finite float


@dataclass(frozen=True)
class VariantRow:
    """One attention variant of the chosen model (None sizes: it does not fit the heads)."""

    key: str                        # 'as built', 'mha', 'gqa', 'mqa' or 'mla'
    label: str
    attention: str | None           # the attention the sized config uses
    n_kv_heads: int | None          # None for MLA and for a variant that does not fit
    kv_lora_rank: int | None        # MLA only
    rope_head_dim: int | None       # MLA only
    bytes_per_token: int | None
    batch_bytes: int | None
    share_of_mha: float | None      # batch_bytes / the MHA row's batch_bytes


@dataclass(frozen=True)
class SizeReport:
    """Every number the size calculator shows for one model, variant, precision, context and
    batch. Bytes are exact ints; GPU memory is in GiB (2^30 bytes)."""

    model: str                      # the zoo name, or the pasted config's name
    variant: str                    # as chosen: 'as built', 'mha', 'gqa', 'mqa' or 'mla'
    attention: str                  # the attention of the sized config
    n_kv_heads: int | None          # H_kv (None for MLA)
    bytes_per_value: float          # b: 4, 2, 1 or 0.5
    context: int                    # S: tokens per sequence
    batch: int                      # B: sequences
    gpu_memory_gib: float
    gpu_bytes: int                  # gpu_memory_gib * 2^30, rounded down
    full_layers: int                # layers whose cache holds every token
    sliding_layers: int             # layers that keep only the last sliding_window tokens
    linear_layers: int              # linear-attention layers: a fixed state per sequence
    sliding_window: int | None
    max_seq_len: int
    values_per_token: int           # summed over full and sliding layers (inside the window)
    bytes_per_token: int            # values_per_token * bytes_per_value
    sequence_bytes: int             # one sequence of `context` tokens
    bytes_per_token_at_context: float   # sequence_bytes / context (windows and states counted)
    batch_bytes: int                # the whole batch
    gpus_of_kv: float               # batch_bytes / gpu_bytes
    total_params: int
    active_params: int              # N_active: the parameters one token uses (MoE: fewer)
    weight_bytes: int               # total params at bf16
    active_weight_bytes: int        # active params at bf16
    weight_bytes_read: int          # what a decode step reads of them (sizing.weight_bytes_read)
    weights_fit: bool               # weight_bytes <= gpu_bytes
    sequences_fit: int              # sequences of `context` tokens beside the weights, one GPU
    kv_share: float                 # batch_bytes / (batch_bytes + weight_bytes_read)
    relative_decode_speed: float    # 1 - kv_share: speed against an empty cache, bandwidth bound
    curve_contexts: tuple           # contexts of the curve (tokens)
    curve_bytes: tuple              # the batch's KV bytes at each curve context
    curve_bytes_as_built: tuple | None   # the same for the model as built (None: variant is it)
    variants: tuple                 # a VariantRow per entry of VARIANTS
    verified: bool
    sources: tuple

    @property
    def windowed(self) -> bool:
        """True when some layers slide or keep a fixed state, so bytes_per_token is the rate
        inside the window, not the average at this context."""
        return bool(self.sliding_layers or self.linear_layers)


def size_report(model: zoo.ZooModel, variant: str = "as built", bytes_per_value=2,
                context: int = 8192, batch: int = 16, gpu_memory_gib=80,
                kv_heads: int | None = None, bytes_per_param=BYTES_PER_PARAM,
                curve_contexts=CURVE_CONTEXTS) -> SizeReport:
    """The size calculator's numbers for `model` (a ZooModel) with its attention replaced by
    `variant` (kv_heads: GQA's KV heads, default default_kv_heads). ValueError on bad input."""
    _check_zoo_model("model", model)
    validate.choice("variant", variant, [key for _, key in VARIANTS])
    validate.exact_number("bytes_per_value", bytes_per_value)
    context = validate.count("context", context, 1, MAX_COUNT)
    batch = validate.count("batch", batch, 1, MAX_COUNT)
    gpu_memory_gib = validate.number("gpu_memory_gib", gpu_memory_gib, GPU_MEMORY_GIB[0],
                                     allow_minimum=True, maximum=GPU_MEMORY_GIB[1])
    validate.exact_number("bytes_per_param", bytes_per_param)
    if isinstance(curve_contexts, (str, bytes, dict)) or not hasattr(curve_contexts, "__iter__"):
        raise ValueError(f"curve_contexts must be a list of contexts (tokens), got "
                         f"{type(curve_contexts).__name__} {curve_contexts!r:.40}")
    curve_contexts = list(itertools.islice(curve_contexts, MAX_CURVE_POINTS + 1))
    if not 1 <= len(curve_contexts) <= MAX_CURVE_POINTS:
        raise ValueError(f"curve_contexts must hold 1 to MAX_CURVE_POINTS={MAX_CURVE_POINTS} "
                         f"contexts, got {len(curve_contexts) or 'none'}"
                         f"{' or more' if len(curve_contexts) > MAX_CURVE_POINTS else ''}")
    curve_contexts = tuple(validate.count("curve context", n, 1, MAX_COUNT)
                           for n in curve_contexts)
    if variant == "gqa":
        kv_heads = default_kv_heads(model.config) if kv_heads is None else \
            validate.count("kv_heads", kv_heads, 1, model.config.n_heads)
    sized = variant_model(model, variant, kv_heads)
    config = sized.config
    gpu_bytes = int(Fraction(gpu_memory_gib) * GiB)
    sequence_bytes = sizing.kv_cache_bytes(config, context, 1, bytes_per_value)
    batch_bytes = batch * sequence_bytes
    weights = sizing.weight_bytes(sized.total_params, bytes_per_param)
    active_weights = sizing.weight_bytes(sized.active_params, bytes_per_param)
    kv_share = sizing.kv_share(sized, context, batch, bytes_per_value, bytes_per_param)

    def curve(cfg):
        return tuple(sizing.kv_cache_bytes(cfg, n, batch, bytes_per_value) for n in curve_contexts)

    kinds = config.layer_kinds
    return SizeReport(
        model=model.name, variant=variant, attention=config.attention,
        n_kv_heads=None if attention_kind(config).latent else config.n_kv_heads,
        bytes_per_value=bytes_per_value, context=context, batch=batch,
        gpu_memory_gib=gpu_memory_gib, gpu_bytes=gpu_bytes,
        full_layers=kinds.count("full"), sliding_layers=kinds.count("sliding"),
        linear_layers=kinds.count("linear"),
        sliding_window=config.sliding_window, max_seq_len=config.max_seq_len,
        values_per_token=sizing.kv_values_per_token(config),
        bytes_per_token=sizing.kv_bytes_per_token(config, bytes_per_value),
        sequence_bytes=sequence_bytes, bytes_per_token_at_context=sequence_bytes / context,
        batch_bytes=batch_bytes, gpus_of_kv=batch_bytes / gpu_bytes,
        total_params=sized.total_params, active_params=sized.active_params,
        weight_bytes=weights, active_weight_bytes=active_weights,
        weight_bytes_read=sizing.weight_bytes_read(sized, bytes_per_param, batch),
        weights_fit=weights <= gpu_bytes,
        sequences_fit=sizing.sequences_that_fit(sized, context, gpu_bytes, bytes_per_value,
                                                bytes_per_param),
        kv_share=kv_share, relative_decode_speed=1 - kv_share,
        curve_contexts=curve_contexts, curve_bytes=curve(config),
        curve_bytes_as_built=None if config == model.config else curve(model.config),
        variants=variant_rows(model, bytes_per_value, context, batch, kv_heads),
        verified=model.verified, sources=tuple(model.sources))


def variant_model(base: zoo.ZooModel, variant: str, kv_heads: int | None = None) -> zoo.ZooModel:
    """base with its attention replaced by `variant` (same layers, heads and head_dim; MLA with
    DeepSeek-V2's latent). Parameter counts stay the model's own. ValueError if it cannot fit."""
    _check_zoo_model("base", base)
    validate.choice("variant", variant, [key for _, key in VARIANTS])
    kv_heads = validate.optional_count("kv_heads", kv_heads, 1)
    if variant == "as built":
        return base
    heads = base.config.n_heads
    if variant == "gqa":
        kv_heads = default_kv_heads(base.config) if kv_heads is None else kv_heads
    try:
        config = variants.with_attention(base.config, variant, n_kv_heads=kv_heads,
                                         **(MLA_LATENT if ATTENTION[variant].latent else {}))
    except ValueError as err:
        label = dict((key, label) for label, key in VARIANTS)[variant]
        extra = f" with {kv_heads} KV heads" if variant == "gqa" else ""
        raise ValueError(f"{label}{extra} does not fit {base.name} ({heads} query heads): "
                         f"{err}") from None
    return dataclasses.replace(base, config=config)


def default_kv_heads(config) -> int:
    """GQA's KV heads for a model: its own if it is GQA, else a divisor of n_heads near
    n_heads / 4."""
    check_config(config)
    if config.attention == "gqa":
        return config.n_kv_heads
    divisors = [d for d in range(2, config.n_heads) if config.n_heads % d == 0]
    return min(divisors, key=lambda d: abs(d - config.n_heads / 4)) if divisors else 1


def variant_rows(base: zoo.ZooModel, bytes_per_value=2, context: int = 8192, batch: int = 16,
                 kv_heads: int | None = None) -> tuple[VariantRow, ...]:
    """Every attention variant of base at this precision, context and batch (VARIANTS order)."""
    _check_zoo_model("base", base)
    validate.exact_number("bytes_per_value", bytes_per_value)
    context = validate.count("context", context, 1, MAX_COUNT)
    batch = validate.count("batch", batch, 1, MAX_COUNT)
    kv_heads = validate.optional_count("kv_heads", kv_heads, 1)
    sized = []
    for label, key in VARIANTS:
        try:
            config = variant_model(base, key, kv_heads).config
        except ValueError:
            sized.append((key, label, None, None))
            continue
        sized.append((key, label, config, sizing.kv_cache_bytes(config, context, batch,
                                                                bytes_per_value)))
    mha = next((b for key, _, _, b in sized if key == "mha"), None)
    rows = []
    for key, label, config, batch_bytes in sized:
        mla = config is not None and attention_kind(config).latent
        rows.append(VariantRow(
            key=key, label=label, attention=config and config.attention,
            n_kv_heads=None if config is None or mla else config.n_kv_heads,
            kv_lora_rank=config.kv_lora_rank if mla else None,
            rope_head_dim=config.rope_head_dim if mla else None,
            bytes_per_token=config and sizing.kv_bytes_per_token(config, bytes_per_value),
            batch_bytes=batch_bytes,
            share_of_mha=batch_bytes / mha if batch_bytes is not None and mha else None))
    return tuple(rows)


def _check_zoo_model(name: str, model) -> zoo.ZooModel:
    """model, if it is a ZooModel (zoo.get(name) gives one); else a ValueError naming `name`."""
    if not isinstance(model, zoo.ZooModel):
        hint = f" (zoo.get({model!r}) gives it)" if isinstance(model, str) else ""
        raise ValueError(f"{name} must be a toykv.zoo.ZooModel, got {type(model).__name__}"
                         f"{hint}")
    return model


def model_from_config_json(text: str) -> zoo.ZooModel:
    """A pasted config.json read by toykv.hfconfig; ValueError (never another error) for text
    that is not one, deeply nested JSON included."""
    if not isinstance(text, str):
        raise ValueError(f"config_json must be a string, got {type(text).__name__}")
    text = text.strip()
    if not text:
        raise ValueError("Paste the contents of a config.json into the box above.")
    try:                                  # one reader of config.json text: toykv.hfconfig's
        data = hfconfig.parse_config_json(text)
        name = os.path.basename(str(data.get("_name_or_path", ""))) or PASTED_NAME
        return hfconfig.from_hf_config(data, name)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise ValueError(f"Could not read the pasted config.json: {message}") from None


__all__ = ["SizeReport", "VariantRow", "size_report", "variant_model", "variant_rows",
           "default_kv_heads", "model_from_config_json", "VARIANTS", "PRECISIONS", "CONTEXTS",
           "GiB"]
