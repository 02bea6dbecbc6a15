"""Issue 35's classes of bad input at the block pool and the scheduler (chapter 10): every
hostile call refuses with a message naming the argument, changes nothing it touched (free list,
reference counts, block tables, queues, cache contents) and never hangs; the valid edge cases
(block size 1, a pool just large enough) keep working.
"""
import numpy as np
import pytest
from bad_input_helpers import cases, refused, refused_case, same, works
from conftest import make_model, token_ids

from toykv import roofline, scheduler as S, zoo
from toykv.generate import generate
from toykv.paged import MAX_BLOCKS, BlockManager, BlockPool, BlockTable, OutOfBlocks
from toykv.paged import decode_step_runner
from toykv.steptime import fill_cache, measure_step_seconds

MODEL = make_model("gqa")
QWEN = zoo.get("qwen3-1.7b").config
HW = roofline.Hardware("assumed", peak_flops=25e12, bandwidth=250e9)
STEPS = S.StepModel(QWEN, HW)


class Seq:
    """The least a BlockManager works on: a block table and token ids."""

    def __init__(self, token_ids=(), block_table=()):
        self.token_ids = None if token_ids is None else list(token_ids)
        self.block_table = list(block_table)
        self.block_hashes, self.num_cached_tokens = [], 0


def manager_with_a_cached_block():
    """3 blocks of 2; block 0 free but holding the hashed tokens (1, 2)."""
    m = BlockManager(3, 2)
    block = m.take()
    m.register(block, None, (1, 2))
    m.release(block)
    return m


def shared_last_block():
    """A manager whose sequence's last block (half full) another sequence also holds, one
    block free: a step of 3 tokens needs a copy and a new block, 2 in all."""
    m = BlockManager(3, 2)
    seq = Seq([1, 2, 3], [m.take(), m.take()])
    m.share(seq.block_table[-1])
    return m, seq


def half_freed():
    """A sequence whose first block is free already (given back twice)."""
    m = BlockManager(4, 2)
    seq = Seq([1, 2, 3], [m.take(), m.take()])
    m.release(seq.block_table[0])
    return m, seq


def full_pool_sequence(tokens=10):
    pool = MODEL.new_paged_cache(num_blocks=3, block_size=4)
    seq = pool.new_sequence()
    MODEL.forward(token_ids(tokens), seq)
    return pool, seq


def finished_sequence():
    pool = MODEL.new_paged_cache(num_blocks=4, block_size=4)
    seq = pool.new_sequence()
    MODEL.forward(token_ids(6), seq)
    seq.finish()
    return pool, seq


# -- the block manager and the pool ----------------------------------------------------------
def manager_cases():
    m = BlockManager(4, 2)
    held = BlockManager(4, 2)
    held.take()
    return [
        (lambda: BlockManager(4.0, 2), "num_blocks", ()),
        (lambda: BlockManager(-1, 2), "num_blocks", ()),
        (lambda: BlockManager(4, 1.5), "block_size", ()),
        (lambda: BlockManager(4, 0), "block_size", ()),
        (lambda: BlockManager(MAX_BLOCKS + 1, 1), "num_blocks", ()),
        (lambda: BlockManager("4", 2), "num_blocks", ()),
        (lambda: held.release(99), "block", (held,)),
        (lambda: held.release(-1), "block", (held,)),
        (lambda: held.release(1.0), "block", (held,)),
        (lambda: held.share(99), "block", (held,)),
        (lambda: held.share(np.int64(-2)), "block", (held,)),
        (lambda: held.release(3), "not in use", (held,)),
        (lambda: m.blocks_for(-5), "tokens", (m,)),
        (lambda: m.blocks_for(1.5), "tokens", (m,)),
        (lambda: m.blocks_for("4"), "tokens", (m,)),
        (lambda: m.register(99, None, (1, 2)), "block", (m,)),
        (lambda: m.register(0, None, (1,)), "tokens", (m,)),
        (lambda: m.register(0, None, "ab"), "tokens", (m,)),
        (lambda: m.lookup(None, [1.5, 2]), "tokens", (m,)),
        (lambda: m.cached_blocks("1234"), "token_ids", (m,)),
        (lambda: m.cached_blocks(12), "token_ids", (m,)),
        (lambda: m.cached_blocks([1, -2, 3]), "token_ids", (m,)),
        (lambda: m.restore("not a state"), "state", (m,)),
        (lambda: m.restore(held.state()[:3]), "state", (m,)),
    ]


def sequence_cases():
    cases = []
    m = manager_with_a_cached_block()
    cases.append((lambda: m.allocate(Seq([1, 2, 3, 4, 5, 6, 7, 8])), "blocks", (m,), OutOfBlocks))
    m2 = manager_with_a_cached_block()
    cases.append((lambda: m2.allocate(Seq([1, 2, 3]), tokens=1.5), "tokens", (m2,)))
    cases.append((lambda: m2.allocate(Seq([1, 2, 3]), tokens=-1), "tokens", (m2,)))
    cases.append((lambda: m2.allocate([1, 2, 3]), "seq", (m2,)))
    cases.append((lambda: m2.can_allocate("seq"), "seq", (m2,)))
    m3, s3 = shared_last_block()
    cases.append((lambda: m3.may_append(s3, 3, 3), "blocks", (m3, s3), OutOfBlocks))
    cases.append((lambda: m3.may_append(s3, -1, 1), "length", (m3, s3)))
    cases.append((lambda: m3.may_append(s3, 3, 1.5), "T", (m3, s3)))
    cases.append((lambda: m3.may_append(s3, 9, 1), "length", (m3, s3)))
    cases.append((lambda: m3.blocks_needed(s3, -5, 1), "length", (m3, s3)))
    cases.append((lambda: m3.blocks_needed(s3, 3, 1.5), "T", (m3, s3)))
    cases.append((lambda: m3.blocks_needed(s3, 3, -2), "T", (m3, s3)))
    cases.append((lambda: m3.can_append(s3, "3"), "length", (m3, s3)))
    cases.append((lambda: m3.can_append("seq", 3), "seq", (m3,)))
    m4, s4 = half_freed()
    cases.append((lambda: m4.deallocate(s4), "not in use", (m4, s4)))
    cases.append((lambda: m4.deallocate(None), "seq", (m4,)))
    m5 = BlockManager(4, 2)
    s5 = Seq([1, 2, 3], [m5.take(), m5.take()])
    cases.append((lambda: m5.hash_blocks(s5, 99), "kept", (m5, s5)))
    cases.append((lambda: m5.hash_blocks(s5, -1), "kept", (m5, s5)))
    cases.append((lambda: m5.hash_blocks(s5, 2.0), "kept", (m5, s5)))
    cases.append((lambda: m5.hash_blocks(Seq(None, [0]), 2), "token_ids", (m5,)))
    return cases


def pool_cases():
    pool = MODEL.new_paged_cache(num_blocks=6, block_size=4)
    seq = pool.new_sequence()
    MODEL.forward(token_ids(5), seq)
    sliding = make_model("sliding")
    return [
        (lambda: BlockPool(MODEL.config, 4, 4), "model", ()),
        (lambda: BlockPool("gqa", 4, 4), "model", ()),
        (lambda: BlockPool(MODEL, 4.0, 4), "num_blocks", ()),
        (lambda: BlockPool(MODEL, 4, 1.5), "block_size", ()),
        (lambda: BlockPool(MODEL, -1, 4), "num_blocks", ()),
        (lambda: BlockPool(MODEL, 5 * 10**6, 64), "num_blocks", ()),
        (lambda: BlockPool(MODEL, 4, 65), "block_size", ()),
        (lambda: BlockPool(MODEL, 4, 4, "int4"), "kv_dtype", ()),
        (lambda: BlockPool(sliding, 4, 4), "sliding", ()),
        (lambda: MODEL.new_paged_cache(4, 0), "block_size", ()),
        (lambda: BlockTable("pool"), "pool", ()),
        (lambda: pool.new_sequence("123"), "prompt_ids", (pool, seq)),
        (lambda: pool.new_sequence([1.5, 2]), "prompt_ids", (pool, seq)),
        (lambda: pool.new_sequence(np.array([[1, 2]])), "prompt_ids", (pool, seq)),
        (lambda: pool.new_sequence([99]), "prompt_ids", (pool, seq)),
        (lambda: pool.check_sequence(MODEL.new_cache()), "sequence", (pool,)),
        (lambda: pool.check_sequence("seq"), "sequence", (pool,)),
        (lambda: seq.blocks_needed(-5), "T", (pool, seq)),
        (lambda: seq.blocks_needed(1.5), "T", (pool, seq)),
        (lambda: seq.truncate(1.5), "n", (pool, seq)),
        (lambda: seq.truncate(-1), "n", (pool, seq)),
        (lambda: seq.truncate(99), "n", (pool, seq)),
        (lambda: seq.layers[0].table.crop(-1), "n", (pool, seq)),
        (lambda: seq.layers[0].table.attach([1, 2]), "attach", (pool, seq)),
    ]


def run_cases():
    """Runs of several steps into a pool's sequence that cannot hold them all: refused before
    the first step (nothing written), and steps into a finished sequence."""
    cases = []
    pool, seq = full_pool_sequence(10)
    cases.append((lambda: generate(MODEL, [1], 5, cache=seq), "block", (pool, seq), OutOfBlocks))
    pool2, seq2 = full_pool_sequence(10)
    cases.append((lambda: fill_cache(seq2, 6), "block", (pool2, seq2), OutOfBlocks))
    pool3, seq3 = full_pool_sequence(10)
    cases.append((lambda: measure_step_seconds(MODEL, seq3, steps=5), "block", (pool3, seq3),
                  OutOfBlocks))
    pool4, seq4 = full_pool_sequence(10)
    cases.append((lambda: MODEL.forward(token_ids(3), seq4), "block", (pool4, seq4),
                  OutOfBlocks))
    pool5, seq5 = finished_sequence()
    cases += [
        (lambda: seq5.stored(0, "k"), "finished", (pool5,)),
        (lambda: seq5.fork(), "finished", (pool5,)),
        (lambda: seq5.finish(), "finished", (pool5,)),
        (lambda: seq5.truncate(2), "finished", (pool5,)),
        (lambda: MODEL.forward([1], seq5), "finished", (pool5,)),
        (lambda: fill_cache(seq5, 2), "finished", (pool5,)),
    ]
    return cases


def runner_cases():
    return [
        (lambda: decode_step_runner(MODEL.config, 8, calls=8), "model", ()),
        (lambda: decode_step_runner(MODEL, 8, calls=-1), "calls", ()),
        (lambda: decode_step_runner(MODEL, 8, calls=1.5), "calls", ()),
        (lambda: decode_step_runner(MODEL, 8, calls=8, sequences=10**8), "sequences", ()),
        (lambda: decode_step_runner(MODEL, 8, calls=8, sequences=0), "sequences", ()),
        (lambda: decode_step_runner(MODEL, 8, calls=8, block_size=0), "block_size", ()),
        (lambda: decode_step_runner(MODEL, 8, calls=8, seed=-1), "seed", ()),
        (lambda: decode_step_runner(MODEL, 60, calls=8), "context", ()),
    ]


@pytest.mark.parametrize("make, i", cases(manager_cases) + cases(sequence_cases)
                         + cases(pool_cases) + cases(run_cases) + cases(runner_cases))
def test_the_pool_refuses_and_changes_nothing(make, i):
    refused_case(make, i)


def test_out_of_blocks_is_a_value_error_too():
    """Callers that catch bad input (a widget, a script) catch a pool too small for a run."""
    pool, seq = full_pool_sequence(10)
    refused(lambda: generate(MODEL, [1], 5, cache=seq), "block", ValueError, (pool, seq))


# -- the scheduler ---------------------------------------------------------------------------
def requests(*lens):
    return [S.Request(i, p, o) for i, (p, o) in enumerate(lens)]


def busy_scheduler():
    """A scheduler after one prefill step of two requests, a third waiting."""
    runner = S.SimRunner(BlockManager(40, 4), STEPS)
    sched = S.Scheduler(runner, max_num_seqs=2)
    seqs = [S.Sequence(r) for r in requests((6, 3), (5, 3), (4, 2))]
    for s in seqs:
        sched.add(s)
    scheduled, _ = sched.schedule()
    sched.postprocess(scheduled, [0] * len(scheduled))
    scheduled, _ = sched.schedule()             # a decode step, scheduled, not yet run
    return sched, seqs, scheduled


def scheduler_cases():
    sched, seqs, scheduled = busy_scheduler()
    other = S.Sequence(S.Request(7, 3, 2))
    return [
        (lambda: S.Request(0, 10, -2), "output_len", ()),
        (lambda: S.Request(0, 10, 1.5), "output_len", ()),
        (lambda: S.Request(-1, 10, 2), "id", ()),
        (lambda: S.Request(0, "10", 2), "prompt_len", ()),
        (lambda: S.Request(0, 10, 2, arrival=float("nan")), "arrival", ()),
        (lambda: S.Request(0, 10, 2, arrival=-1.0), "arrival", ()),
        (lambda: S.Request(0, 10, 2, arrival="0"), "arrival", ()),
        (lambda: S.request_mix(10, prompt=128), "prompt", ()),
        (lambda: S.request_mix(10, prompt=(512, 16)), "prompt", ()),
        (lambda: S.request_mix(10, output=(0, 5)), "output", ()),
        (lambda: S.request_mix(10, output=(1.5, 5)), "output", ()),
        (lambda: S.request_mix(10, prompt="16"), "prompt", ()),
        (lambda: S.request_mix(10**9), "n", ()),
        (lambda: S.request_mix(2.0), "n", ()),
        (lambda: S.request_mix(10, rate=0), "rate", ()),
        (lambda: S.request_mix(10, rate=float("nan")), "rate", ()),
        (lambda: S.request_mix(10, rate=1e-320), "rate", ()),
        (lambda: S.request_mix(10, seed=-1), "seed", ()),
        (lambda: S.StepModel(QWEN, "h100-sxm"), "hardware", ()),
        (lambda: S.StepModel(MODEL, HW), "config", ()),
        (lambda: S.StepModel(zoo.get("qwen3-1.7b"), HW), "config", ()),
        (lambda: S.StepModel(QWEN, HW, overhead=-1), "overhead", ()),
        (lambda: S.StepModel(QWEN, HW, overhead=float("inf")), "overhead", ()),
        (lambda: S.StepModel(QWEN, HW, bytes_per_value=0), "bytes_per_value", ()),
        (lambda: S.StepModel(QWEN, HW, bytes_per_param="2"), "bytes_per_param", ()),
        (lambda: STEPS.seconds(prefills=[(1.5, 0)]), "prefills", ()),
        (lambda: STEPS.seconds(prefills=[5]), "prefills", ()),
        (lambda: STEPS.seconds(prefills=[(0, 3)]), "prefills", ()),
        (lambda: STEPS.seconds(contexts=[-5]), "contexts", ()),
        (lambda: STEPS.seconds(contexts="12"), "contexts", ()),
        (lambda: STEPS.parts(contexts=[0]), "contexts", ()),
        (lambda: S.Sequence("request"), "request", ()),
        (lambda: S.Sequence(S.Request(0, 3, 2), [1, 2]), "prompt_ids", ()),
        (lambda: S.Sequence(S.Request(0, 3, 2), "123"), "prompt_ids", ()),
        (lambda: S.SimRunner("manager", STEPS), "manager", ()),
        (lambda: S.SimRunner(BlockManager(4, 4), "steps"), "step_model", ()),
        (lambda: S.RealRunner(MODEL.config, MODEL.new_paged_cache(4, 4)), "model", ()),
        (lambda: S.RealRunner(MODEL, make_model("gqa").new_paged_cache(4, 4)), "pool", ()),
        (lambda: S.RealRunner(MODEL, MODEL.new_paged_cache(4, 4), "a100"), "step_model", ()),
        (lambda: S.Scheduler("runner", 4), "runner", ()),
        (lambda: S.Outcome().mean_ttft, "first token", ()),
        (lambda: S.Scheduler(sched.runner, 0), "max_num_seqs", ()),
        (lambda: S.Scheduler(sched.runner, 2, max_num_batched_tokens=1.5),
         "max_num_batched_tokens", ()),
        (lambda: S.Scheduler(sched.runner, 2, batching="dynamic"), "batching", ()),
        (lambda: S.Scheduler(sched.runner, 2, reserve_tokens=-1), "reserve_tokens", ()),
        (lambda: sched.add("sequence"), "seq", (sched,)),
        (lambda: sched.add(seqs[2]), "seq", (sched,)),
        (lambda: sched.add(S.Sequence(S.Request(1, 3, 2))), "id", (sched,)),
        (lambda: sched.preempt(other), "seq", (sched,)),
        (lambda: sched.preempt(seqs[2]), "seq", (sched,)),
        (lambda: sched.postprocess(scheduled, [0]), "token_ids", (sched,)),
        (lambda: sched.postprocess([seqs[2]], [0]), "seqs", (sched,)),
        (lambda: sched.postprocess(scheduled, "00"), "token_ids", (sched,)),
    ]


@pytest.mark.parametrize("make, i", cases(scheduler_cases))
def test_the_scheduler_refuses_and_changes_nothing(make, i):
    refused_case(make, i)


def simulate_cases():
    reqs = requests((16, 8), (32, 4))
    return [
        (lambda: S.simulate([16, 32, 64], STEPS, 100), "requests", ()),
        (lambda: S.simulate([16, 32, 64]), "step_model", (), TypeError),
        (lambda: S.simulate(reqs, "steps", 100), "step_model", ()),
        (lambda: S.simulate(reqs, STEPS, 0), "num_blocks", ()),
        (lambda: S.simulate(reqs, STEPS, 100, block_size=1.5), "block_size", ()),
        (lambda: S.simulate(reqs, STEPS, 100, max_batch=0), "max_batch", ()),
        (lambda: S.simulate(reqs, STEPS, 100, batching="dynamic"), "batching", ()),
        (lambda: S.simulate(reqs, STEPS, 100, reserve_tokens=-1), "reserve_tokens", ()),
        (lambda: S.simulate(reqs, STEPS, 100, clients=0), "clients", ()),
        (lambda: S.simulate(reqs, STEPS, 100, max_num_batched_tokens=0),
         "max_num_batched_tokens", ()),
        (lambda: S.simulate([S.Request(0, 16, 8), S.Request(0, 16, 8)], STEPS, 100), "unique",
         ()),
        (lambda: S.simulate([], STEPS, 100), "requests", ()),
        (lambda: S.simulate("requests", STEPS, 100), "requests", ()),
        (lambda: S.simulate(requests((16, 10**8)), STEPS, 10**7), "output", ()),
        (lambda: S.simulate(requests((10**7, 1)), STEPS, 700_000,
                            max_num_batched_tokens=1), "max_num_batched_tokens", ()),
        (lambda: S.simulate(requests((64, 64)), STEPS, 4), "blocks", ()),
    ]


@pytest.mark.parametrize("make, i", cases(simulate_cases))
def test_simulate_refuses_before_it_runs(make, i):
    refused_case(make, i)


def real_cases():
    cases = []
    prompts, outs = [token_ids(5), token_ids(7, seed=1)], [3, 4]

    def case(call, words, **kw):
        pool = MODEL.new_paged_cache(num_blocks=12, block_size=4)
        cases.append((lambda: call(pool), words, (pool,)))

    case(lambda p: S.run_real(MODEL.config, p, prompts, outs, 2), "model")
    case(lambda p: S.run_real(MODEL, "pool", prompts, outs, 2), "pool")
    case(lambda p: S.run_real(MODEL, p, prompts, [3], 2), "output_lens")
    case(lambda p: S.run_real(MODEL, p, "12", outs, 2), "prompts")
    case(lambda p: S.run_real(MODEL, p, 12, outs, 2), "prompts")
    case(lambda p: S.run_real(MODEL, p, prompts, [3, 0], 2), "output_lens")
    case(lambda p: S.run_real(MODEL, p, prompts, [3, 1.5], 2), "output_lens")
    case(lambda p: S.run_real(MODEL, p, prompts, [3, -2], 2), "output_lens")
    case(lambda p: S.run_real(MODEL, p, [[], [1]], outs, 2), "prompts")
    case(lambda p: S.run_real(MODEL, p, [[1], [99]], outs, 2), "prompts")
    case(lambda p: S.run_real(MODEL, p, [[1], [1.5]], outs, 2), "prompts")
    case(lambda p: S.run_real(MODEL, p, [token_ids(60), [1]], [8, 1], 2), "max_seq_len")
    case(lambda p: S.run_real(MODEL, p, prompts, outs, 0), "max_batch")
    case(lambda p: S.run_real(MODEL, p, prompts, outs, 2, step_model="h100"), "step_model")
    case(lambda p: S.run_real(MODEL, p, prompts, outs, 2, batching="x"), "batching")
    case(lambda p: S.run_real(MODEL, p, prompts, outs, 2, record_blocks="yes"),
         "record_blocks")
    case(lambda p: S.run_real(MODEL, p, prompts, outs, 2, max_num_batched_tokens=0),
         "max_num_batched_tokens")
    case(lambda p: S.run_real(MODEL, p, [token_ids(40)], [20], 1), "blocks")
    held = MODEL.new_paged_cache(num_blocks=4, block_size=4)
    hog = held.new_sequence()
    MODEL.forward(token_ids(16), hog)                   # every block held by another sequence
    cases.append((lambda: S.run_real(MODEL, held, prompts, outs, 2), "blocks", (held, hog)))
    return cases


@pytest.mark.parametrize("make, i", cases(real_cases))
def test_run_real_refuses_and_leaves_the_pool_as_it_was(make, i):
    refused_case(make, i)


def serve_cases():
    def real():
        pool = MODEL.new_paged_cache(num_blocks=12, block_size=4)
        return pool, S.RealRunner(MODEL, pool)
    pool, runner = real()
    reqs = requests((5, 3), (4, 2))
    pool2, runner2 = real()
    pool3, runner3 = real()
    return [
        (lambda: S.serve("runner", reqs, 2), "runner", ()),
        (lambda: S.serve(runner, reqs, 2, prompts={0: token_ids(5)}), "prompts", (pool,)),
        (lambda: S.serve(runner, reqs, 2), "prompts", (pool,)),
        (lambda: S.serve(runner2, reqs, 2, prompts={0: token_ids(5), 1: token_ids(3)}),
         "prompts", (pool2,)),
        (lambda: S.serve(runner3, reqs, 2, prompts={0: "abcde", 1: token_ids(4)}),
         "prompts", (pool3,)),
        (lambda: S.serve(S.SimRunner(BlockManager(10, 4), STEPS), reqs, 2, record_blocks=1),
         "record_blocks", ()),
    ]


@pytest.mark.parametrize("make, i", cases(serve_cases))
def test_serve_refuses_and_leaves_the_pool_as_it_was(make, i):
    refused_case(make, i)


def test_alone_tokens_checks_its_arguments():
    for call, words in [(lambda: S.alone_tokens(MODEL, [1, 2], 0), "n"),
                        (lambda: S.alone_tokens(MODEL, [1, 2], 1.5), "n"),
                        (lambda: S.alone_tokens(MODEL, [1, 2], -1), "n"),
                        (lambda: S.alone_tokens(MODEL, [1, 2], 10**9), "max_seq_len"),
                        (lambda: S.alone_tokens(MODEL.config, [1, 2], 3), "model"),
                        (lambda: S.alone_tokens(MODEL, "12", 3), "prompt")]:
        refused(call, words)


class FailingRunner(S.RealRunner):
    """A real runner whose third step fails (a forward pass that raises)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.calls = 0

    def run(self, seqs):
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("simulated failure in a step")
        return super().run(seqs)


def test_a_run_that_fails_part_way_gives_every_block_back():
    pool = MODEL.new_paged_cache(num_blocks=12, block_size=4)
    keep = pool.new_sequence()
    MODEL.forward(token_ids(6), keep)                 # a sequence the run must not touch
    def kept():
        return len(keep), list(keep.table), [keep.stored(i, "k") for i in range(2)]
    held, before = list(pool.manager.ref_count), kept()
    prompts = {0: token_ids(5), 1: token_ids(7, seed=1)}
    with pytest.raises(RuntimeError, match="simulated"):
        S.serve(FailingRunner(MODEL, pool), requests((5, 6), (7, 6)), 2, prompts=prompts)
    assert pool.manager.ref_count == held and same(kept(), before)
    assert sorted(pool.manager.free) == [b for b, n in enumerate(held) if n == 0]
    assert all(t.finished for t in pool.sequences if t is not keep.layers[0].table)


# -- the valid edge cases keep working ---------------------------------------------------------
def test_block_size_one_and_a_pool_just_large_enough_work():
    model = make_model("gqa", exact=True)
    pool = works(lambda: model.new_paged_cache(num_blocks=10, block_size=1))
    seq = pool.new_sequence()
    ids = token_ids(6)
    last = model.forward(ids, seq)[-1]
    ref = model.new_cache()
    assert np.array_equal(last, model.forward(ids, ref)[-1])
    assert generate(model, [1], 4, cache=seq) == generate(model, [1], 4, cache=ref)
    assert len(seq) == 10 == pool.num_blocks and pool.manager.num_free == 0  # every block used
    twin = seq.fork()
    twin.finish()
    seq.finish()
    assert pool.manager.num_free == 10
    prompts = [token_ids(5), token_ids(3, seed=2)]
    out = works(lambda: S.run_real(model, model.new_paged_cache(8, 1), prompts, [3, 5], 2,
                                   max_num_batched_tokens=1))
    assert [out.tokens[i] for i in range(2)] == [S.alone_tokens(model, p, n)
                                                 for p, n in zip(prompts, [3, 5])]


def test_numpy_arrays_work_where_lists_belong():
    mix = works(lambda: S.request_mix(5, prompt=np.array([16, 32]), output=np.array([4, 8])))
    assert mix == S.request_mix(5, prompt=(16, 32), output=(4, 8))
    pool = MODEL.new_paged_cache(num_blocks=12, block_size=4)
    prompts = np.array([token_ids(5), token_ids(5, seed=1)])
    out = works(lambda: S.run_real(MODEL, pool, prompts, np.array([3, 2]), 2))
    assert out.tokens[1] == S.alone_tokens(MODEL, prompts[1], 2)
    assert works(lambda: decode_step_runner(MODEL, np.int64(8), block_size=1, calls=8)) is not None


def test_a_budget_of_a_whole_prompt_and_a_request_filling_the_pool_work():
    out = works(lambda: S.simulate(requests((16, 16)), STEPS, 2, block_size=16,
                                   max_num_batched_tokens=16))
    assert out.output_tokens == 16
