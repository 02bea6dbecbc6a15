"""toykv.load_hf: a checkpoint written here loads into a ToyTransformer that computes what it does.

The first tests need only numpy, safetensors and tokenizers: a toykv model is written out under
Hugging Face's tensor names and read back, and every bad input is rejected. The comparison tests
at the end build tiny random models with `transformers` and check toykv's logits and greedy
tokens against theirs; they skip when torch or transformers is not installed.
"""
import dataclasses
import json
import os
import struct

os.environ["HF_HUB_OFFLINE"] = "1"            # before any transformers import: no network
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"

import numpy as np
import pytest
from safetensors.numpy import save_file

from toykv import ModelConfig, ToyTransformer, generate
from toykv.loaders import load_hf

TINY = dict(vocab_size=128, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128,
            max_seq_len=128)


# -- writing a checkpoint with numpy only ---------------------------------------------------
def random_model(tie=False, seed=0, **changes):
    """A toykv model with random norm weights too, so a swapped norm would show."""
    model = ToyTransformer(ModelConfig(**{**TINY, "tie_embeddings": tie, **changes}), seed=seed)
    rng = np.random.default_rng(seed + 1)
    for layer in model.layers:
        for key in ("attn_norm", "mlp_norm"):
            layer[key] = (1 + 0.2 * rng.standard_normal(model.config.d_model)).astype(np.float32)
    model.final_norm = (1 + 0.2 * rng.standard_normal(model.config.d_model)).astype(np.float32)
    return model


def hf_config(config: ModelConfig, **changes) -> dict:
    """config.json as transformers 4 writes it for a Llama."""
    hf = {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
          "vocab_size": config.vocab_size, "hidden_size": config.d_model,
          "num_hidden_layers": config.n_layers, "num_attention_heads": config.n_heads,
          "num_key_value_heads": config.n_kv_heads, "intermediate_size": config.d_ff,
          "max_position_embeddings": config.max_seq_len, "rope_theta": config.rope_theta,
          "rms_norm_eps": config.norm_eps, "tie_word_embeddings": config.tie_embeddings,
          "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "rope_scaling": None}
    hf.update(changes)
    return hf


def hf_tensors(model) -> dict:
    """The model's arrays under Hugging Face's names, projections as [out, in]."""
    t = {"model.embed_tokens.weight": model.embed, "model.norm.weight": model.final_norm}
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = layer["attn_norm"]
        t[p + "post_attention_layernorm.weight"] = layer["mlp_norm"]
        for ours, theirs in [("wq", "self_attn.q_proj"), ("wk", "self_attn.k_proj"),
                             ("wv", "self_attn.v_proj"), ("wo", "self_attn.o_proj"),
                             ("w_gate", "mlp.gate_proj"), ("w_up", "mlp.up_proj"),
                             ("w_down", "mlp.down_proj")]:
            t[p + theirs + ".weight"] = np.ascontiguousarray(layer[ours].T)
    if model.lm_head is not None:
        t["lm_head.weight"] = np.ascontiguousarray(model.lm_head.T)
    return t


def save_bf16(tensors: dict, file):
    """A safetensors file of BF16 tensors (the float32's top 16 bits), written by hand."""
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        bits = (np.ascontiguousarray(array, np.float32).view(np.uint32) >> 16).astype("<u2")
        header[name] = {"dtype": "BF16", "shape": list(array.shape),
                        "data_offsets": [offset, offset + bits.nbytes]}
        blobs.append(bits.tobytes())
        offset += bits.nbytes
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)                   # the format pads the header to 8 bytes
    with open(file, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_checkpoint(directory, model, config_changes=None, tensors=None, bf16=False):
    directory.mkdir(parents=True, exist_ok=True)
    hf = hf_config(model.config, **(config_changes or {}))
    (directory / "config.json").write_text(json.dumps(hf))
    tensors = hf_tensors(model) if tensors is None else tensors
    (save_bf16 if bf16 else save_file)(tensors, directory / "model.safetensors")
    return directory


def assert_same_weights(a, b):
    assert np.array_equal(a.embed, b.embed) and np.array_equal(a.final_norm, b.final_norm)
    assert (a.lm_head is None) == (b.lm_head is None)
    if a.lm_head is not None:
        assert np.array_equal(a.lm_head, b.lm_head)
    for la, lb in zip(a.layers, b.layers, strict=True):
        assert la.keys() == lb.keys()
        for key in la:
            assert la[key].dtype == np.float32 and np.array_equal(la[key], lb[key]), key


# -- round trips ----------------------------------------------------------------------------
@pytest.mark.parametrize("tie", [False, True])
def test_round_trip_gives_the_same_model(tmp_path, tie):
    original = random_model(tie=tie, rope_theta=500.0, norm_eps=1e-6)
    loaded, tokenizer = load_hf(write_checkpoint(tmp_path, original))
    assert tokenizer is None
    assert loaded.config == original.config
    assert_same_weights(loaded, original)
    ids = [3, 17, 42, 99, 5, 0, 127]
    assert np.array_equal(loaded(ids), original(ids))


def test_transformers5_rope_parameters_and_defaults(tmp_path):
    original = random_model(rope_theta=250.0, n_kv_heads=4, norm_eps=1e-6)
    hf = hf_config(original.config, rope_parameters={"rope_type": "default", "rope_theta": 250.0})
    for key in ("rope_theta", "rms_norm_eps", "tie_word_embeddings", "hidden_act"):
        del hf[key]                                   # missing keys take transformers' defaults
    hf.update(num_key_value_heads=None, head_dim=None, rope_scaling=None)   # nulls: the same
    write_checkpoint(tmp_path, original)
    (tmp_path / "config.json").write_text(json.dumps(hf))
    loaded, _ = load_hf(tmp_path)
    assert loaded.config == original.config
    assert loaded.config.rope_theta == 250.0 and loaded.config.n_kv_heads == 4


def test_max_seq_len_and_exact_are_passed_on(tmp_path):
    loaded, _ = load_hf(write_checkpoint(tmp_path, random_model()), max_seq_len=32, exact=True)
    assert loaded.config.max_seq_len == 32 and loaded.exact
    assert loaded.cos.shape == (32, loaded.config.head_dim)
    for bad in (0, 129, 16.0, True):
        with pytest.raises(ValueError, match="max_seq_len"):
            load_hf(tmp_path, max_seq_len=bad)


@pytest.mark.parametrize("model_type, changes, window", [
    ("mistral", {"sliding_window": 8}, 8),
    ("mistral", {"sliding_window": None}, None),
    ("mistral", {}, 4096),                            # MistralConfig's default when absent
    ("llama", {"sliding_window": 8}, None),           # Llama ignores the key, so do we
])
def test_sliding_window_from_the_config(tmp_path, model_type, changes, window):
    model = random_model()
    loaded, _ = load_hf(write_checkpoint(tmp_path, model, {"model_type": model_type, **changes}))
    assert loaded.config.sliding_window == window
    assert set(loaded.config.layer_kinds) == {"sliding" if window else "full"}


def test_bf16_is_widened_exactly(tmp_path):
    original = random_model()
    loaded, _ = load_hf(write_checkpoint(tmp_path, original, bf16=True))
    keep_top16 = lambda a: (a.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    assert np.array_equal(loaded.embed, keep_top16(original.embed))
    assert np.array_equal(loaded.layers[1]["wq"], keep_top16(original.layers[1]["wq"]))
    assert not np.array_equal(loaded.layers[1]["wq"], original.layers[1]["wq"])


def test_float16_checkpoint(tmp_path):
    original = random_model()
    half = {k: v.astype(np.float16) for k, v in hf_tensors(original).items()}
    loaded, _ = load_hf(write_checkpoint(tmp_path, original, tensors=half))
    assert np.array_equal(loaded.layers[0]["w_down"],
                          original.layers[0]["w_down"].astype(np.float16).astype(np.float32))


def test_sharded_checkpoint(tmp_path):
    original = random_model()
    write_checkpoint(tmp_path, original)
    tensors = hf_tensors(original)
    (tmp_path / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, tmp_path / file)
    weight_map = {n: file for file, part in shards.items() for n in part}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    loaded, _ = load_hf(tmp_path)
    assert_same_weights(loaded, original)

    (tmp_path / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model-00002-of-00002"):
        load_hf(tmp_path)


# -- bad input ------------------------------------------------------------------------------
def test_missing_directory_and_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_hf(tmp_path / "nowhere")
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(NotADirectoryError, match="file.txt"):
        load_hf(tmp_path / "file.txt")
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(hf_config(random_model().config)))
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_hf(tmp_path)


def test_unreadable_files(tmp_path):
    write_checkpoint(tmp_path, random_model())
    (tmp_path / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="safetensors"):
        load_hf(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="JSON"):
        load_hf(tmp_path)


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "qwen2"}, "qwen2.*biases"),
    ({"model_type": "qwen3"}, "qwen3.*q_norm"),
    ({"model_type": "gpt2"}, "gpt2"),
    ({"model_type": None}, "model_type None"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling.*'llama3'"),
    ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling.*'linear'"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_parameters.*'yarn'"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                          "partial_rotary_factor": 0.5}}, "partial_rotary_factor"),
    ({"rope_parameters": {"rope_theta": 20000.0}}, "two rope_theta"),
    ({"attention_bias": True}, "attention_bias"),
    ({"mlp_bias": True}, "mlp_bias"),
    ({"hidden_act": "gelu"}, "hidden_act.*'gelu'"),
    ({"hidden_size": None}, "'hidden_size'"),
    ({"max_position_embeddings": None}, "'max_position_embeddings'"),
    ({"num_key_value_heads": 3}, "num_attention_heads.*multiple of.*num_key_value_heads"),
])
def test_config_rejected(tmp_path, changes, message):
    with pytest.raises(ValueError, match=message):
        load_hf(write_checkpoint(tmp_path, random_model(), changes))


def test_missing_tensor_is_named(tmp_path):
    tensors = hf_tensors(random_model())
    del tensors["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(ValueError, match=r"missing.*'model\.layers\.1\.mlp\.up_proj\.weight'"):
        load_hf(write_checkpoint(tmp_path, random_model(), tensors=tensors))


def test_untied_needs_lm_head_and_tied_ignores_it(tmp_path):
    tensors = hf_tensors(random_model(tie=False))
    lm_head = tensors.pop("lm_head.weight")
    with pytest.raises(ValueError, match="'lm_head.weight'"):
        load_hf(write_checkpoint(tmp_path / "a", random_model(tie=False), tensors=tensors))
    tied = random_model(tie=True)
    with_head = {**hf_tensors(tied), "lm_head.weight": lm_head}      # HF ignores it when tied
    loaded, _ = load_hf(write_checkpoint(tmp_path / "b", tied, tensors=with_head))
    assert loaded.lm_head is None and np.array_equal(loaded(np.arange(5)), tied(np.arange(5)))


def test_wrong_shape_is_named_with_both_shapes(tmp_path):
    tensors = hf_tensors(random_model())
    name = "model.layers.0.self_attn.k_proj.weight"
    tensors[name] = np.zeros((64, 64), np.float32)                   # [n_heads*hd, D]: MHA-sized
    with pytest.raises(ValueError, match=rf"'{name}' has shape \[64, 64\], expected \[32, 64\]"):
        load_hf(write_checkpoint(tmp_path, random_model(), tensors=tensors))


def test_transposed_projection_is_caught(tmp_path):
    tensors = hf_tensors(random_model())
    name = "model.layers.1.mlp.down_proj.weight"
    tensors[name] = np.ascontiguousarray(tensors[name].T)             # [in, out] by mistake
    with pytest.raises(ValueError, match=r"expected \[64, 128\]"):
        load_hf(write_checkpoint(tmp_path, random_model(), tensors=tensors))


def test_unexpected_tensor_is_named(tmp_path):
    tensors = hf_tensors(random_model())
    tensors["model.layers.0.self_attn.q_proj.bias"] = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match=r"'model\.layers\.0\.self_attn\.q_proj\.bias'"):
        load_hf(write_checkpoint(tmp_path, random_model(), tensors=tensors))
    del tensors["model.layers.0.self_attn.q_proj.bias"]
    tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = np.ones(8, np.float32)
    load_hf(write_checkpoint(tmp_path, random_model(), tensors=tensors))   # a known buffer: fine


def test_integer_tensor_is_rejected(tmp_path):
    tensors = hf_tensors(random_model())
    tensors["model.norm.weight"] = np.ones(64, np.int32)
    with pytest.raises(ValueError, match=r"'model\.norm\.weight' has dtype I32"):
        load_hf(write_checkpoint(tmp_path, random_model(), tensors=tensors))


# -- tokenizer ------------------------------------------------------------------------------
def byte_level_bpe(vocab_size=300):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = ["the cache keeps keys and values", "each decode step reads the whole cache",
              "prefill fills the cache once"] * 5
    tokenizer.train_from_iterator(corpus, trainer)
    return tokenizer


def test_tokenizer_round_trip(tmp_path):
    inner = byte_level_bpe()
    model = random_model(vocab_size=320)
    write_checkpoint(tmp_path, model)
    inner.save(str(tmp_path / "tokenizer.json"))
    loaded, tokenizer = load_hf(tmp_path)
    for text in ["the cache keeps keys", "unseen words: naïve KV €5!", ""]:
        ids = tokenizer.encode(text)
        assert all(isinstance(i, int) and 0 <= i < 320 for i in ids)
        assert ids == inner.encode(text).ids
        assert tokenizer.decode(ids) == text
    ids = tokenizer.encode("prefill fills the cache")
    assert len(ids) < len("prefill fills the cache")                 # merges learned and used
    assert loaded(ids).shape == (len(ids), 320)
    with pytest.raises(ValueError, match="str"):
        tokenizer.encode([1, 2])


def test_tokenizer_problems(tmp_path):
    write_checkpoint(tmp_path, random_model())                       # vocab_size 128
    byte_level_bpe(300).save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(ValueError, match="300 tokens.*vocab_size is 128"):
        load_hf(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match="tokenizer.json"):
        load_hf(tmp_path)


# -- against Hugging Face transformers ------------------------------------------------------
def hf_model(kind="llama", seed=0, **config):
    """A tiny random transformers model whose weights are large enough for attention to matter."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    Config, Model = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
                     "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM)}[kind]
    base = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, intermediate_size=128, max_position_embeddings=128,
                bos_token_id=None, eos_token_id=None, pad_token_id=None)   # nothing stops greedy
    torch.set_num_threads(1)                          # tiny matrices: threads only add waiting
    torch.manual_seed(seed)
    model = Model(Config(**{**base, **config}, attn_implementation="eager"))
    with torch.no_grad():         # HF's init (std 0.02) makes attention near-uniform: widen it
        for param in model.parameters():
            if param.ndim == 1:
                param.copy_(1 + 0.2 * torch.randn_like(param))
            else:                                        # [out, in]: variance 1/in
                param.copy_(torch.randn_like(param) / param.shape[1] ** 0.5)
    return model.eval()


def hf_logits(model, ids):
    import torch
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def hf_greedy(model, prompt, n, use_cache=True):
    import torch
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False,
                             use_cache=use_cache)
    return out[0, len(prompt):].tolist()


def assert_close_logits(ours, theirs):
    """Equal up to float32 rounding: within 1e-5 of the logits' own scale."""
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= 1e-5 * np.abs(theirs).max()


PROMPT = [1, 7, 42, 99, 3, 64, 18, 120]
SEQUENCE = PROMPT + [5, 77, 31, 2, 90, 11, 46, 101, 8, 59, 23, 114, 36, 70, 0, 127]   # 24 tokens


@pytest.mark.parametrize("tie, theta", [(False, 10000.0), (True, 10000.0), (False, 500.0),
                                        (True, 1e6)])
def test_llama_matches_transformers(tmp_path, tie, theta):
    theirs = hf_model(tie_word_embeddings=tie, rope_theta=theta, seed=int(theta) % 7 + tie)
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    ours, _ = load_hf(tmp_path)
    assert ours.config.rope_theta == theta and ours.config.tie_embeddings == tie
    assert_close_logits(ours(SEQUENCE), hf_logits(theirs, SEQUENCE))
    expected = hf_greedy(theirs, PROMPT, 16)
    assert len(expected) == 16 and expected == hf_greedy(theirs, PROMPT, 16, use_cache=False)
    assert generate(ours, PROMPT, 16, use_cache=True) == expected
    assert generate(ours, PROMPT, 16, use_cache=False) == expected


def test_mistral_sliding_window_matches_transformers(tmp_path):
    theirs = hf_model("mistral", sliding_window=8, rope_theta=1000.0, seed=3)
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    ours, _ = load_hf(tmp_path)
    assert ours.config.sliding_window == 8
    expected = hf_logits(theirs, SEQUENCE)                          # 24 tokens > window of 8
    assert_close_logits(ours(SEQUENCE), expected)
    unwindowed = ToyTransformer(dataclasses.replace(ours.config, sliding_window=None))
    unwindowed.embed, unwindowed.layers = ours.embed, ours.layers
    unwindowed.final_norm, unwindowed.lm_head = ours.final_norm, ours.lm_head
    gap = np.abs(unwindowed(SEQUENCE) - expected)
    assert gap[:8].max() <= 1e-5 * np.abs(expected).max()           # inside the window: same
    assert gap[8:].max() > 1e-2                                      # past it: HF did slide
    tokens = hf_greedy(theirs, PROMPT, 16)
    assert generate(ours, PROMPT, 16, use_cache=True) == tokens      # ring buffer of 8 slots
    assert generate(ours, PROMPT, 16, use_cache=False) == tokens


def test_bf16_checkpoint_matches_transformers(tmp_path):
    torch = pytest.importorskip("torch")
    theirs = hf_model(seed=5).to(torch.bfloat16)
    theirs.save_pretrained(tmp_path, safe_serialization=True)
    ours, _ = load_hf(tmp_path)
    state = {k: v.float().numpy() for k, v in theirs.state_dict().items()}
    assert np.array_equal(ours.embed, state["model.embed_tokens.weight"])
    assert np.array_equal(ours.layers[1]["wk"], state["model.layers.1.self_attn.k_proj.weight"].T)
    # theirs.float() would keep RoPE's inv_freq rounded to bf16: reload in float32 instead
    reloaded = type(theirs).from_pretrained(tmp_path, dtype=torch.float32)
    assert_close_logits(ours(SEQUENCE), hf_logits(reloaded, SEQUENCE))


def test_sharded_transformers_checkpoint(tmp_path):
    theirs = hf_model(seed=6)
    theirs.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert not (tmp_path / "model.safetensors").exists()
    ours, _ = load_hf(tmp_path)
    assert_close_logits(ours(SEQUENCE), hf_logits(theirs, SEQUENCE))
