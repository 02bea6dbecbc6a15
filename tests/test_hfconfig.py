"""toykv.hfconfig: published config.json files parse to the zoo's shapes and published counts.

The dicts below copy the fields that matter from each model's published config.json
(unrelated fields such as token ids and rope scaling are left out).
"""
import json

import pytest

from toykv import zoo
from toykv.hfconfig import config_from_hf, from_hf_config, parse_config_json
from toykv.sizing import kv_bytes_per_token, kv_cache_bytes

LLAMA_2_7B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
    "max_position_embeddings": 4096, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 32, "rms_norm_eps": 1e-05, "tie_word_embeddings": False,
    "vocab_size": 32000}
LLAMA_31_8B = {
    "model_type": "llama", "attention_bias": False, "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": False,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "vocab_size": 128256}
QWEN3_1_7B = {
    "model_type": "qwen3", "attention_bias": False, "head_dim": 128, "hidden_size": 2048,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 28,
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000, "sliding_window": None,
    "tie_word_embeddings": True, "use_sliding_window": False, "vocab_size": 151936}
MISTRAL_7B = {
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
    "sliding_window": 4096, "tie_word_embeddings": False, "vocab_size": 32000}
GEMMA_3_27B = {                               # the text part is nested; vocab_size is defaulted
    "model_type": "gemma3", "text_config": {
        "head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504,
        "model_type": "gemma3_text", "num_attention_heads": 32, "num_hidden_layers": 62,
        "num_key_value_heads": 16, "query_pre_attn_scalar": 168, "sliding_window": 1024}}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "first_k_dense_replace": 3, "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rope_theta": 10000,
    "tie_word_embeddings": False, "topk_method": "noaux_tc", "v_head_dim": 128,
    "vocab_size": 129280}
DEEPSEEK_V2 = {
    "model_type": "deepseek_v2", "first_k_dense_replace": 1, "hidden_size": 5120,
    "intermediate_size": 12288, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "moe_intermediate_size": 1536, "moe_layer_freq": 1, "n_routed_experts": 160,
    "n_shared_experts": 2, "num_attention_heads": 128, "num_experts_per_tok": 6,
    "num_hidden_layers": 60, "num_key_value_heads": 128, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False,
    "v_head_dim": 128, "vocab_size": 102400}
GPT_OSS_120B = {
    "model_type": "gpt_oss", "attention_bias": True, "experts_per_token": 4, "head_dim": 64,
    "hidden_size": 2880, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
    "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
    "rope_theta": 150000, "sliding_window": 128, "tie_word_embeddings": False,
    "vocab_size": 201088}
QWEN3_235B = {
    "model_type": "qwen3_moe", "decoder_sparse_step": 1, "head_dim": 128, "hidden_size": 4096,
    "intermediate_size": 12288, "max_position_embeddings": 40960, "mlp_only_layers": [],
    "moe_intermediate_size": 1536, "num_attention_heads": 64, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 94, "num_key_value_heads": 4,
    "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936}
QWEN3_NEXT = {
    "model_type": "qwen3_next", "decoder_sparse_step": 1, "full_attention_interval": 4,
    "head_dim": 256, "hidden_size": 2048, "intermediate_size": 5120,
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "max_position_embeddings": 262144, "mlp_only_layers": [], "moe_intermediate_size": 512,
    "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10,
    "num_hidden_layers": 48, "num_key_value_heads": 2, "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False, "vocab_size": 151936}

# config.json -> the zoo entry it should match
CASES = {
    "llama-2-7b": LLAMA_2_7B, "llama-3.1-8b": LLAMA_31_8B, "qwen3-1.7b": QWEN3_1_7B,
    "mistral-7b-v0.1": MISTRAL_7B, "gemma-3-27b": GEMMA_3_27B, "deepseek-v3": DEEPSEEK_V3,
    "deepseek-v2": DEEPSEEK_V2, "gpt-oss-120b": GPT_OSS_120B, "qwen3-235b-a22b": QWEN3_235B,
    "qwen3-next-80b-a3b": QWEN3_NEXT,
}


@pytest.mark.parametrize("name", CASES)
def test_kv_sizes_equal_the_zoo_entry(name):
    parsed, entry = from_hf_config(CASES[name], name), zoo.get(name)
    assert parsed.name == name
    assert kv_bytes_per_token(parsed.config) == kv_bytes_per_token(entry.config)
    assert parsed.config.layer_kinds == entry.config.layer_kinds
    for tokens in (0, 100, 5000, 10**6):
        assert kv_cache_bytes(parsed.config, tokens) == kv_cache_bytes(entry.config, tokens)


# the exact counts of the published checkpoints (their safetensors' parameters), independent
# of toykv; each is also 2 V D + L (2 D + D^2 + 2 D H_kv d_h + H d_h D + 3 D F) + D by hand
PUBLISHED_COUNTS = {"llama-2-7b": 6_738_415_616, "llama-3.1-8b": 8_030_261_248,
                    "mistral-7b-v0.1": 7_241_732_096}


@pytest.mark.parametrize("name", PUBLISHED_COUNTS)
def test_dense_counts_are_exact(name):
    parsed = from_hf_config(CASES[name])
    assert parsed.total_params == parsed.active_params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name, tolerance", [
    ("qwen3-1.7b", 0.02), ("gemma-3-27b", 0.01), ("deepseek-v3", 0.02), ("deepseek-v2", 0.02),
    ("qwen3-235b-a22b", 0.02)])
def test_counts_land_near_the_published_figures(name, tolerance):
    parsed, entry = from_hf_config(CASES[name]), zoo.get(name)
    assert abs(parsed.total_params / entry.total_params - 1) < tolerance
    assert abs(parsed.active_params / entry.active_params - 1) < tolerance


def test_gpt_oss_counts():
    parsed = from_hf_config(GPT_OSS_120B)
    assert abs(parsed.total_params / 117e9 - 1) < 0.01
    # OpenAI's 5.1B active leaves out the input-embedding table (it counts the unembedding).
    embedding = 201088 * 2880
    assert abs((parsed.active_params - embedding) / 5.1e9 - 1) < 0.01


def test_qwen3_next_counts_by_hand():
    d, vocab = 2048, 151936
    gated_attention = d * 16 * 256 * 2 + 2 * d * 2 * 256 + 16 * 256 * d + 2 * 256
    delta_net = (d * (2 * 2048 + 2 * 4096) + d * 64 + 8192 * 4 + 2 * 32 + 128 + 4096 * d)
    expert, shared, router = 3 * d * 512, 3 * d * 512 + d, 512 * d
    outside = 2 * vocab * d + d + 48 * 2 * d + 12 * gated_attention + 36 * delta_net
    parsed = from_hf_config(QWEN3_NEXT)
    assert parsed.total_params == outside + 48 * (512 * expert + shared + router)
    assert parsed.active_params == outside + 48 * (10 * expert + shared + router)
    assert abs(parsed.total_params / 80e9 - 1) < 0.01
    # "A3B" is a rounded label: without the two embedding tables the active count is 3.2B.
    assert 3e9 < parsed.active_params - 2 * vocab * d < 3.5e9
    assert parsed.config.linear_state_values == zoo.QWEN3_NEXT_STATE_VALUES


def test_mla_and_moe_fields_reach_the_config():
    c = from_hf_config(DEEPSEEK_V3).config
    assert (c.attention, c.kv_lora_rank, c.rope_head_dim, c.head_dim) == ("mla", 512, 64, 128)
    assert c.d_ff == 2048 and c.n_heads == 128
    assert "multi-token-prediction" in from_hf_config(DEEPSEEK_V3).notes
    oss = from_hf_config(GPT_OSS_120B)
    assert oss.config.d_ff == 2880 and oss.config.sliding_window == 128
    assert oss.verified is False and oss.sources


def test_gemma3_nested_equals_flat_and_uses_hf_defaults():
    nested = from_hf_config(GEMMA_3_27B)
    flat = from_hf_config(GEMMA_3_27B["text_config"])
    assert nested.config == flat.config and nested.total_params == flat.total_params
    assert nested.config.vocab_size == 262208 and nested.config.tie_embeddings


def test_qwen_sliding_window_only_when_enabled():
    config = dict(QWEN3_1_7B, sliding_window=4096)
    assert set(from_hf_config(config).config.layer_kinds) == {"full"}
    config.update(use_sliding_window=True, max_window_layers=20)
    kinds = from_hf_config(config).config.layer_kinds
    assert kinds == ("full",) * 20 + ("sliding",) * 8


def test_experts_per_token_alias():
    config = {k: v for k, v in GPT_OSS_120B.items() if k != "num_experts_per_tok"}
    assert from_hf_config(config).active_params == from_hf_config(GPT_OSS_120B).active_params


# -- bad input --------------------------------------------------------------------------
def test_unknown_model_type():
    with pytest.raises(ValueError, match="'falcon'"):
        from_hf_config(dict(LLAMA_31_8B, model_type="falcon"))
    with pytest.raises(ValueError, match="model_type None"):
        from_hf_config({k: v for k, v in LLAMA_31_8B.items() if k != "model_type"})


@pytest.mark.parametrize("config, field", [
    (LLAMA_31_8B, "hidden_size"), (LLAMA_31_8B, "vocab_size"), (DEEPSEEK_V3, "kv_lora_rank"),
    (DEEPSEEK_V3, "moe_intermediate_size"), (QWEN3_NEXT, "linear_num_value_heads"),
    (MISTRAL_7B, "max_position_embeddings"), (GPT_OSS_120B, "num_local_experts")])
def test_missing_required_field(config, field):
    with pytest.raises(ValueError, match=field):
        from_hf_config({k: v for k, v in config.items() if k != field})


def test_malformed_values():
    with pytest.raises(ValueError, match="hidden_size"):
        from_hf_config(dict(LLAMA_31_8B, hidden_size="4096"))
    with pytest.raises(ValueError, match="layer_types"):
        from_hf_config(dict(GPT_OSS_120B, layer_types=["full_attention"] * 35))
    with pytest.raises(ValueError, match="layer_types"):
        from_hf_config(dict(GPT_OSS_120B, layer_types=["chunked"] * 36))
    with pytest.raises(ValueError, match="config"):
        from_hf_config("config.json")


# -- one parser, one set of defaults ----------------------------------------------------
def test_loader_and_sizing_read_a_config_alike():
    """The loader's ModelConfig and the sizing ZooModel's come from the same parse."""
    for config in (MISTRAL_7B, LLAMA_31_8B, {k: v for k, v in MISTRAL_7B.items()
                                             if k not in ("sliding_window", "rms_norm_eps")}):
        assert config_from_hf(config) == from_hf_config(config).config


def test_transformers_defaults_for_left_out_fields():
    bare = {k: v for k, v in MISTRAL_7B.items()
            if k not in ("sliding_window", "rms_norm_eps", "rope_theta", "num_key_value_heads",
                         "tie_word_embeddings")}
    c = config_from_hf(bare)                         # MistralConfig's defaults (transformers 5)
    assert (c.sliding_window, c.norm_eps, c.rope_theta, c.n_kv_heads, c.tie_embeddings) == \
        (4096, 1e-6, 10000.0, 8, False)
    assert set(c.layer_kinds) == {"sliding"}
    nulls = dict(bare, sliding_window=None, num_key_value_heads=None)   # null: not windowed, MHA
    c = config_from_hf(nulls)
    assert c.sliding_window is None and c.n_kv_heads == 32 and set(c.layer_kinds) == {"full"}
    llama = config_from_hf({k: v for k, v in LLAMA_2_7B.items() if k != "rms_norm_eps"})
    assert llama.norm_eps == 1e-6 and llama.rope_theta == 10000.0
    oss = from_hf_config({k: v for k, v in GPT_OSS_120B.items() if k != "rope_theta"}).config
    assert oss.rope_theta == 150000.0 and oss.norm_eps == 1e-5


def test_rope_theta_from_transformers_5_rope_parameters():
    v5 = {k: v for k, v in LLAMA_31_8B.items() if k != "rope_theta"}
    v5["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
    assert config_from_hf(v5).rope_theta == 500000.0
    with pytest.raises(ValueError, match="two rope_theta"):
        config_from_hf(dict(v5, rope_theta=10000.0))


def test_max_seq_len_shortens_the_context():
    assert config_from_hf(LLAMA_31_8B, max_seq_len=256).max_seq_len == 256
    for bad in (0, 131073, 2.0, True, "256"):
        with pytest.raises(ValueError, match="max_seq_len"):
            config_from_hf(LLAMA_31_8B, max_seq_len=bad)


def test_only_llama_and_mistral_are_runnable():
    assert from_hf_config(QWEN3_1_7B).config.n_layers == 28          # sized, yes
    with pytest.raises(ValueError, match="'qwen3' is not supported.*q_norm"):
        config_from_hf(QWEN3_1_7B)                                    # run, no


# -- bad input: a ValueError naming the config.json field -------------------------------
DEEP = {}
_inner = DEEP
for _ in range(5000):
    _inner["a"] = {}
    _inner = _inner["a"]


@pytest.mark.parametrize("base, changes, field", [
    (QWEN3_235B, {"num_experts_per_tok": 129}, "'num_experts_per_tok' \\(129\\) is more than "
                                               "'num_experts' \\(128\\)"),
    (DEEPSEEK_V3, {"num_experts_per_tok": 300}, "'num_experts_per_tok'.*'n_routed_experts'"),
    (GPT_OSS_120B, {"num_experts_per_tok": None, "experts_per_token": 200},
     "'experts_per_token'.*'num_local_experts'"),
    (QWEN3_235B, {"num_experts": -4}, "'num_experts' must be an integer >= 0"),
    (DEEPSEEK_V3, {"n_routed_experts": -1}, "'n_routed_experts' must be an integer >= 1"),
    (DEEPSEEK_V3, {"n_shared_experts": -1}, "'n_shared_experts' must be an integer >= 0"),
    (GPT_OSS_120B, {"num_local_experts": 0}, "'num_local_experts'"),
    (DEEPSEEK_V3, {"kv_lora_rank": 512.5}, "'kv_lora_rank' must be an integer"),
    (DEEPSEEK_V3, {"kv_lora_rank": -512}, "'kv_lora_rank' must be an integer >= 1"),
    (DEEPSEEK_V3, {"q_lora_rank": 1.5}, "'q_lora_rank' must be an integer"),
    (DEEPSEEK_V3, {"q_lora_rank": -1}, "'q_lora_rank'"),
    (DEEPSEEK_V3, {"qk_rope_head_dim": "64"}, "'qk_rope_head_dim'"),
    (LLAMA_31_8B, {"tie_word_embeddings": "false"}, "'tie_word_embeddings' must be True or "
                                                    "False, got 'false'"),
    (QWEN3_1_7B, {"use_sliding_window": "true"}, "'use_sliding_window'"),
    (GPT_OSS_120B, {"attention_bias": "false"}, "'attention_bias'"),
    (LLAMA_31_8B, {"mlp_bias": 0}, "'mlp_bias'"),
    (LLAMA_31_8B, {"rope_theta": "abc"}, "'rope_theta' must be a number, got 'abc'"),
    (LLAMA_31_8B, {"rope_theta": "500000"}, "'rope_theta' must be a number"),
    (LLAMA_31_8B, {"rms_norm_eps": "1e-5"}, "'rms_norm_eps' must be a number"),
    (LLAMA_31_8B, {"rms_norm_eps": float("nan")}, "'rms_norm_eps' must be a finite number"),
    (LLAMA_31_8B, {"hidden_size": "4096"}, "'hidden_size' must be an integer"),
    (LLAMA_31_8B, {"num_attention_heads": 32.0}, "'num_attention_heads' must be an integer"),
    (LLAMA_31_8B, {"num_hidden_layers": True}, "'num_hidden_layers' must be an integer"),
    (LLAMA_31_8B, {"vocab_size": [128256]}, "'vocab_size' must be an integer, got a JSON array"),
    (LLAMA_31_8B, {"hidden_size": {"value": 4096}}, "'hidden_size' must be an integer, got a "
                                                    "JSON object"),
    (LLAMA_31_8B, {"rope_parameters": [500000.0]}, "'rope_parameters' must be a JSON object"),
    (LLAMA_31_8B, {"rope_parameters": 500000.0}, "'rope_parameters' must be a JSON object"),
    (LLAMA_31_8B, {"rope_scaling": "llama3"}, "'rope_scaling' must be a JSON object"),
    (LLAMA_31_8B, {"rope_parameters": {"rope_theta": "big"}}, "'rope_parameters.rope_theta'"),
    (GEMMA_3_27B, {"text_config": [1, 2]}, "'text_config' must be a JSON object"),
    (GEMMA_3_27B, {"text_config": 5}, "'text_config' must be a JSON object"),
    (QWEN3_235B, {"mlp_only_layers": 3}, "'mlp_only_layers' must be a list of int"),
    (QWEN3_235B, {"mlp_only_layers": [1.5]}, "'mlp_only_layers' must be a list of int"),
    (GPT_OSS_120B, {"layer_types": "sliding_attention"}, "'layer_types' must be a list of str"),
    (GPT_OSS_120B, {"layer_types": [[1]] * 36}, "'layer_types' must be a list of str"),
    (LLAMA_31_8B, {"num_key_value_heads": 5}, "'num_attention_heads' \\(32\\) must be a multiple "
                                              "of 'num_key_value_heads' \\(5\\)"),
    (LLAMA_31_8B, {"hidden_size": DEEP}, "'hidden_size' must be an integer, got a JSON object"),
    (LLAMA_31_8B, {"rope_theta": [[[[[[[[[[1]]]]]]]]]]}, "'rope_theta' must be a number"),
    (LLAMA_31_8B, {"num_hidden_layers": 10**8}, "'num_hidden_layers' must be an integer in"),
])
def test_bad_field_is_named(base, changes, field):
    with pytest.raises(ValueError, match=field):
        from_hf_config({**base, **changes})


@pytest.mark.parametrize("config", [[LLAMA_31_8B], 4096, None, "model_type: llama"])
def test_config_must_be_a_mapping(config):
    with pytest.raises(ValueError, match="config must be a dict"):
        from_hf_config(config)


def test_deeply_nested_config_json_text():
    for text in ("[" * 200_000, '{"a":' * 200_000, '{"text_config": ' + "[" * 200_000):
        with pytest.raises(ValueError, match="too deeply"):
            parse_config_json(text)
    nested = json.dumps(LLAMA_31_8B)[:-1] + ', "extra": ' + '{"a": ' * 500 + "{}" + "}" * 501
    assert from_hf_config(parse_config_json(nested)).config.n_layers == 32
    for text, message in (("[1]", "JSON object"), ("{", "not valid JSON"), (b"{}", "str")):
        with pytest.raises(ValueError, match=message):
            parse_config_json(text)
