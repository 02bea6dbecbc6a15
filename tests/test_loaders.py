"""toykv.load_hf: a checkpoint written here loads into a ToyTransformer that computes what it does.

Only numpy, safetensors and tokenizers are needed: a toykv model is written out under Hugging
Face's tensor names and read back, and every bad input is rejected. The comparison tests at the
end load tiny checkpoints that transformers saved (tests/data/hf_tiny) and compare toykv's logits
and greedy tokens with transformers' own, recorded by tests/make_references.py.
"""
import dataclasses
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from toykv import ModelConfig, ToyTransformer, generate
from toykv.loaders import load_hf, weight_files

DATA = Path(__file__).parent / "data"

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
    t = {"model.embed_tokens.weight": np.ascontiguousarray(model.embed),   # row-major on disk
         "model.norm.weight": model.final_norm}
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
    ({"tie_word_embeddings": "false"}, "'tie_word_embeddings' must be True or False"),
    ({"attention_bias": "false"}, "'attention_bias' must be True or False"),
    ({"rope_theta": "10000"}, "'rope_theta' must be a number"),
    ({"rms_norm_eps": -1e-6}, "'rms_norm_eps' must be a number > 0"),
    ({"hidden_size": 64.0}, "'hidden_size' must be an integer"),
    ({"rope_scaling": [1, 2]}, "'rope_scaling' must be a JSON object"),
    ({"rope_parameters": 7}, "'rope_parameters' must be a JSON object"),
    ({"model_type": ["llama"]}, "model_type \\['llama'\\] is not supported"),
    ({"head_dim": 15}, "head_dim must be even"),
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


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_tensor_is_named(tmp_path, value):
    tensors = hf_tensors(random_model())
    name = "model.layers.1.self_attn.v_proj.weight"
    tensors[name] = tensors[name].copy()
    tensors[name][3, 5] = value
    with pytest.raises(ValueError, match=rf"'{name}' has 1 NaN or infinite"):
        load_hf(write_checkpoint(tmp_path, random_model(), tensors=tensors))


def sharded(tmp_path, shard_names):
    """A checkpoint whose index names the given shard files (the tensors split among them)."""
    model = random_model()
    write_checkpoint(tmp_path, model)
    (tmp_path / "model.safetensors").unlink()
    tensors = hf_tensors(model)
    names = sorted(tensors)
    weight_map = {n: shard_names[i % len(shard_names)] for i, n in enumerate(names)}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return tmp_path, tensors, weight_map


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "sub/../../x",
                                   "..\\x.safetensors", ""])
def test_shards_must_lie_inside_the_model_directory(tmp_path, shard):
    folder, tensors, _ = sharded(tmp_path / "model", ["a.safetensors", shard])
    save_file(tensors, tmp_path / "outside.safetensors")              # a real file out there
    with pytest.raises(ValueError, match="not a file name inside the model directory"):
        load_hf(folder)


def test_shard_symlink_out_of_the_directory_is_refused(tmp_path):
    folder, tensors, weight_map = sharded(tmp_path / "model", ["a.safetensors", "b.safetensors"])
    for file in set(weight_map.values()):
        save_file({n: tensors[n] for n, f in weight_map.items() if f == file}, tmp_path / file)
    (folder / "a.safetensors").symlink_to(tmp_path / "a.safetensors")
    (folder / "b.safetensors").symlink_to(tmp_path / "b.safetensors")
    with pytest.raises(ValueError, match="'a.safetensors'.*inside the model directory"):
        load_hf(folder)


def test_shards_in_a_subfolder_are_fine(tmp_path):
    folder, tensors, weight_map = sharded(tmp_path, ["w/a.safetensors", "w/b.safetensors"])
    (folder / "w").mkdir()
    for file in set(weight_map.values()):
        save_file({n: tensors[n] for n, f in weight_map.items() if f == file}, folder / file)
    loaded, _ = load_hf(folder)
    assert_same_weights(loaded, random_model())


# -- the Hugging Face hub cache: snapshots/<revision>/ holds links into the model's blobs/ ------
def hub_snapshot(cache, model, sharded=True, repo="models--toykv--tiny"):
    """A hub-cache layout as huggingface_hub writes it: every file of the snapshot is a
    relative symlink to a blob named by its hash. Returns the snapshot folder."""
    tree = cache / repo
    (tree / "blobs").mkdir(parents=True)
    snapshot = tree / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    files = {"config.json": json.dumps(hf_config(model.config)).encode()}
    tensors = hf_tensors(model)
    names = sorted(tensors)
    parts = ({"model-00001-of-00002.safetensors": names[::2],
              "model-00002-of-00002.safetensors": names[1::2]} if sharded
             else {"model.safetensors": names})
    for file, part in parts.items():
        save_file({n: tensors[n] for n in part}, tree / "scratch")
        files[file] = (tree / "scratch").read_bytes()
    if sharded:
        files["model.safetensors.index.json"] = json.dumps(
            {"weight_map": {n: f for f, part in parts.items() for n in part}}).encode()
    (tree / "scratch").unlink()
    for i, (name, data) in enumerate(files.items()):
        (tree / "blobs" / f"blob{i:04d}").write_bytes(data)
        (snapshot / name).symlink_to(Path("..") / ".." / "blobs" / f"blob{i:04d}")
    return snapshot


@pytest.mark.parametrize("sharded", [True, False])
def test_a_hub_cache_snapshot_loads(tmp_path, sharded):
    model = random_model()
    snapshot = hub_snapshot(tmp_path / "hub", model, sharded)
    assert all(f.is_symlink() for f in snapshot.iterdir())
    loaded, _ = load_hf(snapshot)
    assert_same_weights(loaded, model)


@pytest.mark.parametrize("target", ["outside", "other model", "other cache"])
def test_a_hub_link_out_of_the_model_s_tree_is_refused(tmp_path, target):
    snapshot = hub_snapshot(tmp_path / "hub", random_model())
    shard = snapshot / "model-00002-of-00002.safetensors"
    data = shard.read_bytes()
    place = {"outside": tmp_path / "elsewhere",
             "other model": tmp_path / "hub" / "models--toykv--other" / "blobs",
             "other cache": tmp_path / "hub2" / "models--toykv--tiny" / "blobs"}[target]
    place.mkdir(parents=True)
    (place / "blob").write_bytes(data)
    shard.unlink()
    shard.symlink_to(place / "blob")
    with pytest.raises(ValueError, match="'model-00002-of-00002.safetensors'.*inside the model"):
        load_hf(snapshot)


def test_only_a_real_hub_layout_widens_the_tree(tmp_path):
    """A folder under a 'snapshots' folder of anything but models--*/ gets no wider tree."""
    snapshot = hub_snapshot(tmp_path / "hub", random_model(), repo="datasets--toykv--tiny")
    with pytest.raises(ValueError, match="inside the model directory"):
        load_hf(snapshot)


def test_a_single_file_linked_out_of_a_plain_folder_is_refused(tmp_path):
    folder = write_checkpoint(tmp_path / "model", random_model())
    (folder / "model.safetensors").rename(tmp_path / "weights.safetensors")
    (folder / "model.safetensors").symlink_to(tmp_path / "weights.safetensors")
    with pytest.raises(ValueError, match="links to .*weights.safetensors, outside the model"):
        load_hf(folder)


@pytest.mark.parametrize("kwargs, message", [
    ({"max_seq_len": 0}, "max_seq_len"), ({"max_seq_len": 64.0}, "max_seq_len"),
    ({"max_seq_len": "64"}, "max_seq_len"), ({"exact": "False"}, "exact"),
    ({"exact": None}, "exact"), ({"directory": 3}, "directory must be a path"),
])
def test_bad_arguments_are_refused_before_any_file_is_read(tmp_path, monkeypatch, kwargs,
                                                           message):
    from toykv import loaders

    def no_reading(*args, **kw):
        raise AssertionError("a file was read before the arguments were checked")

    folder = write_checkpoint(tmp_path, random_model())
    for name in ("_read_config", "load_tokenizer", "tensor_table", "read_tensor"):
        monkeypatch.setattr(loaders, name, no_reading)
    kwargs = {"directory": folder, **kwargs}
    with pytest.raises(ValueError, match=message):
        load_hf(kwargs.pop("directory"), **kwargs)


def test_a_too_long_context_is_refused_before_any_tensor_is_read(tmp_path, monkeypatch):
    from toykv import loaders

    def no_reading(*args, **kw):
        raise AssertionError("a tensor was read before max_seq_len was checked")

    monkeypatch.setattr(loaders, "read_tensor", no_reading)
    with pytest.raises(ValueError, match="max_seq_len"):
        load_hf(write_checkpoint(tmp_path, random_model()), max_seq_len=TINY["max_seq_len"] + 1)


@pytest.mark.parametrize("index", ['{"weight_map": [1, 2]}', '{"weight_map": {"a": 3}}',
                                   '{"metadata": {}}', '[' * 100_000])
def test_bad_index_file(tmp_path, index):
    folder, _, _ = sharded(tmp_path, ["a.safetensors"])
    (folder / "model.safetensors.index.json").write_text(index)
    with pytest.raises(ValueError, match="model.safetensors.index.json"):
        load_hf(folder)


@pytest.mark.parametrize("text, message", [
    ("[" * 100_000 + "]" * 100_000, "too deeply"),
    ('{"a": ' * 100_000 + "1" + "}" * 100_000, "too deeply"),
    ("[1, 2]", "JSON object"),
    ("", "not valid JSON"),
])
def test_unreadable_config_json(tmp_path, text, message):
    write_checkpoint(tmp_path, random_model())
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ValueError, match=f"config.json.*{message}"):
        load_hf(tmp_path)


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


# -- against Hugging Face transformers (reference outputs from tests/make_references.py) --------
TINY_DIR = DATA / "hf_tiny"


@pytest.fixture(scope="module")
def hf_tiny():
    """transformers' logits and greedy tokens for the tiny checkpoints it saved in tests/data."""
    with np.load(DATA / "references" / "hf_tiny.npz") as refs:
        return {key: refs[key] for key in refs.files}


def assert_close_logits(ours, theirs):
    """Equal up to float32 rounding: within 1e-5 of the logits' own scale."""
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= 1e-5 * np.abs(theirs).max()


def test_references_record_their_versions(hf_tiny):
    versions = json.loads(str(hf_tiny["versions"]))
    assert versions["transformers"] and versions["torch"] and versions["written_by"]


@pytest.mark.parametrize("name, tie, theta", [
    ("llama_untied", False, 10000.0), ("llama_tied_theta1e6", True, 1e6),
    ("llama_bf16_sharded", True, 500.0)])
def test_llama_checkpoints_match_transformers(hf_tiny, name, tie, theta):
    ours, _ = load_hf(TINY_DIR / name)
    assert ours.config.rope_theta == theta and ours.config.tie_embeddings == tie
    sequence, prompt = hf_tiny["sequence"], list(hf_tiny["prompt"])
    assert_close_logits(ours(sequence), hf_tiny[f"{name}/logits"])
    expected = hf_tiny[f"{name}/greedy"].tolist()
    assert len(expected) == 16 and expected == hf_tiny[f"{name}/greedy_no_cache"].tolist()
    assert generate(ours, prompt, 16, use_cache=True) == expected
    assert generate(ours, prompt, 16, use_cache=False) == expected


def test_sharded_bf16_checkpoint_as_transformers_wrote_it(hf_tiny):
    folder = TINY_DIR / "llama_bf16_sharded"
    assert not (folder / "model.safetensors").exists()
    assert len(weight_files(folder)) > 1
    ours, _ = load_hf(folder)                                          # bf16 widened exactly:
    assert np.array_equal(ours.embed.view(np.uint32) & np.uint32(0xFFFF), np.zeros_like(
        ours.embed, np.uint32))                                        # low 16 bits all zero


def test_mistral_sliding_window_matches_transformers(hf_tiny):
    ours, _ = load_hf(TINY_DIR / "mistral_window8")
    assert ours.config.sliding_window == 8
    expected = hf_tiny["mistral_window8/logits"]                       # 24 tokens > window of 8
    sequence, prompt = hf_tiny["sequence"], list(hf_tiny["prompt"])
    assert_close_logits(ours(sequence), expected)
    weights = {"embed": ours.embed, "layers": ours.layers, "final_norm": ours.final_norm,
               "lm_head": ours.lm_head}
    unwindowed = ToyTransformer(dataclasses.replace(ours.config, sliding_window=None),
                                weights=weights)
    gap = np.abs(unwindowed(sequence) - expected)
    assert gap[:8].max() <= 1e-5 * np.abs(expected).max()           # inside the window: same
    assert gap[8:].max() > 1e-2                                      # past it: HF did slide
    tokens = hf_tiny["mistral_window8/greedy"].tolist()
    assert generate(ours, prompt, 16, use_cache=True) == tokens      # ring buffer of 8 slots
    assert generate(ours, prompt, 16, use_cache=False) == tokens


def test_references_fail_when_toykv_drifts(hf_tiny):
    """The comparison can fail: a RoPE base off by 1% moves the logits far past the tolerance."""
    ours, _ = load_hf(TINY_DIR / "llama_untied")
    weights = {"embed": ours.embed, "layers": ours.layers, "final_norm": ours.final_norm,
               "lm_head": ours.lm_head}
    drifted = ToyTransformer(dataclasses.replace(ours.config, rope_theta=10100.0), weights=weights)
    with pytest.raises(AssertionError):
        assert_close_logits(drifted(hf_tiny["sequence"]), hf_tiny["llama_untied/logits"])


def test_tokenizer_config_gives_the_chat_template_and_stop_id(tmp_path):
    write_checkpoint(tmp_path, random_model(vocab_size=320))
    byte_level_bpe().save(str(tmp_path / "tokenizer.json"))
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}{{ eos_token }}{% endfor %}"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": template, "eos_token": {"content": "<s>", "special": True}}))
    _, tokenizer = load_hf(tmp_path)
    assert tokenizer.stop_ids == (0,)                                 # "<s>" is the only special
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]) == "[user] hi<s>"
    (tmp_path / "tokenizer_config.json").write_text("[1]")
    with pytest.raises(ValueError, match="tokenizer_config.json must hold a JSON object"):
        load_hf(tmp_path)


def test_chat_template_jinja_is_the_folder_s_template(tmp_path):
    """transformers' current format: chat_template.jinja beside tokenizer_config.json, which
    it overrides (the model's own template and system prompt would otherwise be lost)."""
    write_checkpoint(tmp_path, random_model(vocab_size=320))
    byte_level_bpe().save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": "old: {{ messages[0]['content'] }}", "eos_token": "<s>"}))
    (tmp_path / "chat_template.jinja").write_text(
        "{% if messages[0]['role'] != 'system' %}[system] You are SmolLM.\n{% endif %}"
        "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}")
    _, tokenizer = load_hf(tmp_path)
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}]) == \
        "[system] You are SmolLM.\n[user] hi\n"
    assert tokenizer.stop_ids == (0,)


def test_named_pipes_in_a_model_folder_never_block(tmp_path):
    import os
    import threading

    folder = write_checkpoint(tmp_path, random_model())
    for name in ("tokenizer.json", "chat_template.jinja", "tokenizer_config.json"):
        os.mkfifo(folder / name)                          # opening one would wait forever
    outcome = []
    worker = threading.Thread(target=lambda: outcome.append(load_hf(folder)), daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "load_hf blocked on a named pipe"
    assert outcome[0][1] is None                          # no readable tokenizer: none
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_hf(folder)
