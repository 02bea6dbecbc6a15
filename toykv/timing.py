"""Timings that a busy machine cannot turn around: the runs to compare, timed in turns, best of each.

A neighbour that takes the core for a while slows whatever runs at that moment. Timing A five
times and then B five times lets a busy spell fall on one of them and reverse their order;
timing them in turns (A, B, B, A, ...) spreads it over both, and the best (fastest) run of
each is the one it touched least. And the clock is the CPU time this process spent
(time.process_time), which stops while a neighbour has the core: a wall clock charges a long
run for every time it was taken off the core, a short run seldom, and so stretches their
ratio by how busy the machine is. best_seconds does all this for any callables. decode_step,
prefill and weight_products make the runners the chapters compare: one decode step at a
context (its cache filled with stand-in entries, as toykv.steptime does), one prefill, and a
decode step's weight products alone; full_pass, one forward of a whole sequence without a
cache, as generation without a cache runs it. tiny_model gives a model with the same layers
and tiny matrices, whose step costs little more than its numpy calls. flush_caches, given to
best_seconds as a run's setup, times that run with the processor's caches emptied first.

What this protects against, and what it does not: a neighbour that takes the core costs no
CPU time, and a busy spell is spread over both sides and dropped by the best-of. A neighbour
that shares the processor's caches or the memory bus still slows this process's own work,
and so its CPU time, most in the parts that move the most bytes. The chapters therefore
assert a relation between such bests only where the counted FLOPs and bytes leave a wide
margin, and let the numbers choose the words for the rest.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from . import validate
from .config import ModelConfig
from .model import Layer, ToyTransformer
from .steptime import fill_cache

MAX_ROUNDS = 1000                # more rounds than any comparison needs; refused before running
FLUSH_BYTES = 64 * 2**20         # more than the last-level cache of the processors we run on
_flush_buffers: dict = {}


def best_seconds(runs: dict, rounds: int = 5, warmup: int = 1, clock=time.process_time,
                 setup: dict | None = None) -> dict:
    """{label: seconds of the fastest call} of each callable in `runs` (label -> fn()), timed in
    `rounds` rounds that call every one in turn, forward and backward on alternate rounds,
    after `warmup` untimed rounds. clock: CPU seconds of this process by default (all its
    threads: with BLAS on one thread, the time the work took); time.perf_counter for wall time.
    setup: {label: callable} run, untimed, before every call of that label (flush_caches).
    """
    if not isinstance(runs, dict) or not runs or not all(callable(f) for f in runs.values()):
        raise ValueError(f"runs must be a non-empty dict of label -> callable taking no "
                         f"arguments, got {runs!r}")
    if not callable(clock):
        raise ValueError(f"clock must be a callable returning seconds, got {clock!r}")
    setup = {} if setup is None else setup
    if (not isinstance(setup, dict) or not set(setup) <= set(runs)
            or not all(callable(f) for f in setup.values())):
        raise ValueError(f"setup must be a dict of label -> callable, its labels among the "
                         f"runs' {sorted(map(str, runs))}, got {setup!r}")
    rounds = validate.count("rounds", rounds, 1, MAX_ROUNDS)
    warmup = validate.count("warmup", warmup, 0, MAX_ROUNDS)
    best = dict.fromkeys(runs, math.inf)
    order = list(runs.items())
    for r in range(warmup + rounds):
        for label, fn in order if r % 2 == 0 else order[::-1]:
            if label in setup:
                setup[label]()
            start = clock()
            fn()
            seconds = clock() - start
            if r >= warmup:
                best[label] = min(best[label], seconds)
    return best


def decode_step(model, context: int, batch: int | None = None, kv_dtype: str = "float32",
                seed: int = 0):
    """A runner of one decode step of `model` at `context` tokens (the new one included), for
    best_seconds. Its cache holds context - 1 stand-in entries and every call adds one, so
    max_seq_len must leave room for every call (a few keys more in thousands change nothing).
    batch=B steps B sequences together."""
    context = validate.count("context", context, 1, model.config.max_seq_len)
    cache = model.new_cache(batch=batch, kv_dtype=kv_dtype)
    fill_cache(cache, context - 1, seed)
    ids = np.zeros((1,) if batch is None else (batch, 1), dtype=np.int64)     # [1] or [B, 1]
    return lambda: model.forward(ids, cache)


def prefill(model, prompt_len: int, seed: int = 0):
    """A runner of one prefill of a random prompt of prompt_len tokens into an empty cache."""
    prompt_len = validate.count("prompt_len", prompt_len, 1, model.config.max_seq_len)
    prompt = np.random.default_rng(seed).integers(0, model.config.vocab_size, prompt_len)
    return lambda: model.forward(prompt, model.new_cache())


def step_matrices(model) -> list:
    """The weight matrices one decode step multiplies, in order: each layer's fused products
    and its other 2-D weights, then the output head."""
    matrices = []
    for layer in model.layers:
        fused = {name for group in layer.fused for name in Layer.GROUPS[group]}
        matrices += list(layer.fused.values())
        matrices += [w for name, w in layer.items() if w.ndim == 2 and name not in fused]
    return matrices + [model.embed.T if model.lm_head is None else model.lm_head]


def tiny_like(config: ModelConfig) -> ModelConfig:
    """config's layers (their number and kinds, window and context) with tiny matrices:
    d_model 64, one head of 64, d_ff 128, vocab 256; MLA becomes plain attention."""
    return dataclasses.replace(config, d_model=64, n_heads=1, n_kv_heads=1, head_dim=64,
                               d_ff=128, vocab_size=256, attention=None, kv_lora_rank=None,
                               rope_head_dim=None)


def full_pass(model, length: int, seed: int = 0):
    """A runner of one forward pass of a random sequence of `length` tokens without a cache: a
    step of generation without a cache, which recomputes the whole sequence."""
    length = validate.count("length", length, 1, model.config.max_seq_len)
    ids = np.random.default_rng(seed).integers(0, model.config.vocab_size, length)
    return lambda: model.forward(ids)


def flush_caches(nbytes: int = FLUSH_BYTES) -> None:
    """Empty the processor's caches of everything else: write once over a buffer of nbytes
    (64 MiB by default, more than the last-level caches of the machines we run on). Given to
    best_seconds as a run's setup, it times that run reading its data from memory."""
    nbytes = validate.count("nbytes", nbytes, 1, 2**31)
    if nbytes not in _flush_buffers:
        _flush_buffers.clear()                        # keep one buffer, not one per size
        _flush_buffers[nbytes] = np.zeros(nbytes, dtype=np.uint8)
    np.add(_flush_buffers[nbytes], 1, out=_flush_buffers[nbytes])


def weight_products(model, rows: int = 1):
    """A runner of a decode step's weight products alone: `rows` rows (one per sequence of a
    batch) through every weight matrix the step multiplies (step_matrices), back to back,
    nothing in between."""
    rows = validate.count("rows", rows, 1)
    matrices = step_matrices(model)
    x = {w.shape[0]: np.ones((rows, w.shape[0]), np.float32) for w in matrices}  # [rows, in]

    def run():
        for w in matrices:
            x[w.shape[0]] @ w                                                   # [rows, out]
    return run


def tiny_model(config) -> ToyTransformer:
    """A model with config's layers (their number, kinds and context) and tiny matrices
    (tiny_like): its decode step makes the same numpy calls as config's, on
    arrays so small that the calls themselves are nearly all it costs."""
    return ToyTransformer(tiny_like(config))


__all__ = ["MAX_ROUNDS", "FLUSH_BYTES", "best_seconds", "decode_step", "prefill", "full_pass",
           "weight_products", "flush_caches", "tiny_model", "step_matrices", "tiny_like"]
