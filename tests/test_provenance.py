"""Errors name the user's field by carrying where a value came from: ModelConfig's errors list
the fields they concern, and the config.json reader is told which GGUF key each field came
from (instead of searching the message text for names)."""
import pytest

from toykv import ModelConfig
from toykv.config import ConfigError
from test_hfconfig import DEEPSEEK_V3

from toykv.hfconfig import config_from_hf, from_hf_config

LLAMA = {"model_type": "llama", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64,
         "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": True}


@pytest.mark.parametrize("changes, fields", [
    (dict(d_model=30), ("d_model", "n_heads")),
    (dict(n_kv_heads=3), ("n_heads", "n_kv_heads")),
    (dict(head_dim=7), ("head_dim",)),
    (dict(vocab_size=0), ("vocab_size",)),
    (dict(attention="mla", kv_lora_rank=8), ("rope_head_dim",)),
    (dict(layer_types=("full",)), ("layer_types", "n_layers")),
])
def test_config_errors_list_the_fields_they_concern(changes, fields):
    base = dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64)
    with pytest.raises(ConfigError) as err:
        ModelConfig(**{**base, **changes})
    assert err.value.fields == fields and isinstance(err.value, ValueError)


def test_config_json_errors_say_which_fields_without_reading_the_message():
    with pytest.raises(ValueError, match=r"head_dim must be even.*") as err:
        config_from_hf({**LLAMA, "head_dim": 7})
    assert "in config.json" not in str(err.value)                   # head_dim is head_dim
    odd = {**DEEPSEEK_V3, "qk_rope_head_dim": 63}              # ModelConfig: must be even
    with pytest.raises(ValueError, match=r"rope_head_dim must be even.*\(in config.json: "
                                         r"rope_head_dim is 'qk_rope_head_dim'\)"):
        from_hf_config(odd)
    with pytest.raises(ValueError, match=r"; from where it came$"):
        from_hf_config(odd, sources={"qk_rope_head_dim": "where it came"})

def test_a_loader_says_where_each_field_came_from():
    sources = {"num_key_value_heads": "GGUF key 'llama.attention.head_count_kv'",
               "rope_theta": "GGUF key 'llama.rope.freq_base'"}
    with pytest.raises(ValueError, match="multiple of 'num_key_value_heads' .*; from GGUF key "
                                         "'llama.attention.head_count_kv'"):
        config_from_hf({**LLAMA, "num_key_value_heads": 3}, sources=sources)
    with pytest.raises(ValueError, match="'rope_theta' must be a number.*; from GGUF key "
                                         "'llama.rope.freq_base'$"):
        config_from_hf({**LLAMA, "rope_theta": "big"}, sources=sources)
    with pytest.raises(ValueError) as err:                            # a field not from GGUF
        config_from_hf({**LLAMA, "hidden_size": "32"}, sources=sources)
    assert "GGUF" not in str(err.value)
