"""The KV cache: per-layer arrays written in place, one small class per kind of layer.

Each layer's cache follows its description (toykv.layers.LayerSpec): a full-attention layer
keeps every position (FullLayer), a sliding-window layer a ring of w = `sliding_window` slots,
so its memory stops growing (SlidingLayer). MHA/GQA/MQA layers store K and V per KV head; MLA
layers store the latent c_kv and one shared rotary key (deepseek2024v2). kv_dtype 'int8'
stores values as int8 with one float32 scale per token and head (and per entry), and `nbytes`
counts both.

Capacity: a cache allocates `capacity` positions per layer up front (default max_seq_len,
as Hugging Face's StaticCache does, so a step only writes) and grows geometrically, doubling
(as a DynamicCache grows), when more arrive; a sliding layer never beyond its window.
`nbytes` counts what is held, `allocated_nbytes` what is allocated.

A step is all or nothing: `update`/`append` give attention the layer's keys and values with the
new tokens' included, and `advance(T)` commits the step (a ring's writes happen there, since
they overwrite positions still in the window). A forward pass that fails at any layer calls
`discard()`, so every cache is left exactly as it was: its length and every held value.

An unbatched cache (batch=None) holds one sequence: `layers[l][name]` is [capacity, ...]. A
batched cache holds B sequences of the same length: `layers[l][name]` is [B, capacity, ...].
Either way `len(cache)` is the tokens held per sequence. K and V are indexed [.., position,
head, dim] but laid out in memory head by head, as Hugging Face's [batch, heads, tokens,
head_dim] caches are (`head_major`).

Rollback: `truncate(n)` keeps the first n positions and drops the rest, as truncating a file
does (speculative decoding drops the proposed tokens the model did not accept). A full layer
just forgets them: slots past the length are written before they are read again. A ring that
has overwritten a position the shorter cache would hold again refuses.

A new kind of layer cache (a paged layer, an eviction policy) is one class with FullLayer's
methods (held, append, commit, discard, read, copy, rollback_floor), registered in
LAYER_CACHES.
"""
from __future__ import annotations

import weakref
from collections.abc import Mapping

import numpy as np

from . import validate
from .config import ModelConfig, check_config
from .layers import KV_DTYPE_BYTES, LayerSpec, check_kv_dtype
from .sizing import kv_cache_bytes

KV_DTYPES = tuple(KV_DTYPE_BYTES)                                   # 'float32', 'float16', 'int8'
SCALE_BYTES = {name: scale for name, (_, scale) in KV_DTYPE_BYTES.items()}


def head_major(shape: tuple, dtype, new=np.zeros) -> np.ndarray:
    """Zeros of shape [..., capacity, H_kv, d_h], stored in memory as [..., H_kv, capacity, d_h]
    (a transposed view): each KV head's keys are one contiguous block, which attention reads as
    a plain matrix, instead of pieces of d_h values H_kv d_h apart. Indexing sees the shape.
    new=np.empty leaves them unset (for slots written before they are read)."""
    *lead, capacity, heads, dim = shape
    return new((*lead, heads, capacity, dim), dtype).swapaxes(-3, -2)


class Codec:
    """How values are stored in one kv_dtype: as float32 or float16, or as int8 with a scale."""

    def __init__(self, kv_dtype: str):
        self.kv_dtype = kv_dtype

    def zeros(self, name: str, shape: tuple, token_shape: tuple, new=np.zeros) -> dict:
        """The arrays of one entry, shape = [(B,) slots, *token_shape] (K and V head-major),
        plus its int8 scales (one per row of d_h values); new=np.empty: left unset."""
        arrays = {name: head_major(shape, self.kv_dtype, new) if len(token_shape) == 2
                  else new(shape, self.kv_dtype)}
        if self.kv_dtype == "int8":
            arrays[name + "_scale"] = new(shape[:-1], np.float32)
        return arrays

    def encode(self, values: np.ndarray):
        """(values as stored, int8 scales or None). int8 is symmetric: scale = max|x| / 127."""
        if self.kv_dtype != "int8":
            return values.astype(self.kv_dtype, copy=False), None
        scale = np.abs(values).max(axis=-1) / 127.0
        scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
        return np.clip(np.rint(values / scale[..., None]), -127, 127).astype(np.int8), scale

    def decode(self, stored: np.ndarray, scale) -> np.ndarray:
        """float32 values from encode's output."""
        if scale is None:
            return stored.astype(np.float32, copy=False)
        return stored.astype(np.float32) * scale[..., None]


class FullLayer(Mapping):
    """A full-attention layer's cache: position p in slot p, every position kept.

    As a mapping it is the layer's arrays by name ('k', 'v' or MLA's 'c_kv', 'k_rope', and
    their '_scale' arrays for int8), [(B,) slots, ...] each, to read or edit in place.
    Methods take the cache's length (`start`) and new values [B, T, ...]: the cache checks.
    """

    def __init__(self, spec: LayerSpec, codec: Codec, rows: int | None, slots: int,
                 max_slots: int, new=np.zeros):
        self.spec, self.codec, self.rows, self.max_slots = spec, codec, rows, max_slots
        self._allocate(self._zeros(slots, new), slots)
        self.staged = None                                  # a step's (start, T, ring writes)

    def _zeros(self, slots: int, new=np.zeros) -> dict:
        lead = () if self.rows is None else (self.rows,)
        arrays = {}
        for name, shape in self.spec.entries:                # [(B,) slots, ...]
            arrays.update(self.codec.zeros(name, (*lead, slots, *shape), shape, new))
        return arrays

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def __iter__(self):
        return iter(self.arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    def held(self, length: int) -> int:
        """Positions held once `length` tokens are stored."""
        return self.spec.held(length)

    def nbytes(self, length: int) -> int:
        """Bytes of the positions held at `length` (values and scales), every sequence."""
        return self.held(length) * sum(a.nbytes for a in self.arrays.values()) // self.slots

    def _allocate(self, arrays: dict, slots: int):
        """Hold these arrays of `slots` positions; `batched` views them with a batch axis in
        front ([1, ...] for one sequence), the shape the methods read and write."""
        self.arrays, self.slots = arrays, slots
        self.batched = {name: a if self.rows is not None else a[None] for name, a in
                        arrays.items()}

    def read(self, name: str, first: int, end: int) -> np.ndarray:
        """Positions first..end-1 as float32 [B, end - first, ...] (a view where it can be)."""
        slots = self.slots
        index = slice(first, end) if end <= slots else np.arange(first, end) % slots  # wrapped
        scale = self.batched.get(name + "_scale")
        return self.codec.decode(self.batched[name][:, index],
                                 None if scale is None else scale[:, index])

    def grow(self, need: int):
        """Make room for `need` slots (doubling, at most max_slots), keeping what is stored.
        Only called before the layer's positions wrap around, so slot = position."""
        if need <= self.slots:
            return
        slots = min(self.max_slots, max(need, 2 * self.slots))
        validate.fits_in_memory(f"a cache layer of {slots} positions",
                                sum(a.nbytes for a in self.arrays.values()) // self.slots * slots,
                                "give the model a smaller max_seq_len")
        old, views = self.slots, self.batched
        self._allocate(self._zeros(slots, np.empty), slots)  # slots past `old`: written first
        for name, view in views.items():
            self.batched[name][:, :old] = view

    def append(self, new: dict, start: int) -> tuple[dict, np.ndarray]:
        """Write the new tokens' entries after the `start` held ones; return what attention
        reads: every position, float32 [B, start + T, ...], and the positions [start + T].
        Slots past the cache's length are invisible until commit, so writing them now
        changes nothing a failed step would have to undo."""
        T = next(iter(new.values())).shape[1]
        end = start + T
        if end > self.slots:
            self.grow(end)
        for name, values in new.items():
            stored, scale = self.codec.encode(values)
            self.batched[name][:, start:end] = stored
            if scale is not None:
                self.batched[name + "_scale"][:, start:end] = scale
        self.staged = (start, T, None)                      # written; counted at commit
        return {name: self.read(name, 0, end) for name in new}, np.arange(end)

    def commit(self, start: int, T: int):
        """The step is done: nothing left to write for a full layer."""
        self.staged = None

    def discard(self):
        """The step failed: nothing was written where it shows."""
        self.staged = None

    def copy(self, length: int, slots: int) -> FullLayer:
        """A layer of `slots` slots (at least what is held) holding the same positions."""
        held = self.held(length)
        twin = type(self)(self.spec, self.codec, self.rows, max(slots, self._copy_slots(length)),
                          self.max_slots, np.empty)         # the slots past held: written first
        for name in self.arrays:
            twin.batched[name][:, :held] = self.batched[name][:, :held]
        return twin

    def _copy_slots(self, length: int) -> int:
        return self.held(length)

    def rollback_floor(self, length: int) -> int:
        """The shortest length this layer can be truncated to when it holds `length` tokens:
        0 for a full layer, which keeps every position."""
        return 0


class SlidingLayer(FullLayer):
    """A sliding-window layer's cache: a ring of at most w slots, position p in slot p % slots.

    It grows like a full layer until it has w slots and only then wraps, so a slot is reused
    only once the ring is whole. Its writes wait for commit: they overwrite positions that are
    still in the window, and a failed step must not lose them.
    """

    def append(self, new: dict, start: int) -> tuple[dict, np.ndarray]:
        """Return the window held before this step followed by the new tokens, as stored and
        read back (so a token reads the same however it arrived), and their positions; stage
        the newest min(T, slots) for commit (a prefill longer than the window needs the old
        window, which the writes overwrite)."""
        T = next(iter(new.values())).shape[1]
        self.grow(min(start + T, self.max_slots))
        first = start - self.held(start)
        encoded = {name: self.codec.encode(values) for name, values in new.items()}
        out = {name: np.concatenate([self.read(name, first, start),
                                     self.codec.decode(*encoded[name])], axis=1)
               for name in new}
        keep = min(T, self.slots)                        # a ring keeps at most slots of them
        self.staged = (start, T, {name: (np.array(stored[:, T - keep:]),     # kept apart from
                                         None if scale is None else scale[:, T - keep:])
                                  for name, (stored, scale) in encoded.items()})  # the input
        return out, np.arange(first, start + T)

    def commit(self, start: int, T: int):
        """Write the staged tokens into their ring slots."""
        if self.staged is None or self.staged[2] is None:
            self.staged = None
            return
        _, _, rows = self.staged
        self.staged = None
        keep = next(iter(rows.values()))[0].shape[1]
        first_slot = (start + T - keep) % self.slots
        slots = (slice(first_slot, first_slot + keep) if first_slot + keep <= self.slots
                 else np.arange(first_slot, first_slot + keep) % self.slots)   # wrapping
        for name, (stored, scale) in rows.items():
            self.batched[name][:, slots] = stored
            if scale is not None:
                self.batched[name + "_scale"][:, slots] = scale

    def _copy_slots(self, length: int) -> int:
        """A ring that has wrapped is copied whole, slot for slot."""
        return self.slots if length > self.slots else self.held(length)

    def rollback_floor(self, length: int) -> int:
        """A ring holds positions length - slots .. length - 1; a length n needs its last
        held(n) positions back, so n - held(n) >= length - slots. Before the ring has wrapped
        that is every n >= 0; once it has (slots = w), only n = length: each new position
        overwrote the oldest, which a shorter cache would still see."""
        if length <= self.slots:
            return 0
        return length - self.slots + self.spec.window


LAYER_CACHES = {"full": FullLayer, "sliding": SlidingLayer}     # layer kind -> its cache


def check_cache(cache, name: str = "cache") -> KVCache:
    """cache, if it is a KVCache; else a ValueError that says what was given instead."""
    if isinstance(cache, KVCache):
        return cache
    hint = ""
    if isinstance(cache, ModelConfig) or hasattr(cache, "new_cache"):
        hint = " (a cache comes from model.new_cache())"
    raise ValueError(f"{name} must be a toykv.KVCache, got {type(cache).__name__}{hint}")


class KVCache:
    """Keys and values of every layer for one sequence (batch=None) or a batch of B sequences.

    len(cache) = tokens held per sequence. Made by `model.new_cache(...)`, a cache belongs
    to that model: another model, even one with an equal config, has other weights, so the
    keys and values it holds would be wrong for it, and forward refuses. capacity: positions
    allocated per layer now (default max_seq_len); a layer grows when more arrive.
    policy: a toykv.CachePolicy (or 'full'), what each layer keeps (toykv.policies).
    """
    policy = None               # a kind that keeps every token (toykv.paged) needs none

    def __init__(self, config: ModelConfig, batch: int | None = None,
                 kv_dtype: str = "float32", capacity: int | None = None, policy=None):
        if not isinstance(config, ModelConfig) and hasattr(config, "new_cache"):
            raise ValueError(f"config must be a toykv.ModelConfig, got "
                             f"{type(config).__name__}: use model.new_cache()")
        check_config(config)
        if isinstance(batch, str):                      # new_cache("int8"): an easy slip
            raise ValueError(f"batch must be None or an integer >= 1, got {batch!r}; the KV "
                             f"dtype is the kv_dtype argument: new_cache(kv_dtype={batch!r})")
        self.batch = validate.optional_count("batch", batch, 1)
        self.kv_dtype = check_kv_dtype(kv_dtype)
        capacity = validate.optional_count("capacity", capacity, 1, config.max_seq_len)
        if "linear" in config.layer_kinds:
            raise ValueError("toykv's model has no linear-attention layers; "
                             "layer_types with 'linear' are for sizing only")
        self.config = config
        self.length = 0
        self._owner = None                              # weakref to the model that fills it
        slots = config.max_seq_len if capacity is None else capacity
        validate.fits_in_memory(
            "a KV cache for {}={} tokens{}".format(
                "max_seq_len" if capacity is None else "capacity", slots,
                "" if batch is None else f" x batch {self.batch}"),
            kv_cache_bytes(config, slots, self.batch or 1, self.bytes_per_value,
                           self.scale_bytes),
            "give the ModelConfig a smaller max_seq_len (the cache is allocated for all of it)"
            if capacity is None else "give a smaller capacity")
        codec = Codec(self.kv_dtype)
        self.policy, kind, options = None, None, {}
        if policy is not None:                          # what to keep (toykv.policies)
            from .policies import check_policy          # it builds on this module
            self.policy = check_policy(policy, config, self.batch)
            kind, options = "policy", {"policy": self.policy, "theta": config.rope_theta}
        self.layers = [LAYER_CACHES[kind or spec.kind](spec, codec, self.batch, spec.held(slots),
                                                       spec.held(config.max_seq_len), **options)
                       for spec in config.layers]
        self.names = tuple(name for name, _ in config.layers[0].entries)   # what update takes

    def __len__(self) -> int:
        return self.length

    @property
    def capacity(self) -> list[int]:
        """Positions allocated per layer now."""
        return [layer.slots for layer in self.layers]

    @property
    def bytes_per_value(self) -> int:
        """b: bytes of one stored value (4, 2 or 1), for sizing.kv_cache_bytes."""
        return KV_DTYPE_BYTES[self.kv_dtype][0]

    @property
    def scale_bytes(self) -> int:
        """Bytes of the scale stored per token, layer and K/V head (4 for int8, else 0)."""
        return KV_DTYPE_BYTES[self.kv_dtype][1]

    def held(self, layer: int) -> int:
        """Tokens layer `layer` holds now: all of them, or the last window for a sliding layer."""
        layer = validate.count("layer", layer, 0, self.config.n_layers - 1)
        return self.layers[layer].held(self.length)

    @property
    def nbytes(self) -> int:
        """Bytes held for the tokens stored so far, every sequence (values, plus int8 scales)."""
        return sum(layer.nbytes(self.length) for layer in self.layers)

    @property
    def allocated_nbytes(self) -> int:
        """Bytes allocated now, held or not."""
        return sum(arr.nbytes for layer in self.layers for arr in layer.values())

    # -- reading ---------------------------------------------------------------------
    def stored(self, layer: int, name: str) -> np.ndarray:
        """The values one layer holds in position order, float32 [held, ...] ([B, held, ...]),
        read-only (a view, or a copy for float16, int8 and a wrapped ring)."""
        layer = validate.count("layer", layer, 0, self.config.n_layers - 1)
        validate.choice("name", name, self.names)
        self._check_stores(layer)
        cache = self.layers[layer]
        rows = cache.read(name, self.length - self.held(layer), self.length)
        rows = rows if self.batch else rows[0]
        rows.flags.writeable = False
        return rows

    def _check_stores(self, layer: int):
        """A layer that reuses another's keys and values (kv_sharing) holds none: refused."""
        source = self.config.kv_sources[layer]
        if source != layer:
            raise ValueError(f"layer {layer} holds no keys or values: with kv_sharing="
                             f"{self.config.kv_sharing} it attends to layer {source}'s")

    # -- writing ---------------------------------------------------------------------
    def update(self, layer: int, **new: np.ndarray) -> tuple[dict, np.ndarray]:
        """Store new tokens' entries in `layer` (every name in self.names: 'k' and 'v', or MLA's
        'c_kv' and 'k_rope'; [T, ...] each, [B, T, ...] in a batched cache), after checking them.

        Returns (what attention reads: float32 [Tk, ...] ([B, Tk, ...]) per name, the positions
        [Tk] of those keys). Call advance(T) once every layer has been updated.
        """
        layer = validate.count("layer", layer, 0, self.config.n_layers - 1)
        self._check_stores(layer)
        if len(new) != len(self.names) or any(name not in new for name in self.names):
            missing = [n for n in self.names if n not in new]
            raise ValueError(f"update needs exactly {self.names} for this cache; missing "
                             f"{missing}, unexpected {sorted(set(new) - set(self.names))}")
        T, lead = None, 1 if self.batch is None else 2     # axes before a token's
        shapes = self.config.layers[layer].entry_shapes
        for name in self.names:
            value, shape = new[name], shapes[name]
            if (not isinstance(value, np.ndarray) or value.dtype.kind != "f"
                    or value.ndim != lead + len(shape) or value.shape[lead:] != shape
                    or (self.batch is not None and value.shape[0] != self.batch)):
                given = getattr(value, "shape", type(value).__name__)
                want = "[T, ...]" if self.batch is None else f"[{self.batch}, T, ...]"
                raise ValueError(f"{name} must be a float array of shape {want} with ... = "
                                 f"{shape}, got {given}")
            if T is not None and value.shape[lead - 1] != T:
                raise ValueError(f"every name must bring the same number of tokens T; "
                                 f"{name} brings {value.shape[lead - 1]}, the others {T}")
            T = value.shape[lead - 1]
        if T == 0:
            raise ValueError("update got T = 0 new tokens; give at least one")
        if self.length + T > self.config.max_seq_len:
            raise ValueError(f"cache full: {self.length} tokens + {T} new exceeds max_seq_len "
                             f"{self.config.max_seq_len}")
        return self.append(layer, **new)

    def append(self, layer: int, **new: np.ndarray) -> tuple[dict, np.ndarray]:
        """update() without the checks, for the model's forward pass, which has checked the
        cache and the length once: new entries [T, ...] ([B, T, ...]) -> (every key and value
        the layer attends over, float32 [Tk, ...] ([B, Tk, ...]), their positions [Tk])."""
        if self.batch is None:
            out, positions = self.layers[layer].append(
                {name: values[None] for name, values in new.items()}, self.length)
            return {name: values[0] for name, values in out.items()}, positions
        return self.layers[layer].append(new, self.length)

    def begin_step(self, ids: np.ndarray):
        """forward calls this with the step's token ids [B, T] before any layer runs; a
        KVCache needs nothing (a paged cache finds its blocks, toykv.paged)."""

    def narrow(self, layer: int, positions: np.ndarray, allowed):
        """The mask [T, Tk] of a step's queries, narrowed by the cache's policy (if any)."""
        return allowed if self.policy is None else self.layers[layer].narrow(positions, allowed)

    def attended(self, layer: int, weights: np.ndarray):
        """Hand a step's attention weights [..., T, Tk] to the policy (H2O counts them)."""
        if self.policy is not None:
            self.layers[layer].attended(weights)

    def advance(self, T: int):
        """Commit the step: T more tokens are stored (once per forward, after every layer)."""
        T = validate.count("T", T, 0, self.config.max_seq_len - self.length)
        staged = {layer.staged[1] for layer in self.layers if layer.staged is not None}
        if staged and staged != {T}:
            raise ValueError(f"advance({T}) after update() was given {sorted(staged)} new "
                             "tokens: advance by the tokens given")
        for layer in self.layers:
            layer.commit(self.length, T)
        self.length += T

    def discard(self):
        """Forget a step that was not committed (a forward pass that failed): the cache is
        exactly as it was before the step."""
        for layer in self.layers:
            layer.discard()

    def truncate(self, n: int):
        """Keep the first n tokens (per sequence) and drop the rest: the cache is then exactly
        one that never held the dropped tokens, `len` and `nbytes` included, and continues
        bit for bit as that one would. Speculative decoding rolls back the proposals the model
        rejected this way.

        A batched cache has one length for all its rows, so n is one number for every row
        (rows of different lengths would need a ragged cache). A sliding-window ring that has
        overwritten positions cannot roll back past them: see rollback_floor. A refused call
        changes nothing.
        """
        if isinstance(n, (np.ndarray, list, tuple)):
            raise ValueError("truncate takes one length n for every row: a batched cache has "
                             "one length (rows of different lengths would need a ragged "
                             f"cache), got {type(n).__name__}")
        n = validate.count("n", n, 0, self.length)
        if any(layer.staged is not None for layer in self.layers):
            raise ValueError("truncate during a step (update() without advance()): advance or "
                             "discard the step first")
        for i, layer in enumerate(self.layers):
            if getattr(layer, "rollback_floor", None) is None:
                raise ValueError(f"layer {i}'s cache ({type(layer).__name__}) cannot roll back: "
                                 "what it keeps depends on every token it has seen (a cache "
                                 "policy), or its kind has no rollback_floor (see FullLayer)")
            floor = layer.rollback_floor(self.length)
            if n < floor:
                raise ValueError(
                    f"cannot truncate to {n} tokens: layer {i}'s sliding-window ring of "
                    f"{layer.slots} slots has wrapped, and its writes overwrote positions a "
                    f"cache of {n} tokens would still hold; the shortest length it can roll "
                    f"back to is {floor}")
        self.length = n

    def rollback_floor(self) -> int:
        """The shortest length truncate accepts now: 0 unless a sliding-window ring has
        wrapped, then len(cache) (its writes overwrote the oldest positions in the window)."""
        return max(layer.rollback_floor(self.length) if hasattr(layer, "rollback_floor")
                   else self.length for layer in self.layers)

    # -- ownership and copies ---------------------------------------------------------
    def owned_by(self, model) -> bool:
        """True when `model` fills this cache (it made it, or was the first to use it)."""
        return self._owner is not None and self._owner() is model

    def _claim(self, model):
        """Bind the cache to the model that fills it; refuse any other model."""
        if self._owner is None:
            self._owner = weakref.ref(model)
        elif self._owner() is not model:
            raise ValueError("cache belongs to another ToyTransformer: its keys and values "
                             "come from that model's weights (even with an equal config); "
                             "use this model's new_cache()")

    def copy(self, capacity: int | None = None) -> KVCache:
        """A new cache holding the same tokens, bound to the same model, that fills on its own:
        prefix reuse fills one cache with a shared prompt and continues a copy per request.

        Only what is held is copied. capacity: positions to allocate per layer (at least what
        is held); default twice the tokens held (at most max_seq_len), so a continuation as
        long again needs no regrowth, and beyond that the copy grows as any cache does. A
        wrapped sliding ring is copied whole. Same batch and kv_dtype. The slots past the held
        ones are left unset, not zeroed: each is written before anything reads it.
        """
        held = max(len(self), 1)
        capacity = validate.optional_count("capacity", capacity, 1, self.config.max_seq_len)
        if capacity is None:
            capacity = min(2 * held, self.config.max_seq_len)
        capacity = max(capacity, len(self), 1)
        twin = KVCache.__new__(KVCache)
        twin.__dict__.update(self.__dict__)               # config, batch, kv_dtype, owner
        twin.layers = [layer.copy(self.length, layer.spec.held(capacity))
                       for layer in self.layers]
        return twin


__all__ = ["KVCache", "FullLayer", "SlidingLayer", "LAYER_CACHES", "check_cache", "head_major",
           "KV_DTYPES", "SCALE_BYTES"]
