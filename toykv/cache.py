"""The KV cache: per-layer arrays allocated once and written in place.

Full-attention layers keep every position; sliding-window layers keep a ring buffer of
w = `sliding_window` slots, so their memory stops growing. MHA/GQA/MQA layers store K and V
per KV head; MLA layers store the latent c_kv and one shared rotary key (deepseek2024v2).
kv_dtype 'int8' stores values as int8 with one float32 scale per token and head (and per K
or V), and `nbytes` counts both.

An unbatched cache (batch=None) holds one sequence: `layers[l][name]` is [capacity, ...].
A batched cache holds B sequences of the same length: `layers[l][name]` is
[B, capacity, ...]. Either way `len(cache)` is the tokens held per sequence. K and V are
indexed [.., position, head, dim] but laid out in memory head by head, as Hugging Face's
[batch, heads, tokens, head_dim] caches are (`head_major`).
"""
from __future__ import annotations

import weakref

import numpy as np

from . import validate
from .config import ModelConfig
from .sizing import kv_cache_bytes

KV_DTYPES = ("float32", "float16", "int8")
SCALE_BYTES = {"float32": 0, "float16": 0, "int8": 4}     # one float32 scale per row for int8


def head_major(shape: tuple, dtype) -> np.ndarray:
    """Zeros of shape [..., capacity, H_kv, d_h], stored in memory as [..., H_kv, capacity, d_h]
    (a transposed view): each KV head's keys are one contiguous block, which attention reads as
    a plain matrix, instead of pieces of d_h values H_kv d_h apart. Indexing sees the shape."""
    *lead, capacity, heads, dim = shape
    return np.zeros((*lead, heads, capacity, dim), dtype).swapaxes(-3, -2)


class KVCache:
    """Keys and values of every layer for one sequence (batch=None) or a batch of B sequences.

    len(cache) = tokens held per sequence. Made by `model.new_cache(...)`, a cache belongs
    to that model: another model, even one with an equal config, has other weights, so the
    keys and values it holds would be wrong for it, and forward refuses.
    """

    def __init__(self, config: ModelConfig, batch: int | None = None,
                 kv_dtype: str = "float32"):
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a toykv.ModelConfig, got {type(config).__name__}")
        if isinstance(batch, str):                      # new_cache("int8"): an easy slip
            raise ValueError(f"batch must be None or an integer >= 1, got {batch!r}; the KV "
                             f"dtype is the kv_dtype argument: new_cache(kv_dtype={batch!r})")
        self.batch = validate.optional_count("batch", batch, 1)
        self.kv_dtype = validate.choice("kv_dtype", kv_dtype, KV_DTYPES)
        if "linear" in config.layer_kinds:
            raise ValueError("toykv's model has no linear-attention layers; "
                             "layer_types with 'linear' are for sizing only")
        self.config = config
        self.length = 0
        self._owner = None                              # weakref to the model that fills it
        self.capacity = [min(config.sliding_window, config.max_seq_len) if kind == "sliding"
                         else config.max_seq_len for kind in config.layer_kinds]
        validate.fits_in_memory(
            "a KV cache for max_seq_len={} tokens{}".format(
                config.max_seq_len, "" if batch is None else f" x batch {self.batch}"),
            kv_cache_bytes(config, config.max_seq_len, self.batch or 1, self.bytes_per_value,
                           self.scale_bytes),
            "give the ModelConfig a smaller max_seq_len (the cache is allocated for all of it)")
        c = config
        if c.attention == "mla":
            shapes = {"c_kv": (c.kv_lora_rank,), "k_rope": (c.rope_head_dim,)}
        else:
            shapes = {"k": (c.n_kv_heads, c.head_dim), "v": (c.n_kv_heads, c.head_dim)}
        self.names = tuple(shapes)                      # what update() takes
        rows = () if self.batch is None else (self.batch,)
        self.layers = []                                # one dict of arrays per layer
        for cap in self.capacity:
            arrays = {}
            for name, shape in shapes.items():          # [(B,) capacity, heads?, dim]
                full_shape = (*rows, cap, *shape)
                arrays[name] = (head_major(full_shape, kv_dtype) if len(shape) == 2   # K, V
                                else np.zeros(full_shape, kv_dtype))             # MLA's
                if kv_dtype == "int8":                  # one scale per token (and head)
                    arrays[name + "_scale"] = np.zeros((*rows, cap, *shape[:-1]), np.float32)
            self.layers.append(arrays)

    def __len__(self) -> int:
        return self.length

    @property
    def bytes_per_value(self) -> int:
        """b: bytes of one stored value (4, 2 or 1), for sizing.kv_cache_bytes."""
        return np.dtype(self.kv_dtype).itemsize

    @property
    def scale_bytes(self) -> int:
        """Bytes of the scale stored per token, layer and K/V head (4 for int8, else 0)."""
        return SCALE_BYTES[self.kv_dtype]

    def held(self, layer: int) -> int:
        """Tokens layer `layer` holds now: all of them, or the last window for a sliding layer."""
        return min(self.length, self.capacity[layer])

    @property
    def nbytes(self) -> int:
        """Bytes held for the tokens stored so far, every sequence (values, plus int8 scales)."""
        return sum(self.held(i) * arr.nbytes // self.capacity[i]
                   for i, arrays in enumerate(self.layers) for arr in arrays.values())

    @property
    def allocated_nbytes(self) -> int:
        """Bytes allocated up front for the full capacity."""
        return sum(arr.nbytes for arrays in self.layers for arr in arrays.values())

    # -- reading ---------------------------------------------------------------------
    def stored(self, layer: int, name: str) -> np.ndarray:
        """The values one layer holds in position order, as float32 [held, ...] ([B, held, ...])."""
        layer = validate.count("layer", layer, 0, self.config.n_layers - 1)
        validate.choice("name", name, self.names)
        rows = self._read(layer, name, self.length - self.held(layer), self.length)
        return rows if self.batch else rows[0]

    def _rows(self, array: np.ndarray) -> np.ndarray:
        """The array with a leading batch axis: a view [1, ...] of an unbatched cache's array."""
        return array if self.batch else array[None]

    def _read(self, layer: int, name: str, first: int, end: int) -> np.ndarray:
        """Positions first..end-1 of one layer as float32 [B, end - first, ...] (a view if it can)."""
        arrays, cap = self.layers[layer], self.capacity[layer]
        if end <= cap:                                  # no slot reused yet: one block
            slots = slice(first, end)
        else:                                           # a ring that has wrapped
            slots = np.arange(first, end) % cap
        values = self._rows(arrays[name])[:, slots]
        if self.kv_dtype == "int8":
            scale = self._rows(arrays[name + "_scale"])[:, slots]
            return values.astype(np.float32) * scale[..., None]
        return values.astype(np.float32, copy=False)

    # -- writing ---------------------------------------------------------------------
    def update(self, layer: int, **new: np.ndarray) -> tuple[dict, np.ndarray]:
        """Store new tokens' entries in `layer` (every name in self.names: 'k' and 'v', or MLA's
        'c_kv' and 'k_rope'; [T, ...] each, [B, T, ...] in a batched cache).

        Returns (what attention reads: float32 [Tk, ...] ([B, Tk, ...]) per name, the positions
        [Tk] of those keys). Call advance(T) once every layer has been updated.
        """
        layer = validate.count("layer", layer, 0, self.config.n_layers - 1)
        if len(new) != len(self.names) or any(name not in new for name in self.names):
            missing = [n for n in self.names if n not in new]
            raise ValueError(f"update needs exactly {self.names} for this cache; missing "
                             f"{missing}, unexpected {sorted(set(new) - set(self.names))}")
        rows, T, lead = {}, None, 1 if self.batch is None else 2     # axes before a token's
        for name in self.names:
            value, shape = new[name], self.layers[layer][name].shape  # [(B,) capacity, ...]
            if (not isinstance(value, np.ndarray) or value.dtype.kind != "f"
                    or value.ndim != len(shape) or value.shape[lead:] != shape[lead:]
                    or (self.batch is not None and value.shape[0] != self.batch)):
                given = getattr(value, "shape", type(value).__name__)
                want = "[T, ...]" if self.batch is None else f"[{self.batch}, T, ...]"
                raise ValueError(f"{name} must be a float array of shape {want} with ... = "
                                 f"{shape[lead:]}, got {given}")
            value = self._rows(value)
            if T is not None and value.shape[1] != T:
                raise ValueError(f"every name must bring the same number of tokens T; "
                                 f"{name} brings {value.shape[1]}, the others {T}")
            T = value.shape[1]
            rows[name] = value
        if T == 0:
            raise ValueError("update got T = 0 new tokens; give at least one")
        out, positions = self._update(layer, rows)
        return (out if self.batch else {k: v[0] for k, v in out.items()}), positions

    def _update(self, layer: int, new: dict) -> tuple[dict, np.ndarray]:
        """update() without the checks, for the model: new values [B, T, ...] per name.

        Full layers are written first and read back as one view. Sliding layers return the
        window held before this call followed by the new tokens, then keep the newest ones
        (a prefill longer than the window needs the old window, which the writes overwrite).
        Both read the new tokens as stored (int8 or float16, then back to float32), so a
        sliding layer and a full layer attend to the same values, and a token's key is the
        same whether it came in one prefill or step by step: chunked and one-pass prefills
        agree bit for bit with exact=True for every kv_dtype.
        """
        T = next(iter(new.values())).shape[1]
        start, cap = self.length, self.capacity[layer]
        if start + T > self.config.max_seq_len:
            raise ValueError(f"cache full: {start} tokens + {T} new exceeds max_seq_len "
                             f"{self.config.max_seq_len}")
        sliding = self.config.layer_kinds[layer] == "sliding"
        if sliding:
            first = start - self.held(layer)
            out = {name: np.concatenate([self._read(layer, name, first, start),
                                         self._decode(*self._encode(values))], axis=1)
                   for name, values in new.items()}
            positions = np.arange(first, start + T)
        n_keep = min(T, cap)                            # a ring keeps at most cap of them
        first_slot = (start + T - n_keep) % cap
        slots = (slice(first_slot, first_slot + n_keep) if first_slot + n_keep <= cap
                 else np.arange(first_slot, first_slot + n_keep) % cap)   # wrapping around
        for name, values in new.items():
            stored, scale = self._encode(values[:, T - n_keep:])
            self._rows(self.layers[layer][name])[:, slots] = stored
            if scale is not None:
                self._rows(self.layers[layer][name + "_scale"])[:, slots] = scale
        if not sliding:
            out = {name: self._read(layer, name, 0, start + T) for name in new}
            positions = np.arange(start + T)
        return out, positions

    def _encode(self, values: np.ndarray):
        """(values as stored, int8 scales or None). int8 is symmetric: scale = max|x| / 127."""
        if self.kv_dtype != "int8":
            return values.astype(self.kv_dtype, copy=False), None
        scale = np.abs(values).max(axis=-1) / 127.0
        scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
        return np.clip(np.rint(values / scale[..., None]), -127, 127).astype(np.int8), scale

    def _decode(self, stored: np.ndarray, scale) -> np.ndarray:
        """float32 values from _encode's output, exactly as _read returns them."""
        if scale is None:
            return stored.astype(np.float32, copy=False)
        return stored.astype(np.float32) * scale[..., None]

    def advance(self, T: int):
        """Count T more tokens as stored (called once per forward, after every layer wrote)."""
        T = validate.count("T", T, 0, self.config.max_seq_len - self.length)
        self.length += T

    def _claim(self, model):
        """Bind the cache to the model that fills it; refuse any other model."""
        if self._owner is None:
            self._owner = weakref.ref(model)
        elif self._owner() is not model:
            raise ValueError("cache belongs to another ToyTransformer: its keys and values "
                             "come from that model's weights (even with an equal config); "
                             "use this model's new_cache()")

    def copy(self) -> "KVCache":
        """A new cache holding the same tokens, bound to the same model, that fills on its own:
        prefix reuse fills one cache with a shared prompt and continues a copy per request.
        Only the held slots are copied; the copy has the same capacity, batch and kv_dtype."""
        twin = KVCache(self.config, self.batch, self.kv_dtype)
        twin._owner = self._owner
        for layer, (mine, theirs) in enumerate(zip(self.layers, twin.layers)):
            held = self.held(layer)              # slots 0..held-1: in order, or a full ring
            for name, array in mine.items():     # [(B,) capacity, ...]
                self._rows(theirs[name])[:, :held] = self._rows(array)[:, :held]
        twin.length = self.length
        return twin
