"""python -m toykv.bench: toykv's speed against this machine's own roofline, measured in one run.

Prints the machine and then
1. decode: bytes a cached step reads / step time / measured memory bandwidth (a ~0.57 GB
   float32 model), and where the time goes: the step's weight products alone, and the numpy
   calls of the same layers with tiny matrices (the ceiling they leave),
2. prefill: FLOPs of a 512-token prompt / time / measured matmul peak (the same model),
3. the source's toy generating to 512 tokens: cached step time at 512 over at 64 (flat?),
   and uncached over cached step time at 512 (the blog post
   source_blog_numpy_toy measured 58x),
4. the exact backend's slowdown over the default one,
5. widget update latency: median time of a cache-fill Step/Reset, a change of the
   attention view's layer or head, and a size-calculator change, against a 100 ms budget
   (a Step, which updates the attention view too, and the attention menus: one frame),
6. a decode step of each attention variant at 16K tokens against its one-thread bound,
7. decode of SmolLM2-135M's shapes (float32) against its bandwidth bound (chapter 9), with
   the same split of its time as in 1,
8. batched decode at batch 1, 4 and 16: tokens/s against the bandwidth bound (chapter 6),
9. speculative decoding on SmolLM2-135M-Instruct (the GGUF, chapter 11): prompt lookup on a
   task that quotes its prompt and on one that does not, speed-up over plain decoding (timed
   in turns, best of each) and acceptance, the same tokens asserted.
Each ratio carries PASS or BELOW FLOOR. Bandwidth and peak come from toykv.roofline and are
measured in rounds interleaved with the model's runs, because on a shared machine they drift
within seconds. The run also reports how busy other processes kept the CPUs: when they used
more than a few percent, the figures say more about the neighbours than about toykv.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import time

import numpy as np

from . import roofline
from .config import bench_toy, source_toy
from .flops import cached_step_flops, forward_flops
from .generate import decode_steps
from .model import ToyTransformer
from .timing import step_matrices, tiny_like

DECODE_CONFIG = bench_toy()         # ~0.57 GB of float32 weights (toykv.config.bench_toy)
PROMPT_LEN = 512                    # prefill length, and the context decode starts from
DECODE_ROUNDS, STEPS_PER_ROUND = 5, 12    # each round: measure bandwidth, then time 12 steps
PREFILL_ROUNDS = 3                  # each round: measure matmul peak, then time one prefill
TOY_PROMPT, TOY_END, WINDOW = 32, 512, 32  # toy: 32-token prompt to 512; 32-step windows
EXACT_NEW_TOKENS = 64
SOURCE_UNCACHED_OVER_CACHED = 58    # source_blog_numpy_toy: 35.1 ms / 0.60 ms per step at 512
BUSY_WARNING = 0.05                 # other processes' share of the CPUs that spoils timings
HIGH_STATE = 48e9                   # this VM's measured bandwidth sits near 35 or near 60 GB/s
SMOLLM2 = "smollm2-135m"            # toykv.zoo's entry, shapes from the model's GGUF metadata
SMOLLM2_PROMPT = 512                # decode starts from a 512-token context, as in section 1
BATCHES, BATCH_PROMPT, BATCH_ROUNDS, BATCH_STEPS = (1, 4, 16), 64, 3, 6


def verdict(ratio: float, floor: float, higher_is_better: bool = True) -> str:
    ok = ratio >= floor if higher_is_better else ratio <= floor
    return "PASS" if ok else "BELOW FLOOR"


def random_prompt(n: int, vocab_size: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab_size, n)]


def median_window(steps, last_context: int, width: int) -> float:
    """Median step time of the `width` steps whose context ends at last_context."""
    times = [s.seconds for s in steps if last_context - width < s.context <= last_context]
    if len(times) != width:
        raise ValueError(f"need {width} steps ending at context {last_context}, got {len(times)}")
    return float(np.median(times))


# -- how busy the machine is -------------------------------------------------------------

def _cpu_jiffies():
    """(busy, total) CPU ticks of the whole machine since boot, from /proc/stat (Linux)."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]
    idle = ticks[3] + ticks[4]                        # idle + iowait
    return sum(ticks) - idle, sum(ticks)


class OthersLoad:
    """Share of the machine's CPU time used by other processes between start() and share()."""

    def start(self):
        try:
            self.busy0, self.total0 = _cpu_jiffies()
        except (OSError, ValueError, IndexError):
            self.busy0 = None
        self.own0 = time.process_time()

    def share(self) -> float | None:
        if self.busy0 is None:
            return None
        busy, total = _cpu_jiffies()
        ticks_per_s = os.sysconf("SC_CLK_TCK")
        own = (time.process_time() - self.own0) * ticks_per_s
        return max(0.0, (busy - self.busy0 - own) / max(1, total - self.total0))


def load_average() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def print_machine():
    info = roofline.describe_machine()
    print(f"date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}")
    print("machine: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    env = {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                          "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    print("env: " + ", ".join(f"{k}={v if v is not None else '(unset)'}" for k, v in env.items()))
    print(f"load average at the start (1, 5, 15 min): {load_average()}")


# -- 1 and 2: decode and prefill on a ~0.57 GB model ----------------------------------------

def bench_prefill(model, prompt):
    """Rounds of (matmul peak, one timed prefill). Returns (peaks, seconds, the last cache, logits)."""
    peaks, seconds = [], []
    for _ in range(PREFILL_ROUNDS):
        peaks.append(roofline.measure_matmul_peak())
        cache = model.new_cache()
        t0 = time.perf_counter()
        logits = model.forward(prompt, cache)
        seconds.append(time.perf_counter() - t0)
    return peaks, seconds, cache, logits


def bench_decode(model, cache, token):
    """Rounds of (bandwidth, STEPS_PER_ROUND timed cached steps). Returns bandwidths, per-round
    step times and the bytes each step read (weights + the cache it attends over)."""
    wbytes, bandwidths, rounds, step_bytes = model.weight_nbytes, [], [], []
    for _ in range(DECODE_ROUNDS):
        bandwidths.append(roofline.measure_bandwidth())
        times = []
        for _ in range(STEPS_PER_ROUND):
            step_bytes.append(wbytes + cache.nbytes + cache.nbytes // len(cache))  # + new K, V
            t0 = time.perf_counter()
            logits = model.forward([token], cache)
            times.append(time.perf_counter() - t0)
            token = int(np.argmax(logits[-1]))
        rounds.append(times)
    return bandwidths, rounds, step_bytes


def print_decode(bandwidths, rounds, step_bytes):
    """Per round and overall: bytes per step / step time / bandwidth, and the median ratio of
    the rounds in each of the machine's bandwidth states."""
    steps = [t for r in rounds for t in r]
    bandwidth, step, nbytes = (float(np.median(bandwidths)), float(np.median(steps)),
                               float(np.median(step_bytes)))
    print(f"   {DECODE_ROUNDS} rounds of [measure_bandwidth(), {STEPS_PER_ROUND} cached steps]:")
    for b, r in zip(bandwidths, rounds):
        print(f"     bandwidth {b / 1e9:5.1f} GB/s, median step {np.median(r) * 1e3:6.2f} ms "
              f"-> {nbytes / np.median(r) / b:.2f}")
    print(f"   bytes per step {nbytes / 1e6:.1f} MB (weights + cache); median step "
          f"{step * 1e3:.2f} ms (best {min(steps) * 1e3:.2f}); median bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s")
    ratio = nbytes / step / bandwidth
    print(f"   -> {nbytes / step / 1e9:.1f} GB/s = {ratio:.2f} of measured bandwidth  "
          f"(goal 0.8, floor 0.5)  {verdict(ratio, 0.5)}")
    for name, high in (("below", False), ("above", True)):
        ratios = [nbytes / np.median(r) / b for b, r in zip(bandwidths, rounds)
                  if (b >= HIGH_STATE) == high]
        if ratios:
            ratio = float(np.median(ratios))
            print(f"   rounds {name} {HIGH_STATE / 1e9:.0f} GB/s: {len(ratios)}, median of their "
                  f"ratios {ratio:.2f}  {verdict(ratio, 0.5)}")


def products_alone(model, repeats: int = DECODE_ROUNDS) -> float:
    """Median seconds of one step's weight products run back to back, one row each, with
    nothing between them: the most a step's products can give on this machine."""
    matrices = step_matrices(model)
    rows = {w.shape[0]: np.ones((1, w.shape[0]), np.float32) for w in matrices}
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for w in matrices:
            rows[w.shape[0]] @ w
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def fixed_cost(config, context: int, steps: int = 3 * STEPS_PER_ROUND) -> float:
    """Median decode step at `context` of tiny_like(config), whose products take next to no
    time: what the numpy calls of config's layers cost per step."""
    tiny = tiny_like(config)
    model = ToyTransformer(tiny)
    cache = model.new_cache()
    model.forward(random_prompt(context, tiny.vocab_size), cache)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        model.forward([1], cache)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def print_decode_parts(model, step_bytes, context: int):
    """Where a step's time goes: its weight products alone, against the bandwidth measured
    just before, and the per-step cost of the numpy calls, from the same layers with tiny
    matrices. Their sum bounds the ratio a step can reach even with attention for free."""
    bandwidth = roofline.measure_bandwidth()
    products, fixed = products_alone(model), fixed_cost(model.config, context)
    nbytes, layers = float(np.median(step_bytes)), model.config.n_layers
    print(f"   where the time goes, at {bandwidth / 1e9:.1f} GB/s measured just before: the "
          f"weight products alone, back to back, {products * 1e3:.2f} ms "
          f"({model.weight_nbytes / products / bandwidth:.2f} of their bound); the same "
          f"{layers} layers with tiny matrices (numpy calls), {fixed * 1e3:.2f} ms a step, "
          f"{fixed / layers * 1e6:.0f} us a layer")
    print(f"   -> ceiling with attention over the cache for free: "
          f"{nbytes / (products + fixed) / bandwidth:.2f} of measured bandwidth")


def bench_decode_and_prefill():
    c = DECODE_CONFIG
    model = ToyTransformer(c)
    prompt = random_prompt(PROMPT_LEN, c.vocab_size)
    peaks, prefill_times, cache, logits = bench_prefill(model, prompt)
    bandwidths, rounds, step_bytes = bench_decode(model, cache, int(np.argmax(logits[-1])))
    print(f"\n1. decode ({c.n_layers} layers, d_model {c.d_model}, {c.n_heads} heads, d_ff "
          f"{c.d_ff}, vocab {c.vocab_size}; float32 weights {model.weight_nbytes / 1e9:.3f} GB; "
          f"context {PROMPT_LEN + 1}-{PROMPT_LEN + DECODE_ROUNDS * STEPS_PER_ROUND})")
    print_decode(bandwidths, rounds, step_bytes)
    print_decode_parts(model, step_bytes, len(cache))

    peak, flops, prefill = (float(np.median(peaks)), forward_flops(c, PROMPT_LEN),
                            float(np.median(prefill_times)))
    ratio = flops / prefill / peak
    print(f"\n2. prefill ({PROMPT_LEN} tokens, same model): {flops / 1e9:.1f} GFLOP; "
          f"{PREFILL_ROUNDS} rounds of [measure_matmul_peak(), one prefill]:")
    for p, s in zip(peaks, prefill_times):
        print(f"     peak {p / 1e9:6.1f} GFLOP/s, prefill {s:.3f} s -> {flops / s / p:.2f}")
    print(f"   median prefill {prefill:.3f} s, median peak {peak / 1e9:.1f} GFLOP/s")
    print(f"   -> {flops / prefill / 1e9:.1f} GFLOP/s = {ratio:.2f} of measured matmul peak  "
          f"(goal 0.8, floor 0.5)  {verdict(ratio, 0.5)}")


# -- 3 and 4: the source's toy --------------------------------------------------------------

def bench_toy():
    model = ToyTransformer(source_toy())
    prompt = random_prompt(TOY_PROMPT, model.config.vocab_size)
    new = TOY_END - TOY_PROMPT + 1             # the last step runs at context TOY_END
    t0 = time.perf_counter()
    cached = list(decode_steps(model, prompt, new, use_cache=True))
    t_cached = time.perf_counter() - t0
    t0 = time.perf_counter()
    uncached = list(decode_steps(model, prompt, new, use_cache=False))
    t_uncached = time.perf_counter() - t0
    same = [s.token for s in cached] == [s.token for s in uncached]

    at64, at512 = median_window(cached, 64, WINDOW), median_window(cached, TOY_END, WINDOW)
    un64, un512 = median_window(uncached, 64, WINDOW), median_window(uncached, TOY_END, WINDOW)
    flat, speedup = at512 / at64, un512 / at512
    print(f"\n3. source toy (2 layers, d_model 128, 8 heads, d_ff 512, vocab 512): "
          f"{TOY_PROMPT}-token prompt generated to {TOY_END} tokens; medians of the "
          f"{WINDOW} steps ending at each context")
    print(f"   cached step: {at64 * 1e3:.3f} ms at 64, {at512 * 1e3:.3f} ms at {TOY_END} "
          f"-> {flat:.2f}x  (flat: floor <= 1.5)  {verdict(flat, 1.5, higher_is_better=False)}")
    print(f"   uncached step: {un64 * 1e3:.2f} ms at 64, {un512 * 1e3:.2f} ms at {TOY_END} "
          f"-> {speedup:.0f}x the cached step at {TOY_END}  (source measured "
          f"{SOURCE_UNCACHED_OVER_CACHED}x)  {verdict(speedup, SOURCE_UNCACHED_OVER_CACHED)}")
    print(f"   whole generation: cached {t_cached:.2f} s, uncached {t_uncached:.2f} s; "
          f"same tokens: {same}")


def bench_exact():
    prompt = random_prompt(TOY_PROMPT, source_toy().vocab_size)
    seconds = {}
    for exact in (False, True):
        model = ToyTransformer(source_toy(), exact=exact)
        t0 = time.perf_counter()
        for _ in decode_steps(model, prompt, EXACT_NEW_TOKENS):
            pass
        seconds[exact] = time.perf_counter() - t0
    print(f"\n4. exact backend (source toy, {TOY_PROMPT}-token prompt, {EXACT_NEW_TOKENS} tokens "
          f"generated with the cache): {seconds[True]:.2f} s vs default {seconds[False]:.3f} s "
          f"-> {seconds[True] / seconds[False]:.0f}x slower (keep exact=True to small runs)")


WIDGET_BUDGET = 0.100               # seconds: a widget should answer a click at once
FRAME_BUDGET = 1 / 60               # one frame at 60 Hz: the attention view's figures follow
FRAME_UPDATES = ("cache_fill_step", "attention_layer_head")   # the input within one frame


def bench_widgets():
    """Median seconds per widget update (toykv.widgets.update_latency), against 100 ms, and
    against one frame (16.7 ms) for a Step (both views) and the attention view's menus."""
    try:
        from .widgets import update_latency
    except ImportError as err:                    # ipywidgets/matplotlib are not hard deps
        print(f"\n5. widget update latency: skipped ({err}); pip install ipywidgets matplotlib")
        return
    print("\n5. widget update latency (median of 10 updates each; budget 100 ms, one frame "
          "(16.7 ms) where marked):")
    for name, seconds in update_latency(repeats=10).items():
        budget = FRAME_BUDGET if name in FRAME_UPDATES else WIDGET_BUDGET
        mark = " (one frame)" if name in FRAME_UPDATES else ""
        print(f"   {name:24s} {seconds * 1e3:7.1f} ms  "
              f"{verdict(seconds, budget, higher_is_better=False)}{mark}")


def bench_variants(context: int = 16384, steps: int = 7):
    """6. Decode step of each attention variant (chapter 7's toy) at long context, against its
    bandwidth bound: bytes the step moves (toykv.variants) / bandwidth, both on one BLAS thread."""
    from .steptime import blas_threads, step_time_curve
    from .sizing import decode_step_bytes
    from .variants import TOY_VARIANT_SHAPES, attention_variants, long_context_toy
    configs = attention_variants(long_context_toy(), **TOY_VARIANT_SHAPES)
    runs = [("MHA", configs["mha"], False), ("GQA", configs["gqa"], False),
            ("MQA", configs["mqa"], False), ("MLA absorbed", configs["mla"], True),
            ("MLA expanded", configs["mla"], False)]
    print(f"\n6. decode step per attention variant (chapter 7's toy: 4 layers, d_model 768, "
          f"12 heads of 64, float32) at context {context:,}; median of {steps} steps (3 for "
          f"expanded MLA), one BLAS thread; bound = bytes moved / measure_bandwidth() on one "
          f"thread, measured just before each variant:")
    for label, config, absorb in runs:
        model = ToyTransformer(config, absorb=absorb)
        with blas_threads(1):
            bandwidth = roofline.measure_bandwidth()
        n = 3 if label == "MLA expanded" else steps
        seconds = float(step_time_curve(model, [context], steps=n, threads=1)[0])
        nbytes = decode_step_bytes(config, context, 1, 4, 4, expanded=not absorb)["total"]
        bound = nbytes / bandwidth
        print(f"   {label:13} {nbytes / 1e6:6.0f} MB  step {seconds * 1e3:7.1f} ms  bound "
              f"{bound * 1e3:6.1f} ms at {bandwidth / 1e9:4.1f} GB/s -> {bound / seconds:.2f} "
              "of the bound")
        del model


def bench_smollm2():
    """7. Decode of SmolLM2-135M-Instruct's shapes, float32, against its bandwidth bound: the
    zoo's config with seeded weights (a step's time does not depend on the values)."""
    from .zoo import get
    config = dataclasses.replace(get(SMOLLM2).config, max_seq_len=1024)
    model = ToyTransformer(config)
    prompt = random_prompt(SMOLLM2_PROMPT, config.vocab_size)
    cache = model.new_cache()
    token = int(np.argmax(model.forward(prompt, cache)[-1]))
    bandwidths, rounds, step_bytes = bench_decode(model, cache, token)
    c = config
    print(f"\n7. SmolLM2-135M decode ({c.n_layers} layers, d_model {c.d_model}, {c.n_heads} "
          f"heads / {c.n_kv_heads} KV heads, d_ff {c.d_ff}, vocab {c.vocab_size}, tied; "
          f"toykv.zoo's shapes with seeded weights; float32 weights "
          f"{model.weight_nbytes / 1e9:.3f} GB; "
          f"context {SMOLLM2_PROMPT + 1}-{SMOLLM2_PROMPT + DECODE_ROUNDS * STEPS_PER_ROUND})")
    print_decode(bandwidths, rounds, step_bytes)
    steps = [t for r in rounds for t in r]
    print(f"   {1 / np.median(steps):.0f} tok/s")
    print_decode_parts(model, step_bytes, len(cache))


def bench_batched():
    """8. Batched decode on section 1's model: tokens/s summed over the batch, against the
    bandwidth bound B / ((weights + B caches) / bandwidth), with bandwidth measured in rounds."""
    c = DECODE_CONFIG
    model = ToyTransformer(c)
    print(f"\n8. batched decode (section 1's model, {BATCH_PROMPT}-token prompts, context "
          f"{BATCH_PROMPT + 1}-{BATCH_PROMPT + BATCH_ROUNDS * BATCH_STEPS}); {BATCH_ROUNDS} rounds "
          f"of [measure_bandwidth(), {BATCH_STEPS} steps] per batch; tok/s over the batch:")
    peak = roofline.measure_matmul_peak()
    for B in BATCHES:
        ids = np.array([random_prompt(BATCH_PROMPT, c.vocab_size, seed=b) for b in range(B)])
        cache = model.new_cache(batch=B)
        tokens = np.argmax(model.forward(ids, cache)[:, -1], axis=-1)[:, None]     # [B, 1]
        bandwidths, times, nbytes = [], [], []
        for _ in range(BATCH_ROUNDS):
            bandwidths.append(roofline.measure_bandwidth())
            for _ in range(BATCH_STEPS):
                nbytes.append(model.weight_nbytes + cache.nbytes + cache.nbytes // len(cache))
                t0 = time.perf_counter()
                tokens = np.argmax(model.forward(tokens, cache)[:, -1], axis=-1)[:, None]
                times.append(time.perf_counter() - t0)
        step, bandwidth = float(np.median(times)), float(np.median(bandwidths))
        bound = B * bandwidth / float(np.median(nbytes))          # tok/s if bytes set the pace
        flops = cached_step_flops(c, len(cache), batch=B)         # the last step's
        compute = B * peak / flops                                # tok/s if FLOPs did
        print(f"   batch {B:2d}: step {step * 1e3:6.1f} ms, {B / step:6.1f} tok/s; bandwidth "
              f"bound {bound:6.1f} tok/s at {bandwidth / 1e9:4.1f} GB/s -> {B / step / bound:.2f}"
              f"; compute bound {compute:.0f} tok/s at {peak / 1e9:.0f} GFLOP/s")
        del cache


SPEC_NEW, SPEC_K, SPEC_ROUNDS = 48, 8, 3
SPEC_TASKS = {
    "quote": "Copy this paragraph exactly, word for word:\n\nA language model writes one "
             "token at a time. Each step it reads all of its weights from memory, does a "
             "little arithmetic with them, and picks the next token. The keys and values of "
             "the earlier tokens wait in the cache, so nothing is computed twice.",
    "story": "Write a short story about a lighthouse keeper and a storm.",
}


def bench_speculative():
    """9. Speculative decoding with prompt lookup on SmolLM2-135M-Instruct: speed-up and
    acceptance on a quoting task and a free one (the real weights: acceptance needs them)."""
    from .gguf_loader import load_gguf
    from .smollm2 import smollm2_gguf_path
    from .speculative import PromptLookup, acceptance, speculative_steps
    from .timing import best_seconds
    print(f"\n9. speculative decoding, SmolLM2-135M-Instruct (GGUF, float32), prompt lookup "
          f"k <= {SPEC_K}, {SPEC_NEW} new tokens; plain and speculative timed in turns, best "
          f"of {SPEC_ROUNDS} each (CPU time):")
    try:
        model, tok = load_gguf(smollm2_gguf_path(), max_seq_len=1024)
    except (OSError, ValueError) as err:             # no file and no network
        print(f"   skipped: {err}")
        return
    lookup = PromptLookup(k=SPEC_K)
    for name, text in SPEC_TASKS.items():
        ids, out = tok.encode_chat([{"role": "user", "content": text}]), {}
        runs = {"plain": lambda: out.__setitem__("plain", decode_tokens(model, ids, tok)),
                "spec": lambda: out.__setitem__("steps", list(speculative_steps(
                    model, ids, SPEC_NEW, lookup, stop_ids=tok.stop_ids)))}
        best = best_seconds(runs, rounds=SPEC_ROUNDS, warmup=0)
        assert [t for s in out["steps"] for t in s.tokens] == out["plain"], name
        stats = acceptance(out["steps"])
        print(f"   {name}: plain {best['plain']:.2f} s, speculative {best['spec']:.2f} s -> "
              f"speed-up {best['plain'] / best['spec']:.2f}; {stats['verify_steps']} verify "
              f"steps, {stats['tokens_per_step']:.2f} tokens per step, "
              f"{stats['acceptance_rate']:.0%} of {stats['proposed']} proposals kept; "
              "same tokens")


def decode_tokens(model, ids, tok) -> list[int]:
    """Plain greedy decoding of section 9's tasks."""
    return [s.token for s in decode_steps(model, ids, SPEC_NEW, stop_ids=tok.stop_ids)]


PAGED_CONTEXT, PAGED_BLOCKS, PAGED_BATCHES = 2048, (4, 16, 64), (1, 8)


def bench_paged():
    """10. A paged decode step (toykv.paged) against the contiguous cache's: the same model, the
    same context, one forward per sequence for both, timed in turns (CPU time, best of 5)."""
    from .config import decode_toy
    from .paged import decode_step_runner
    from .timing import best_seconds, decode_step
    model = ToyTransformer(decode_toy(max_seq_len=PAGED_CONTEXT + 128), seed=0)
    print(f"\n10. paged against contiguous KV cache, decode at {PAGED_CONTEXT:,} tokens, "
          "chapters 5 and 6's decode toy (float32), one forward per sequence, timed in turns, "
          "best of 5 (CPU time); ratio = paged / contiguous step time:")
    for B in PAGED_BATCHES:
        blocks = PAGED_BLOCKS if B == 1 else (16,)
        contiguous = [decode_step(model, PAGED_CONTEXT, seed=b) for b in range(B)]
        runs = {"contiguous": lambda c=contiguous: [step() for step in c]}
        for size in blocks:
            runs[size] = decode_step_runner(model, PAGED_CONTEXT, block_size=size, sequences=B)
        best = best_seconds(runs)
        cells = ", ".join(f"blocks of {size}: {best[size] / best['contiguous']:.2f}"
                          for size in blocks)
        print(f"   {B} sequence{'s' if B > 1 else ''}: contiguous {best['contiguous'] * 1e3:.1f}"
              f" ms a step; {cells}")


def main():
    t_start, others = time.perf_counter(), OthersLoad()
    others.start()
    print("toykv benchmark: python -m toykv.bench")
    print_machine()
    print("roofline: toykv.roofline.measure_bandwidth() (a float32 row times a 256 MiB "
          "float32 matrix, best of 5) "
          "and measure_matmul_peak() (float32 2048^3, best of 5), measured in rounds between "
          "the model's runs; ratios use medians")
    bench_decode_and_prefill()
    bench_toy()
    bench_exact()
    bench_widgets()
    bench_variants()
    bench_smollm2()
    bench_batched()
    bench_speculative()
    bench_paged()
    share = others.share()
    print(f"\nload average at the end: {load_average()}; total {time.perf_counter() - t_start:.0f} s")
    if share is None:
        print("other processes' CPU use: unknown (no /proc/stat)")
    else:
        note = ("  WARNING: the machine was busy; rerun when it is idle" if share > BUSY_WARNING
                else "  (quiet enough)")
        print(f"other processes used {share:.0%} of the CPUs during the run{note}")


if __name__ == "__main__":
    main()
