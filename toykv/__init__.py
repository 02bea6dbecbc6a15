"""toykv: a small numpy Llama-style transformer for learning how the KV cache works."""
from .cache import KVCache
from .config import ModelConfig, source_toy
from .generate import Step, decode_steps, generate
from .model import ToyTransformer

__all__ = ["ModelConfig", "source_toy", "ToyTransformer", "KVCache", "Step",
           "decode_steps", "generate"]
