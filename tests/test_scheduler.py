"""toykv.scheduler: static and continuous batching, simulated and real; preemption keeps tokens."""
import numpy as np
import pytest
from conftest import make_model, token_ids

from toykv import param_count, roofline, scheduler as S, zoo

QWEN = zoo.get("qwen3-1.7b").config


def step_model(**kw):
    return S.StepModel(QWEN, roofline.Hardware("assumed", peak_flops=25e12, bandwidth=250e9),
                       **kw)


def test_request_mix_is_seeded_and_in_range():
    a, b = S.request_mix(50, seed=3), S.request_mix(50, seed=3)
    assert a == b and a != S.request_mix(50, seed=4)
    assert all(16 <= r.prompt_len <= 512 and 16 <= r.output_len <= 256 for r in a)
    stream = S.request_mix(20, rate=2.0)
    assert all(x.arrival < y.arrival for x, y in zip(stream, stream[1:]))
    with pytest.raises(ValueError, match="prompt high"):
        S.request_mix(3, prompt=(10, 5))


def test_the_step_model_is_the_roofline_of_counted_flops_and_bytes():
    sm = step_model()
    flops, nbytes = sm.parts((), [640])
    assert nbytes == 2 * param_count(QWEN) + 114_688 * 640
    assert sm.seconds((), [640]) == max(flops / 25e12, nbytes / 250e9)
    one, eight = sm.seconds((), [640]), sm.seconds((), [640] * 8)
    assert eight < 2 * one                      # the weights are read once for the batch


def test_continuous_beats_static_on_a_mixed_batch_with_the_same_tokens_out():
    reqs = S.request_mix(40, seed=0, prompt=(32, 256), output=(8, 200))
    cont = S.simulate(reqs, step_model(), 2000, 16, max_batch=8)
    stat = S.simulate(reqs, step_model(), 2000, 16, max_batch=8, batching="static")
    assert cont.output_tokens == stat.output_tokens == sum(r.output_len for r in reqs)
    assert cont.throughput > stat.throughput and cont.mean_ttft < stat.mean_ttft


def test_a_worst_case_reservation_fits_fewer_requests():
    reqs = [S.Request(i, 100, 20) for i in range(40)]
    paged = S.simulate(reqs, step_model(), 100, 16)
    reserved = S.simulate(reqs, step_model(), 100, 16, reserve_tokens=1024)
    assert max(r["batch"] for r in paged.trace) > 4 * max(r["batch"] for r in reserved.trace)


def test_the_blog_shape_throughput_stops_growing_when_the_blocks_run_out():
    runs = {n: S.simulate([S.Request(i, 512, 128) for i in range(2 * n)], step_model(), 1378,
                          16, clients=n) for n in (32, 64)}
    assert max(r["batch"] for r in runs[32].trace) == 32
    assert runs[64].throughput < 1.1 * runs[32].throughput
    assert runs[64].mean_ttft > 2 * runs[32].mean_ttft


@pytest.mark.parametrize("batching", S.BATCHING)
@pytest.mark.parametrize("num_blocks", [40, 9])
def test_a_real_run_gives_every_request_its_tokens_alone_even_when_preempted(batching,
                                                                             num_blocks):
    model = make_model("gqa", exact=True)
    rng = np.random.default_rng(1)
    prompts = [token_ids(int(n), seed=i) for i, n in enumerate(rng.integers(3, 16, 6))]
    outs = [int(n) for n in rng.integers(2, 12, 6)]
    pool = model.new_paged_cache(num_blocks, 4)
    out = S.run_real(model, pool, prompts, outs, max_batch=4, batching=batching,
                     record_blocks=True)
    for i, p in enumerate(prompts):
        assert out.tokens[i] == S.alone_tokens(model, p, outs[i])
    assert (out.preemptions > 0) == (num_blocks == 9)
    assert pool.manager.num_used == 0
    assert all(len(row["owners"]) == num_blocks for row in out.trace)


def test_a_shared_prompt_is_prefilled_once():
    model = make_model("mha", exact=True)
    system = token_ids(16, seed=5)
    prompts = [system + token_ids(3, seed=10 + i) for i in range(4)]
    pool = model.new_paged_cache(40, 4)
    before = model.flops
    out = S.run_real(model, pool, prompts, [3] * 4, max_batch=1)
    shared = model.flops - before
    assert all(out.tokens[i] == S.alone_tokens(model, p, 3) for i, p in enumerate(prompts))
    before = model.flops
    S.run_real(model, model.new_paged_cache(40, 4), prompts[:1], [3], max_batch=1)
    assert shared < 4 * (model.flops - before) * 0.6


def test_bad_input_is_refused():
    model = make_model("mha")
    with pytest.raises(ValueError, match="more blocks than the pool"):
        S.run_real(model, model.new_paged_cache(2, 4), [[1] * 9], [5], max_batch=1)
    with pytest.raises(ValueError, match="BlockPool of this model"):
        S.run_real(make_model("mha"), model.new_paged_cache(2, 4), [[1]], [1], max_batch=1)
    with pytest.raises(ValueError, match="batching must be"):
        S.simulate([S.Request(0, 4, 4)], step_model(), 4, 16, batching="dynamic")
    with pytest.raises(ValueError, match="StepModel"):
        S.simulate([S.Request(0, 4, 4)], None, 4, 16)


# -- nano-vllm's shapes: Sequence, Scheduler.schedule / postprocess, a token budget ------------
def test_the_scheduler_alone_prefills_first_then_decodes_as_nano_vllm_does():
    manager = S.BlockManager(8, 4)
    sched = S.Scheduler(S.SimRunner(manager, None), max_num_seqs=2)
    for i in range(3):
        sched.add(S.Sequence(S.Request(i, 5, 2)))
    seqs, kind = sched.schedule()                       # two seats: two whole prompts
    assert kind == "prefill" and [s.id for s in seqs] == [0, 1]
    assert [s.num_scheduled_tokens for s in seqs] == [5, 5] and manager.num_used == 4
    assert sched.postprocess(seqs, [7, 8]) == []
    assert [s.output for s in seqs] == [[7], [8]]
    seqs, kind = sched.schedule()                       # no seat: a decode step
    assert kind == "decode" and [s.num_scheduled_tokens for s in seqs] == [1, 1]
    finished = sched.postprocess(seqs, [9, 9])
    assert [s.id for s in finished] == [0, 1] and manager.num_used == 0   # freed at once
    seqs, kind = sched.schedule()
    assert kind == "prefill" and [s.id for s in seqs] == [2]


def test_a_token_budget_runs_decodes_first_and_chunks_the_prompts():
    manager = S.BlockManager(40, 4)
    sched = S.Scheduler(S.SimRunner(manager, None), max_num_seqs=4, max_num_batched_tokens=8)
    sched.add(S.Sequence(S.Request(0, 3, 5)))
    seqs, kind = sched.schedule()
    sched.postprocess(seqs, [1])                        # request 0 is decoding
    late = S.Sequence(S.Request(1, 20, 2))
    sched.add(late)
    fed = []
    while not late.output:
        seqs, kind = sched.schedule()
        assert seqs[0].id == 0 and seqs[0].num_scheduled_tokens == 1      # decode first
        fed.append(seqs[1].num_scheduled_tokens)
        assert kind == "mixed" and sum(s.num_scheduled_tokens for s in seqs) <= 8
        sched.postprocess(seqs, [1, 2])
    assert fed == [7, 7, 6]                             # the prompt, in chunks of what is left


@pytest.mark.parametrize("budget", [3, 7, 64])
@pytest.mark.parametrize("num_blocks", [40, 9])
def test_chunked_prefill_gives_every_request_its_tokens_alone(budget, num_blocks):
    model = make_model("gqa", exact=True)
    rng = np.random.default_rng(4)
    prompts = [token_ids(int(n), seed=i) for i, n in enumerate(rng.integers(3, 16, 6))]
    outs = [int(n) for n in rng.integers(2, 12, 6)]
    pool = model.new_paged_cache(num_blocks, 4)
    out = S.run_real(model, pool, prompts, outs, max_batch=4, max_num_batched_tokens=budget)
    for i, p in enumerate(prompts):
        assert out.tokens[i] == S.alone_tokens(model, p, outs[i])
    assert all(row["tokens"] <= budget for row in out.trace)
    assert pool.manager.num_used == 0
    if budget < 16:
        assert any(row["kind"] == "mixed" for row in out.trace)


def test_a_budget_spreads_a_burst_of_prefills_over_steps():
    """32 prompts of 512 at once: without a budget one step prefills all of them (every first
    token waits for it); a budget of 2,048 tokens lets the first answers start sooner."""
    reqs = [S.Request(i, 512, 16) for i in range(32)]
    whole = S.simulate(reqs, step_model(), 4000, 16, max_batch=64)
    chunked = S.simulate(reqs, step_model(), 4000, 16, max_batch=64,
                         max_num_batched_tokens=2048)
    assert whole.trace[0]["tokens"] == 32 * 512
    assert max(row["tokens"] for row in chunked.trace) <= 2048
    assert min(chunked.ttft.values()) < min(whole.ttft.values()) / 4
    assert chunked.output_tokens == whole.output_tokens == 32 * 16


@pytest.mark.parametrize("call, match", [
    (lambda: S.Request(0, 4, -2), "output_len"),
    (lambda: S.Request(0, 0, 2), "prompt_len"),
    (lambda: S.Request(0, 4, 2, arrival=float("nan")), "arrival"),
    (lambda: S.StepModel(QWEN, "h100-sxm"), "hardware"),
    (lambda: step_model(overhead=-1), "overhead"),
    (lambda: S.simulate([S.Request(0, 4, 4), S.Request(0, 5, 5)], step_model(), 40),
     "unique"),
    (lambda: S.simulate([S.Request(0, 4, 10**8)], step_model(), 10**7, 16), "output tokens"),
    (lambda: S.simulate([S.Request(0, 4, 4)], step_model(), 40, max_num_batched_tokens=0),
     "max_num_batched_tokens"),
    (lambda: S.simulate([16, 32], step_model(), 40), "Request"),
    (lambda: S.request_mix(3, prompt=128), "prompt must be a"),
])
def test_bad_serving_input_is_refused_in_words(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_a_refused_real_run_leaves_the_pool_as_it_was():
    model = make_model("mha")
    pool = model.new_paged_cache(6, 4)
    hog = pool.new_sequence()
    model.forward(token_ids(20), hog)                   # 5 of the 6 blocks held
    before = pool.snapshot()[0]
    for call, match in [
            (lambda: S.run_real(model, pool, [[1] * 9], [2], max_batch=1), "free"),
            (lambda: S.run_real(model, pool, [[1] * 60], [10], max_batch=1), "max_seq_len"),
            (lambda: S.run_real(model, pool, [[]], [2], max_batch=1), "prompt_len"),
            (lambda: S.run_real(model, pool, [[1]], [2], 1, step_model="fast"), "StepModel")]:
        with pytest.raises(ValueError, match=match):
            call()
        assert pool.snapshot()[0] == before
