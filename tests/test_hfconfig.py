"""toykv.hfconfig: published config.json files parse to the zoo's shapes and published counts.

The dicts below copy the fields that matter from each model's published config.json
(unrelated fields such as token ids and rope scaling are left out).
"""
import pytest

from toykv import zoo
from toykv.hfconfig import from_hf_config
from toykv.sizing import kv_bytes_per_token, kv_cache_bytes, param_count

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


def test_dense_counts_are_exact():
    assert from_hf_config(LLAMA_2_7B).total_params == 6_738_415_616
    for name in ("llama-3.1-8b", "mistral-7b-v0.1"):
        parsed = from_hf_config(CASES[name])
        assert parsed.total_params == parsed.active_params == param_count(zoo.get(name).config)
    assert abs(from_hf_config(LLAMA_31_8B).total_params / 8.03e9 - 1) < 1e-4


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
