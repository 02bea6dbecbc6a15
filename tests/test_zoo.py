"""toykv.zoo: every model with its numbers, patterns and public sources."""
import dataclasses

import pytest

from toykv import zoo

# name: (layers, d_model, heads, kv heads, head_dim, vocab, d_ff, tied, params), typed from the
# public sources each entry names (zoo.SOURCES: model cards, reports, published configs), not
# from toykv. Where no source states a rounded count, the exact published one (Llama 2 7B:
# 6,738,415,616; Mistral 7B: 7,241,732,096), which toykv must reproduce from the shapes.
DENSE = {
    "llama-2-7b": (32, 4096, 32, 32, 128, 32000, 11008, False, 6_738_415_616),
    "llama-3.1-8b": (32, 4096, 32, 8, 128, 128256, 14336, False, 8_030_000_000),
    "llama-3.1-70b": (80, 8192, 64, 8, 128, 128256, 28672, False, 70_550_000_000),
    "llama-3.3-70b": (80, 8192, 64, 8, 128, 128256, 28672, False, 70_550_000_000),
    "llama-3.1-405b": (126, 16384, 128, 8, 128, 128256, 53248, False, 405_000_000_000),
    "mistral-7b-v0.1": (32, 4096, 32, 8, 128, 32000, 14336, False, 7_241_732_096),
    "qwen2.5-1.5b": (28, 1536, 12, 2, 128, 151936, 8960, True, 1_540_000_000),
    "qwen2.5-7b": (28, 3584, 28, 4, 128, 152064, 18944, False, 7_600_000_000),
    "qwen3-0.6b": (28, 1024, 16, 8, 128, 151936, 3072, True, 600_000_000),
    "qwen3-1.7b": (28, 2048, 16, 8, 128, 151936, 6144, True, 1_700_000_000),
    "qwen3-8b": (36, 4096, 32, 8, 128, 151936, 12288, False, 8_200_000_000),
    "gpt2": (12, 768, 12, 12, 64, 50257, 3072, True, 124_000_000),
    "smollm2-135m": (30, 576, 9, 3, 64, 49152, 1536, True, 135_000_000),
    "tinyllama-1.1b": (22, 2048, 32, 4, 64, 32000, 5632, False, 1_100_000_000),
    "gemma-3-27b": (62, 5376, 32, 16, 128, 262144, 21504, True, 27_000_000_000),
    "gemma-2-9b": (42, 3584, 16, 8, 256, 256000, 14336, True, 9_000_000_000),
}

# name: (layers, d_model, heads, kv heads or None for MLA, head_dim, total, active), as above
MOE = {
    "qwen3-235b-a22b": (94, 4096, 64, 4, 128, 235e9, 22e9),
    "deepseek-v2": (60, 5120, 128, None, 128, 236e9, 21e9),
    "deepseek-v3": (61, 7168, 128, None, 128, 671e9, 37e9),
    "kimi-k2": (61, 7168, 64, None, 128, 1e12, 32e9),
    "minimax-m2": (62, 3072, 48, 8, 128, 230e9, 10e9),
    "gpt-oss-120b": (36, 2880, 64, 8, 64, 117e9, 5.1e9),
    "gpt-oss-20b": (24, 2880, 64, 8, 64, 21e9, 3.6e9),
    "qwen3-next-80b-a3b": (48, 2048, 16, 2, 256, 80e9, 3e9),
}


def test_every_model_is_there():
    assert set(zoo.names()) == set(DENSE) | set(MOE)
    assert len(zoo.names()) == 24


@pytest.mark.parametrize("name", DENSE)
def test_dense_shapes_and_params(name):
    layers, d_model, heads, kv, head_dim, vocab, d_ff, tied, params = DENSE[name]
    model = zoo.get(name)
    c = model.config
    assert (c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size, c.d_ff,
            c.tie_embeddings) == (layers, d_model, heads, kv, head_dim, vocab, d_ff, tied)
    assert model.total_params == model.active_params == params
    assert not model.is_moe


@pytest.mark.parametrize("name", MOE)
def test_moe_shapes_and_params(name):
    layers, d_model, heads, kv, head_dim, total, active = MOE[name]
    model = zoo.get(name)
    c = model.config
    assert (c.n_layers, c.d_model, c.n_heads, c.head_dim) == (layers, d_model, heads, head_dim)
    assert c.attention == ("mla" if kv is None else "gqa")
    if kv is None:
        assert (c.kv_lora_rank, c.rope_head_dim) == (512, 64)
    else:
        assert c.n_kv_heads == kv
    assert (model.total_params, model.active_params) == (int(total), int(active))
    assert model.is_moe


def test_computed_params():
    # published counts: Llama 2 7B 6,738,415,616; Mistral 7B 7,241,732,096
    # (= 2 x 32000 x 4096 embeddings + 32 x (2 x 4096 + 2 x 4096^2 + 2 x 4096 x 1024
    #    + 3 x 4096 x 14336) + 4096)
    assert zoo.get("llama-2-7b").total_params == 6_738_415_616
    assert zoo.get("mistral-7b-v0.1").total_params == 7_241_732_096


def test_both_70b_keys_share_shapes():
    assert zoo.get("llama-3.1-70b").config == zoo.get("llama-3.3-70b").config


@pytest.mark.parametrize("name", ["qwen2.5-7b", "tinyllama-1.1b", "qwen3-next-80b-a3b"])
def test_unverified_items_are_marked(name):
    model = zoo.get(name)
    assert model.verified is False
    assert "unverified" in model.notes.lower()


def test_verified_models_carry_no_unverified_note():
    for name in zoo.names():
        model = zoo.get(name)
        if model.verified:
            assert "unverified" not in model.notes.lower(), name


def test_sources_expand_the_source_keys():
    for name in zoo.names():
        model = zoo.get(name)
        assert model.sources, name
        keyed = [s for s in model.sources if s.split(":")[0] in zoo.SOURCES]
        assert keyed, name
        for source in keyed:
            key = source.split(":")[0]
            assert source == f"{key}: {zoo.SOURCES[key]}"


# -- layer patterns -------------------------------------------------------------------
def test_gemma3_pattern_five_local_then_global():
    c = zoo.get("gemma-3-27b").config
    assert c.sliding_window == 1024
    assert c.layer_kinds[:6] == ("sliding",) * 5 + ("full",)
    assert [i for i, k in enumerate(c.layer_kinds) if k == "full"] == list(range(5, 62, 6))


def test_gemma2_alternates_sliding_first():
    c = zoo.get("gemma-2-9b").config
    assert c.sliding_window == 4096
    assert c.layer_kinds[:4] == ("sliding", "full", "sliding", "full")
    assert c.layer_kinds.count("full") == c.layer_kinds.count("sliding") == 21


def test_mistral_slides_on_every_layer():
    c = zoo.get("mistral-7b-v0.1").config
    assert c.sliding_window == 4096 and set(c.layer_kinds) == {"sliding"}


@pytest.mark.parametrize("name, layers", [("gpt-oss-120b", 36), ("gpt-oss-20b", 24)])
def test_gpt_oss_even_layers_slide(name, layers):
    c = zoo.get(name).config
    assert c.sliding_window == 128 and c.n_layers == layers
    assert all((k == "sliding") == (i % 2 == 0) for i, k in enumerate(c.layer_kinds))


def test_qwen3_next_every_fourth_layer_full():
    c = zoo.get("qwen3-next-80b-a3b").config
    assert [i for i, k in enumerate(c.layer_kinds) if k == "full"] == list(range(3, 48, 4))
    assert c.layer_kinds.count("linear") == 36
    assert c.linear_state_values == zoo.QWEN3_NEXT_STATE_VALUES > 0


def test_other_models_are_full_attention():
    patterned = {"gemma-3-27b", "gemma-2-9b", "mistral-7b-v0.1", "gpt-oss-120b", "gpt-oss-20b",
                 "qwen3-next-80b-a3b"}
    for name in set(zoo.names()) - patterned:
        assert set(zoo.get(name).config.layer_kinds) == {"full"}, name


# -- lookup and table -------------------------------------------------------------------
def test_unknown_name_suggests_close_ones():
    with pytest.raises(KeyError, match="llama-3.1-8b"):
        zoo.get("llama3.1-8b")
    with pytest.raises(KeyError, match="no zoo model named 'zzz'"):
        zoo.get("zzz")


def test_zoo_models_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        zoo.get("gpt2").total_params = 1


def test_table_rows():
    rows = zoo.table()
    assert [row["name"] for row in rows] == zoo.names()
    for row in rows:
        model = zoo.get(row["name"])
        c = model.config
        growing = sum(kind != "linear" for kind in c.layer_kinds)   # layers whose cache grows
        per_layer = (c.kv_lora_rank + c.rope_head_dim if c.attention == "mla"
                     else 2 * c.n_kv_heads * c.head_dim)           # values per token and layer
        assert row["KV bytes/token (bf16)"] == growing * per_layer * 2
        assert row["params total"] == model.total_params
        assert row["params active"] == model.active_params
        assert row["layers"] == model.config.n_layers
        assert row["sources"]
    by_name = {row["name"]: row for row in rows}
    assert by_name["llama-3.1-8b"]["heads / kv heads"] == "32 / 8"
    assert by_name["deepseek-v2"]["KV bytes/token (bf16)"] == 69_120
    assert by_name["gemma-3-27b"]["layer pattern"] == "10 full + 52 sliding (1024)"


def test_every_source_and_note_is_public():
    # a reader can open what the zoo cites: no working file, no path on a build machine
    for name in zoo.names():
        model = zoo.get(name)
        for text in (*model.sources, model.notes):
            assert "ZOO" not in text and "/work/" not in text, (name, text)
    assert "ZOO.md" not in zoo.__doc__ and "/work/" not in zoo.__doc__
