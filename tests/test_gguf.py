"""toykv.load_gguf on small GGUF files written here with the gguf package's writer.

A toykv model is written the way llama.cpp's converter writes a Llama (Q and K rows permuted,
[out, in] matrices, GGUF metadata, a byte-level BPE tokenizer); load_gguf must give back a model
that computes the same logits, and refuse every bad file with a ValueError naming the fault.
"""
import dataclasses
import json
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from toykv import ModelConfig, ToyTransformer, load_gguf
from toykv.gguf_loader import unpermute_rows

Q = gguf.GGMLQuantizationType
TINY = dict(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128, max_seq_len=96,
            rope_theta=5000.0, norm_eps=1e-5)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
            "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
            "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.fixture(scope="module")
def bpe():
    """A small byte-level BPE (tokenizers' trainer): its tokenizer, tokens in id order, merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(["the cache keeps keys and values", "each decode step reads "
                                   "the whole cache", "prefill fills the cache once"] * 5, trainer)
    model = json.loads(tokenizer.to_str())["model"]
    tokens = sorted(model["vocab"], key=model["vocab"].get)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tokenizer, tokens, merges


def llama_cpp_permute(w, n_heads):
    """llama.cpp's convert_hf_to_gguf.py permute: per head, interleave the two RoPE halves."""
    return (w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def random_model(vocab_size, tie=True, seed=0):
    model = ToyTransformer(ModelConfig(vocab_size=vocab_size, tie_embeddings=tie, **TINY),
                           seed=seed)
    rng = np.random.default_rng(seed + 1)
    for layer in model.layers:                 # norms that are not all ones, so a swap shows
        for key in ("attn_norm", "mlp_norm"):
            layer[key] = (1 + 0.2 * rng.standard_normal(model.config.d_model)).astype(np.float32)
    return model


def gguf_tensors(model) -> dict:
    """GGUF name -> float32 array as llama.cpp stores it ([out, in], Q/K rows permuted)."""
    c = model.config
    out = {"token_embd.weight": model.embed, "output_norm.weight": model.final_norm}
    names = {"wq": "attn_q", "wk": "attn_k", "wv": "attn_v", "wo": "attn_output",
             "w_gate": "ffn_gate", "w_up": "ffn_up", "w_down": "ffn_down"}
    for i, layer in enumerate(model.layers):
        out[f"blk.{i}.attn_norm.weight"] = layer["attn_norm"]
        out[f"blk.{i}.ffn_norm.weight"] = layer["mlp_norm"]
        for key, name in names.items():
            w = np.ascontiguousarray(layer[key].T)                      # [out, in]
            if key in ("wq", "wk"):
                w = llama_cpp_permute(w, c.n_heads if key == "wq" else c.n_kv_heads)
            out[f"blk.{i}.{name}.weight"] = w
    if model.lm_head is not None:
        out["output.weight"] = np.ascontiguousarray(model.lm_head.T)
    return out


def metadata(model, bpe, arch="llama") -> dict:
    """GGUF key -> (value, GGUF value type) for a Llama and its tokenizer."""
    c, (_, tokens, merges) = model.config, bpe
    V, S, A = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.STRING, gguf.GGUFValueType.ARRAY
    F = gguf.GGUFValueType.FLOAT32
    types = [3 if t in SPECIALS else 1 for t in tokens]
    return {
        f"{arch}.block_count": (c.n_layers, V), f"{arch}.context_length": (c.max_seq_len, V),
        f"{arch}.embedding_length": (c.d_model, V), f"{arch}.feed_forward_length": (c.d_ff, V),
        f"{arch}.attention.head_count": (c.n_heads, V),
        f"{arch}.attention.head_count_kv": (c.n_kv_heads, V),
        f"{arch}.rope.freq_base": (c.rope_theta, F), f"{arch}.rope.dimension_count": (c.head_dim, V),
        f"{arch}.attention.layer_norm_rms_epsilon": (c.norm_eps, F),
        f"{arch}.vocab_size": (c.vocab_size, V),
        "tokenizer.ggml.model": ("gpt2", S), "tokenizer.ggml.pre": ("smollm", S),
        "tokenizer.ggml.tokens": (tokens, A), "tokenizer.ggml.merges": (merges, A),
        "tokenizer.ggml.token_type": (types, A),
        "tokenizer.ggml.bos_token_id": (tokens.index("<|im_start|>"), V),
        "tokenizer.ggml.eos_token_id": (tokens.index("<|im_end|>"), V),
        "tokenizer.chat_template": (TEMPLATE, S),
    }


def write_gguf(path, model, bpe, arch="llama", meta_changes=None, tensors=None, types=None):
    """A GGUF file; meta_changes: key -> (value, type) or None to leave the key out;
    types: tensor name -> GGML type to quantize it to (default F32)."""
    meta = {**metadata(model, bpe, arch), **(meta_changes or {})}
    writer = gguf.GGUFWriter(str(path), arch)
    for key, item in meta.items():
        if item is not None:
            value, vtype = item
            sub = None
            if vtype == gguf.GGUFValueType.ARRAY:
                sub = gguf.GGUFValueType.STRING if isinstance(value[0], str) else \
                    gguf.GGUFValueType.INT32
            writer.add_key_value(key, value, vtype, sub)
    for name, array in (gguf_tensors(model) if tensors is None else tensors).items():
        kind = (types or {}).get(name, Q.F32)
        if kind in (Q.F32, Q.I8, Q.I32):
            writer.add_tensor(name, array.astype({Q.F32: np.float32, Q.I8: np.int8,
                                                  Q.I32: np.int32}[kind]))
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def tiny(bpe, tmp_path_factory):
    """(model, GGUF path) of a tied float32 model."""
    model = random_model(len(bpe[1]))
    return model, write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", model, bpe)


# -- what loads ---------------------------------------------------------------------------
def test_round_trip_gives_the_same_model(tiny):
    original, path = tiny
    loaded, _ = load_gguf(path)
    stored_eps = float(np.float32(original.config.norm_eps))        # GGUF keeps it as float32
    assert loaded.config == dataclasses.replace(original.config, norm_eps=stored_eps)
    assert loaded.lm_head is None and np.array_equal(loaded.embed, original.embed)
    for ours, theirs in zip(loaded.layers, original.layers, strict=True):
        assert ours.keys() == theirs.keys()
        for key in ours:
            assert ours[key].dtype == np.float32 and np.array_equal(ours[key], theirs[key]), key
    ids = [3, 17, 42, 99, 5, 0, 127, 250]
    assert np.allclose(loaded(ids), original(ids), rtol=0, atol=1e-5)


def test_without_undoing_the_permutation_rope_pairs_the_wrong_values(tiny, monkeypatch):
    """The un-permutation matters: skipping it changes the logits (RoPE rotates other pairs)."""
    original, path = tiny
    monkeypatch.setattr("toykv.gguf_loader.unpermute_rows", lambda w, n: w)
    skipped, _ = load_gguf(path)
    ids = [3, 17, 42, 99, 5, 0, 127, 250]
    assert np.abs(skipped(ids) - original(ids)).max() > 1e-2


def test_unpermute_inverts_llama_cpp_permute():
    w = np.arange(6 * 8 * 5, dtype=np.float32).reshape(48, 5)          # 6 heads of 8 rows
    assert np.array_equal(unpermute_rows(llama_cpp_permute(w, 6), 6), w)
    head = llama_cpp_permute(np.arange(8.0)[:, None], 1)[:, 0]
    assert head.tolist() == [0, 4, 1, 5, 2, 6, 3, 7]                  # pairs (i, i + d/2)


def test_untied_model_and_options(bpe, tmp_path):
    original = random_model(len(bpe[1]), tie=False, seed=3)
    path = write_gguf(tmp_path / "untied.gguf", original, bpe)
    loaded, _ = load_gguf(path, max_seq_len=32, exact=True)
    assert not loaded.config.tie_embeddings and np.array_equal(loaded.lm_head, original.lm_head)
    assert loaded.config.max_seq_len == 32 and loaded.exact and loaded.cos.shape[0] == 32
    for bad in (0, 97, 8.0, True):
        with pytest.raises(ValueError, match="max_seq_len"):
            load_gguf(path, max_seq_len=bad)


@pytest.mark.parametrize("kind, rows_error", [(Q.Q8_0, 1 / 127), (Q.Q4_1, 1 / 15),
                                              (Q.F16, 1e-3), (Q.BF16, 1e-2)])
def test_quantized_tensors_are_dequantized(bpe, tmp_path, kind, rows_error):
    """Each block's error stays within its quantization step (max |w| / levels)."""
    original = random_model(len(bpe[1]), seed=4)
    names = [n for n in gguf_tensors(original) if n.endswith(("attn_q.weight", "ffn_down.weight"))]
    path = write_gguf(tmp_path / "q.gguf", original, bpe, types={n: kind for n in names})
    loaded, _ = load_gguf(path)
    for i in range(2):
        for key in ("wq", "w_down"):
            ours, theirs = loaded.layers[i][key], original.layers[i][key]   # [in, out]
            assert ours.dtype == np.float32 and ours.shape == theirs.shape
            step = np.abs(theirs).max(axis=0) * rows_error                 # per output row
            assert (np.abs(ours - theirs) <= step * 1.01 + 1e-7).all(), key
            assert not np.array_equal(ours, theirs)                        # it was quantized


# -- the tokenizer from the metadata ------------------------------------------------------
TEXTS = ["the cache keeps keys", "unseen words: naïve KV €5! 東京 🙂", "  two  spaces\n\ttab",
         "<|im_start|>user\nhi<|im_end|>\n", ""]


def test_tokenizer_equals_the_bpe_it_came_from(tiny, bpe):
    trained = bpe[0]
    _, tokenizer = load_gguf(tiny[1])
    assert tokenizer.vocab_size == len(bpe[1])
    for text in TEXTS:
        assert tokenizer.encode(text) == trained.encode(text).ids, text
        assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=False) == text
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n")
    assert ids[0] == bpe[1].index("<|im_start|>") and bpe[1].index("<|im_end|>") in ids
    assert tokenizer.decode(ids) == "user\nhi\n"                         # specials skipped
    with pytest.raises(ValueError, match="outside"):
        tokenizer.decode([len(bpe[1])])
    with pytest.raises(ValueError, match="str"):
        tokenizer.encode(b"bytes")


def test_chat_template_and_stop_ids(tiny, bpe):
    _, tokenizer = load_gguf(tiny[1])
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    text = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
    assert tokenizer.apply_chat_template(messages) == text + "<|im_start|>assistant\n"
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=False) == text
    assert tokenizer.encode_chat(messages) == tokenizer.encode(text + "<|im_start|>assistant\n")
    assert set(tokenizer.stop_ids) == {bpe[1].index("<|im_end|>"), bpe[1].index("<|endoftext|>")}
    for bad in ("Hi", [{"role": "robot", "content": "x"}], [{"role": "user"}],
                [{"role": "user", "content": 3}], []):
        with pytest.raises(ValueError, match="messages"):
            tokenizer.apply_chat_template(bad)


def test_chatml_without_a_template(bpe, tmp_path):
    model = random_model(len(bpe[1]))
    path = write_gguf(tmp_path / "t.gguf", model, bpe, meta_changes={"tokenizer.chat_template": None})
    _, tokenizer = load_gguf(path)
    assert tokenizer.chat_template is None
    assert tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}]) == \
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"


# -- bad files: a ValueError that names the fault, and no model ---------------------------
def test_missing_path_and_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_gguf(tmp_path / "nowhere.gguf")
    with pytest.raises(IsADirectoryError, match="load_hf"):
        load_gguf(tmp_path)


def test_not_a_gguf(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04 a zip file, not a GGUF")
    with pytest.raises(ValueError, match="not a GGUF file.*b'PK"):
        load_gguf(tmp_path / "x.gguf")
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match="not a GGUF file"):
        load_gguf(tmp_path / "empty.gguf")


@pytest.mark.parametrize("keep", [0.999, 0.9, 0.5, 0.02, 200])
def test_truncated_file(tiny, tmp_path, keep):
    data = tiny[1].read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:keep if isinstance(keep, int) else int(len(data) * keep)])
    with pytest.raises(ValueError, match="truncated or corrupted"):
        load_gguf(cut)


@pytest.mark.parametrize("offset, value", [(4, b"\xff\xff\xff\xff"),            # version
                                           (8, b"\xff" * 8), (16, b"\xff" * 8),   # counts
                                           (24, b"\xff" * 8), (40, b"\x7f" * 8)])
def test_corrupted_header(tiny, tmp_path, offset, value):
    data = bytearray(tiny[1].read_bytes())
    data[offset:offset + len(value)] = value
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="GGUF"):
        load_gguf(bad)


@pytest.mark.parametrize("arch", ["gpt2", "qwen2", "mamba"])
def test_unsupported_architecture(bpe, tmp_path, arch):
    path = write_gguf(tmp_path / "a.gguf", random_model(len(bpe[1])), bpe, arch=arch)
    with pytest.raises(ValueError, match=f"'general.architecture' is '{arch}'"):
        load_gguf(path)


@pytest.mark.parametrize("kind", [Q.I8, Q.I32])
def test_unsupported_tensor_type(bpe, tmp_path, kind):
    model = random_model(len(bpe[1]))
    path = write_gguf(tmp_path / "t.gguf", model, bpe, types={"blk.1.attn_k.weight": kind})
    with pytest.raises(ValueError, match=f"'blk.1.attn_k.weight' has type {kind.name}"):
        load_gguf(path)


@pytest.mark.parametrize("key, message", [
    ("tokenizer.ggml.tokens", "'tokenizer.ggml.tokens' must be a non-empty list"),
    ("tokenizer.ggml.merges", "'tokenizer.ggml.merges' must be a non-empty list"),
    ("tokenizer.ggml.model", "has no tokenizer.*'tokenizer.ggml.model' is missing"),
])
def test_missing_tokenizer_metadata(bpe, tmp_path, key, message):
    path = write_gguf(tmp_path / "t.gguf", random_model(len(bpe[1])), bpe, meta_changes={key: None})
    with pytest.raises(ValueError, match=message):
        load_gguf(path)


S = gguf.GGUFValueType.STRING
U = gguf.GGUFValueType.UINT32


@pytest.mark.parametrize("changes, message", [
    ({"tokenizer.ggml.model": ("llama", S)}, "'tokenizer.ggml.model' is 'llama'"),
    ({"tokenizer.ggml.pre": ("qwen2", S)}, "'tokenizer.ggml.pre' is 'qwen2'"),
    ({"tokenizer.ggml.merges": (["a b c"], gguf.GGUFValueType.ARRAY)}, "'a b c'"),
    ({"llama.vocab_size": (400, U)}, "'tokenizer.ggml.tokens' has 3.. tokens.*vocab_size is 400"),
    ({"llama.attention.head_count": None}, "'num_attention_heads'.*'llama.attention.head_count'"
                                           "|missing the required field 'num_attention_heads'"),
    ({"llama.attention.head_count_kv": (3, U)}, "multiple of 'num_key_value_heads' \\(3\\).*"
                                                "'llama.attention.head_count_kv'"),
    ({"llama.rope.freq_base": ("big", S)}, "'rope_theta' must be a number.*llama.rope.freq_base"),
    ({"llama.embedding_length": None}, "'hidden_size'"),
    ({"llama.rope.dimension_count": (8, U)}, "'llama.rope.dimension_count' is 8.*16"),
    ({"llama.rope.scaling.type": ("yarn", S)}, "rope_type 'yarn'"),
    ({"llama.expert_count": (8, U)}, "'llama.expert_count' is 8.*mixture of experts"),
])
def test_bad_metadata_is_named(bpe, tmp_path, changes, message):
    path = write_gguf(tmp_path / "m.gguf", random_model(len(bpe[1])), bpe, meta_changes=changes)
    with pytest.raises(ValueError, match=message):
        load_gguf(path)


def test_bad_tensors_are_named(bpe, tmp_path):
    model = random_model(len(bpe[1]))
    tensors = gguf_tensors(model)
    name = "blk.1.ffn_up.weight"

    def fails_with(message, changed):
        path = write_gguf(tmp_path / "b.gguf", model, bpe, tensors=changed)
        with pytest.raises(ValueError, match=message):
            load_gguf(path)

    fails_with(f"missing 1 tensor.*'{name}'", {k: v for k, v in tensors.items() if k != name})
    fails_with("'blk.0.attn_q.bias'", {**tensors, "blk.0.attn_q.bias": np.zeros(64, np.float32)})
    fails_with(rf"'{name}' has shape \[64, 128\], expected \[128, 64\]",
               {**tensors, name: np.ascontiguousarray(tensors[name].T)})
    for value in (np.nan, np.inf):
        broken = tensors[name].copy()
        broken[7, 3] = value
        fails_with(rf"'{name}' has 1 NaN or infinite", {**tensors, name: broken})


# -- files that lie: the header must match the file, the tensors must not overlap ----------
def patched(tiny, tmp_path, change) -> Path:
    """A copy of the tiny GGUF with change(reader) applied to its header in place."""
    copy = tmp_path / "patched.gguf"
    copy.write_bytes(tiny[1].read_bytes())
    reader = gguf.GGUFReader(copy, mode="r+")
    change(reader)
    reader.data.flush()
    del reader
    return copy


def tensor(reader, name):
    return next(t for t in reader.tensors if t.name == name)


def set_offset(reader, name, offset):
    tensor(reader, name).field.parts[5][0] = offset          # the tensor's data offset


def offset_of(reader, name):
    return int(tensor(reader, name).field.parts[5][0])


@pytest.mark.parametrize("how", ["same data", "swapped", "gap", "overlap by 4 bytes"])
def test_tensors_whose_data_overlap_or_leave_gaps_are_refused(tiny, tmp_path, how):
    gate, up = "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"

    def change(reader):
        g, u = offset_of(reader, gate), offset_of(reader, up)
        if how == "same data":                               # W_up would come out as W_gate
            set_offset(reader, up, g)
        elif how == "swapped":
            set_offset(reader, gate, u), set_offset(reader, up, g)
        elif how == "gap":
            set_offset(reader, up, u + 32)
        else:
            set_offset(reader, up, u - 4)

    bad = patched(tiny, tmp_path, change)
    with pytest.raises(ValueError, match=r"tensor 'blk.0.ffn_(gate|up).weight' starts at byte "
                                         r"[\d,]+ of the data, expected [\d,]+: .*llama.cpp"):
        load_gguf(bad)


def test_the_writer_s_layout_is_accepted(tiny):
    reader = gguf.GGUFReader(tiny[1])
    ends = [int(t.data_offset) + int(t.n_bytes) for t in reader.tensors]
    starts = [int(t.data_offset) for t in reader.tensors]
    assert all(0 <= s - e < reader.alignment for e, s in zip(ends, starts[1:]))   # contiguous
    load_gguf(tiny[1])


def test_corrupted_tensor_dims_that_wrap_are_refused(tiny, tmp_path):
    def change(reader):
        dims = tensor(reader, "blk.0.ffn_norm.weight").field.parts[3]
        dims[0] = 2**62                                     # x 4 bytes wraps int64 to 0

    with pytest.raises(ValueError, match="past the end of the file|starts at byte"):
        load_gguf(patched(tiny, tmp_path, change))


@pytest.mark.parametrize("key, length", [
    ("tokenizer.ggml.tokens", 2**40), ("tokenizer.ggml.token_type", 2**40),  # past the file
    ("tokenizer.ggml.token_type", 2**62), ("tokenizer.ggml.merges", 2**63 + 5),
    ("tokenizer.ggml.token_type", 10**7),                # finite: unbounded, ~30 s of loop
    ("tokenizer.ggml.tokens", None),                     # a little longer: reads garbage
])
def test_a_corrupted_array_length_never_reads_past_the_file(tiny, tmp_path, key, length):
    def change(reader):
        alen = reader.fields[key].parts[4]
        alen[0] = length if length is not None else alen[0] + 7

    bad = patched(tiny, tmp_path, change)
    start = time.perf_counter()
    with pytest.raises(ValueError, match="past the end of the file|bytes left in the file"):
        load_gguf(bad)
    assert time.perf_counter() - start < 30                 # bounded by the file, not 2**40


@pytest.mark.parametrize("offset, value", [(16, (2**40).to_bytes(8, "little")),   # kv count
                                           (8, (2**40).to_bytes(8, "little"))])   # tensors
def test_corrupted_counts_are_bounded_by_the_file(tiny, tmp_path, offset, value):
    data = bytearray(tiny[1].read_bytes())
    data[offset:offset + 8] = value
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="claims 1,099,511,627,776 .*bytes left"):
        load_gguf(bad)


def test_a_duplicate_token_is_refused(bpe, tmp_path):
    tokens = list(bpe[1])
    tokens[-1] = tokens[-2]
    path = write_gguf(tmp_path / "d.gguf", random_model(len(tokens)), bpe,
                      meta_changes={"tokenizer.ggml.tokens": (tokens, gguf.GGUFValueType.ARRAY)})
    with pytest.raises(ValueError, match="'tokenizer.ggml.tokens' holds the same token twice"):
        load_gguf(path)


def test_a_named_pipe_is_refused_without_waiting(tmp_path):
    import os
    import threading

    pipe = tmp_path / "model.gguf"
    os.mkfifo(pipe)
    outcome = []

    def load():                                          # a blocked open would hang here
        try:
            load_gguf(pipe)
        except Exception as err:                         # noqa: BLE001 (the outcome is checked)
            outcome.append(err)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "load_gguf blocked on a named pipe"
    assert isinstance(outcome[0], ValueError) and "not a regular file" in str(outcome[0])


@pytest.mark.parametrize("kwargs, message", [
    ({"max_seq_len": 0}, "max_seq_len"), ({"max_seq_len": 32.0}, "max_seq_len"),
    ({"max_seq_len": "32"}, "max_seq_len"), ({"exact": "yes"}, "exact"),
    ({"exact": 1}, "exact"), ({"path": 42}, "path must be a path"),
])
def test_bad_arguments_are_refused_before_the_file_is_read(tiny, monkeypatch, kwargs, message):
    from toykv import gguf_loader

    def no_reading(*args, **kw):
        raise AssertionError("the file was read before the arguments were checked")

    monkeypatch.setattr(gguf_loader, "_bounded_reader", no_reading)
    kwargs = {"path": tiny[1], **kwargs}
    with pytest.raises(ValueError, match=message):
        load_gguf(kwargs.pop("path"), **kwargs)


def test_a_too_long_context_is_refused_before_any_tensor_is_dequantized(tiny, monkeypatch):
    from toykv import gguf_loader

    def no_dequantizing(*args, **kw):
        raise AssertionError("a tensor was dequantized before max_seq_len was checked")

    monkeypatch.setattr(gguf_loader, "dequantized", no_dequantizing)
    with pytest.raises(ValueError, match="max_seq_len"):
        load_gguf(tiny[1], max_seq_len=tiny[0].config.max_seq_len + 1)


@pytest.mark.parametrize("which", [0, -1])
def test_a_string_that_claims_more_than_the_file_is_refused(tiny, tmp_path, which):
    """The first or last token's byte length set past the end of the file: refused by name,
    as gguf's own reader would otherwise slice what is left (the string-array fast path)."""
    def change(reader):
        parts = reader.fields["tokenizer.ggml.tokens"].parts
        parts[5 if which == 0 else len(parts) - 2][0] = 2**40      # [5]: the first length

    with pytest.raises(ValueError, match="past the end of the file"):
        load_gguf(patched(tiny, tmp_path, change))


def test_string_arrays_read_as_gguf_reads_them(tiny):
    """The fast path's fields equal gguf's own GGUFReader's, part for part."""
    from gguf import GGUFReader
    from toykv.gguf_loader import _bounded_reader
    ours, theirs = _bounded_reader(tiny[1]).fields, GGUFReader(tiny[1]).fields
    assert list(ours) == list(theirs)
    for key, field in theirs.items():
        assert ours[key].data == field.data and ours[key].types == field.types, key
        assert len(ours[key].parts) == len(field.parts), key
        assert all(np.array_equal(a, b) for a, b in zip(ours[key].parts, field.parts)), key
