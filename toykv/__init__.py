"""toykv: a small numpy Llama-style transformer for learning how the KV cache works.

The model (ToyTransformer, its KVCache, generate) and the maths around it: FLOP formulas
(toykv.flops), cache sizes and KV share (toykv.sizing), what a step costs, counted
(toykv.stepcost) and measured (toykv.steptime), verified public configs (toykv.zoo),
rooflines and machine measurements (toykv.roofline). Widgets live in toykv.widgets, which
imports ipywidgets and matplotlib, and the chapters' figures in toykv.plots (matplotlib): both
are imported when first used; nothing else here needs more than numpy. __all__ is what the
chapters use, and the public API the course's design names.
"""
import importlib

from . import (check, config, convert, flops, kinds, kvquant, layers, longctx, model, ops,
               paged, policies, prefix, quality, roofline, scheduler, serving, sizing, speculative,
               stepcost, steptime, timing, variants, zoo)
from .cache import KVCache
from .config import ModelConfig, source_toy
from .generate import Step, decode_steps, generate
from .gguf_loader import load_gguf
from .hfconfig import config_from_hf, from_hf_config
from .loaders import load_hf
from .model import ToyTransformer
from .policies import CachePolicy
from .roofline import (HARDWARE, Hardware, describe_machine, hardware, measure_bandwidth,
                       measure_matmul_peak)
from .smollm2 import smollm2_gguf_path
from .sizing import (kv_bytes_per_token, kv_cache_bytes, kv_share, kv_values_per_token,
                     max_tokens_per_second, param_count, relative_decode_speed,
                     sequences_that_fit, weight_bytes)
from .tokenizer import Tokenizer
from .zoo import ZooModel

__all__ = [
    "ModelConfig", "source_toy", "ToyTransformer", "KVCache", "Step", "decode_steps", "generate",
    "load_hf", "Tokenizer", "load_gguf", "smollm2_gguf_path", "from_hf_config",
    "kv_bytes_per_token", "kv_cache_bytes", "param_count", "kv_share", "relative_decode_speed",
    "max_tokens_per_second", "sequences_that_fit",
    "Hardware", "hardware", "measure_bandwidth", "measure_matmul_peak",
    "CachePolicy", "quality",
    "check", "config", "convert", "flops", "kinds", "kvquant", "longctx", "model", "ops", "paged", "plots",
    "prefix", "roofline", "scheduler", "serving", "sizing", "speculative", "stepcost", "steptime",
    "timing",
    "variants", "widgets", "zoo",
]


def __getattr__(name):
    """toykv.plots and toykv.widgets, imported on first use (they import matplotlib)."""
    if name in ("plots", "widgets"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
