"""Paged blocks: one pool of fixed-size blocks serves many sequences (kwon2023pagedattention).

A contiguous cache reserves room for a sequence's whole length up front. A paged cache keeps
every layer's keys and values in a pool of `num_blocks` blocks of `block_size` tokens and gives
a sequence a block only when its tokens reach it; its *block table* lists its blocks in order,
so position p lives in slot table[p // block_size] * block_size + p % block_size. Attention
reads a sequence's keys and values through its table (a gather), so a sequence wastes at most
block_size - 1 slots, in its last block.

The pieces take nano-vllm's names (GeeeekExplorer/nano-vllm, nano_vllm: block_manager.py):

- BlockManager: the bookkeeping only (a free list, a reference count per block, each full
  block's hash), no arrays: allocate, can_append, may_append, deallocate, hash_blocks on
  anything with a block_table and token_ids (toykv.scheduler's Sequence, a BlockTable).
- BlockPool: a BlockManager and the arrays of every layer's entries, for one model
  (`model.new_paged_cache(num_blocks, block_size)`); `pool.new_sequence()` gives a KVCache
  whose layers are PagedLayers sharing one BlockTable.
- BlockTable: one sequence's blocks, tokens and block hashes; PagedLayer: one layer of it.

Prefix caching (vLLM's automatic prefix caching, vllm_prefix_caching): a full block's hash
chains its tokens with the hash of the block before it, so equal hashes mean equal prefixes.
new_sequence finds the longest run of the prompt's full blocks already in the pool and shares
them (reference count + 1) instead of computing them again; a block whose count drops to 0
goes back to the free list but keeps its hash until it is taken for other tokens.
A block's hash is registered only once its tokens are kept (vLLM's rule): when the sequence's
next step begins, when it forks or finishes, or when the pool looks up a prefix, never at the
end of the step that wrote it, so a speculative step's rejected proposals, cropped right after
their forward pass, never reach the table. A registered block is never written again: a write
into it (after a crop into its middle) or into a block another sequence holds (a fork that
diverges inside it) copies it first, copy on write.
A prompt that ends exactly on a cached full block computes that block again (its last token's
logits are needed), so two blocks hold the same tokens. vLLM keeps both under the hash, nano-vllm
points the hash at the newest, an earlier toykv kept the first; here both are kept (lookup
takes the oldest still cached), so freeing and reusing one copy leaves the prefix found through
its twin.

A step is all or nothing: blocks are found before any layer runs (OutOfBlocks otherwise,
nothing changed), and a step that fails puts back the pool's bookkeeping and every value it
overwrote. Sliding-window layers are refused: a paged cache here holds every position.
"""
from __future__ import annotations

import weakref
from collections import deque

import numpy as np

from .. import validate
from ..layers import KV_DTYPE_BYTES, check_kv_dtype
from .base import CacheLayer, Codec, Seen
from .shared import shared_layers

MAX_BLOCKS = 10_000_000     # a BlockManager keeps a few Python lists of this length, at most


class OutOfBlocks(RuntimeError, ValueError):
    """The pool has fewer free blocks than a step needs: admit later, or preempt a sequence.
    A RuntimeError (the pool is busy now) and a ValueError (what was asked does not fit what
    is free), so code that catches bad input catches it too."""


def _check_seq(seq, tokens: bool = False):
    """seq, if it has what a BlockManager works on: a block_table list (and token_ids, a
    sequence of ids, when `tokens`); else a ValueError naming it."""
    if not isinstance(getattr(seq, "block_table", None), list):
        raise ValueError(f"seq must have a block_table list (a toykv.scheduler.Sequence's "
                         f"table, a BlockTable), got {type(seq).__name__}")
    if tokens and getattr(seq, "token_ids", None) is None:
        raise ValueError(f"seq must have token_ids (its tokens, for prefix caching), got "
                         f"{type(seq).__name__} without them")
    return seq


class BlockManager:
    """Which blocks are free, who holds each one, and the hash of each full block.

    ref_count[b]: sequences whose block table holds block b (0: free). free: the free blocks,
    the least recently freed first (taken first). hash_of[b]: the chained hash of a full block's
    tokens, or None; prefix_blocks maps a hash to the blocks registered under it (oldest first).
    Every method checks its arguments, and one that cannot finish (too few free blocks) refuses
    before it changes anything.
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

    def _block(self, name: str, block) -> int:
        return validate.count(name, block, 0, self.num_blocks - 1)

    def _full_block(self, tokens) -> tuple:
        """A full block's tokens as a tuple of block_size token ids."""
        ids = validate.token_ids("tokens", tokens)
        if len(ids) != self.block_size:
            raise ValueError(f"tokens must be a full block of block_size={self.block_size} token "
                             f"ids, got {len(ids)}")
        return tuple(ids)

    # -- one block ---------------------------------------------------------------------
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
        block = self._block("block", block)
        if self.ref_count[block] == 0:
            self.free.remove(block)
        self.ref_count[block] += 1

    def release(self, block: int):
        """One sequence fewer holds `block`; at 0 it is free (its hash kept until taken)."""
        block = self._block("block", block)
        if self.ref_count[block] <= 0:
            raise ValueError(f"block {block} is not in use")
        self.ref_count[block] -= 1
        if self.ref_count[block] == 0:
            self.free.append(block)

    # -- hashes ------------------------------------------------------------------------
    @staticmethod
    def chain(previous, tokens: tuple) -> int:
        """The hash of a full block: its tokens chained with the hash of the block before."""
        return hash((previous, tokens))

    def lookup(self, previous, tokens: tuple):
        """The block holding these tokens after the prefix hashed `previous` (the oldest
        registered one still cached), or None."""
        return self._lookup(previous, tuple(validate.token_ids("tokens", tokens)))

    def _lookup(self, previous, tokens: tuple):
        for block in self.prefix_blocks.get(self.chain(previous, tokens), ()):
            if self.tokens_of[block] == (previous, tokens):
                return block
        return None

    def register(self, block: int, previous, tokens: tuple) -> int:
        """Record full `block` as holding `tokens` after the prefix hashed `previous`; its hash.
        A second block with the same tokens is kept beside the first (vLLM's choice)."""
        return self._register(self._block("block", block), previous, self._full_block(tokens))

    def _register(self, block: int, previous, tokens: tuple) -> int:
        key = self.chain(previous, tokens)
        if self.hash_of[block] != key:
            self._forget(block)
            self.prefix_blocks.setdefault(key, []).append(block)
            self.hash_of[block], self.tokens_of[block] = key, (previous, tokens)
        return key

    def _forget(self, block: int):
        key = self.hash_of[block]
        if key is not None:
            blocks = self.prefix_blocks.get(key, [])
            if block in blocks:
                blocks.remove(block)
            if not blocks:
                self.prefix_blocks.pop(key, None)
        self.hash_of[block] = self.tokens_of[block] = None

    # -- a sequence (nano-vllm's names): anything with block_table and token_ids ----------
    def cached_blocks(self, token_ids) -> list[int]:
        """The prompt's leading full blocks the pool holds (at most all but its last token:
        the last token's logits must be computed)."""
        return self._cached_blocks(validate.token_ids("token_ids", token_ids))

    def _cached_blocks(self, token_ids: list[int]) -> list[int]:
        bs, found, previous = self.block_size, [], None
        for j in range((len(token_ids) - 1) // bs):
            tokens = tuple(token_ids[j * bs:(j + 1) * bs])
            block = self._lookup(previous, tokens)
            if block is None:
                break
            found.append(block)
            previous = self.chain(previous, tokens)
        return found

    def can_allocate(self, seq) -> int:
        """Blocks found cached for seq's tokens, or -1 when the free blocks cannot hold the
        rest (a cached block that is free counts as taken)."""
        _check_seq(seq, tokens=True)
        cached = self.cached_blocks(seq.token_ids)
        need = self.blocks_for(len(seq.token_ids)) - len(cached)
        revived = sum(self.ref_count[b] == 0 for b in cached)
        return -1 if need + revived > self.num_free else len(cached)

    def allocate(self, seq, tokens: int | None = None):
        """Give seq (with no blocks yet) the cached blocks of its prompt and new blocks for the
        rest of `tokens` (default all its tokens); sets seq.num_cached_tokens. Too few free
        blocks: OutOfBlocks, nothing taken."""
        _check_seq(seq, tokens=True)
        if seq.block_table:
            raise ValueError("allocate takes a sequence without blocks")
        ids = validate.token_ids("seq.token_ids", seq.token_ids)
        tokens = len(ids) if tokens is None else validate.count("tokens", tokens, 0)
        cached = self._cached_blocks(ids[:tokens])
        need = self.blocks_for(tokens) - len(cached)
        revived = sum(self.ref_count[b] == 0 for b in cached)    # free, held again
        if need + revived > self.num_free:
            raise OutOfBlocks(f"allocating {tokens} tokens needs {need + revived} free blocks, "
                              f"the pool has {self.num_free} of {self.num_blocks}")
        for block in cached:
            self.share(block)
        seq.block_table[:] = cached
        seq.num_cached_tokens = len(cached) * self.block_size
        for _ in range(need):
            seq.block_table.append(self.take())

    def _copies(self, seq, length: int) -> bool:
        """A write after `length` tokens copies the last block first: it is shared or hashed."""
        if length % self.block_size == 0 or not seq.block_table:
            return False
        last = seq.block_table[-1]
        return self.ref_count[last] > 1 or self.hash_of[last] is not None

    def _step(self, seq, length, T) -> tuple[int, int]:
        """(length, T) of a step on seq, checked: length at most what its blocks hold."""
        _check_seq(seq)
        length = validate.count("length", length, 0, len(seq.block_table) * self.block_size)
        return length, validate.count("T", T, 0)

    def blocks_needed(self, seq, length: int, T: int = 1) -> int:
        """Free blocks a step of T tokens after `length` takes (a copied last block too)."""
        return self._blocks_needed(seq, *self._step(seq, length, T))

    def _blocks_needed(self, seq, length: int, T: int) -> int:
        return max(-(-(length + T) // self.block_size) - len(seq.block_table), 0) + \
            int(self._copies(seq, length))

    def can_append(self, seq, length: int, T: int = 1) -> bool:
        """The free blocks cover a step of T tokens after `length`."""
        return self.blocks_needed(seq, length, T) <= self.num_free

    def may_append(self, seq, length: int, T: int = 1) -> list[tuple[int, int]]:
        """Take the blocks a step of T tokens after `length` needs; returns the (old, new)
        block pairs whose contents the caller must copy (copy on write). Too few free blocks:
        OutOfBlocks, nothing taken."""
        length, T = self._step(seq, length, T)
        need = self._blocks_needed(seq, length, T)
        if need > self.num_free:
            raise OutOfBlocks(f"a step of {T} tokens after {length} needs {need} free "
                              f"block{'s' if need != 1 else ''}, the pool has {self.num_free} "
                              f"of {self.num_blocks}")
        return self._may_append(seq, length, T)

    def _may_append(self, seq, length: int, T: int) -> list[tuple[int, int]]:
        copies = []
        if self._copies(seq, length):
            old, new = seq.block_table[-1], self.take()
            seq.block_table[-1] = new
            self.release(old)
            copies.append((old, new))
        for _ in range(-(-(length + T) // self.block_size) - len(seq.block_table)):
            seq.block_table.append(self.take())
        return copies

    def deallocate(self, seq):
        """Give back every block of seq (the last first, so a prefix stays cached longest).
        A block seq lists that is not held as often: a ValueError, nothing given back."""
        _check_seq(seq)
        listed = {}
        for block in seq.block_table:
            block = self._block("seq.block_table entry", block)
            listed[block] = listed.get(block, 0) + 1
        for block, times in listed.items():
            if self.ref_count[block] < times:
                raise ValueError(f"block {block} is not in use as seq's block_table says "
                                 f"(held {self.ref_count[block]} times, listed {times})")
        for block in reversed(seq.block_table):
            self.release(block)
        seq.block_table.clear()
        seq.num_cached_tokens = 0

    def hash_blocks(self, seq, kept: int) -> list:
        """Register the full blocks of seq's first `kept` tokens (kept: no longer to be rolled
        back); returns seq's block hashes, which it keeps in seq.block_hashes."""
        _check_seq(seq, tokens=True)
        kept = validate.count("kept", kept, 0, min(len(seq.token_ids),
                                                   len(seq.block_table) * self.block_size))
        return self._hash_blocks(seq, kept)

    def _hash_blocks(self, seq, kept: int) -> list:
        bs = self.block_size
        for j in range(len(seq.block_hashes), kept // bs):
            previous = seq.block_hashes[-1] if seq.block_hashes else None
            tokens = tuple(seq.token_ids[j * bs:(j + 1) * bs])
            seq.block_hashes.append(self._register(seq.block_table[j], previous, tokens))
        return seq.block_hashes

    # -- snapshots -----------------------------------------------------------------------
    def state(self) -> tuple:
        """Everything the manager knows, to compare or to restore."""
        return (list(self.ref_count), list(self.hash_of), list(self.tokens_of),
                list(self.free), {key: list(blocks) for key, blocks in
                                  self.prefix_blocks.items()})

    def restore(self, state: tuple):
        """Put back what state() returned (of this manager: its number of blocks)."""
        n = self.num_blocks
        if not isinstance(state, tuple) or len(state) != 5 or \
                not all(isinstance(part, list) and len(part) == n for part in state[:3]) or \
                not isinstance(state[3], list) or not isinstance(state[4], dict):
            raise ValueError(f"state must be what state() of a manager of {n} blocks returned "
                             f"(5 parts), got {type(state).__name__}")
        ref, hashes, tokens, free, prefix = state
        self.ref_count, self.hash_of, self.tokens_of = list(ref), list(hashes), list(tokens)
        self.free = deque(free)
        self.prefix_blocks = {key: list(blocks) for key, blocks in prefix.items()}


class BlockPool:
    """num_blocks blocks of block_size tokens, every layer's K and V (or MLA's latent), for one
    model. Made by `model.new_paged_cache(num_blocks, block_size)`; sequences come from
    new_sequence. arrays[l][name] is [num_blocks * block_size, ...], slot s of block s //
    block_size (K and V head-major, as in a KVCache)."""

    def __init__(self, model, num_blocks: int, block_size: int, kv_dtype: str = "float32"):
        config = getattr(model, "config", None)
        if not callable(getattr(model, "new_cache", None)) or config is None:
            raise ValueError(f"model must be a toykv.ToyTransformer (a pool holds one model's "
                             f"keys and values), got {type(model).__name__}")
        block_size = validate.count("block_size", block_size, 1, config.max_seq_len)
        num_blocks = validate.count("num_blocks", num_blocks, 1)
        if "sliding" in config.layer_kinds:
            raise ValueError("a paged cache holds every position: sliding-window layers "
                             "(config.sliding_window) are not supported; use model.new_cache()")
        self.kv_dtype = check_kv_dtype(kv_dtype)
        value, scale = KV_DTYPE_BYTES[self.kv_dtype]
        per_token = sum(spec.values_per_token * value + spec.scales_per_token * scale
                        for spec in config.layers)       # 0 for a layer that reuses (kv_sharing)
        self.block_nbytes = block_size * per_token
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
        self.model = model                                 # whose keys and values it holds
        self.sequences = weakref.WeakSet()                 # the live block tables

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

    def new_sequence(self, prompt_ids=None):
        """An empty sequence of this pool, a KVCache forward accepts; given the prompt's ids, it
        starts holding the longest run of the prompt's full blocks the pool already has (prefix
        caching), at most all but the prompt's last token, so len(seq) tokens are cached: feed
        prompt_ids[len(seq):]."""
        prompt = None
        if prompt_ids is not None:
            prompt = validate.token_ids("prompt_ids", prompt_ids, self.config.vocab_size,
                                        self.config.max_seq_len)
        seq = self.model.new_cache(kv_dtype=self.kv_dtype, pool=self)
        if prompt is not None:
            self.settle()                                  # every kept block registered
            seq.length = seq.cached_tokens = seq.layers[0].table.attach(prompt)
        return seq

    def new_layers(self) -> list:
        """One sequence's layers: a new BlockTable, one PagedLayer per model layer (a
        SharedLayer of its source for a layer that reuses another's keys and values)."""
        table = BlockTable(self)
        return shared_layers(self.config, [None if spec.shares_kv else PagedLayer(table, i)
                                           for i, spec in enumerate(self.config.layers)])

    def settle(self):
        """Register the kept full blocks of every live sequence (before a prefix lookup)."""
        for table in list(self.sequences):
            table.settle()

    def check_sequence(self, seq):
        """seq, if it is a sequence of this pool; else a ValueError."""
        layers = getattr(seq, "layers", None)
        table = getattr(layers[0], "table", None) if isinstance(layers, list) and layers else None
        if not isinstance(table, BlockTable):
            raise ValueError(f"seq must be a sequence of this pool (pool.new_sequence()), got "
                             f"{type(seq).__name__}")
        if table.pool is not self:
            raise ValueError("this sequence's block table points into another BlockPool")
        return seq

    def block_owners(self) -> list[int]:
        """Per block: how many sequences hold it (0: free), for views of the pool."""
        return list(self.manager.ref_count)

    def snapshot(self) -> tuple:
        """The bookkeeping and a copy of every array: equal snapshots, equal pools."""
        return self.manager.state(), [{n: np.array(a) for n, a in layer.items()}
                                      for layer in self.arrays]


class BlockTable:
    """One sequence of a pool: its blocks in order (block_table), its kept tokens (token_ids,
    None once a step came without its ids: no prefix caching then), the hashes of its
    registered full blocks, and a step's staged blocks. Its PagedLayers share it."""

    def __init__(self, pool: BlockPool):
        if not isinstance(pool, BlockPool):
            raise ValueError(f"pool must be a toykv.paged.BlockPool (model.new_paged_cache), got "
                             f"{type(pool).__name__}")
        self.pool, self.manager = pool, pool.manager
        self.block_table: list[int] = []
        self.token_ids: list[int] | None = []
        self.block_hashes: list[int] = []
        self.num_cached_tokens = 0
        self.length, self.finished, self.staged = 0, False, None
        self.slots = np.zeros(0, np.int64)
        pool.sequences.add(self)

    def _set_slots(self):
        bs = self.pool.block_size
        self.slots = (np.repeat(np.asarray(self.block_table, np.int64) * bs, bs)
                      + np.tile(np.arange(bs), len(self.block_table)))

    def blocks_needed(self, T: int) -> int:
        """Free blocks a step of T tokens takes (a copied last block too)."""
        return self.manager._blocks_needed(self, self.length, validate.count("T", T, 0))

    # -- a step ------------------------------------------------------------------------
    def check(self, T: int):
        """Refuse, before any work, a step that cannot run: finished, or too few blocks."""
        if self.finished:
            raise ValueError("this sequence is finished (its blocks went back to the pool); "
                             "start a new one with pool.new_sequence()")
        if self.staged is None:
            need, manager = self.blocks_needed(T), self.manager
            if need > manager.num_free:
                raise OutOfBlocks(f"a step of {T} tokens needs {need} free "
                                  f"block{'s' if need != 1 else ''}, the pool has "
                                  f"{manager.num_free} of {manager.num_blocks}: wait for a "
                                  f"sequence to finish, or preempt one")

    def stage(self, T: int):
        """Find the step's blocks (once per step: the first layer asks), saving what it
        changes so that discard can put it back."""
        if self.staged is not None:
            return
        self.check(T)
        pool, bs = self.pool, self.pool.block_size
        state, table = self.manager.state(), list(self.block_table)
        self.settle()                                  # the tokens before this step are kept
        copies = self.manager._may_append(self, self.length, T)     # check() found them
        written = set(self.block_table) - set(table)      # new blocks, and copies
        if self.length % bs and not copies:
            written.add(table[-1])                         # the last block, written into
        saved = {b: [{n: a[b * bs:(b + 1) * bs].copy() for n, a in layer.items()}
                     for layer in pool.arrays] for b in written}
        for old, new in copies:                        # copy on write
            for layer in pool.arrays:
                for a in layer.values():
                    a[new * bs:(new + 1) * bs] = a[old * bs:(old + 1) * bs]
        self.staged = {"T": T, "table": table, "state": state, "saved": saved,
                       "hashes": list(self.block_hashes)}
        self._set_slots()

    def commit(self, T: int, ids):
        if self.staged is None:
            return
        self.staged = None
        self.length += T
        if self.token_ids is not None and ids is not None:
            self.token_ids += [int(t) for t in np.ravel(ids)]
        else:
            self.token_ids = None                       # tokens unknown: no prefix caching

    def discard(self):
        staged, self.staged = self.staged, None
        if staged is None:
            return
        self.manager.restore(staged["state"])
        bs = self.pool.block_size
        for block, layers in staged["saved"].items():
            for arrays, saved in zip(self.pool.arrays, layers):
                for name, values in saved.items():
                    arrays[name][block * bs:(block + 1) * bs] = values
        self.block_table[:] = staged["table"]
        self.block_hashes = staged["hashes"]
        self._set_slots()

    def settle(self):
        """Register the full blocks of the kept tokens (every committed one)."""
        if self.token_ids is not None and not self.finished and self.staged is None:
            self.manager._hash_blocks(self, self.length)

    # -- prefix, crop, fork, finish -------------------------------------------------------
    def attach(self, prompt: list[int]) -> int:
        """Share the prompt's cached leading blocks; the tokens they hold."""
        if self.block_table or self.length:
            raise ValueError("attach takes a table without blocks (a new sequence's)")
        prompt = validate.token_ids("prompt", prompt)
        for block in self.manager._cached_blocks(prompt):
            self.manager.share(block)
            self.block_table.append(block)
        self.length = self.num_cached_tokens = len(self.block_table) * self.pool.block_size
        self.token_ids = list(prompt[:self.length])
        self.manager._hash_blocks(self, self.length)
        self._set_slots()
        return self.length

    def _idle(self, what: str):
        if self.finished:
            raise ValueError(f"cannot {what} a finished sequence")
        if self.staged is not None:
            raise ValueError(f"cannot {what} during a step")

    def crop(self, n: int):
        """Keep the first n tokens; give back the blocks after them. A registered block cut in
        its middle keeps its tokens (and hash) for others: the next write copies it."""
        n = validate.count("n", n, 0)
        self._idle("crop")
        if n >= self.length:
            return
        bs, keep = self.pool.block_size, -(-n // self.pool.block_size)
        for block in reversed(self.block_table[keep:]):
            self.manager.release(block)
        del self.block_table[keep:]
        self.block_hashes = self.block_hashes[:n // bs]
        if self.token_ids is not None:
            self.token_ids = self.token_ids[:n]
        self.length = n
        self._set_slots()

    def fork(self) -> BlockTable:
        """A new table holding the same blocks (each count + 1)."""
        self._idle("fork")
        self.settle()
        twin = BlockTable(self.pool)
        for block in self.block_table:
            self.manager.share(block)
        twin.block_table, twin.length = list(self.block_table), self.length
        twin.token_ids = None if self.token_ids is None else list(self.token_ids)
        twin.block_hashes = list(self.block_hashes)
        twin._set_slots()
        return twin

    def finish(self):
        """Give every block back (the last first, so a prefix stays cached longest)."""
        if self.finished:
            return
        self._idle("finish")
        self.settle()
        self.manager.deallocate(self)
        self.finished = True
        self._set_slots()


def take_blocks(array: np.ndarray, blocks: np.ndarray, axis: int) -> np.ndarray:
    """array's blocks `blocks` along `axis`, in their order: a view where they sit side by side
    in the pool (a sequence whose blocks were handed out in a row), else one copy laid out in
    that order (np.take; indexing array[:, blocks] lays its copy out block-first, and the
    reshape after it copied everything a second time)."""
    if len(blocks) and (np.diff(blocks) == 1).all():                # one run of blocks
        index = [slice(None)] * array.ndim
        index[axis] = slice(int(blocks[0]), int(blocks[-1]) + 1)
        return array[tuple(index)]
    return np.take(array, blocks, axis=axis)


class PagedLayer(CacheLayer):
    """One layer of one sequence: reads and writes the pool's arrays through its BlockTable."""

    def __init__(self, table: BlockTable, index: int):
        if not isinstance(table, BlockTable):
            raise ValueError(f"table must be a BlockTable (pool.new_sequence() makes the "
                             f"layers), got {type(table).__name__}")
        index = validate.count("index", index, 0, table.pool.config.n_layers - 1)
        self.table, self.index = table, index
        self.spec = table.pool.config.layers[index]
        self.arrays = table.pool.arrays[index]          # the pool's: every sequence's blocks
        self.staged = None

    @property
    def slots(self) -> int:
        """Positions its blocks hold."""
        return len(self.table.block_table) * self.table.pool.block_size

    def held(self, length: int) -> int:
        return length

    def nbytes(self, length: int) -> int:
        """Bytes of the blocks the sequence holds, this layer's share."""
        pool = self.table.pool
        per_slot = sum(a.nbytes for a in self.arrays.values()) // (pool.num_blocks *
                                                                    pool.block_size)
        return len(self.table.block_table) * pool.block_size * per_slot

    @property
    def allocated_nbytes(self) -> int:
        return self.nbytes(0)

    def read(self, name: str, first: int, end: int) -> np.ndarray:
        """Positions first..end-1 as float32 [1, end - first, ...], gathered from their blocks
        a block at a time (K and V come out head-major, as a KVCache holds them)."""
        scale = self.arrays.get(name + "_scale")
        return self.table.pool.codec.decode(
            self._gather(self.arrays[name], first, end),
            None if scale is None else self._gather(scale, first, end))[None]

    def stored(self, name: str, length: int) -> np.ndarray:
        return self.read(name, 0, length)

    def _gather(self, array: np.ndarray, first: int, end: int) -> np.ndarray:
        bs = self.table.pool.block_size
        blocks = self.table.slots[::bs][first // bs:-(-end // bs)] // bs   # staged ones too
        lo, n = first - first // bs * bs, end - first
        if array.ndim == 3:                                 # K, V: memory [H, slots, d]
            heads = array.swapaxes(0, 1)                    # the C-ordered array beneath
            H, d = heads.shape[0], heads.shape[2]
            rows = take_blocks(heads.reshape(H, -1, bs, d), blocks, 1).reshape(H, -1, d)
            return rows[:, lo:lo + n].swapaxes(0, 1)        # [n, H, d], head-major
        rest = array.shape[1:]
        return take_blocks(array.reshape(-1, bs, *rest), blocks, 0).reshape(-1, *rest)[lo:lo + n]

    def check_step(self, start: int, T: int):
        if self.index == 0:                             # one table for every layer
            self.table.check(T)

    check_room = check_step                             # T tokens take the same blocks

    def append(self, new: dict, start: int) -> Seen:
        """Write the new tokens [1, T, ...] into their slots; they attend over every position."""
        T = next(iter(new.values())).shape[1]
        self.table.stage(T)
        slots = self.table.slots[start:start + T]
        for name, values in new.items():
            stored, scale = self.table.pool.codec.encode(values[0])
            self.arrays[name][slots] = stored
            if scale is not None:
                self.arrays[name + "_scale"][slots] = scale
        self.staged = (start, T, None)
        end = start + T
        keys, queries = np.arange(end), np.arange(start, end)
        return Seen({name: self.read(name, 0, end) for name in new}, keys,
                    self.spec.allowed(queries, keys), queries)

    def commit(self, start: int, T: int, ids=None):
        self.staged = None
        self.table.commit(T, ids)

    def discard(self):
        self.staged = None
        self.table.discard()

    def crop(self, n: int, length: int):
        self.table.crop(n)

    def copy(self, length: int, slots: int, shared: dict) -> PagedLayer:
        """The same layer of a fork: every block shared, copied on the first write."""
        if id(self.table) not in shared:
            shared[id(self.table)] = self.table.fork()
        return PagedLayer(shared[id(self.table)], self.index)

    def blocks_needed(self, length: int, T: int) -> int:
        return self.table.blocks_needed(T)

    def finish(self):
        self.table.finish()


__all__ = ["BlockManager", "BlockPool", "BlockTable", "PagedLayer", "OutOfBlocks",
           "MAX_BLOCKS"]
