"""toykv.timing: runs timed in turns, the fastest of each kept; the runners the chapters time."""
import time

import numpy as np
import pytest

from conftest import make_model
from toykv import ToyTransformer, source_toy, timing
from toykv.timing import step_matrices


def test_best_seconds_calls_in_turns_forward_then_backward():
    calls = []
    runs = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    best = timing.best_seconds(runs, rounds=3, warmup=1)
    assert calls == list("abc" "cba" "abc" "cba")       # warm-up round, then 3 timed
    assert set(best) == set("abc") and all(0 <= t < 1 for t in best.values())


def busy(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_best_seconds_keeps_the_fastest_call():
    work = iter([0.0, 0.05, 0.0, 0.0])      # warm-up, then slow in the first timed round only
    best = timing.best_seconds({"slow once": lambda: busy(next(work))}, rounds=3, warmup=1)
    assert best["slow once"] < 0.04


def test_best_seconds_counts_work_not_waiting():
    # the default clock stops while the process waits (as while a neighbour has the core)
    best = timing.best_seconds({"wait": lambda: time.sleep(0.05), "work": lambda: busy(0.02)},
                               rounds=2, warmup=0)
    assert best["wait"] < 0.01 < best["work"]
    wall = timing.best_seconds({"wait": lambda: time.sleep(0.05)}, rounds=1, warmup=0,
                               clock=time.perf_counter)
    assert wall["wait"] >= 0.05


@pytest.mark.parametrize("runs", [{}, {"a": 1}, [lambda: None], None])
def test_best_seconds_refuses_what_is_not_runs(runs):
    with pytest.raises(ValueError, match="runs must be"):
        timing.best_seconds(runs)


def test_best_seconds_refuses_a_clock_that_is_not_one():
    with pytest.raises(ValueError, match="clock must be"):
        timing.best_seconds({"a": lambda: None}, clock=1.0)


@pytest.mark.parametrize("rounds", [0, 2.0, True, timing.MAX_ROUNDS + 1])
def test_best_seconds_refuses_bad_rounds_before_running(rounds):
    calls = []
    with pytest.raises(ValueError, match="rounds"):
        timing.best_seconds({"a": lambda: calls.append(1)}, rounds=rounds)
    assert calls == []


def test_decode_step_steps_at_the_context_asked_for():
    model = make_model("gqa")
    step = timing.decode_step(model, 20)
    logits = step()
    assert logits.shape == (1, model.config.vocab_size)
    batched = timing.decode_step(model, 20, batch=3)
    assert batched().shape == (3, 1, model.config.vocab_size)
    with pytest.raises(ValueError, match="context"):
        timing.decode_step(model, model.config.max_seq_len + 1)


def test_decode_step_cache_holds_the_context():
    model = make_model("mha")
    flops = []
    for context in (10, 30):
        step = timing.decode_step(model, context)
        before = model.flops
        step()
        flops.append(model.flops - before)
    # one more key costs 2 x 2 x H x d_h FLOPs per layer (scores and values)
    c = model.config
    assert flops[1] - flops[0] == 20 * c.n_layers * 4 * c.n_heads * c.head_dim


def test_prefill_runs_a_prompt_of_the_length_asked_for():
    model = make_model("mha")
    assert timing.prefill(model, 7)().shape == (7, model.config.vocab_size)
    with pytest.raises(ValueError, match="prompt_len"):
        timing.prefill(model, 0)


def test_weight_products_multiply_every_weight_of_a_step_once():
    model = ToyTransformer(source_toy())
    # the step's products hold every parameter but the norms' scales (the toy ties its head)
    weights = sum(w.size for w in step_matrices(model))
    c = model.config
    assert weights == 590_464 - (2 * c.n_layers + 1) * c.d_model
    assert timing.weight_products(model)() is None


def test_weight_products_take_as_many_rows_as_a_batch(monkeypatch):
    seen = []

    class Watched(np.ndarray):                     # a weight that notes who multiplies it
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            seen.append(inputs[0].shape)
            return getattr(ufunc, method)(*(np.asarray(x) for x in inputs), **kwargs)

    w = np.ones((8, 3), np.float32).view(Watched)
    monkeypatch.setattr(timing, "step_matrices", lambda model: [w])
    timing.weight_products(None, rows=2)()
    timing.weight_products(None)()
    assert seen == [(2, 8), (1, 8)]
    for bad in (0, 1.5, "2"):
        with pytest.raises(ValueError, match="rows"):
            timing.weight_products(None, rows=bad)


def test_tiny_model_keeps_the_layers_and_shrinks_the_matrices():
    c = source_toy(sliding_window=16)
    tiny = timing.tiny_model(c).config
    assert (tiny.n_layers, tiny.layer_kinds, tiny.max_seq_len) == (
        c.n_layers, c.layer_kinds, c.max_seq_len)
    assert tiny.d_model * tiny.d_ff < c.d_model * c.d_ff / 4


def test_best_seconds_runs_setup_before_each_call_untimed():
    calls = []
    ticks = iter(range(100))
    runs = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    best = timing.best_seconds(runs, rounds=2, warmup=0, clock=lambda: next(ticks),
                               setup={"b": lambda: calls.append("setup b")})
    assert calls == ["a", "setup b", "b", "setup b", "b", "a"]
    assert best == {"a": 1, "b": 1}                   # the setup took no tick of the clock


@pytest.mark.parametrize("setup", [{"c": lambda: None}, {"a": 1}, [lambda: None]])
def test_best_seconds_refuses_a_setup_that_is_not_one(setup):
    calls = []
    with pytest.raises(ValueError, match="setup must be"):
        timing.best_seconds({"a": lambda: calls.append(1)}, setup=setup)
    assert calls == []


def test_flush_caches_writes_over_its_buffer_and_checks_its_size():
    timing.flush_caches(2**16)
    buffer = timing._flush_buffers[2**16]
    before = int(buffer[0])
    timing.flush_caches(2**16)
    assert int(buffer[0]) == (before + 1) % 256 and buffer.nbytes == 2**16
    for nbytes in (0, 1.5, 2**40):
        with pytest.raises(ValueError, match="nbytes"):
            timing.flush_caches(nbytes)


def test_full_pass_runs_the_whole_sequence_without_a_cache():
    model = make_model("mha")
    run = timing.full_pass(model, 9)
    before = model.flops
    assert run().shape == (9, model.config.vocab_size)
    from toykv import flops
    assert model.flops - before == flops.full_pass_flops(model.config, 9)
    with pytest.raises(ValueError, match="length"):
        timing.full_pass(model, model.config.max_seq_len + 1)
