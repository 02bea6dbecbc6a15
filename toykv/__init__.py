"""toykv: a small numpy Llama-style transformer for learning how the KV cache works.

The model (ToyTransformer, its KVCache, generate) and the maths around it: FLOP formulas
(toykv.flops), cache sizes and KV share (toykv.sizing), verified public configs (toykv.zoo),
rooflines and machine measurements (toykv.roofline). Widgets live in toykv.widgets, which
imports ipywidgets and matplotlib; nothing else here needs more than numpy.
"""
from . import check, flops, roofline, serving, sizing, zoo
from .cache import KVCache
from .config import ModelConfig, source_toy
from .generate import Step, decode_steps, generate
from .gguf_loader import load_gguf
from .hfconfig import config_from_hf, from_hf_config
from .loaders import load_hf
from .model import ToyTransformer
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
    "load_hf", "config_from_hf", "Tokenizer", "load_gguf", "smollm2_gguf_path",
    "check", "flops", "roofline", "serving", "sizing", "zoo", "ZooModel", "from_hf_config",
    "kv_values_per_token", "kv_bytes_per_token", "kv_cache_bytes", "param_count", "weight_bytes",
    "kv_share", "relative_decode_speed", "max_tokens_per_second", "sequences_that_fit",
    "Hardware", "HARDWARE", "hardware", "measure_bandwidth", "measure_matmul_peak",
    "describe_machine",
]
