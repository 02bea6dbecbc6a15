"""A paged KV cache: one pool of fixed-size blocks serves many sequences (kwon2023pagedattention).

A contiguous cache reserves room for a sequence's whole length up front. A paged cache keeps
every layer's keys and values in a pool of `num_blocks` blocks of `block_size` tokens and gives
a sequence a block only when its tokens reach it; its *block table* lists its blocks in order,
so position p lives in slot table[p // block_size] * block_size + p % block_size. Attention
reads a sequence's keys and values through its table (a gather), so a sequence wastes at most
block_size - 1 slots, in its last block.

The pieces take nano-vllm's names (GeeeekExplorer/nano-vllm, block_manager.py):

- BlockManager: the bookkeeping only (a free list, a reference count per block, each full
  block's hash), no arrays; toykv.scheduler's simulation uses it alone for models too big to
  hold.
- BlockPool: a BlockManager and the arrays of every layer's entries, for one model
  (`model.new_paged_cache(num_blocks, block_size)`).
- PagedCache: one sequence's view of a pool, a KVCache the model's forward accepts:
  `pool.new_sequence(prompt_ids)`, then forward as with any cache; `finish()` returns its
  blocks.

Prefix caching (vLLM's automatic prefix caching, vllm_prefix_caching): a full block's hash
chains its tokens with the hash of the block before it, so equal hashes mean equal prefixes.
new_sequence finds the longest run of the prompt's full blocks already in the pool and shares
them (reference count + 1) instead of computing them again; a block whose count drops to 0
goes back to the free list but keeps its hash until it is taken for other tokens, so a prefix
outlives its last user while memory allows. A shared block written into (a fork that diverges
inside it) is copied first: copy on write. SGLang keeps the same prefixes in a radix tree
(zheng2024sglang) instead of a table of hashes.

A step is all or nothing, as for a KVCache: blocks are found before any layer runs (or an
OutOfBlocks error leaves everything as it was), and a step that fails puts back the pool's
bookkeeping and every value it overwrote, so the pool is exactly as it was, arrays included.
Sliding-window layers are refused: a paged cache here holds every position.
"""
from __future__ import annotations

import math
import weakref
from collections import deque

import numpy as np

from . import validate
from .cache import Codec, KVCache
from .layers import KV_DTYPE_BYTES, check_kv_dtype
from .sizing import kv_cache_bytes


MAX_BLOCKS = 10_000_000     # a BlockManager keeps a few Python lists of this length, at most


class OutOfBlocks(RuntimeError):
    """The pool has fewer free blocks than a step needs: admit later, or preempt a sequence."""


class BlockManager:
    """Which blocks are free, who holds each one, and the hash of each full block.

    ref_count[b]: sequences whose block table holds block b (0: free). free: the free blocks,
    the least recently freed first (taken first). hash_of[b]: the chained hash of a full block's
    tokens, or None; prefix_blocks maps a hash to its block, for prefix caching.
    """

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = validate.count("num_blocks", num_blocks, 1, MAX_BLOCKS)
        self.block_size = validate.count("block_size", block_size, 1)
        self.ref_count = [0] * self.num_blocks
        self.hash_of: list = [None] * self.num_blocks
        self.tokens_of: list = [None] * self.num_blocks         # a hashed block's tokens
        self.free = deque(range(self.num_blocks))
        self.prefix_blocks: dict = {}

    @property
    def num_free(self) -> int:
        return len(self.free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self.free)

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold `tokens` tokens: ceil(tokens / block_size)."""
        return -(-validate.count("tokens", tokens, 0) // self.block_size)

    def take(self) -> int:
        """A free block for new tokens (count 1); it forgets the prefix it held."""
        if not self.free:
            raise OutOfBlocks(f"all {self.num_blocks} blocks are in use")
        block = self.free.popleft()
        self._forget(block)
        self.ref_count[block] = 1
        return block

    def share(self, block: int):
        """One more sequence holds `block` (a free one comes back from the free list)."""
        if self.ref_count[block] == 0:
            self.free.remove(block)
        self.ref_count[block] += 1

    def release(self, block: int):
        """One sequence fewer holds `block`; at 0 it is free (its hash kept until taken)."""
        if self.ref_count[block] <= 0:
            raise ValueError(f"block {block} is not in use")
        self.ref_count[block] -= 1
        if self.ref_count[block] == 0:
            self.free.append(block)

    @staticmethod
    def chain(previous, tokens: tuple) -> int:
        """The hash of a full block: its tokens chained with the hash of the block before."""
        return hash((previous, tokens))

    def lookup(self, previous, tokens: tuple):
        """The block holding these tokens after the prefix hashed `previous`, or None."""
        block = self.prefix_blocks.get(self.chain(previous, tokens))
        if block is not None and self.tokens_of[block] == (previous, tokens):
            return block
        return None

    def register(self, block: int, previous, tokens: tuple) -> int:
        """Record full `block` as holding `tokens` after the prefix hashed `previous`; its hash.
        A prefix already held by another block keeps that block."""
        key = self.chain(previous, tokens)
        if key not in self.prefix_blocks:
            self.prefix_blocks[key] = block
            self.hash_of[block], self.tokens_of[block] = key, (previous, tokens)
        return key

    def _forget(self, block: int):
        key = self.hash_of[block]
        if key is not None and self.prefix_blocks.get(key) == block:
            del self.prefix_blocks[key]
        self.hash_of[block] = self.tokens_of[block] = None

    def state(self) -> tuple:
        """Everything the manager knows, to compare or to restore."""
        return (list(self.ref_count), list(self.hash_of), list(self.tokens_of),
                list(self.free), dict(self.prefix_blocks))

    def restore(self, state: tuple):
        ref, hashes, tokens, free, prefix = state
        self.ref_count, self.hash_of, self.tokens_of = list(ref), list(hashes), list(tokens)
        self.free, self.prefix_blocks = deque(free), dict(prefix)


class BlockPool:
    """num_blocks blocks of block_size tokens, every layer's K and V (or MLA's latent), for one
    model. Made by `model.new_paged_cache(num_blocks, block_size)`; sequences come from
    new_sequence. arrays[l][name] is [num_blocks * block_size, ...], slot s of block s //
    block_size (K and V head-major, as in a KVCache)."""

    def __init__(self, model, num_blocks: int, block_size: int, kv_dtype: str = "float32"):
        config = model.config
        block_size = validate.count("block_size", block_size, 1, config.max_seq_len)
        num_blocks = validate.count("num_blocks", num_blocks, 1)
        if "sliding" in config.layer_kinds:
            raise ValueError("a paged cache holds every position: sliding-window layers "
                             "(config.sliding_window) are not supported; use model.new_cache()")
        self.kv_dtype = check_kv_dtype(kv_dtype)
        value, scale = KV_DTYPE_BYTES[self.kv_dtype]
        self.block_nbytes = kv_cache_bytes(config, block_size, 1, value, scale)
        validate.fits_in_memory(f"a block pool of {num_blocks:,} blocks of {block_size} tokens",
                                num_blocks * self.block_nbytes,
                                "give fewer blocks (num_blocks) or smaller ones")
        self.config, self.manager = config, BlockManager(num_blocks, block_size)
        self.codec = Codec(self.kv_dtype)
        slots = num_blocks * block_size
        self.arrays = []
        for spec in config.layers:
            arrays = {}
            for name, shape in spec.entries:
                arrays.update(self.codec.zeros(name, (slots, *shape), shape))
            self.arrays.append(arrays)
        self._model = weakref.ref(model)
        self.sequences = weakref.WeakSet()                 # the live PagedCaches

    @property
    def num_blocks(self) -> int:
        return self.manager.num_blocks

    @property
    def block_size(self) -> int:
        return self.manager.block_size

    @property
    def nbytes(self) -> int:
        """Bytes of every block, used or free: what the pool reserves."""
        return self.num_blocks * self.block_nbytes

    @property
    def used_nbytes(self) -> int:
        """Bytes of the blocks some sequence holds."""
        return self.manager.num_used * self.block_nbytes

    def new_sequence(self, prompt_ids=None) -> PagedCache:
        """An empty sequence of this pool; given the prompt's ids, it starts holding the
        longest run of the prompt's full blocks the pool already has (prefix caching), at most
        all but the prompt's last token, so len(seq) tokens are cached: feed prompt_ids[len(seq):].
        """
        seq = PagedCache(self)
        if prompt_ids is not None:
            prompt = validate.token_ids("prompt_ids", prompt_ids, self.config.vocab_size)
            seq._attach_prefix(prompt)
        return seq

    def check_sequence(self, seq) -> PagedCache:
        """seq, if it is a PagedCache of this pool; else a ValueError."""
        if not isinstance(seq, PagedCache):
            raise ValueError(f"expected a PagedCache of this pool, got {type(seq).__name__}")
        if seq.pool is not self:
            raise ValueError("this sequence's block table points into another BlockPool")
        return seq

    def block_owners(self) -> list[int]:
        """Per block: how many sequences hold it (0: free), for views of the pool."""
        return list(self.manager.ref_count)

    def snapshot(self) -> tuple:
        """The bookkeeping and a copy of every array: equal snapshots, equal pools."""
        return self.manager.state(), [{n: np.array(a) for n, a in layer.items()}
                                      for layer in self.arrays]


class PagedLayer:
    """One layer of one sequence: reads and writes the pool's arrays through its block table."""

    def __init__(self, seq: PagedCache, index: int):
        self.seq, self.index, self.spec = seq, index, seq.config.layers[index]
        self.staged = None

    @property
    def arrays(self) -> dict:
        return self.seq.pool.arrays[self.index]

    def values(self):
        return self.arrays.values()

    def held(self, length: int) -> int:
        return self.spec.held(length)

    def nbytes(self, length: int) -> int:
        """Bytes of the blocks the sequence holds, this layer's share (0 for a layer that reuses
        another's keys and values)."""
        pool = self.seq.pool
        per_slot = sum(a.nbytes for a in self.arrays.values()) // (pool.num_blocks *
                                                                    pool.block_size)
        return len(self.seq.table) * pool.block_size * per_slot

    def read(self, name: str, first: int, end: int) -> np.ndarray:
        """Positions first..end-1 as float32 [1, end - first, ...], gathered from their blocks
        a block at a time (K and V come out head-major, as a KVCache holds them)."""
        scale = self.arrays.get(name + "_scale")
        return self.seq.pool.codec.decode(
            self._gather(self.arrays[name], first, end),
            None if scale is None else self._gather(scale, first, end))[None]

    def _gather(self, array: np.ndarray, first: int, end: int) -> np.ndarray:
        bs = self.seq.pool.block_size
        table = self.seq._slots[::bs] // bs                 # the block table, staged blocks too
        blocks = table[first // bs:-(-end // bs)]
        lo, n = first - first // bs * bs, end - first
        if array.ndim == 3:                                 # K, V: memory [H, slots, d]
            heads = array.swapaxes(0, 1)                    # the C-ordered array beneath
            H, d = heads.shape[0], heads.shape[2]
            rows = heads.reshape(H, -1, bs, d)[:, blocks].reshape(H, -1, d)
            return rows[:, lo:lo + n].swapaxes(0, 1)        # [n, H, d], head-major
        rest = array.shape[1:]
        return array.reshape(-1, bs, *rest)[blocks].reshape(-1, *rest)[lo:lo + n]

    def append(self, new: dict, start: int) -> tuple[dict, np.ndarray]:
        """Write the new tokens [1, T, ...] into their slots; return every position's values."""
        T = next(iter(new.values())).shape[1]
        self.seq._stage(T)
        slots = self.seq._slots[start:start + T]
        for name, values in new.items():
            stored, scale = self.seq.pool.codec.encode(values[0])
            self.arrays[name][slots] = stored
            if scale is not None:
                self.arrays[name + "_scale"][slots] = scale
        self.staged = (start, T, None)
        end = start + T
        return {name: self.read(name, 0, end) for name in new}, np.arange(end)

    def commit(self, start: int, T: int):
        self.staged = None

    def discard(self):
        self.staged = None


class PagedCache(KVCache):
    """One sequence's cache in a BlockPool: its block table, its length and its tokens.

    The model's forward takes it as it takes a one-sequence KVCache. nbytes = blocks held x
    block bytes (a shared block counts in full for every sequence holding it; the pool's
    used_nbytes counts it once). fork() shares every block (copy on write), finish() gives
    them back, truncate(n) drops the tokens after the first n.
    """

    def __init__(self, pool: BlockPool):
        model = pool._model()
        if model is None:
            raise ValueError("the model of this BlockPool no longer exists")
        self.pool, self.config, self.batch = pool, pool.config, None
        self.kv_dtype, self.length, self.finished = pool.kv_dtype, 0, False
        self._owner = weakref.ref(model)
        self.names = tuple(name for name, _ in self.config.layers[0].entries)
        self.layers = [PagedLayer(self, i) for i in range(self.config.n_layers)]
        self.table: list[int] = []
        self.tokens: list[int] | None = []       # None once a step came without its ids
        self.block_hashes: list[int] = []        # hash of each full block, in order
        self.cached_tokens = 0                   # tokens found by prefix caching
        self._staged = None
        self._slots = np.zeros(0, np.int64)
        pool.sequences.add(self)

    # -- what it holds ---------------------------------------------------------------
    @property
    def capacity(self) -> list[int]:
        """Positions its blocks hold, per layer."""
        return [len(self.table) * self.pool.block_size] * self.config.n_layers

    @property
    def nbytes(self) -> int:
        """Blocks held x bytes per block (every layer, values and int8 scales)."""
        return len(self.table) * self.pool.block_nbytes

    @property
    def allocated_nbytes(self) -> int:
        return self.nbytes

    def blocks_needed(self, T: int) -> int:
        """Free blocks a step of T more tokens takes (with a copy of a shared last block)."""
        start, bs = self.length, self.pool.block_size
        new = -(-(start + T) // bs) - len(self.table)
        cow = start % bs != 0 and self.pool.manager.ref_count[self.table[-1]] > 1
        return new + int(cow)

    def _set_slots(self, table):
        bs = self.pool.block_size
        self._slots = (np.repeat(np.asarray(table, np.int64) * bs, bs)
                       + np.tile(np.arange(bs), len(table)))

    # -- a step: stage, then advance (commit) or discard --------------------------------
    def begin_step(self, ids: np.ndarray):
        """forward calls this with the step's ids [1, T] before any layer: find the blocks."""
        self._stage(ids.shape[-1], [int(t) for t in np.ravel(ids)])

    def _stage(self, T: int, ids=None):
        if self._staged is not None:
            return
        if self.finished:
            raise ValueError("this sequence is finished (its blocks went back to the pool); "
                             "start a new one with pool.new_sequence()")
        manager, bs = self.pool.manager, self.pool.block_size
        need = self.blocks_needed(T)
        if need > manager.num_free:
            raise OutOfBlocks(f"a step of {T} tokens needs {need} free "
                              f"block{'s' if need != 1 else ''}, the pool has "
                              f"{manager.num_free} of {manager.num_blocks}: wait for a sequence "
                              f"to finish, or preempt one")
        state, table = manager.state(), list(self.table)
        start = self.length
        cow = start % bs != 0 and manager.ref_count[table[-1]] > 1
        taken = [manager.take() for _ in range(need)]
        written = taken + ([table[-1]] if start % bs and not cow else [])
        saved = {b: [{n: a[b * bs:(b + 1) * bs].copy() for n, a in layer.items()}
                     for layer in self.pool.arrays] for b in written}
        if cow:                                      # copy the shared block, write the copy
            old, table[-1] = table[-1], taken.pop(0)
            for layer in self.pool.arrays:
                for a in layer.values():
                    a[table[-1] * bs:(table[-1] + 1) * bs] = a[old * bs:(old + 1) * bs]
            manager.release(old)
        table += taken
        self._staged = {"T": T, "table": table, "state": state, "saved": saved, "ids": ids}
        self._set_slots(table)

    def advance(self, T: int):
        if self._staged is None:
            self._stage(T)
        staged = self._staged
        super().advance(T)
        self.table, self._staged = staged["table"], None
        if self.tokens is not None and staged["ids"] is not None:
            self.tokens += staged["ids"]
            self._register_full_blocks()
        else:
            self.tokens = None                        # tokens unknown: no prefix caching

    def discard(self):
        super().discard()
        staged, self._staged = self._staged, None
        if staged is None:
            return
        self.pool.manager.restore(staged["state"])
        bs = self.pool.block_size
        for block, layers in staged["saved"].items():
            for arrays, saved in zip(self.pool.arrays, layers):
                for name, values in saved.items():
                    arrays[name][block * bs:(block + 1) * bs] = values
        self._set_slots(self.table)

    def _register_full_blocks(self):
        bs, manager = self.pool.block_size, self.pool.manager
        for j in range(len(self.block_hashes), self.length // bs):
            previous = self.block_hashes[-1] if self.block_hashes else None
            tokens = tuple(self.tokens[j * bs:(j + 1) * bs])
            self.block_hashes.append(manager.register(self.table[j], previous, tokens))

    def _attach_prefix(self, prompt: list[int]):
        bs, manager = self.pool.block_size, self.pool.manager
        for j in range((len(prompt) - 1) // bs):
            previous = self.block_hashes[-1] if self.block_hashes else None
            tokens = tuple(prompt[j * bs:(j + 1) * bs])
            block = manager.lookup(previous, tokens)
            if block is None:
                break
            manager.share(block)
            self.table.append(block)
            self.block_hashes.append(manager.chain(previous, tokens))
        self.length = self.cached_tokens = len(self.table) * bs
        self.tokens = list(prompt[:self.length])
        self._set_slots(self.table)

    # -- sharing, finishing, cutting ------------------------------------------------------
    def _check_idle(self, what: str):
        if self.finished:
            raise ValueError(f"cannot {what} a finished sequence")
        if self._staged is not None:
            raise ValueError(f"cannot {what} during a step")

    def fork(self) -> PagedCache:
        """A new sequence holding the same blocks (each count + 1): the first write into a
        shared block copies it (copy on write)."""
        self._check_idle("fork")
        twin = PagedCache(self.pool)
        for block in self.table:
            self.pool.manager.share(block)
        twin.table, twin.length = list(self.table), self.length
        twin.tokens = None if self.tokens is None else list(self.tokens)
        twin.block_hashes = list(self.block_hashes)
        twin._set_slots(twin.table)
        return twin

    def copy(self, capacity: int | None = None) -> PagedCache:
        """A fork (capacity is ignored: blocks are taken as tokens arrive)."""
        return self.fork()

    def finish(self):
        """Give every block back (the last block first, so a prefix stays cached longest)."""
        if self.finished:
            raise ValueError("this sequence is already finished")
        self._check_idle("finish")
        for block in reversed(self.table):
            self.pool.manager.release(block)
        self.table, self.finished = [], True
        self._set_slots(self.table)

    def truncate(self, n: int):
        """Keep the first n tokens, give back the blocks after them. Refused when the block
        that would keep a part of its tokens is registered for prefix caching (other
        sequences may find it by its hash, so it must keep every token)."""
        self._check_idle("truncate")
        n = validate.count("n", n, 0, self.length)
        bs, keep = self.pool.block_size, -(-n // self.pool.block_size)
        if n % bs and self.pool.manager.hash_of[self.table[keep - 1]] is not None:
            raise ValueError(f"truncate({n}) would cut into block {keep - 1}, which is full "
                             f"and registered for prefix caching; truncate to a multiple of "
                             f"block_size={bs} there, or fork first")
        for block in reversed(self.table[keep:]):
            self.pool.manager.release(block)
        self.table, self.length = self.table[:keep], n
        self.block_hashes = self.block_hashes[:n // bs]
        if self.tokens is not None:
            self.tokens = self.tokens[:n]
        self._set_slots(self.table)


def decode_step_runner(model, context: int, block_size: int = 16, sequences: int = 1,
                       calls: int = 64, seed: int = 0):
    """A runner for toykv.timing.best_seconds: one decode step of each of `sequences` paged
    sequences at `context` tokens (the new one included; stand-in entries, as
    toykv.steptime.fill_cache writes them), one forward per sequence. The pool has room for
    `calls` calls; a runner called more often raises OutOfBlocks."""
    from .steptime import fill_cache

    context = validate.count("context", context, 1, model.config.max_seq_len - calls)
    sequences = validate.count("sequences", sequences, 1)
    per_sequence = -(-(context + calls) // validate.count("block_size", block_size, 1))
    pool = model.new_paged_cache(sequences * per_sequence, block_size)
    seqs = [pool.new_sequence() for _ in range(sequences)]
    for seq in seqs:
        fill_cache(seq, context - 1, seed)
    token = np.zeros(1, dtype=np.int64)

    def step():
        for seq in seqs:
            model.forward(token, seq)
    step.pool = pool
    return step


__all__ = ["BlockManager", "BlockPool", "PagedCache", "PagedLayer", "OutOfBlocks",
           "decode_step_runner"]
