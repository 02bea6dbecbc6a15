"""Serving many requests: a scheduler shaped like nano-vllm's, over a block pool.

The pieces take nano-vllm's names (GeeeekExplorer/nano-vllm, nano_vllm: engine/sequence.py,
scheduler.py, block_manager.py):

- Sequence: one request as the scheduler sees it: its prompt, the tokens it has made, its
  block table, how many of its tokens the cache holds and how many the next step feeds.
- Scheduler: a queue of waiting sequences and a batch of running ones. `schedule()` picks the
  sequences of the next step and gives them blocks (toykv.kinds.paged.BlockManager's
  allocate, can_append, may_append, deallocate); `postprocess()` takes the step's tokens,
  finishes sequences and frees their blocks.
- A runner executes a step: SimRunner on the block bookkeeping alone, its time from a StepModel
  (a roofline: the slower of FLOPs at a peak rate and bytes at a bandwidth, counted by
  toykv.flops and toykv.sizing), for a model too big to hold such as Qwen3-1.7B; RealRunner on
  a toykv model and its BlockPool, one forward per sequence (greedy). The same Scheduler drives
  both, and `serve` is the loop: arrivals, schedule, run, postprocess, a trace row.

What a step holds:
- max_num_batched_tokens=None (the default): vLLM's first scheduler's rule, and nano-vllm's:
  prefill first. An iteration either prefills newly admitted requests, whole, or runs one
  decode step of every running one.
- max_num_batched_tokens=N: vLLM V1's rule, a per-step token budget. The running sequences go
  first (a decode step takes one token of the budget, a prefill in progress its next chunk),
  then waiting requests are admitted with what is left, a prompt longer than that split over
  several steps: chunked prefill (Sarathi, Agrawal et al. 2024). Steps mix prefills and
  decodes.
- batching='continuous' (Orca's iteration-level scheduling, yu2022orca) admits waiting
  requests at every step while blocks and max_batch allow, and a finished request leaves at
  once; batching='static' admits a batch only when the previous one has finished entirely: its
  finished rows wait, padded, for the longest (and are still computed, as a padded batch is).
- Blocks: a request takes blocks as its tokens arrive (paged); reserve_tokens=N instead takes
  blocks for N tokens at admission (contiguous worst-case preallocation). A step that finds no
  free block preempts the most recently admitted request: its blocks are freed and it waits at
  the front of the queue, to be prefilled again over its prompt and the tokens it had generated
  (recompute, as vLLM does by default): the tokens it goes on to produce are the same.
"""
from __future__ import annotations

import functools
import itertools
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from . import validate
from .config import ModelConfig, check_config
from .flops import forward_flops
from .model import check_model
from .paged import BlockManager, BlockPool
from .roofline import Hardware
from .runcheck import check_run
from .sizing import kv_cache_bytes, read_config, weight_bytes_read

BATCHING = ("continuous", "static")
MAX_REQUESTS = 100_000          # a simulated mix has at most this many requests
MAX_ITERATIONS = 1_000_000      # steps a run may take, at most (about a minute of simulation):
#                                 bounded from the requests before the run starts
MAX_RECORDED = 10_000_000       # block owners a run records (record_blocks), at most


@dataclass(frozen=True)
class Request:
    """One request: prompt_len tokens in, output_len tokens out, arriving at `arrival` s."""
    id: int
    prompt_len: int
    output_len: int
    arrival: float = 0.0

    def __post_init__(self):
        validate.count("id", self.id, 0)
        validate.count("prompt_len", self.prompt_len, 1)
        validate.count("output_len", self.output_len, 1)
        validate.number("arrival", self.arrival, 0.0, allow_minimum=True)


def request_mix(n: int, seed: int = 0, prompt=(16, 512), output=(16, 256),
                rate: float | None = None) -> list[Request]:
    """n requests, prompt and output lengths uniform integers in the given [low, high] ranges,
    seeded; all arriving at time 0, or as a Poisson stream of `rate` requests per second."""
    n = validate.count("n", n, 1, MAX_REQUESTS)
    seed = validate.count("seed", seed, 0)
    ranges = []
    for name, pair in (("prompt", prompt), ("output", output)):
        if isinstance(pair, (str, bytes, dict)) or not hasattr(pair, "__len__") or \
                len(pair) != 2:
            raise ValueError(f"{name} must be a (low, high) pair of token counts, got {pair!r}")
        low = validate.count(f"{name} low", pair[0], 1)
        ranges.append((low, validate.count(f"{name} high", pair[1], low)))
    rng = np.random.default_rng(seed)
    prompts = rng.integers(ranges[0][0], ranges[0][1] + 1, n)
    outputs = rng.integers(ranges[1][0], ranges[1][1] + 1, n)
    arrivals = np.zeros(n) if rate is None else np.cumsum(
        rng.exponential(1 / validate.number("rate", rate), n))
    if not np.isfinite(arrivals).all():
        raise ValueError(f"rate must be a number of requests per second whose arrival times "
                         f"stay finite, got {rate!r} (too small)")
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

    def __post_init__(self):
        check_config(self.config)
        if not isinstance(self.hardware, Hardware):
            raise ValueError(f"hardware must be a toykv.roofline.Hardware (e.g. toykv.hardware("
                             f"'h100-sxm')), got {self.hardware!r}")
        validate.number("bytes_per_value", self.bytes_per_value)
        validate.number("bytes_per_param", self.bytes_per_param)
        validate.number("overhead", self.overhead, allow_minimum=True)

    def parts(self, prefills=(), contexts=()) -> tuple[int, int]:
        """(FLOPs, bytes) of an iteration: prefills as (new tokens, cached tokens) pairs,
        decode steps as contexts (tokens held after the step). At most MAX_REQUESTS of each."""
        return self._parts(*_check_step(prefills, contexts))

    def _parts(self, prefills, contexts) -> tuple[int, int]:
        c, b = self.config, self.bytes_per_value
        flops = nbytes = 0
        for new, cached in prefills:
            f, m = _prefill_cost(c, new, cached, b)
            flops, nbytes = flops + f, nbytes + m
        for ctx in contexts:
            f, m = _decode_cost(c, ctx, b)
            flops, nbytes = flops + f, nbytes + m
        rows = len(prefills) + len(contexts)
        return flops, nbytes + weight_bytes_read(c, self.bytes_per_param, max(rows, 1))

    def seconds(self, prefills=(), contexts=()) -> float:
        """The iteration's modelled time (a bound, plus the overhead)."""
        return self._seconds(*_check_step(prefills, contexts))

    def _seconds(self, prefills, contexts) -> float:
        flops, nbytes = self._parts(prefills, contexts)
        return self.hardware.min_seconds(flops, nbytes) + self.overhead


def _items(name: str, values) -> list:
    """A list of at most MAX_REQUESTS items (a str, a lone number or a generator without end
    is refused)."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise ValueError(f"{name} must be a list, got {type(values).__name__} {values!r:.60}")
    values = list(itertools.islice(values, MAX_REQUESTS + 1))
    if len(values) > MAX_REQUESTS:
        raise ValueError(f"{name} has more than MAX_REQUESTS={MAX_REQUESTS:,} entries")
    return values


def _check_step(prefills, contexts) -> tuple[list, list]:
    """An iteration's prefills, (new tokens >= 1, cached tokens >= 0) pairs, and decode
    contexts (>= 1), checked, as lists of ints."""
    pairs = []
    for i, pair in enumerate(_items("prefills", prefills)):
        if isinstance(pair, (str, bytes, dict)) or not hasattr(pair, "__len__") or \
                len(pair) != 2:
            raise ValueError(f"prefills[{i}] must be a (new tokens, cached tokens) pair, got "
                             f"{pair!r:.60}")
        pairs.append((validate.count(f"prefills[{i}] new tokens", pair[0], 1),
                      validate.count(f"prefills[{i}] cached tokens", pair[1], 0)))
    return pairs, [validate.count(f"contexts[{i}]", c, 1)
                   for i, c in enumerate(_items("contexts", contexts))]


@functools.lru_cache(maxsize=1 << 16)
def _decode_cost(config: ModelConfig, ctx: int, bytes_per_value) -> tuple[int, int]:
    """(FLOPs, cache bytes read) of one sequence's decode step at ctx tokens (the new one
    included): toykv.flops and toykv.sizing, remembered (a run asks for the same few thousand
    contexts again and again)."""
    read = read_config(config)                  # each layer reads the cache it attends to
    return forward_flops(config, 1, ctx - 1), kv_cache_bytes(read, ctx, 1, bytes_per_value)


@functools.lru_cache(maxsize=1 << 16)
def _prefill_cost(config: ModelConfig, new: int, cached: int, bytes_per_value
                  ) -> tuple[int, int]:
    """(FLOPs, cache bytes) of a prefill (chunk) of `new` tokens after `cached`: the output head
    on its last token only; the cache of new + cached tokens written and read."""
    head = 2 * config.d_model * config.vocab_size
    return (forward_flops(config, new, cached) - head * (new - 1),
            kv_cache_bytes(read_config(config), new + cached, 1, bytes_per_value))


# -- a request as the scheduler sees it ------------------------------------------------------
WAITING, RUNNING, FINISHED = "waiting", "running", "finished"


class Sequence:
    """One request in the scheduler (nano-vllm's Sequence): its prompt ids (real runs; None in
    a simulation), the tokens it has made (output), its blocks (`table`: anything with a
    block_table the BlockManager fills; a real run's is its KVCache's), how many of its tokens
    the cache holds (num_cached_tokens) and how many the next step feeds (num_scheduled_tokens).
    The newest token made is fed by the next step, so a decoding sequence holds all but one."""

    def __init__(self, request: Request, prompt_ids: list | None = None):
        if not isinstance(request, Request):
            raise ValueError(f"request must be a toykv.scheduler.Request, got "
                             f"{type(request).__name__}")
        if prompt_ids is not None:
            prompt_ids = validate.token_ids("prompt_ids", prompt_ids)
            if len(prompt_ids) != request.prompt_len:
                raise ValueError(f"prompt_ids holds {len(prompt_ids)} tokens, request "
                                 f"{request.id}'s prompt_len is {request.prompt_len}")
        self.request, self.prompt_ids = request, prompt_ids
        self.output: list[int] = []
        self.status = WAITING
        self.table, self.cache = None, None
        self.num_cached_tokens = self.num_scheduled_tokens = 0
        self.is_prefill = True            # the next step feeds more than its newest token

    @property
    def id(self) -> int:
        return self.request.id

    @property
    def num_tokens(self) -> int:
        """Its prompt and every token it has made."""
        return self.request.prompt_len + len(self.output)

    @property
    def token_ids(self) -> list | None:
        return None if self.prompt_ids is None else self.prompt_ids + self.output

    @property
    def done(self) -> bool:
        return len(self.output) >= self.request.output_len

    def __len__(self) -> int:
        return self.num_tokens


class SimTable:
    """A simulated sequence's blocks: a block table and no tokens (no prefix caching)."""

    def __init__(self):
        self.block_table, self.block_hashes, self.token_ids = [], [], None
        self.num_cached_tokens = 0


# -- the scheduler ---------------------------------------------------------------------------
class Scheduler:
    """Which sequences run in the next step, with their blocks (nano-vllm's Scheduler).

    runner: a SimRunner or RealRunner (its BlockManager, and how a sequence gets and gives back
    its blocks); max_num_seqs: sequences running at once; max_num_batched_tokens: the token
    budget of a step (None: prefill first, whole prompts); batching, reserve_tokens: see the
    module."""

    def __init__(self, runner, max_num_seqs: int, max_num_batched_tokens: int | None = None,
                 batching: str = "continuous", reserve_tokens: int | None = None):
        self.runner, self.manager = _check_runner(runner), runner.manager
        self.max_num_seqs = validate.count("max_num_seqs", max_num_seqs, 1)
        self.max_num_batched_tokens = validate.optional_count(
            "max_num_batched_tokens", max_num_batched_tokens, 1)
        self.batching = validate.choice("batching", batching, BATCHING)
        self.reserve = validate.optional_count("reserve_tokens", reserve_tokens, 1) or 0
        self.waiting: deque[Sequence] = deque()
        self.running: deque[Sequence] = deque()
        self.preemptions = 0
        self.held: dict[int, Sequence] = {}       # request id -> its sequence, waiting or running

    def is_finished(self) -> bool:
        return not self.waiting and not self.running

    def add(self, seq: Sequence):
        """A new sequence waits for its turn (its request id not already held here)."""
        if not isinstance(seq, Sequence):
            raise ValueError(f"seq must be a toykv.scheduler.Sequence, got {type(seq).__name__}")
        if seq.status != WAITING or seq.table is not None or seq.output:
            raise ValueError(f"seq (request {seq.id}) has been scheduled before ({seq.status}); "
                             "add a new Sequence")
        if seq.id in self.held:
            raise ValueError(f"seq has request id {seq.id}, which a sequence in this scheduler "
                             "already has: ids must be unique")
        self.held[seq.id] = seq
        self.waiting.append(seq)

    # -- blocks ------------------------------------------------------------------------
    def _admit(self, seq: Sequence, budget: int | None = None) -> int:
        """Give a waiting sequence its cached prefix (real runs) and blocks for the tokens it
        feeds first (all, or `budget` of them), or its reservation; schedules them. 0, nothing
        held, when the free blocks are too few."""
        self.runner.start(seq)
        tokens = seq.num_tokens - seq.num_cached_tokens
        tokens = tokens if budget is None else min(tokens, budget)
        held = max(seq.num_cached_tokens + tokens, self.reserve)
        need = self.manager.blocks_for(held) - len(seq.table.block_table)
        if need > self.manager.num_free:
            self.runner.stop(seq)
            return 0
        self.manager._may_append(seq.table, seq.num_cached_tokens,      # checked: need fits
                                 held - seq.num_cached_tokens)
        seq.status, seq.num_scheduled_tokens, seq.is_prefill = RUNNING, tokens, True
        return tokens

    def _needs(self, seq: Sequence, tokens: int) -> int:
        return self.manager._blocks_needed(seq.table, seq.num_cached_tokens, tokens)

    def preempt(self, seq: Sequence):
        """Free seq's blocks; it waits at the front of the queue, to be prefilled again."""
        if not any(s is seq for s in self.running):
            raise ValueError(f"seq must be a running sequence of this scheduler, got "
                             f"{_named(seq)}")
        self.running.remove(seq)
        self.runner.stop(seq)
        seq.status = WAITING
        self.waiting.appendleft(seq)
        self.preemptions += 1

    # -- a step ------------------------------------------------------------------------
    def schedule(self) -> tuple[list[Sequence], str]:
        """The sequences of the next step, each with num_scheduled_tokens set and its blocks
        taken, and the step's kind: 'prefill', 'decode' or (with a budget) 'mixed'."""
        if self.max_num_batched_tokens is None:
            return self._prefill_first()
        return self._within_budget(self.max_num_batched_tokens)

    def _admissible(self) -> bool:
        return bool(self.waiting) and (self.batching == "continuous" or not self.running)

    def _prefill_first(self) -> tuple[list[Sequence], str]:
        admitted = []
        if self._admissible():
            while self.waiting and len(self.running) + len(admitted) < self.max_num_seqs:
                if not self._admit(self.waiting[0]):
                    break
                admitted.append(self.waiting.popleft())
        if admitted:                                  # a prefill step, whole prompts
            self.running.extend(admitted)
            return admitted, "prefill"
        active = [seq for seq in self.running if not seq.done]   # static: finished rows stay
        while sum(self._needs(seq, 1) for seq in active) > self.manager.num_free:
            self.preempt(active.pop())                # the most recently admitted
        for seq in active:                            # a decode step of every running one
            self.manager._may_append(seq.table, seq.num_cached_tokens, 1)
            seq.num_scheduled_tokens, seq.is_prefill = 1, False
        return active, "decode"

    def _within_budget(self, budget: int) -> tuple[list[Sequence], str]:
        scheduled = []
        for seq in list(self.running):                # running first: decodes, prefill chunks
            if seq not in self.running or seq.done:
                continue
            tokens = min(seq.num_tokens - seq.num_cached_tokens, budget)
            if tokens == 0:
                break
            while self._needs(seq, tokens) > self.manager.num_free:
                victim = self.running[-1]
                self.preempt(victim)
                if victim is seq:
                    break
            else:
                self.manager._may_append(seq.table, seq.num_cached_tokens, tokens)
                seq.num_scheduled_tokens = tokens
                seq.is_prefill = seq.num_tokens - seq.num_cached_tokens > 1
                scheduled.append(seq)
                budget -= tokens
        if self._admissible():                        # then the waiting, with what is left
            while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
                tokens = self._admit(self.waiting[0], budget)
                if not tokens:
                    break
                self.running.append(self.waiting.popleft())
                scheduled.append(self.running[-1])
                budget -= tokens
        prefill = {seq.is_prefill for seq in scheduled}
        return scheduled, ("mixed" if len(prefill) > 1 else
                           "prefill" if prefill == {True} else "decode")

    def postprocess(self, seqs: list[Sequence], token_ids: list) -> list[Sequence]:
        """Take a step's results: each scheduled sequence holds its fed tokens, and one whose
        prompt is all fed appends its next token (token_ids[i]; None for a prefill chunk).
        Returns the running sequences that have just finished (continuous batching frees them
        now; static batching when the whole batch has)."""
        seqs, token_ids = self._check_results(seqs, token_ids)
        for seq, token in zip(seqs, token_ids):
            seq.num_cached_tokens += seq.num_scheduled_tokens
            seq.num_scheduled_tokens = 0
            if seq.num_cached_tokens == seq.num_tokens and not seq.done:
                seq.output.append(token)
        finished = [seq for seq in self.running if seq.done and seq.status != FINISHED]
        for seq in finished:
            seq.status = FINISHED
        if self.batching == "continuous":
            for seq in finished:
                self.running.remove(seq)
                self.runner.stop(seq)
                del self.held[seq.id]
        elif self.running and all(seq.done for seq in self.running):
            for seq in self.running:
                self.runner.stop(seq)
                del self.held[seq.id]
            self.running.clear()
        return finished

    def _check_results(self, seqs, token_ids) -> tuple[list, list]:
        """A step's sequences (running ones, scheduled) and one token (an id, or None for a
        prefill chunk) each, checked before postprocess changes anything."""
        seqs, token_ids = _items("seqs", seqs), _items("token_ids", token_ids)
        if len(token_ids) != len(seqs):
            raise ValueError(f"token_ids must hold one token per scheduled sequence: "
                             f"{len(seqs)} sequences, {len(token_ids)} token_ids")
        running = {id(s) for s in self.running}
        for i, seq in enumerate(seqs):
            if id(seq) not in running or not getattr(seq, "num_scheduled_tokens", 0):
                raise ValueError(f"seqs[{i}] must be a running sequence schedule() gave this "
                                 f"step, got {_named(seq)}")
        return seqs, [None if t is None else validate.count(f"token_ids[{i}]", t, 0)
                      for i, t in enumerate(token_ids)]


# -- runners: where a step runs ------------------------------------------------------------
def _named(seq) -> str:
    """A sequence as a message names it."""
    return f"request {seq.id}'s sequence" if isinstance(seq, Sequence) else \
        f"{type(seq).__name__} {seq!r:.40}"


def _check_step_model(step_model, optional: bool = False):
    if not isinstance(step_model, StepModel) and not (optional and step_model is None):
        raise ValueError(f"step_model must be a toykv.scheduler.StepModel"
                         f"{' or None' if optional else ''}, got {type(step_model).__name__}")
    return step_model


def _check_runner(runner):
    """runner, if it runs steps as SimRunner and RealRunner do (a BlockManager, start, stop,
    run, step_model); else a ValueError."""
    if not isinstance(getattr(runner, "manager", None), BlockManager) or \
            not all(callable(getattr(runner, name, None)) for name in ("start", "stop", "run")) \
            or not hasattr(runner, "step_model"):
        raise ValueError(f"runner must be a toykv.scheduler.SimRunner or RealRunner, got "
                         f"{type(runner).__name__}")
    return runner


class SimRunner:
    """A step on the bookkeeping alone: blocks in a BlockManager, no arrays, no tokens; its
    time from step_model."""

    def __init__(self, manager: BlockManager, step_model: StepModel):
        if not isinstance(manager, BlockManager):
            raise ValueError(f"manager must be a toykv.paged.BlockManager, got "
                             f"{type(manager).__name__}")
        self.manager, self.step_model = manager, _check_step_model(step_model, optional=True)

    def start(self, seq: Sequence):
        seq.table, seq.num_cached_tokens = SimTable(), 0

    def stop(self, seq: Sequence):
        self.manager.deallocate(seq.table)
        seq.table, seq.num_cached_tokens = None, 0

    def run(self, seqs: list[Sequence]) -> list:
        return [0] * len(seqs)


class RealRunner:
    """A step on a toykv model and its BlockPool: a sequence is a KVCache of the pool
    (prefix caching at admission), fed its scheduled tokens with one forward each, greedy."""

    def __init__(self, model, pool: BlockPool, step_model: StepModel | None = None):
        check_model(model)
        if not isinstance(pool, BlockPool) or pool.model is not model:
            given = "another model's" if isinstance(pool, BlockPool) else type(pool).__name__
            raise ValueError(f"pool must be a BlockPool of this model (model.new_paged_cache), "
                             f"got {given}")
        self.model, self.pool, self.manager = model, pool, pool.manager
        self.step_model = _check_step_model(step_model, optional=True)

    def start(self, seq: Sequence):
        seq.cache = self.pool.new_sequence(seq.token_ids)
        seq.table, seq.num_cached_tokens = seq.cache.layers[0].table, len(seq.cache)

    def stop(self, seq: Sequence):
        seq.cache.finish()
        seq.cache = seq.table = None
        seq.num_cached_tokens = 0

    def run(self, seqs: list[Sequence]) -> list:
        tokens = []
        for seq in seqs:
            first = seq.num_cached_tokens
            feed = seq.token_ids[first:first + seq.num_scheduled_tokens]
            logits = self.model.forward(feed, seq.cache)[-1]
            complete = first + len(feed) == seq.num_tokens
            tokens.append(int(np.argmax(logits)) if complete else None)
        return tokens


# -- the loop --------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What serve did: per request its first-token and finish times, the time each of its
    tokens came (token_times) and its tokens (real runs), how long it waited in the queue
    before its first step (queued), the preemptions, and one trace row per iteration."""
    ttft: dict = field(default_factory=dict)          # request id -> s from arrival to token 1
    finish: dict = field(default_factory=dict)        # request id -> s at its last token
    tokens: dict = field(default_factory=dict)        # request id -> generated ids (real runs)
    token_times: dict = field(default_factory=dict)   # request id -> s at each of its tokens
    queued: dict = field(default_factory=dict)        # request id -> s from arrival to its
    #   first scheduled step
    preemptions: int = 0
    trace: list = field(default_factory=list)         # dicts: t, kind, batch, generating,
    #   waiting, blocks, held (tokens stored of each running request), tokens (fed this step),
    #   owners
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
        """Mean seconds from arrival to the first token, over the requests that have one."""
        if not self.ttft:
            raise ValueError("no request has a first token yet: mean_ttft has nothing to "
                             "average")
        return float(np.mean(list(self.ttft.values())))

    def itl(self) -> np.ndarray:
        """Every inter-token latency: the gaps between a request's consecutive tokens, all
        requests. [tokens - requests] s"""
        gaps = [np.diff(times) for times in self.token_times.values() if len(times) > 1]
        return np.concatenate(gaps) if gaps else np.zeros(0)

    def tpot(self) -> np.ndarray:
        """Time per output token of each request with more than one: (last - first token) /
        (tokens - 1). [requests] s"""
        return np.array([(t[-1] - t[0]) / (len(t) - 1) for t in self.token_times.values()
                         if len(t) > 1])

    def latency(self, q: float = 50) -> dict:
        """The q-th percentile (0..100) of time to first token, time per output token and
        inter-token latency, in seconds: {'ttft', 'tpot', 'itl'}."""
        q = validate.number("q", q, 0.0, allow_minimum=True, maximum=100.0)
        pick = lambda a: float(np.percentile(a, q)) if len(a) else 0.0   # noqa: E731
        return {"ttft": pick(np.array(list(self.ttft.values()))), "tpot": pick(self.tpot()),
                "itl": pick(self.itl())}


def _request_list(requests) -> list[Request]:
    """requests as a non-empty list of Requests with unique ids."""
    if isinstance(requests, (str, bytes, dict)) or not hasattr(requests, "__iter__"):
        raise ValueError(f"requests must be a list of toykv.scheduler.Request, got "
                         f"{type(requests).__name__} {requests!r:.60}")
    requests = _items("requests", requests)
    if not requests or not all(isinstance(r, Request) for r in requests):
        raise ValueError("requests must be a non-empty list of toykv.scheduler.Request")
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        twice = sorted(i for i in set(ids) if ids.count(i) > 1)[:5]
        raise ValueError(f"request ids must be unique, got {twice} twice")
    return requests


def _check_fits(requests, manager, reserve: int, budget: int | None):
    """Each request able to run alone in the blocks free now, and a run whose steps (decode
    steps, and prefills in chunks of at most `budget`) are bounded."""
    for r in requests:
        if manager.blocks_for(max(r.prompt_len + r.output_len, reserve)) > manager.num_free:
            raise ValueError(f"request {r.id} ({r.prompt_len} + {r.output_len} tokens) needs "
                             f"more blocks than the pool's {manager.num_free} free of "
                             f"{manager.num_blocks}")
    if sum(r.output_len for r in requests) > MAX_ITERATIONS:
        raise ValueError(f"the requests ask for more than {MAX_ITERATIONS:,} output tokens in "
                         "all: a run that long is refused, not waited for")
    if budget is not None and sum(-(-r.prompt_len // budget) + r.output_len
                                  for r in requests) > MAX_ITERATIONS:
        raise ValueError(f"max_num_batched_tokens={budget} splits these prompts into more "
                         f"than {MAX_ITERATIONS:,} steps with their output tokens: a run that "
                         "long is refused, not waited for; give a larger budget")


def _check_prompts(runner, requests, prompts) -> dict | None:
    """A real run's prompts: request id -> its prompt_len token ids, each run within
    max_seq_len; None for a simulated one."""
    model = getattr(runner, "model", None)
    if model is None:
        if prompts is not None:
            raise ValueError("prompts are for a real run (a RealRunner); a simulated run has "
                             "none: give prompts=None")
        return None
    if not isinstance(prompts, dict):
        raise ValueError(f"prompts must be a dict of request id -> prompt token ids for a real "
                         f"run, got {type(prompts).__name__}")
    config, checked = model.config, {}
    for r in requests:
        if r.id not in prompts:
            raise ValueError(f"prompts has no prompt for request {r.id}")
        ids = validate.token_ids(f"prompts[{r.id}]", prompts[r.id], config.vocab_size)
        if len(ids) != r.prompt_len:
            raise ValueError(f"prompts[{r.id}] holds {len(ids)} tokens, the request's "
                             f"prompt_len is {r.prompt_len}")
        if r.prompt_len + r.output_len - 1 > config.max_seq_len:
            raise ValueError(f"request {r.id} needs {r.prompt_len + r.output_len - 1} "
                             f"positions, more than max_seq_len {config.max_seq_len}")
        checked[r.id] = ids
    return checked


def serve(runner, requests, max_batch: int, batching: str = "continuous",
          reserve_tokens: int | None = None, record_blocks: bool = False,
          clients: int | None = None, max_num_batched_tokens: int | None = None,
          prompts: dict | None = None) -> Outcome:
    """Serve `requests` with a Scheduler and `runner` (see simulate and run_real, which build
    it): arrivals join the queue, the scheduler picks each step, the runner runs it, the clock
    advances by the step model's time (1 s a step without one).

    clients=N: a closed loop, as a benchmark with N concurrent requests runs: N clients each
    send their next request (in the list's order) when their previous one has finished, so
    request arrivals are those moments, not their `arrival` fields. prompts: request id ->
    prompt ids (real runs). Everything is checked, and the run's length bounded
    (MAX_ITERATIONS), before the first block is taken; a run that fails part-way gives back
    every block it took."""
    _check_runner(runner)
    max_batch = validate.count("max_batch", max_batch, 1)
    clients = validate.optional_count("clients", clients, 1)
    validate.flag("record_blocks", record_blocks)
    scheduler = Scheduler(runner, max_batch, max_num_batched_tokens, batching, reserve_tokens)
    requests = _request_list(requests)
    prompts = _check_prompts(runner, requests, prompts)
    _check_fits(requests, runner.manager, scheduler.reserve, scheduler.max_num_batched_tokens)
    if record_blocks and (len(requests) + sum(r.output_len for r in requests)) * \
            runner.manager.num_blocks > MAX_RECORDED:
        raise ValueError(f"record_blocks would record a row of {runner.manager.num_blocks:,} "
                         f"block owners for each of up to "
                         f"{len(requests) + sum(r.output_len for r in requests):,} steps, more "
                         f"than MAX_RECORDED={MAX_RECORDED:,}: record a smaller run")
    try:
        return _serve(runner, scheduler, requests, clients, record_blocks, prompts)
    except BaseException:                      # give back every block the run holds
        for seq in list(scheduler.running) + list(scheduler.waiting):
            if seq.table is not None:
                try:
                    runner.stop(seq)
                except Exception:              # noqa: BLE001 - the first error is the one
                    pass
        raise


def _serve(runner, scheduler, requests, clients, record_blocks, prompts) -> Outcome:
    """serve's loop, on checked arguments."""
    if clients is None:
        pending, later = sorted(requests, key=lambda r: (r.arrival, r.id)), []
    else:
        pending, later = list(requests[:clients]), list(requests[clients:])
    arrival = {r.id: 0.0 if clients else r.arrival for r in requests}
    out, t, p = Outcome(), 0.0, 0
    steps = runner.step_model
    for _ in range(MAX_ITERATIONS + len(requests)):
        while p < len(pending) and arrival[pending[p].id] <= t:
            scheduler.add(Sequence(pending[p], None if prompts is None else
                                   prompts[pending[p].id]))
            p += 1
        if scheduler.is_finished():
            if p == len(pending):
                out.preemptions = scheduler.preemptions
                return out
            t = arrival[pending[p].id]
            continue
        seqs, kind = scheduler.schedule()
        if not seqs and not scheduler.running:
            raise RuntimeError("no request could be scheduled in an empty batch")
        for seq in seqs:
            out.queued.setdefault(seq.id, t - arrival[seq.id])
        prefills = [(s.num_scheduled_tokens, s.num_cached_tokens) for s in seqs if s.is_prefill]
        contexts = [s.num_cached_tokens + 1 for s in seqs if not s.is_prefill]
        contexts += [s.request.prompt_len + s.request.output_len for s in scheduler.running
                     if s.done]                        # static: finished rows still run
        tokens = runner.run(seqs)
        if prefills or contexts:
            t += steps._seconds(prefills, contexts) if steps else 1.0
        made = [s for s, token in zip(seqs, tokens)
                if s.num_cached_tokens + s.num_scheduled_tokens == s.num_tokens]
        finished = scheduler.postprocess(seqs, tokens)
        for seq in made:
            out.output_tokens += 1
            out.tokens[seq.id] = seq.output
            out.ttft.setdefault(seq.id, t - arrival[seq.id])
            out.token_times.setdefault(seq.id, []).append(t)
        for seq in finished:
            out.finish[seq.id] = t
            if later:                                  # its client sends the next request
                arrival[later[0].id] = t
                pending.append(later.pop(0))
        row = {"t": t, "kind": kind, "batch": len(scheduler.running),
               "generating": sum(not s.done for s in scheduler.running),
               "waiting": len(scheduler.waiting), "blocks": runner.manager.num_used,
               "held": sum(s.num_cached_tokens for s in scheduler.running),
               "tokens": sum(n for n, _ in prefills) + sum(not s.is_prefill for s in seqs)}
        if record_blocks:
            row["owners"] = _owners(runner.manager, scheduler.running)
        out.trace.append(row)
    raise RuntimeError(f"serve ran {MAX_ITERATIONS:,} iterations without finishing")


def _owners(manager, running) -> list[int]:
    """Per block: the id of the request holding it (-1: free; the lowest id if shared)."""
    owners = [-1] * manager.num_blocks
    for seq in sorted(running, key=lambda s: -s.id):
        for block in seq.table.block_table:
            owners[block] = seq.id
    return owners


def simulate(requests, step_model: StepModel, num_blocks: int, block_size: int = 16,
             max_batch: int = 256, batching: str = "continuous",
             reserve_tokens: int | None = None, clients: int | None = None,
             max_num_batched_tokens: int | None = None) -> Outcome:
    """Serve requests on a simulated pool (a BlockManager) with step times from step_model."""
    _check_step_model(step_model)
    return serve(SimRunner(BlockManager(num_blocks, block_size), step_model), requests,
                 max_batch, batching, reserve_tokens, clients=clients,
                 max_num_batched_tokens=max_num_batched_tokens)


def _sized(name: str, values) -> list:
    """A list of values that has a length (a str or a lone number refused)."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        raise ValueError(f"{name} must be a list, got {type(values).__name__} {values!r:.60}")
    return _items(name, values)


def run_real(model, pool: BlockPool, prompts: list, output_lens: list, max_batch: int,
             batching: str = "continuous", step_model: StepModel | None = None,
             record_blocks: bool = False, max_num_batched_tokens: int | None = None
             ) -> Outcome:
    """Serve real prompts (lists of ids) on a toykv model's BlockPool, greedy, each for its
    output_lens tokens; the outcome's tokens are every request's generated ids. Every
    argument is checked before the first step; the pool ends as it began (every block the run
    took given back, also by a run that fails part-way)."""
    runner = RealRunner(model, pool, step_model)
    prompts, output_lens = _sized("prompts", prompts), _sized("output_lens", output_lens)
    if len(prompts) != len(output_lens):
        raise ValueError(f"output_lens must give one output length per prompt, got "
                         f"{len(prompts)} prompts and {len(output_lens)} output_lens")
    config = model.config
    ids = [validate.token_ids(f"prompts[{i}]", p, config.vocab_size, config.max_seq_len)
           for i, p in enumerate(prompts)]
    for i, p in enumerate(ids):
        if not p:
            raise ValueError(f"prompts[{i}] is empty (prompt_len 0): give every prompt at "
                             "least one token")
    lens = [validate.count(f"output_lens[{i}]", n, 1) for i, n in enumerate(output_lens)]
    requests = [Request(i, len(p), n) for i, (p, n) in enumerate(zip(ids, lens))]
    return serve(runner, requests, max_batch, batching, None, record_blocks,
                 max_num_batched_tokens=max_num_batched_tokens, prompts=dict(enumerate(ids)))


def alone_tokens(model, prompt, n: int) -> list[int]:
    """Greedy tokens of one prompt with a contiguous cache: what a served request must give."""
    check_model(model)
    prompt = validate.token_ids("prompt", prompt, model.config.vocab_size)
    n = validate.count("n", n, 1)
    ids, cache, _, _ = check_run(model, prompt, n)            # fits max_seq_len, up front
    token = int(np.argmax(model.forward(ids, cache)[-1]))
    tokens = [token]
    while len(tokens) < n:
        tokens.append(int(np.argmax(model.forward([tokens[-1]], cache)[-1])))
    return tokens


__all__ = ["Request", "request_mix", "StepModel", "Sequence", "Scheduler", "SimRunner",
           "RealRunner", "Outcome", "serve", "simulate", "run_real", "alone_tokens",
           "BATCHING"]
