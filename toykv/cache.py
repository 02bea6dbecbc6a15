"""The KV cache: per-layer arrays allocated once and written in place.

Full-attention layers keep every position; sliding-window layers keep a ring buffer
of `sliding_window` slots, so their memory stops growing. MHA/GQA/MQA layers store
K and V per KV head; MLA layers store the compressed latent c_kv and one shared
rotary key. kv_dtype 'int8' stores values as int8 with one float32 scale per token
and head (and per K or V), and `nbytes` counts both.
"""
from __future__ import annotations

import numpy as np

from .config import ModelConfig

KV_DTYPES = ("float32", "float16", "int8")


class KVCache:
    """Keys and values of every layer for one sequence. len(cache) = tokens seen so far."""

    def __init__(self, config: ModelConfig, kv_dtype: str = "float32"):
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, got {kv_dtype!r}")
        if "linear" in config.layer_kinds:
            raise ValueError("toykv's model has no linear-attention layers; "
                             "layer_types with 'linear' are for sizing only")
        self.config = config
        self.kv_dtype = kv_dtype
        self.length = 0
        self.capacity = [min(config.sliding_window, config.max_seq_len) if kind == "sliding"
                         else config.max_seq_len for kind in config.layer_kinds]
        c = config
        if c.attention == "mla":
            shapes = {"c_kv": (c.kv_lora_rank,), "k_rope": (c.rope_head_dim,)}
        else:
            shapes = {"k": (c.n_kv_heads, c.head_dim), "v": (c.n_kv_heads, c.head_dim)}
        self.layers = []                                # one dict of arrays per layer
        for cap in self.capacity:
            arrays = {}
            for name, shape in shapes.items():          # [capacity, heads?, dim]
                arrays[name] = np.zeros((cap, *shape), dtype=kv_dtype)
                if kv_dtype == "int8":                  # one scale per token (and head)
                    arrays[name + "_scale"] = np.zeros((cap, *shape[:-1]), dtype=np.float32)
            self.layers.append(arrays)

    def __len__(self) -> int:
        return self.length

    def held(self, layer: int) -> int:
        """Tokens layer `layer` holds now: all of them, or the last window for a sliding layer."""
        return min(self.length, self.capacity[layer])

    @property
    def nbytes(self) -> int:
        """Bytes held for the tokens stored so far (values, plus scales for int8)."""
        total = 0
        for i, arrays in enumerate(self.layers):
            for arr in arrays.values():
                total += self.held(i) * (arr.nbytes // arr.shape[0])
        return total

    @property
    def allocated_nbytes(self) -> int:
        """Bytes allocated up front for the full capacity."""
        return sum(arr.nbytes for arrays in self.layers for arr in arrays.values())

    def stored(self, layer: int, name: str) -> np.ndarray:
        """The values held by one layer in position order, as float32. [held, ...]"""
        arrays, n, cap = self.layers[layer], self.held(layer), self.capacity[layer]
        slots = np.arange(self.length - n, self.length) % cap
        values = arrays[name][slots] if self.length > cap else arrays[name][:n]
        if self.kv_dtype == "int8":
            scale = arrays[name + "_scale"][slots if self.length > cap else slice(0, n)]
            return values.astype(np.float32) * scale[..., None]
        return values.astype(np.float32, copy=False)

    def update(self, layer: int, **new: np.ndarray) -> tuple[dict, np.ndarray]:
        """Store the new tokens' entries ([T, ...] each); return what attention reads and its positions.

        Full layers are written first and read back as one view. Sliding layers return the
        window held before this call followed by the new tokens, then keep the newest ones.
        """
        T = next(iter(new.values())).shape[0]
        start, cap = self.length, self.capacity[layer]
        if start + T > self.config.max_seq_len:
            raise ValueError(f"cache full: {start} tokens + {T} new exceeds max_seq_len "
                             f"{self.config.max_seq_len}")
        sliding = self.config.layer_kinds[layer] == "sliding"
        if sliding:
            held = self.held(layer)
            out = {k: np.concatenate([self.stored(layer, k), v.astype(np.float32)]) for k, v in new.items()}
            positions = np.arange(start - held, start + T)
        n_keep = min(T, cap)                            # a ring keeps at most cap of them
        first = (start + T - n_keep) % cap
        slots = (slice(first, first + n_keep) if first + n_keep <= cap     # one block, or
                 else np.arange(first, first + n_keep) % cap)             # wrapping around
        for name, values in new.items():
            self._write(layer, name, slots, values[-n_keep:])
        if not sliding:
            out = {k: self.stored_upto(layer, k, start + T) for k in new}
            positions = np.arange(start + T)
        return out, positions

    def stored_upto(self, layer: int, name: str, end: int) -> np.ndarray:
        arrays = self.layers[layer]
        values = arrays[name][:end]
        if self.kv_dtype == "int8":
            return values.astype(np.float32) * arrays[name + "_scale"][:end][..., None]
        return values.astype(np.float32, copy=False)

    def _write(self, layer, name, slots, values):
        arrays = self.layers[layer]
        if self.kv_dtype == "int8":                     # symmetric: scale = max|x| / 127
            scale = np.abs(values).max(axis=-1) / 127.0
            scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
            arrays[name][slots] = np.clip(np.rint(values / scale[..., None]), -127, 127)
            arrays[name + "_scale"][slots] = scale
        else:
            arrays[name][slots] = values

    def advance(self, T: int):
        """Count T more tokens as stored (called once per forward, after every layer wrote)."""
        self.length += T
