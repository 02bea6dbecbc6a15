"""What the bad-input tests of chapters 10-12's APIs share: a snapshot of every object a call
touches (a cache's length and values, a pool's free list, reference counts and block tables, a
scheduler's queues, a draft's cache), and `refused`, which runs a hostile call under a time
limit and checks that it raised the expected error, that the message names the argument, and
that every touched object is as it was.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import signal

import numpy as np
import pytest

from toykv import KVCache
from toykv.kinds.paged import BlockManager, BlockPool
from toykv.scheduler import Scheduler
from toykv.speculative import DraftModel

SECONDS = 20                      # a refusal takes well under a second; a hang takes forever


class Hang(Exception):
    """The call ran past SECONDS: an input-driven loop that was not bounded before it began."""


@contextlib.contextmanager
def time_limit(seconds: int = SECONDS):
    def stop(signum, frame):
        raise Hang(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def state(obj):
    """A comparable copy of what obj holds (equal states: an unchanged object)."""
    if isinstance(obj, KVCache):
        layers = []
        for i, layer in enumerate(obj.layers):
            extra = {key: copy.deepcopy(getattr(layer, key)) for key in
                     ("positions", "received", "done", "due", "slots", "staged")
                     if hasattr(layer, key)}
            held = {} if obj.finished else {name: np.array(obj.stored(i, name))
                                            for name in obj.names}
            layers.append((extra, held))
        table = getattr(obj.layers[0], "table", None)
        pool = None if table is None else (state(table.pool), list(table.block_table),
                                           table.length, copy.copy(table.token_ids),
                                           list(table.block_hashes), table.finished)
        return ("cache", len(obj), obj.finished, obj.cached_tokens, layers, pool)
    if isinstance(obj, BlockPool):
        tables = sorted((list(t.block_table), t.length, t.finished) for t in obj.sequences)
        return ("pool", obj.snapshot(), tables)
    if isinstance(obj, BlockManager):
        return ("manager", obj.state())
    if isinstance(obj, Scheduler):
        def seq(s):
            return (s.id, s.status, list(s.output), s.num_cached_tokens,
                    s.num_scheduled_tokens, None if s.table is None else
                    list(s.table.block_table))
        return ("scheduler", [seq(s) for s in obj.waiting], [seq(s) for s in obj.running],
                obj.preemptions, obj.manager.state())
    if isinstance(obj, DraftModel):
        return ("draft", list(obj.held), state(obj.cache))
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return (type(obj).__name__, {k: _plain(v) for k, v in vars(obj).items()})
    return copy.deepcopy(obj)


def _plain(value):
    """A comparable copy of an attribute: caches and pools by state, containers and
    dataclasses field by field, arrays copied, other objects (a model, a widget) by identity."""
    if isinstance(value, (KVCache, BlockPool, BlockManager)):
        return state(value)
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, {f.name: _plain(getattr(value, f.name))
                                       for f in dataclasses.fields(value)})
    if isinstance(value, (int, float, str, bytes, bool, type(None), np.generic)):
        return value
    return ("object", id(value))


def same(a, b) -> bool:
    """a == b, numpy arrays compared by value (NaN equal to NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape
                and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return a == b


def refused(call, words=(), error=ValueError, touched=()):
    """call() raises `error` within SECONDS, its message holds every one of `words` (the
    argument's name and what was wrong), and every object in `touched` is as it was."""
    words = (words,) if isinstance(words, str) else tuple(words)
    before = [state(obj) for obj in touched]
    with time_limit(), pytest.raises(error) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in the message: {message}"
    for obj, was in zip(touched, before):
        assert same(state(obj), was), f"{type(obj).__name__} changed by a refused call"
    return message


def works(call):
    """call() returns within SECONDS (a valid edge case); its result."""
    with time_limit():
        return call()


def cases(make):
    """One test per case of make() (a list of (call, words, touched[, error])), each case built
    afresh when its test runs, so no case sees the objects another one touched."""
    return [pytest.param(make, i, id=f"{make.__name__}-{i}") for i in range(len(make()))]


def refused_case(make, i):
    """refused() on case i of make(), built afresh."""
    call, words, touched, *error = make()[i]
    refused(call, words, error[0] if error else ValueError, touched)
