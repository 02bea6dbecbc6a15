"""A paged KV cache: one pool of fixed-size blocks serves many sequences (kwon2023pagedattention).

The kind itself lives in toykv.kinds.paged (BlockManager, BlockPool, BlockTable, PagedLayer,
OutOfBlocks; read its docstring for prefix caching and copy on write). This module is its
public face, and a runner that times a paged decode step. `model.new_paged_cache(num_blocks,
block_size)` makes a pool; `pool.new_sequence(prompt_ids)` gives a KVCache whose layers read
and write the pool's blocks through one block table (`seq.table`), which the model's forward
takes as it takes any cache; `seq.fork()` shares every block, `seq.finish()` gives them back.
"""
from __future__ import annotations

import numpy as np

from . import validate
from .kinds.paged import (MAX_BLOCKS, BlockManager, BlockPool, BlockTable, OutOfBlocks,
                          PagedLayer)
from .layers import KV_DTYPE_BYTES
from .model import check_model
from .sizing import kv_cache_bytes


def decode_step_runner(model, context: int, block_size: int = 16, sequences: int = 1,
                       calls: int = 64, seed: int = 0):
    """A runner for toykv.timing.best_seconds: one decode step of each of `sequences` paged
    sequences at `context` tokens (the new one included; stand-in entries, as
    toykv.steptime.fill_cache writes them), one forward per sequence. The pool has room for
    `calls` calls; a runner called more often raises OutOfBlocks."""
    from .steptime import fill_cache

    check_model(model)
    calls = validate.count("calls", calls, 1, model.config.max_seq_len - 1)
    context = validate.count("context", context, 1, model.config.max_seq_len - calls)
    block_size = validate.count("block_size", block_size, 1, model.config.max_seq_len)
    seed = validate.count("seed", seed, 0)
    per_sequence = -(-(context + calls) // block_size)
    sequences = validate.count("sequences", sequences, 1, MAX_BLOCKS // per_sequence)
    validate.fits_in_memory(f"a pool for {sequences:,} sequences of {context + calls} tokens",
                            kv_cache_bytes(model.config, per_sequence * block_size, sequences,
                                           KV_DTYPE_BYTES["float32"][0]),
                            "give fewer sequences")
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


__all__ = ["BlockManager", "BlockPool", "BlockTable", "PagedLayer", "OutOfBlocks",
           "MAX_BLOCKS", "decode_step_runner"]
