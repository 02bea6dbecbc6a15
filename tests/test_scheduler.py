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
