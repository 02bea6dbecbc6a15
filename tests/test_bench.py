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
