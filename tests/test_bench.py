"""The pieces `python -m toykv.bench` splits a decode step with (its timings are not tested:
they belong to the machine; see BENCHMARKS.md)."""
import numpy as np
import pytest
from conftest import BASE, config, make_model

from toykv import ModelConfig
from toykv.bench import fixed_cost
from toykv.timing import step_matrices, tiny_like


@pytest.mark.parametrize("name, changes", [("mha", {}), ("gqa", {}), ("mla_absorbed", {}),
                                           ("mha", {"tie_embeddings": False})])
def test_step_matrices_are_every_weight_a_step_multiplies(name, changes):
    """Every 2-D weight once (fused groups as one matrix), and the output head: their bytes
    are the model's weight bytes less the norm vectors (and less an untied input embedding,
    which a step looks one row up in)."""
    model = make_model(name, **changes)
    matrices = step_matrices(model)
    vectors = model.final_norm.nbytes + sum(w.nbytes for layer in model.layers
                                            for w in layer.values() if w.ndim == 1)
    lookup = 0 if model.lm_head is None else model.embed.nbytes
    assert sum(w.nbytes for w in matrices) == model.weight_nbytes - vectors - lookup
    head = model.embed.T if model.lm_head is None else model.lm_head
    assert matrices[-1] is head or np.shares_memory(matrices[-1], head)
    assert all(w.ndim == 2 for w in matrices)


def test_tiny_like_keeps_the_layers_and_shrinks_the_matrices():
    base = ModelConfig(**{**BASE, "n_layers": 4}, n_kv_heads=2, sliding_window=8,
                       layer_types=["sliding", "full", "sliding", "full"])
    tiny = tiny_like(base)
    assert tiny.layer_kinds == base.layer_kinds and tiny.n_layers == 4
    assert (tiny.max_seq_len, tiny.sliding_window) == (base.max_seq_len, 8)
    assert (tiny.d_model, tiny.n_heads, tiny.n_kv_heads, tiny.d_ff) == (64, 1, 1, 128)
    assert tiny_like(config("mla_absorbed")).attention == "mha"


def test_fixed_cost_runs_the_tiny_model_at_the_context():
    seconds = fixed_cost(config("gqa"), context=20, steps=3)
    assert 0 < seconds < 1
    with pytest.raises(ValueError, match="max_seq_len"):
        fixed_cost(config("gqa"), context=BASE["max_seq_len"], steps=1)


def test_rows_runner_repeats_the_same_step():
    """Each call feeds the same tokens over the same cached context: the cache is truncated back
    after the forward, so a verify step or a batch can be timed again and again."""
    from toykv.bench import rows_runner
    model = make_model("gqa")
    seen = []
    real = model.forward

    def forward(ids, cache):
        seen.append((np.shape(ids), len(cache)))
        return real(ids, cache)
    model.forward = forward
    for tokens, batch, shape in ((5, None, (5,)), (1, 3, (3, 1))):
        run = rows_runner(model, 12, tokens, batch)
        run()
        run()
        assert seen[-2:] == [(shape, 12), (shape, 12)]


def test_products_runner_takes_the_models_few_row_product(monkeypatch):
    """Every step matrix once per call, as the model multiplies it: a few rows go through
    Ops.matmul's blocked product (what a batch or a verify step runs); the model's own FLOP
    count is left alone."""
    import toykv.ops as ops
    from toykv.bench import products_runner
    model = make_model("mha")
    calls = []
    monkeypatch.setattr(ops, "blocked_matmul", lambda a, b: calls.append(a.shape) or a @ b)
    flops = model.flops
    products_runner(model, 3)()
    products_runner(model, 1)()
    assert calls == [(3, w.shape[0]) for w in step_matrices(model)]
    assert model.flops == flops


def test_target_and_sections():
    from toykv.bench import SECTIONS, main, target
    assert target(1.2, 1.3, higher_is_better=False) == "(target <= 1.3: MET)"
    assert target(2.0, 3.0) == "(target >= 3.0: MISSED)"
    assert sorted(SECTIONS, key=int) == [str(n) for n in range(1, 12)]
    with pytest.raises(SystemExit, match="unknown section"):
        main(["6", "12"])                                  # refused before anything runs


@pytest.mark.parametrize("name", ["mha", "gqa", "mqa", "mla_absorbed"])
def test_step_parts_tells_attention_from_the_weights_by_the_keys_length(name):
    """The products step_parts files under attention are exactly those toykv.flops counts as
    attention's own (the queries against the held keys and the values averaged), at the step's
    context; the model's own matmul is back afterwards."""
    from toykv.bench import step_parts
    from toykv.flops import attention_flops
    model = make_model(name, max_seq_len=256)
    parts = step_parts(model, context=200, steps=2)      # 3 calls: the last holds 202 keys
    assert parts["attention_flops"] == attention_flops(model.config, 1, 201, model.absorb)
    assert all(parts[p] > 0 for p in ("step", "weights", "attention"))
    assert "matmul" not in vars(model.ops)
    with pytest.raises(ValueError, match="longer than every weight"):
        step_parts(model, context=64, steps=1)


def test_warm_row_runner_takes_each_matrix_first_block_once_per_block(monkeypatch):
    """One row against each step matrix's first block of columns (the width the blocked product
    takes), as many times as the matrix has blocks: the same work as one row over the whole
    matrix, with every block but the first call's already in cache."""
    from toykv.bench import warm_row_runner
    from toykv.ops import BLOCK_BYTES, block_columns
    model = make_model("gqa", d_model=256, d_ff=1024)
    run = warm_row_runner(model)
    seen = []
    real = np.matmul
    monkeypatch.setattr(np, "matmul", lambda a, b, out: seen.append(b) or real(a, b, out=out))
    run()
    expected = []
    for w in step_matrices(model):
        width = min(block_columns(w), w.shape[1])
        assert width * w.shape[0] * 4 <= max(BLOCK_BYTES, 64 * w.shape[0] * 4)
        expected += [w[:, :width]] * -(-w.shape[1] // width)
    assert len(seen) == len(expected) and len(expected) > len(step_matrices(model))
    assert all(np.shares_memory(b, e) and b.shape == e.shape for b, e in zip(seen, expected))


def test_interleaved_sequence_alternates_blocks_and_gather_runner_reads_them_all():
    """The paged bench's interleaved sequence holds every other block of the pool (its reads
    gather), and gather_runner reads every layer's keys and values of the whole context."""
    from toykv.bench import gather_runner, interleaved_sequence
    model = make_model("gqa", max_seq_len=128)
    seq = interleaved_sequence(model, context=41, block_size=4, calls=1)
    blocks = list(seq.layers[0].table.block_table)
    assert len(seq) == 40 and len(blocks) == 10
    assert all(b - a == 2 for a, b in zip(blocks, blocks[1:]))
    reads = gather_runner(model, context=40, block_size=4)()
    c = model.config
    assert [r.shape for r in reads] == [(1, 40, c.n_kv_heads, c.head_dim)] * (2 * c.n_layers)
