"""The KV cache: one layer object per model layer, each of a kind (toykv.kinds), one protocol.

Each layer's kind follows its description (toykv.layers.LayerSpec) and the cache's options: a
full-attention layer keeps every position (FullLayer), a sliding-window layer a ring of w =
`sliding_window` slots, so its memory stops growing (SlidingLayer); a CachePolicy keeps a
budget of tokens (SinksLayer, HeavyHitterLayer), a QuantScheme stores them in a few bits
(QuantizedLayer), and a BlockPool supplies layers that read and write its blocks (PagedLayer).
MHA/GQA/MQA layers store K and V per KV head; MLA layers store the latent c_kv and one shared
rotary key (deepseek2024v2), 'lowrank' layers the latent alone. A layer that reuses an earlier
layer's keys and values (kv_sharing) holds nothing: its SharedLayer returns what its source
attends over in the step. kv_dtype 'int8' stores values as int8 with one float32 scale per
token and head (and per entry), and `nbytes` counts both.

A step is all or nothing: `update`/`append` give attention what each layer's queries attend over
(a toykv.kinds.Seen) with the new tokens included, and `advance(T)` commits the step. A forward
pass that fails at any layer calls `discard()`, so every cache is left exactly as it was: its
length and every held value. `check_step(T)` refuses, before any work, a step a layer cannot
take (a finished sequence, a pool out of blocks).

An unbatched cache (batch=None) holds one sequence: `layers[l][name]` is [capacity, ...]. A
batched cache holds B sequences of the same length: `layers[l][name]` is [B, capacity, ...].
Either way `len(cache)` is the tokens held per sequence. K and V are indexed [.., position,
head, dim] but laid out in memory head by head, as Hugging Face's [batch, heads, tokens,
head_dim] caches are (`head_major`).

Rollback: `truncate(n)` keeps the first n positions and drops the rest, as truncating a file
does (speculative decoding drops the proposed tokens the model did not accept). Each kind says
how far it can go (`rollback_floor`): a full layer anywhere, a ring that has overwritten a
position the shorter cache would hold again nowhere, a policy that has evicted tokens nowhere.
A refused truncate changes nothing.
"""
from __future__ import annotations

import weakref
from dataclasses import replace

import numpy as np

from . import validate
from .config import ModelConfig, check_config
from .kinds import KINDS, Codec, Seen, head_major
from .kinds.shared import shared_layers
from .kinds.paged import BlockPool
from .kinds.quantized import QuantScheme, check_layers
from .layers import KV_DTYPE_BYTES, check_kv_dtype
from .policies import check_policy
from .sizing import kv_cache_bytes

KV_DTYPES = tuple(KV_DTYPE_BYTES)                                   # 'float32', 'float16', 'int8'
SCALE_BYTES = {name: scale for name, (_, scale) in KV_DTYPE_BYTES.items()}


def check_cache(cache, name: str = "cache") -> KVCache:
    """cache, if it is a KVCache; else a ValueError that says what was given instead."""
    if isinstance(cache, KVCache):
        return cache
    hint = ""
    if isinstance(cache, ModelConfig) or hasattr(cache, "new_cache"):
        hint = " (a cache comes from model.new_cache())"
    raise ValueError(f"{name} must be a toykv.KVCache, got {type(cache).__name__}{hint}")


def _schemes(quant, batch) -> tuple | None:
    """quant (a QuantScheme, or one per row of a batch, None for a float32 row) as a tuple."""
    if quant is None:
        return None
    rows = [quant] * (batch or 1) if isinstance(quant, QuantScheme) else list(quant) \
        if isinstance(quant, (list, tuple)) else None
    if rows is None or not all(s is None or isinstance(s, QuantScheme) for s in rows):
        raise ValueError(f"quant must be a toykv.kvquant.QuantScheme, or one (or None) per row, "
                         f"got {quant!r}")
    if len(rows) != (batch or 1):
        raise ValueError(f"quant gives {len(rows)} schemes for {batch or 1} rows")
    return tuple(rows)


def new_pool(model, num_blocks: int, block_size: int = 16, kv_dtype: str = "float32"):
    """A BlockPool of num_blocks blocks of block_size tokens for many sequences of `model`
    (toykv.paged): pool.new_sequence() gives each one a cache forward accepts."""
    return BlockPool(model, num_blocks, block_size, kv_dtype)


class KVCache:
    """Keys and values of every layer for one sequence (batch=None) or a batch of B sequences.

    len(cache) = tokens held per sequence. Made by `model.new_cache(...)`, a cache belongs
    to that model: another model, even one with an equal config, has other weights, so the
    keys and values it holds would be wrong for it, and forward refuses. capacity: positions
    allocated per layer now (default max_seq_len); a layer grows when more arrive.
    policy: a toykv.CachePolicy (or 'full'), what each layer keeps (toykv.policies).
    quant: a toykv.kvquant.QuantScheme (or one per row, None for float32): quantized storage.
    pool: a toykv.paged.BlockPool (pool.new_sequence() passes it): the layers are its blocks.
    """

    def __init__(self, config: ModelConfig, batch: int | None = None,
                 kv_dtype: str = "float32", capacity: int | None = None, policy=None,
                 quant=None, pool=None):
        if not isinstance(config, ModelConfig) and hasattr(config, "new_cache"):
            raise ValueError(f"config must be a toykv.ModelConfig, got "
                             f"{type(config).__name__}: use model.new_cache()")
        check_config(config)
        if isinstance(batch, str):                      # new_cache("int8"): an easy slip
            raise ValueError(f"batch must be None or an integer >= 1, got {batch!r}; the KV "
                             f"dtype is the kv_dtype argument: new_cache(kv_dtype={batch!r})")
        batch = validate.optional_count("batch", batch, 1)
        kv_dtype = check_kv_dtype(kv_dtype)
        capacity = validate.optional_count("capacity", capacity, 1, config.max_seq_len)
        if "linear" in config.layer_kinds:
            raise ValueError("toykv's model has no linear-attention layers; "
                             "layer_types with 'linear' are for sizing only")
        if policy is not None:
            policy = check_policy(policy, config, batch)
        schemes = _schemes(quant, batch)
        chosen = [name for name, given in (("policy", policy), ("quant", schemes),
                                           ("pool", pool)) if given is not None]
        if len(chosen) > 1:
            raise ValueError(f"a cache takes one of policy, quant and pool, got {chosen}: each "
                             "decides how its layers hold the tokens")
        if schemes is not None:
            check_layers(config)
            if kv_dtype != "float32":
                raise ValueError(f"a quantized cache (quant) stores its own codes: give "
                                 f"kv_dtype='float32', got {kv_dtype!r}")
        if pool is not None:
            layers = self._pool_layers(pool, config, batch, kv_dtype, capacity)
        else:
            slots = config.max_seq_len if capacity is None else capacity
            value, scale = KV_DTYPE_BYTES[kv_dtype]
            validate.fits_in_memory(
                "a KV cache for {}={} tokens{}".format(
                    "max_seq_len" if capacity is None else "capacity", slots,
                    "" if batch is None else f" x batch {batch}"),
                kv_cache_bytes(config, slots, batch or 1, value, scale),
                "give the ModelConfig a smaller max_seq_len (the cache is allocated for all of "
                "it)" if capacity is None else "give a smaller capacity")
            layers = self._build(config, batch, kv_dtype, slots, policy, schemes)
        self._setup(config, batch, kv_dtype, policy, schemes, layers)

    @staticmethod
    def _pool_layers(pool, config, batch, kv_dtype, capacity) -> list:
        if not isinstance(pool, BlockPool) or pool.config != config:
            raise ValueError("pool must be a toykv.paged.BlockPool of this model "
                             "(model.new_paged_cache)")
        if batch is not None or capacity is not None or kv_dtype != pool.kv_dtype:
            raise ValueError(f"a pool's sequence holds one sequence, takes its blocks as tokens "
                             f"arrive and stores the pool's kv_dtype ({pool.kv_dtype!r}): give "
                             f"no batch or capacity")
        return pool.new_layers()

    @staticmethod
    def _build(config, batch, kv_dtype, slots, policy, schemes) -> list:
        """One layer of its kind per model layer (toykv.kinds.KINDS); a layer that reuses
        another's keys and values (kv_sharing) a SharedLayer reading that one."""
        codec, options, kind = Codec(kv_dtype), {}, None
        if policy is not None:
            kind, options = policy.kind, {"policy": policy, "theta": config.rope_theta}
        elif schemes is not None:
            kind, options = "quantized", {"schemes": schemes}
        return shared_layers(config, [
            None if spec.shares_kv else KINDS[kind or spec.kind](
                spec, codec, batch, spec.held(slots), spec.held(config.max_seq_len), **options)
            for spec in config.layers])

    def _setup(self, config, batch, kv_dtype, policy, schemes, layers):
        """The attributes every cache has, given its layers (a new cache's, a copy's)."""
        self.config, self.batch, self.kv_dtype = config, batch, kv_dtype
        self.policy, self.quant, self.layers = policy, schemes, layers
        self.length, self.cached_tokens, self.finished = 0, 0, False
        self._owner = None                              # weakref to the model that fills it
        self.names = tuple(name for name, _ in config.layers[0].entries)   # what update takes

    def __len__(self) -> int:
        return self.length

    # -- what it holds ------------------------------------------------------------------
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
        """Tokens layer `layer` holds now: all of them, or fewer (a window, a policy)."""
        layer = validate.count("layer", layer, 0, self.config.n_layers - 1)
        return self.layers[layer].held(self.length)

    def positions(self, layer: int) -> np.ndarray:
        """The positions layer `layer` holds now, ascending. [held]"""
        layer = validate.count("layer", layer, 0, self.config.n_layers - 1)
        return self.layers[layer].held_positions(self.length)

    @property
    def nbytes(self) -> int:
        """Bytes held for the tokens stored so far, every sequence (values, plus int8 scales)."""
        return sum(layer.nbytes(self.length) for layer in self.layers)

    @property
    def allocated_nbytes(self) -> int:
        """Bytes allocated now, held or not."""
        return sum(layer.allocated_nbytes for layer in self.layers)

    @property
    def table(self) -> list[int] | None:
        """A pool's sequence: its block table, the pool's blocks holding its tokens in order
        (None for a cache that holds its own arrays)."""
        table = getattr(self.layers[0], "table", None)
        return None if table is None else table.block_table

    def blocks_needed(self, T: int) -> int:
        """Free blocks of a shared pool a step of T more tokens takes (a copy of a shared or
        registered last block included); 0 for a cache that holds its own arrays."""
        T = validate.count("T", T, 1)
        return max(layer.blocks_needed(self.length, T) for layer in self.layers)

    def stored(self, layer: int, name: str) -> np.ndarray:
        """The values one layer holds in position order, float32 [held, ...] ([B, held, ...]),
        read-only (a view, or a copy for float16, int8, a wrapped ring and a paged layer)."""
        layer = validate.count("layer", layer, 0, self.config.n_layers - 1)
        validate.choice("name", name, self.names)
        if self.finished:
            raise ValueError("this cache is finished (a pool's sequence gave its blocks back): "
                             "it holds nothing to read")
        rows = self.layers[layer].stored(name, self.length)
        rows = rows if self.batch else rows[0]
        rows.flags.writeable = False
        return rows

    # -- a step ----------------------------------------------------------------------------
    def check_step(self, T: int):
        """Refuse, before any work, a step of T new tokens that some layer cannot take: a
        finished cache, one past max_seq_len, a pool without the blocks. Changes nothing."""
        for layer in self.layers:                       # a pool's sequence says it first
            layer.check_step(self.length, T)
        self._check_open(T)

    def check_room(self, T: int):
        """Refuse, before a run of several steps, T more tokens that would not fit however they
        arrive (max_seq_len, a pool's free blocks); changes nothing."""
        for layer in self.layers:
            layer.check_room(self.length, T)
        self._check_open(T)

    def check_chunks(self, T: int, chunk: int):
        """Refuse, before a run that feeds T more tokens `chunk` at a time, one that some layer
        would refuse part-way: no room for them all (check_room), or a step it cannot take
        where it comes (a renumbered policy past its budget takes one token a step). Changes
        nothing."""
        T, chunk = validate.count("T", T, 1), validate.count("chunk", chunk, 1)
        self.check_room(T)
        for done in range(0, T, chunk):                 # T <= max_seq_len: a bounded loop
            for layer in self.layers:
                layer.check_step(self.length + done, min(chunk, T - done))

    def _check_open(self, T: int):
        if self.finished:
            raise ValueError("this cache is finished; start a new one")
        if self.length + T > self.config.max_seq_len:
            raise ValueError(f"cache full: {self.length} tokens + {T} new exceeds max_seq_len "
                             f"{self.config.max_seq_len}")

    def update(self, layer: int, **new: np.ndarray) -> Seen:
        """Store new tokens' entries in `layer` (every name in self.names: 'k' and 'v', or MLA's
        'c_kv' and 'k_rope'; [T, ...] each, [B, T, ...] in a batched cache), after checking them.

        Returns what attention reads (a Seen: float32 [Tk, ...] ([B, Tk, ...]) per name, the
        positions [Tk] of those keys, the mask). Call advance(T) once every layer is updated.
        """
        layer = validate.count("layer", layer, 0, self.config.n_layers - 1)
        source = self.config.kv_sources[layer]
        if source != layer:
            raise ValueError(f"layer {layer} holds no keys or values: with kv_sharing="
                             f"{self.config.kv_sharing} it attends to layer {source}'s (update "
                             f"layer {source})")
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
        staged = self.layers[layer].staged
        if staged is None:
            self.check_step(T)
        return self.append(layer, **new)

    def append(self, layer: int, **new: np.ndarray) -> Seen:
        """update() without the checks, for the model's forward pass, which has checked the
        cache and the step once: new entries [T, ...] ([B, T, ...]) -> what layer `layer`'s
        queries attend over (a Seen: every key and value, float32 [Tk, ...] ([B, Tk, ...]),
        their positions [Tk], the mask [T, Tk])."""
        kind = self.layers[layer]
        if self.batch is None:
            new = {name: values[None] for name, values in new.items()}
        kind.seen = seen = kind.append(new, self.length)     # kept for a layer sharing it
        kv = seen.kv if self.batch is not None else \
            {name: values[0] for name, values in seen.kv.items()}
        return replace(seen, kv=kv, layer=layer, batch=self.batch,
                       observe=getattr(kind, "observe", None))

    def advance(self, T: int, token_ids=None):
        """Commit the step: T more tokens are stored (once per forward, after every layer).
        token_ids [T] ([B, T]): the step's tokens, for a pool's prefix caching."""
        T = validate.count("T", T, 0, self.config.max_seq_len - self.length)
        staged = {layer.staged[1] for layer in self.layers if layer.staged is not None}
        if staged and staged != {T}:
            raise ValueError(f"advance({T}) after update() was given {sorted(staged)} new "
                             "tokens: advance by the tokens given")
        for layer in self.layers:
            layer.commit(self.length, T, token_ids)
            layer.seen = None
        self.length += T

    def discard(self):
        """Forget a step that was not committed (a forward pass that failed): the cache is
        exactly as it was before the step."""
        for layer in self.layers:
            layer.discard()
            layer.seen = None

    # -- rollback ----------------------------------------------------------------------------
    def rollback_floor(self, ahead: int = 0) -> int:
        """The shortest length truncate accepts now; ahead=T: once a step of T more tokens is
        in (speculative decoding asks before it verifies). 0 for full and paged layers; a ring
        that has wrapped, a policy that has evicted or counted, quantized groups raise it."""
        ahead = validate.count("ahead", ahead, 0)
        return max(layer.rollback_floor(self.length + ahead) for layer in self.layers)

    def truncate(self, n: int):
        """Keep the first n tokens (per sequence) and drop the rest: the cache is then exactly
        one that never held the dropped tokens, `len` and `nbytes` included, and continues
        bit for bit as that one would. Speculative decoding rolls back the proposals the model
        rejected this way.

        A batched cache has one length for all its rows, so n is one number for every row
        (rows of different lengths would need a ragged cache). A layer that cannot go back so
        far refuses (see rollback_floor). A refused call changes nothing.
        """
        if isinstance(n, (np.ndarray, list, tuple)):
            raise ValueError("truncate takes one length n for every row: a batched cache has "
                             "one length (rows of different lengths would need a ragged "
                             f"cache), got {type(n).__name__}")
        n = validate.count("n", n, 0, self.length)
        if any(layer.staged is not None for layer in self.layers):
            raise ValueError("truncate during a step (update() without advance()): advance or "
                             "discard the step first")
        if self.finished:
            raise ValueError("cannot truncate a finished cache")
        for i, layer in enumerate(self.layers):
            floor = layer.rollback_floor(self.length)
            if n < floor:
                raise ValueError(
                    f"cannot truncate to {n} tokens: layer {i}'s "
                    f"{layer.floor_reason(self.length, n)}; the shortest length it can roll "
                    f"back to is {floor}")
        for layer in self.layers:
            layer.crop(n, self.length)
        self.length = n

    # -- ownership, copies, the end ---------------------------------------------------------
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

    def copy(self, capacity: int | None = None, batch: int | None = None,
             quant=None) -> KVCache:
        """A new cache holding the same tokens, bound to the same model, that fills on its own:
        prefix reuse fills one cache with a shared prompt and continues a copy per request.

        Only what is held is copied. capacity: positions to allocate per layer (at least what
        is held); default twice the tokens held (at most max_seq_len), so a continuation as
        long again needs no regrowth, and beyond that the copy grows as any cache does. A
        wrapped sliding ring is copied whole; a pool's sequence is forked (its blocks shared,
        copied on the first write). Same batch, kv_dtype and kind, unless batch=B (a copy of
        one sequence in each of B rows) or quant (quantized from its next step on) is given:
        those need a float32 cache of full layers.
        """
        if self.finished or any(layer.staged is not None for layer in self.layers):
            raise ValueError("cannot copy a finished cache, or one during a step")
        capacity = validate.optional_count("capacity", capacity, 1, self.config.max_seq_len)
        if capacity is None:
            capacity = min(2 * max(len(self), 1), self.config.max_seq_len)
        capacity = max(capacity, len(self), 1)
        if batch is not None or quant is not None:
            return self._convert(capacity, batch, quant)
        layers = []
        shared = {"layers": layers}          # the copies so far: a SharedLayer reads its source's
        for layer in self.layers:
            layers.append(layer.copy(self.length, layer.spec.held(capacity), shared))
        twin = object.__new__(KVCache)
        twin._setup(self.config, self.batch, self.kv_dtype, self.policy, self.quant, layers)
        twin.length, twin._owner = self.length, self._owner
        return twin

    def fork(self) -> KVCache:
        """copy(): for a pool's sequence, a new sequence sharing every block (copy on write)."""
        return self.copy()

    def _convert(self, capacity: int, batch, quant) -> KVCache:
        """A copy of another batch (one sequence in every row) or kind (quantized storage)."""
        batch = validate.optional_count("batch", batch, 1)
        if self.batch is not None and batch not in (None, self.batch):
            raise ValueError(f"a batched cache is copied with its own batch ({self.batch})")
        if self.kv_dtype != "float32" or self.policy is not None or self.quant is not None \
                or any(layer.held(self.length) != self.length for layer in self.layers):
            raise ValueError("copy(batch=, quant=) needs a float32 cache that holds every "
                             "token it was fed (no policy, no wrapped ring, not quantized)")
        rows = self.batch if batch is None else batch
        twin = KVCache(self.config, rows, "float32", capacity, quant=quant)
        for i in sorted(set(self.config.kv_sources)):        # the layers that store
            layer = twin.layers[i]
            values = {name: self.stored(i, name) for name in self.names}
            if self.batch is None:
                values = {n: np.broadcast_to(v, (rows or 1, *v.shape)) for n, v in
                          values.items()}
            layer.write(values, 0)
        twin.length, twin._owner = self.length, self._owner
        return twin

    def finish(self):
        """The cache is done: a pool's sequence gives its blocks back (the last first, so a
        prefix stays cached longest); no step runs after. Refused during a step."""
        if self.finished:
            raise ValueError("this cache is already finished")
        if any(layer.staged is not None for layer in self.layers):
            raise ValueError("cannot finish a cache during a step")
        for layer in self.layers:
            layer.finish()
        self.finished = True


__all__ = ["KVCache", "check_cache", "new_pool", "head_major", "KV_DTYPES", "SCALE_BYTES"]
