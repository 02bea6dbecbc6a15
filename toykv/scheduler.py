"""Serving many requests: static against continuous batching over a block pool.

One loop (`serve`), two backends. It keeps a queue of waiting requests and a batch of running
ones; each iteration is either a prefill of newly admitted requests or one decode step of every
running one (vLLM's first scheduler's rule, and nano-vllm's scheduler.py: prefill first).

- batching='continuous' (Orca's iteration-level scheduling, yu2022orca; vLLM) admits waiting
  requests at every iteration while blocks and max_batch allow; a finished request leaves at
  once. batching='static' admits a batch only when the previous one has finished entirely: its
  finished rows wait, padded, for the longest (and are still computed, as a padded batch is).
- Blocks: a request takes blocks as its tokens arrive (paged); reserve_tokens=N instead takes
  blocks for N tokens at admission (contiguous worst-case preallocation). A decode step that
  finds no free block preempts the most recently admitted request: its blocks are freed and it
  waits at the front of the queue, to be prefilled again over its prompt and the tokens it had
  generated (recompute, as vLLM does by default): the tokens it goes on to produce are the same.

`simulate` runs the loop on a BlockManager alone and a StepModel (a roofline: the slower of
FLOPs at a peak rate and bytes at a bandwidth, counted by toykv.flops and toykv.sizing), for a
model too big to hold, such as Qwen3-1.7B. `run_real` runs it on a toykv model and a BlockPool,
one forward per sequence per iteration (sequences of different lengths are stepped one at a
time), greedy, and returns every request's tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import validate
from .config import ModelConfig, check_config
from .flops import forward_flops
from .paged import BlockManager, BlockPool
from .roofline import Hardware
from .sizing import kv_cache_bytes, weight_bytes_read

BATCHING = ("continuous", "static")
MAX_REQUESTS = 100_000          # a simulated mix has at most this many requests
MAX_ITERATIONS = 10_000_000     # a loop that runs longer than this is refused, not waited for


@dataclass(frozen=True)
class Request:
    """One request: prompt_len tokens in, output_len tokens out, arriving at `arrival` s."""
    id: int
    prompt_len: int
    output_len: int
    arrival: float = 0.0


def request_mix(n: int, seed: int = 0, prompt=(16, 512), output=(16, 256),
                rate: float | None = None) -> list[Request]:
    """n requests, prompt and output lengths uniform integers in the given [low, high] ranges,
    seeded; all arriving at time 0, or as a Poisson stream of `rate` requests per second."""
    n = validate.count("n", n, 1, MAX_REQUESTS)
    seed = validate.count("seed", seed, 0)
    ranges = []
    for name, (low, high) in (("prompt", prompt), ("output", output)):
        low = validate.count(f"{name} low", low, 1)
        ranges.append((low, validate.count(f"{name} high", high, low)))
    rng = np.random.default_rng(seed)
    prompts = rng.integers(ranges[0][0], ranges[0][1] + 1, n)
    outputs = rng.integers(ranges[1][0], ranges[1][1] + 1, n)
    arrivals = np.zeros(n) if rate is None else np.cumsum(
        rng.exponential(1 / validate.number("rate", rate), n))
    return [Request(i, int(p), int(o), float(a))
            for i, (p, o, a) in enumerate(zip(prompts, outputs, arrivals))]


@dataclass(frozen=True)
class StepModel:
    """An iteration's time on `hardware`: max(FLOPs / peak, bytes / bandwidth) + overhead.

    FLOPs: toykv.flops.forward_flops for each prefill (the output head on its last token only)
    and each decode step. Bytes: the weights read once per iteration (sizing.weight_bytes_read),
    every decoding sequence's cache read, every new token's keys and values written."""
    config: ModelConfig
    hardware: Hardware
    bytes_per_value: int = 2
    bytes_per_param: int = 2
    overhead: float = 0.0

    def parts(self, prefills=(), contexts=()) -> tuple[int, int]:
        """(FLOPs, bytes) of an iteration: prefills as (new tokens, cached tokens) pairs,
        decode steps as contexts (tokens held after the step)."""
        c = self.config
        head = 2 * c.d_model * c.vocab_size
        flops = sum(forward_flops(c, new, cached) - head * (new - 1) for new, cached in prefills)
        flops += sum(forward_flops(c, 1, ctx - 1) for ctx in contexts)
        rows = len(prefills) + len(contexts)
        nbytes = weight_bytes_read(c, self.bytes_per_param, max(rows, 1))
        nbytes += sum(kv_cache_bytes(c, ctx, 1, self.bytes_per_value) for ctx in contexts)
        nbytes += sum(kv_cache_bytes(c, new + cached, 1, self.bytes_per_value)
                      for new, cached in prefills)
        return flops, nbytes

    def seconds(self, prefills=(), contexts=()) -> float:
        flops, nbytes = self.parts(prefills, contexts)
        return self.hardware.min_seconds(flops, nbytes) + self.overhead


@dataclass
class Outcome:
    """What serve did: per request its first-token and finish times and its tokens (real
    runs), the preemptions, and one trace row per iteration."""
    ttft: dict = field(default_factory=dict)          # request id -> s from arrival to token 1
    finish: dict = field(default_factory=dict)        # request id -> s at its last token
    tokens: dict = field(default_factory=dict)        # request id -> generated ids (real runs)
    preemptions: int = 0
    trace: list = field(default_factory=list)         # dicts: t, kind, batch, blocks, held
    #   (tokens stored: prompt and generated but the last, of each running request), ...
    output_tokens: int = 0

    @property
    def makespan(self) -> float:
        return max(self.finish.values()) if self.finish else 0.0

    @property
    def throughput(self) -> float:
        """Output tokens per second over the whole run."""
        return self.output_tokens / self.makespan if self.makespan else 0.0

    @property
    def mean_ttft(self) -> float:
        return float(np.mean(list(self.ttft.values())))


class _Sim:
    """The simulated backend: block tables in a BlockManager, no arrays, no tokens."""

    def __init__(self, manager: BlockManager, step_model: StepModel):
        self.manager, self.step_model = manager, step_model

    def start(self, req, tokens: int, reserve: int) -> dict | None:
        need = self.manager.blocks_for(max(tokens, reserve))
        if need > self.manager.num_free:
            return None
        return {"table": [self.manager.take() for _ in range(need)], "length": 0}

    def cached(self, h) -> int:
        return 0

    def grow_needs(self, h) -> int:
        return max(self.manager.blocks_for(h["length"] + 1) - len(h["table"]), 0)

    def grow(self, h):
        for _ in range(self.grow_needs(h)):
            h["table"].append(self.manager.take())

    def prefill(self, h, tokens: list, n: int) -> int:
        h["length"] = n
        return 0

    def decode(self, h, token: int) -> int:
        h["length"] += 1
        return 0

    def stop(self, h):
        for block in reversed(h["table"]):
            self.manager.release(block)

    def blocks(self, h) -> int:
        return len(h["table"])


class _Real:
    """The toykv backend: a PagedCache per request, greedy tokens."""

    def __init__(self, model, pool: BlockPool, prompts: dict, step_model):
        self.model, self.pool, self.prompts = model, pool, prompts
        self.manager, self.step_model = pool.manager, step_model
        self.promised = 0                          # blocks admitted prefills will take

    def start(self, req, tokens: list, reserve: int):
        seq = self.pool.new_sequence(tokens)
        need = self.manager.blocks_for(len(tokens)) - len(seq.table)
        if need > self.manager.num_free - self.promised:
            seq.finish()
            return None
        self.promised += need
        return seq

    def cached(self, seq) -> int:
        return len(seq)                            # found by prefix caching

    def grow_needs(self, seq) -> int:
        return seq.blocks_needed(1)

    def grow(self, seq):
        pass                                       # the forward takes its blocks

    def prefill(self, seq, tokens: list, n: int) -> int:
        self.promised -= self.manager.blocks_for(len(tokens)) - len(seq.table)
        return int(np.argmax(self.model.forward(tokens[len(seq):], seq)[-1]))

    def decode(self, seq, token: int) -> int:
        return int(np.argmax(self.model.forward([token], seq)[-1]))

    def stop(self, seq):
        seq.finish()

    def blocks(self, seq) -> int:
        return len(seq.table)


def serve(backend, requests, max_batch: int, batching: str = "continuous",
          reserve_tokens: int | None = None, record_blocks: bool = False,
          clients: int | None = None) -> Outcome:
    """Serve `requests` with `backend` (see simulate and run_real, which build it).

    clients=N: a closed loop, as a benchmark with N concurrent requests runs: N clients each
    send their next request (in the list's order) when their previous one has finished, so
    request arrivals are those moments, not their `arrival` fields."""
    max_batch = validate.count("max_batch", max_batch, 1)
    clients = validate.optional_count("clients", clients, 1)
    validate.choice("batching", batching, BATCHING)
    reserve = validate.optional_count("reserve_tokens", reserve_tokens, 1) or 0
    manager = backend.manager
    for r in requests:
        if manager.blocks_for(max(r.prompt_len + r.output_len, reserve)) > manager.num_blocks:
            raise ValueError(f"request {r.id} ({r.prompt_len} + {r.output_len} tokens) needs "
                             f"more blocks than the pool's {manager.num_blocks}")
    if clients is None:
        pending, later = sorted(requests, key=lambda r: (r.arrival, r.id)), []
    else:
        pending, later = list(requests[:clients]), list(requests[clients:])
    arrival = {r.id: 0.0 if clients else r.arrival for r in requests}
    waiting, running, out = [], [], Outcome()
    generated = {r.id: [] for r in requests}
    handles, t, p = {}, 0.0, 0
    for _ in range(MAX_ITERATIONS):
        while p < len(pending) and arrival[pending[p].id] <= t:
            waiting.append(pending[p])
            p += 1
        if not waiting and not running:
            if p == len(pending):
                return out
            t = arrival[pending[p].id]
            continue
        admitted = []
        if waiting and (batching == "continuous" or not running):
            while waiting and len(running) + len(admitted) < max_batch:
                r = waiting[0]
                tokens = _tokens(backend, r, generated[r.id])
                h = backend.start(r, tokens, reserve)
                if h is None:
                    break
                handles[r.id] = h
                admitted.append((waiting.pop(0), tokens))
        if admitted:                                   # a prefill iteration
            prefills = []
            for r, tokens in admitted:
                n = len(tokens) if isinstance(tokens, list) else tokens
                cached = backend.cached(handles[r.id])
                prefills.append((n - cached, cached))
                _emit(out, r, generated, backend.prefill(handles[r.id], tokens, n))
            t += backend.step_model.seconds(prefills, ()) if backend.step_model else 1.0
            for r, _ in admitted:
                out.ttft.setdefault(r.id, t - arrival[r.id])
                running.append(r)
            kind = "prefill"
        else:                                          # a decode iteration
            active = [r for r in running if len(generated[r.id]) < r.output_len]
            while sum(backend.grow_needs(handles[r.id]) for r in active) > manager.num_free:
                victim = active.pop()                  # the most recently admitted: recompute
                running.remove(victim)
                backend.stop(handles.pop(victim.id))
                waiting.insert(0, victim)
                out.preemptions += 1
            contexts = []
            for r in active:
                backend.grow(handles[r.id])
                contexts.append(r.prompt_len + len(generated[r.id]))
                _emit(out, r, generated, backend.decode(handles[r.id], generated[r.id][-1]))
            padded = contexts + [r.prompt_len + r.output_len for r in running
                                 if r not in active]     # static: finished rows still run
            t += (backend.step_model.seconds((), padded) if backend.step_model else 1.0) \
                if padded else 0.0
            kind = "decode"
        for r in list(running):
            if len(generated[r.id]) >= r.output_len and r.id not in out.finish:
                out.finish[r.id] = t
                if later:                              # its client sends the next request
                    arrival[later[0].id] = t
                    pending.append(later.pop(0))
            if batching == "continuous" and r.id in out.finish:
                running.remove(r)
                backend.stop(handles.pop(r.id))
        if batching == "static" and running and all(r.id in out.finish for r in running):
            for r in running:
                backend.stop(handles.pop(r.id))
            running = []
        row = {"t": t, "kind": kind, "batch": len(running), "waiting": len(waiting),
               "blocks": manager.num_used,
               "held": sum(r.prompt_len + len(generated[r.id]) - 1 for r in running)}
        if record_blocks:
            row["owners"] = _owners(backend, handles)
        out.trace.append(row)
    raise ValueError(f"serve ran {MAX_ITERATIONS:,} iterations without finishing")


def _tokens(backend, r, generated):
    """What a (re)admitted request prefills: its prompt and what it had generated."""
    if isinstance(backend, _Real):
        return list(backend.prompts[r.id]) + list(generated)
    return r.prompt_len + len(generated)


def _emit(out, r, generated, token):
    if len(generated[r.id]) < r.output_len:
        generated[r.id].append(token)
        out.output_tokens += 1
        out.tokens[r.id] = generated[r.id]


def _owners(backend, handles) -> list[int]:
    """Per block: the id of the request holding it (-1: free; the lowest id if shared)."""
    owners = [-1] * backend.manager.num_blocks
    for rid in sorted(handles, reverse=True):
        h = handles[rid]
        for block in (h["table"] if isinstance(h, dict) else h.table):
            owners[block] = rid
    return owners


def simulate(requests, step_model: StepModel, num_blocks: int, block_size: int = 16,
             max_batch: int = 256, batching: str = "continuous",
             reserve_tokens: int | None = None, clients: int | None = None) -> Outcome:
    """Serve requests on a simulated pool (a BlockManager) with step times from step_model."""
    if not isinstance(step_model, StepModel):
        raise ValueError(f"step_model must be a toykv.scheduler.StepModel, got "
                         f"{type(step_model).__name__}")
    check_config(step_model.config)
    return serve(_Sim(BlockManager(num_blocks, block_size), step_model), requests, max_batch,
                 batching, reserve_tokens, clients=clients)


def run_real(model, pool: BlockPool, prompts: list, output_lens: list, max_batch: int,
             batching: str = "continuous", step_model: StepModel | None = None,
             record_blocks: bool = False) -> Outcome:
    """Serve real prompts (lists of ids) on a toykv model's BlockPool, greedy, each for its
    output_lens tokens; the outcome's tokens are every request's generated ids."""
    if not isinstance(pool, BlockPool) or pool.model is not model:
        raise ValueError("pool must be a BlockPool of this model (model.new_paged_cache)")
    if len(prompts) != len(output_lens):
        raise ValueError(f"{len(prompts)} prompts but {len(output_lens)} output lengths")
    ids = [validate.token_ids("prompt", p, model.config.vocab_size) for p in prompts]
    requests = [Request(i, len(p), validate.count("output length", n, 1))
                for i, (p, n) in enumerate(zip(ids, output_lens))]
    backend = _Real(model, pool, dict(enumerate(ids)), step_model)
    return serve(backend, requests, max_batch, batching, None, record_blocks)


def alone_tokens(model, prompt, n: int) -> list[int]:
    """Greedy tokens of one prompt with a contiguous cache: what a served request must give."""
    cache = model.new_cache()
    token = int(np.argmax(model.forward(prompt, cache)[-1]))
    tokens = [token]
    while len(tokens) < n:
        tokens.append(int(np.argmax(model.forward([tokens[-1]], cache)[-1])))
    return tokens


__all__ = ["Request", "request_mix", "StepModel", "Outcome", "serve", "simulate", "run_real",
           "alone_tokens", "BATCHING"]
