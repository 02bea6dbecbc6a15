"""Quantized storage: keys and values held in 8, 4 or 2 bits, the newest few in float32.

The schemes of the quantized caches people serve with: a float32 scale and zero point
(minimum) per group of values, keys with one scale per token or one per channel (KIVI,
liu2024kivi: keys have outlier channels), values per token, and the most recent tokens kept in
float32 until a whole group of them can be quantized (as Hugging Face's QuantizedCache keeps
a residual). QuantScheme says which, round_trip is the arithmetic, QuantizedLayer the kind.

The layer stores float32 arrays and writes each group back as quantized and dequantized once
the scheme holds it quantized, so attention reads exactly what a quantized cache gives; nbytes
counts the bytes the scheme would hold (codes, scales, residual). A group becomes due at the
end of a step and is rewritten when the next step begins (or the values are read), so a
speculative step's rejected tokens, cropped before that, are never quantized.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .. import validate
from ..config import check_config
from .base import Seen
from .full import FullLayer

QUANT_BITS = (2, 4, 8)
SCALES = ("token", "channel")
SCALE_BYTES = 4                   # a float32 scale and a float32 zero point per group of values


def round_trip(x, bits: int, per: str = "token") -> np.ndarray:
    """x [tokens, ..., d_h] after quantizing to `bits` and back (float32, same shape).

    Asymmetric min-max: s = (max - min) / (2^bits - 1), code = rint((x - min) / s), x' = code s
    + min, so |x - x'| <= s / 2. per='token': one (s, min) per token row of d_h values (over
    the last axis); per='channel': one per channel, over the tokens (axis 0)."""
    bits = check_bits(bits)
    per = validate.choice("per", per, SCALES)
    try:
        x = np.asarray(x)
    except ValueError:                                  # ragged rows
        raise ValueError("x must be a real array [tokens, ..., d_h], got ragged rows") from None
    if x.ndim < 2 or x.dtype.kind not in "fiu" or not x.size:
        raise ValueError(f"x must be a non-empty real array [tokens, ..., d_h], got shape "
                         f"{x.shape} ({x.dtype})")
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise ValueError("x must hold finite numbers: a NaN or an infinity would spread over "
                         "its whole group")
    axis = -1 if per == "token" else 0
    lo, hi = x.min(axis=axis, keepdims=True), x.max(axis=axis, keepdims=True)
    levels = np.float32(2 ** bits - 1)
    scale = (hi - lo) / levels
    safe = np.where(scale > 0, scale, np.float32(1))
    codes = np.clip(np.rint((x - lo) / safe), 0, levels)               # integers 0 .. 2^b - 1
    return (codes * scale + lo).astype(np.float32)


@dataclass(frozen=True)
class QuantScheme:
    """A quantized cache: `bits` per value, keys' scales per 'token' or per 'channel' (over a
    group of `group` tokens), values' per token; the newest tokens stay float32 until `group`
    of them are older than the `residual` most recent, then that group is quantized."""
    bits: int = 4
    keys: str = "channel"
    group: int = 32
    residual: int = 32

    def __post_init__(self):
        object.__setattr__(self, "bits", check_bits(self.bits))
        validate.choice("keys", self.keys, SCALES)
        object.__setattr__(self, "group", validate.count("group", self.group, 1))
        object.__setattr__(self, "residual", validate.count("residual", self.residual, 0))

    @property
    def name(self) -> str:
        """'int4, keys per channel' and the like."""
        return f"int{self.bits}, keys per {self.keys}"

    def quantized(self, tokens: int) -> int:
        """Positions held quantized at this length: whole groups older than the residual."""
        tokens = validate.count("tokens", tokens, 0)
        return max(tokens - self.residual, 0) // self.group * self.group

    def layer_nbytes(self, n_kv_heads: int, head_dim: int, tokens: int) -> int:
        """Exact bytes one layer of one sequence holds at `tokens`: codes (bits / 8 a value), a
        float32 scale and zero per token row (values; keys per token) or per channel and group
        (keys per channel), and the float32 residual, for each of its n_kv_heads."""
        n_kv_heads = validate.count("n_kv_heads", n_kv_heads, 1)
        head_dim = validate.count("head_dim", head_dim, 1)
        tokens = validate.count("tokens", tokens, 0)
        q = self.quantized(tokens)
        codes = 2 * q * head_dim * self.bits // 8                     # K and V
        key_scales = q if self.keys == "token" else q // self.group * head_dim
        scales = 2 * SCALE_BYTES * (key_scales + q)                   # (scale, zero) each
        residual = 2 * (tokens - q) * head_dim * 4                    # float32 K and V
        return n_kv_heads * (codes + scales + residual)

    def nbytes(self, config, tokens: int) -> int:
        """Exact bytes of one sequence's cache at `tokens` (layer_nbytes, every layer that
        stores: with kv_sharing the others hold nothing). Full-attention K/V layers only."""
        check_layers(check_config(config))
        stores = sum(not spec.shares_kv for spec in config.layers)
        return stores * self.layer_nbytes(config.n_kv_heads, config.head_dim, tokens)


def check_bits(bits) -> int:
    """bits, if it is one of QUANT_BITS given as an integer (4, not 4.0 or True)."""
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral) or \
            int(bits) not in QUANT_BITS:
        raise ValueError(f"bits must be one of {QUANT_BITS} (an integer), got {bits!r}")
    return int(bits)


def check_layers(config):
    """Quantized schemes are defined for full-attention layers caching K and V per KV head (or
    reusing such a layer's, kv_sharing)."""
    specs = config.layers
    if any(s.kind != "full" or set(s.entry_shapes) != {"k", "v"} and not s.shares_kv
           for s in specs):
        raise ValueError("a quantized scheme needs full-attention layers caching k and v "
                         f"(MHA, GQA, MQA), got attention={config.attention!r} with layer "
                         f"kinds {sorted({s.kind for s in specs})}")
    if (config.head_dim * 2) % 8:
        raise ValueError(f"head_dim {config.head_dim} must be a multiple of 4 for 2-bit codes")


class QuantizedLayer(FullLayer):
    """A full-attention K/V layer under a QuantScheme per sequence (schemes: one per row of a
    batched cache, None for a row kept in float32, so several schemes can run side by side).
    done[r]: positions of row r rewritten so far; due: positions the scheme holds quantized at
    the last commit, rewritten before anything reads them. A step of several tokens reads the
    groups as they were when it began (as Hugging Face's quantized cache does), not as one-token
    steps would have rewritten them in between: steps_split is False."""

    steps_split = False

    def __init__(self, spec, codec, rows, slots, max_slots, new=np.zeros, schemes=()):
        super().__init__(spec, codec, rows, slots, max_slots, new)
        self.schemes = tuple(schemes)
        self.done = [0] * len(self.schemes)
        self.due = 0

    def settle(self):
        """Rewrite every group that has become due, as quantized and dequantized values."""
        for row, scheme in enumerate(self.schemes):
            if scheme is None:
                continue
            q = scheme.quantized(self.due)
            k, v = self.batched["k"][row], self.batched["v"][row]       # [slots, H_kv, d_h]
            for first in range(self.done[row], q, scheme.group):
                end = first + scheme.group
                k[first:end] = round_trip(k[first:end], scheme.bits, scheme.keys)
                v[first:end] = round_trip(v[first:end], scheme.bits, "token")
            self.done[row] = max(q, self.done[row])

    def nbytes(self, length: int) -> int:
        H, hd = self.spec.entry_shapes["k"]
        return sum(2 * length * H * hd * 4 if s is None else s.layer_nbytes(H, hd, length)
                   for s in self.schemes)

    def stored(self, name: str, length: int) -> np.ndarray:
        self.settle()
        return super().stored(name, length)

    def append(self, new: dict, start: int) -> Seen:
        self.settle()
        return super().append(new, start)

    def commit(self, start: int, T: int, ids=None):
        self.staged = None
        self.due = start + T

    def rollback_floor(self, length: int) -> int:
        """A rewritten group cannot be read back in float32: the shortest length is the one at
        which the scheme holds those groups quantized."""
        return max([d + s.residual for d, s in zip(self.done, self.schemes)
                    if s is not None and d > 0], default=0)

    def floor_reason(self, length: int, n: int) -> str:
        return (f"quantized cache cannot roll back: it has quantized groups a cache of {n} "
                "tokens would hold in float32")

    def crop(self, n: int, length: int):
        self.due = min(self.due, n)

    def copy(self, length: int, slots: int, shared: dict) -> QuantizedLayer:
        self.settle()
        twin = super().copy(length, slots, shared)
        twin.schemes, twin.done, twin.due = self.schemes, list(self.done), self.due
        return twin

    def _make_twin(self, slots):
        return type(self)(self.spec, self.codec, self.rows, slots, self.max_slots, np.empty,
                          self.schemes)


__all__ = ["QuantizedLayer", "QuantScheme", "round_trip", "check_layers", "QUANT_BITS",
           "SCALES", "SCALE_BYTES"]
