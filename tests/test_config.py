"""ModelConfig: derived fields, and ValueErrors that name the field and the rule."""
from dataclasses import replace

import numpy as np
import pytest

from toykv import ModelConfig, source_toy

BASE = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64)
MLA = dict(attention="mla", kv_lora_rank=8, rope_head_dim=4)


def bad(match, **changes):
    with pytest.raises(ValueError, match=match):
        ModelConfig(**{**BASE, **changes})


def test_derived_fields():
    c = ModelConfig(**BASE)
    assert (c.head_dim, c.n_kv_heads, c.attention, c.group_size) == (8, 4, "mha", 1)
    assert ModelConfig(**BASE, n_kv_heads=2).attention == "gqa"
    assert ModelConfig(**BASE, n_kv_heads=1).attention == "mqa"
    assert ModelConfig(**BASE, attention="mqa").n_kv_heads == 1
    assert ModelConfig(**BASE, n_kv_heads=2).group_size == 2
    assert ModelConfig(**BASE, **MLA).n_kv_heads == 4
    assert ModelConfig(**{**BASE, "d_model": 30}, head_dim=16).head_dim == 16
    assert ModelConfig(**BASE).layer_kinds == ("full", "full")
    assert ModelConfig(**BASE, sliding_window=8).layer_kinds == ("sliding", "sliding")


def test_source_toy_is_the_blog_posts_model():
    # source_blog_numpy_toy, section 3: 2 layers, d_model 128, 8 heads of 16, MLP 512, vocab 512
    c = source_toy()
    assert (c.n_layers, c.d_model, c.n_heads, c.head_dim, c.d_ff, c.vocab_size) == \
        (2, 128, 8, 16, 512, 512)
    assert c.attention == "mha"
    assert source_toy(n_kv_heads=2).attention == "gqa"


@pytest.mark.parametrize("field", ["vocab_size", "d_model", "n_layers", "n_heads", "d_ff",
                                   "max_seq_len", "n_kv_heads", "head_dim", "sliding_window"])
@pytest.mark.parametrize("value", [0, -2, 2.5, True])
def test_sizes_must_be_positive_integers(field, value):
    bad(f"{field} must be an integer", **{field: value})


@pytest.mark.parametrize("field", ["kv_lora_rank", "rope_head_dim"])
@pytest.mark.parametrize("value", [0, -4])
def test_mla_ranks_must_be_positive(field, value):
    bad(f"{field} must be an integer >= 1", **{**MLA, field: value})


def test_d_model_divisible_by_n_heads_unless_head_dim_given():
    bad(r"d_model \(30\) must be divisible by n_heads \(4\)", d_model=30)
    assert ModelConfig(**{**BASE, "d_model": 30, "head_dim": 8}).head_dim == 8


def test_n_heads_multiple_of_n_kv_heads():
    bad(r"n_heads \(4\) must be a multiple of n_kv_heads \(3\)", n_kv_heads=3)
    bad("n_heads", n_kv_heads=8)


@pytest.mark.parametrize("kind", ["MHA", "sliding", "latent", ""])
def test_attention_kind_must_be_one_of_four(kind):
    bad("attention must be one of", attention=kind)


@pytest.mark.parametrize("missing", ["kv_lora_rank", "rope_head_dim"])
def test_mla_needs_its_ranks(missing):
    changes = {k: v for k, v in MLA.items() if k != missing}
    bad(f"attention='mla' needs {missing}", **changes)


def test_mla_specific_rules():
    bad("rope_head_dim must be even", **{**MLA, "rope_head_dim": 3})
    bad("n_kv_heads", **MLA, n_kv_heads=2)
    bad("for attention='mla' only", kv_lora_rank=8)
    bad("for attention='mla' only", rope_head_dim=4)


@pytest.mark.parametrize("attention, n_kv_heads", [
    ("mha", 2), ("mha", 1), ("gqa", 4), ("gqa", 1), ("mqa", 2), ("mqa", 4)])
def test_attention_must_match_n_kv_heads(attention, n_kv_heads):
    bad(f"attention='{attention}' does not match n_kv_heads={n_kv_heads}",
        attention=attention, n_kv_heads=n_kv_heads)


def test_gqa_needs_n_kv_heads():
    bad("attention='gqa' needs n_kv_heads", attention="gqa")


@pytest.mark.parametrize("window", [0, -1])
def test_window_must_be_positive(window):
    bad("sliding_window must be an integer >= 1", sliding_window=window)


def test_layer_types_rules():
    bad("layer_types has 3 entries but n_layers is 2", layer_types=("full", "full", "full"))
    bad("layer_types entries must be in", layer_types=("full", "global"))
    bad("sliding_window is not set", layer_types=("sliding", "full"))
    bad("linear_state_values must be > 0", layer_types=("linear", "full"))
    c = ModelConfig(**BASE, sliding_window=4, layer_types=["sliding", "full"])
    assert c.layer_kinds == ("sliding", "full")


@pytest.mark.parametrize("field, value", [("rope_theta", 0), ("rope_theta", -1.0),
                                          ("norm_eps", 0), ("linear_state_values", -1)])
def test_other_numeric_fields(field, value):
    bad(field, **{field: value})


def test_replace_derives_again_what_was_not_given():
    c = ModelConfig(**BASE)
    assert replace(c, attention="mqa").n_kv_heads == 1
    assert replace(c, n_kv_heads=2).attention == "gqa"
    assert replace(c, n_heads=8).head_dim == 4                 # derived head_dim follows
    assert replace(c, n_heads=8).n_kv_heads == 8               # derived n_kv_heads follows
    assert replace(c, n_heads=8).attention == "mha"
    assert replace(c, d_model=64).head_dim == 16
    mla = replace(c, **MLA)
    assert mla.attention == "mla" and mla.n_kv_heads == 4
    back = replace(mla, attention=None, kv_lora_rank=None, rope_head_dim=None)
    assert back == c
    assert c == ModelConfig(**BASE)                            # frozen: replace made copies


def test_replace_keeps_what_was_given():
    c = ModelConfig(**BASE, n_kv_heads=2, head_dim=16)
    assert replace(c, n_heads=8).n_kv_heads == 2
    assert replace(c, d_model=64).head_dim == 16
    with pytest.raises(ValueError, match="attention='mha' does not match n_kv_heads=2"):
        replace(c, attention="mha")


def test_derived_values_are_plain_ints_to_the_reader():
    c = ModelConfig(**BASE)
    assert repr(c.n_kv_heads) == "4" and repr(c.attention) == "'mha'"
    assert "n_kv_heads=4" in repr(c) and c.n_kv_heads + 1 == 5


def test_odd_head_dim_is_refused_rope_needs_pairs():
    bad("head_dim must be even", d_model=36, n_heads=4)
    bad("head_dim must be even", head_dim=7)


@pytest.mark.parametrize("value", [np.int64(4), np.int32(4)])
def test_numpy_integers_are_counts(value):
    assert ModelConfig(**{**BASE, "n_heads": value}).n_heads == 4


@pytest.mark.parametrize("value", [4.0, np.float64(4.0), "4", None])
def test_floats_and_strings_are_not_counts(value):
    bad("n_heads must be an integer", n_heads=value)


def test_absurd_depth_is_refused():
    bad(r"n_layers must be an integer in \[1, 100000\]", n_layers=10**8)


@pytest.mark.parametrize("field, value", [("tie_embeddings", "false"), ("tie_embeddings", 0)])
def test_flags_must_be_bools(field, value):
    bad(f"{field} must be True or False", **{field: value})


@pytest.mark.parametrize("value", ["full", 3, [1, 2]])
def test_layer_types_must_be_a_sequence_of_kinds(value):
    bad("layer_types", layer_types=value)


def test_rope_of_a_derived_head_dim_equals_a_given_one():
    """A derived head_dim must not change RoPE's float32 arithmetic (numpy promotes int
    subclasses to int64, which would turn the frequency division into float64)."""
    from toykv.model import rope_cos_sin

    derived = ModelConfig(**BASE).head_dim
    assert type(derived) is not int and derived == 8
    for a, b in zip(rope_cos_sin(np.arange(50), derived, 10000.0),
                    rope_cos_sin(np.arange(50), 8, 10000.0)):
        assert np.array_equal(a, b)


LOWRANK = dict(attention="lowrank", kv_lora_rank=12)


def test_lowrank_needs_its_rank_and_has_no_rotary_key():
    c = ModelConfig(**BASE, **LOWRANK, n_kv_heads=2)
    assert c.attention == "lowrank" and c.n_kv_heads == 2 and c.kv_lora_rank == 12
    assert ModelConfig(**BASE, **LOWRANK).n_kv_heads == 4       # default: n_heads
    bad("attention='lowrank' needs kv_lora_rank", attention="lowrank")
    bad("no decoupled rotary key", **LOWRANK, rope_head_dim=4)
    bad("multiple of n_kv_heads", **LOWRANK, n_kv_heads=3)
    bad("head_dim must be even", **LOWRANK, head_dim=7)


@pytest.mark.parametrize("value", [0, -1, 3, 2.0, True, "2", None])
def test_kv_sharing_is_a_count_up_to_n_layers(value):
    bad("kv_sharing", kv_sharing=value)                         # BASE has 2 layers


def test_kv_sharing_groups_each_kinds_layers_in_order():
    c = ModelConfig(**{**BASE, "n_layers": 5}, kv_sharing=2)
    assert c.kv_sources == (0, 0, 2, 2, 4)
    assert ModelConfig(**{**BASE, "n_layers": 5}, kv_sharing=5).kv_sources == (0,) * 5
    mixed = ModelConfig(**{**BASE, "n_layers": 6}, sliding_window=4, kv_sharing=2,
                        layer_types=("sliding", "full") * 3)
    assert mixed.kv_sources == (0, 1, 0, 1, 4, 5)              # pairs within each kind
    assert ModelConfig(**BASE).kv_sources == (0, 1)
