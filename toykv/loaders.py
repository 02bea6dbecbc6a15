"""load_hf: a Hugging Face Llama-family checkpoint (config.json + safetensors) in a ToyTransformer.

Only architectures whose forward pass is exactly what ToyTransformer computes are accepted:
RMSNorm, rotate-half RoPE without scaling, SwiGLU, no biases. Everything is checked (config,
tensor names, shapes, dtypes) before the model is built, so a bad checkpoint never half-loads.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from .config import ModelConfig
from .model import ToyTransformer

SUPPORTED_MODEL_TYPES = ("llama", "mistral")
UNSUPPORTED_WHY = {      # model_type -> what its forward pass adds that ToyTransformer lacks
    "qwen2": "adds biases to the q/k/v projections",
    "qwen3": "normalises queries and keys per head (q_norm, k_norm)",
    "gemma": "scales the embeddings, uses GELU and (1 + w) RMSNorm weights",
    "phi3": "fuses q/k/v and gate/up into single projections",
}
FLOAT_DTYPES = ("F32", "F16", "BF16", "F64")
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)      # buffers old checkpoints saved; recomputed here

# toykv layer key -> Hugging Face name inside model.layers.{i}.; projections are stored [out, in]
LAYER_TENSORS = {
    "attn_norm": "input_layernorm.weight",
    "wq": "self_attn.q_proj.weight",
    "wk": "self_attn.k_proj.weight",
    "wv": "self_attn.v_proj.weight",
    "wo": "self_attn.o_proj.weight",
    "mlp_norm": "post_attention_layernorm.weight",
    "w_gate": "mlp.gate_proj.weight",
    "w_up": "mlp.up_proj.weight",
    "w_down": "mlp.down_proj.weight",
}


def load_hf(directory, max_seq_len: int | None = None, exact: bool = False):
    """(model, tokenizer) from a Hugging Face model directory; no tokenizer.json gives None.

    max_seq_len: a context shorter than max_position_embeddings, to keep the RoPE tables and
    the cache (allocated for max_seq_len tokens) small. exact: passed to ToyTransformer.
    """
    path = _check_directory(directory)
    config = config_from_hf(_read_config(path), max_seq_len)
    tensors = tensor_table(weight_files(path))
    weights = _gather_weights(tensors, config)                # every array, before the model
    tokenizer = load_tokenizer(path, config.vocab_size)
    return ToyTransformer(config, exact=exact, weights=weights), tokenizer


# -- config -------------------------------------------------------------------------------
def config_from_hf(hf: dict, max_seq_len: int | None = None) -> ModelConfig:
    """A ModelConfig from a config.json dict; ValueError for anything ToyTransformer cannot run."""
    _check_forward_matches(hf)
    n_heads = _required(hf, "num_attention_heads")
    n_positions = _required(hf, "max_position_embeddings")
    if max_seq_len is not None and (isinstance(max_seq_len, bool) or not isinstance(
            max_seq_len, int) or not 0 < max_seq_len <= n_positions):
        raise ValueError(f"max_seq_len must be an integer in [1, max_position_embeddings="
                         f"{n_positions}], got {max_seq_len!r}")
    tie = _optional(hf, "tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise ValueError(f"tie_word_embeddings must be true or false, got {tie!r}")
    window = None                                    # Llama has no window; Mistral's default is
    if hf["model_type"] == "mistral":                # 4096 when the key is absent, none when null
        window = hf.get("sliding_window", 4096)
    try:
        return ModelConfig(
            vocab_size=_required(hf, "vocab_size"), d_model=_required(hf, "hidden_size"),
            n_layers=_required(hf, "num_hidden_layers"), n_heads=n_heads,
            n_kv_heads=_optional(hf, "num_key_value_heads", n_heads),
            head_dim=hf.get("head_dim"), d_ff=_required(hf, "intermediate_size"),
            rope_theta=float(_rope_theta(hf)), norm_eps=float(_optional(hf, "rms_norm_eps", 1e-6)),
            max_seq_len=max_seq_len or n_positions, sliding_window=window, tie_embeddings=tie)
    except (ValueError, TypeError) as err:
        raise ValueError(f"config.json describes a model toykv cannot build: {err}") from None


def _check_forward_matches(hf: dict):
    """Reject architectures and options whose forward pass differs from ToyTransformer's."""
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        why = UNSUPPORTED_WHY.get(model_type, "is not a Llama-style architecture toykv knows")
        raise ValueError(f"model_type {model_type!r} is not supported: it {why}; "
                         f"toykv loads {SUPPORTED_MODEL_TYPES}")
    if _optional(hf, "hidden_act", "silu") not in ("silu", "swish"):   # swish is silu
        raise ValueError(f"hidden_act must be 'silu' (SwiGLU), got {hf['hidden_act']!r}")
    for key in ("attention_bias", "mlp_bias"):
        if hf.get(key, False):
            raise ValueError(f"{key} is true: toykv's projections have no biases")
    for key in ("rope_scaling", "rope_parameters"):
        rope = hf.get(key) or {}
        if not isinstance(rope, dict):
            raise ValueError(f"{key} must be a JSON object or null, got {rope!r}")
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise ValueError(f"{key} has rope_type {kind!r}: toykv implements only plain RoPE "
                             f"('default', no scaling)")
        if rope.get("partial_rotary_factor", 1.0) != 1.0:
            raise ValueError(f"{key}.partial_rotary_factor must be 1.0 (RoPE on the whole head), "
                             f"got {rope['partial_rotary_factor']!r}")


def _rope_theta(hf: dict) -> float:
    """rope_theta from the top level (transformers 4) or rope_parameters (transformers 5)."""
    top, nested = hf.get("rope_theta"), (hf.get("rope_parameters") or {}).get("rope_theta")
    if top is not None and nested is not None and float(top) != float(nested):
        raise ValueError(f"config.json gives two rope_theta values: {top} and "
                         f"rope_parameters.rope_theta {nested}")
    theta = nested if nested is not None else top
    return 10000.0 if theta is None else theta        # transformers' default for both types


def _optional(hf: dict, key: str, default):
    """hf[key], or transformers' default for Llama and Mistral when it is missing or null."""
    return default if hf.get(key) is None else hf[key]


def _required(hf: dict, key: str):
    if hf.get(key) is None:
        raise ValueError(f"config.json has no {key!r}; it is needed to shape the model")
    return hf[key]


# -- files --------------------------------------------------------------------------------
def _check_directory(directory) -> Path:
    path = Path(directory)
    if not path.exists():
        raise FileNotFoundError(f"model directory {str(path)!r} does not exist")
    if not path.is_dir():
        raise NotADirectoryError(f"{str(path)!r} is a file; load_hf wants a model directory")
    return path


def _read_config(path: Path) -> dict:
    file = path / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"{str(path)!r} has no config.json")
    try:
        hf = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{file} is not valid JSON: {err}") from None
    if not isinstance(hf, dict):
        raise ValueError(f"{file} must hold a JSON object, got {type(hf).__name__}")
    return hf


def weight_files(path: Path) -> list[Path]:
    """model.safetensors, or the shards that model.safetensors.index.json lists."""
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file():
        return [single]
    if not index.is_file():
        raise FileNotFoundError(f"{str(path)!r} has no model.safetensors nor "
                                f"model.safetensors.index.json (toykv reads safetensors only)")
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{index} must be JSON with a 'weight_map' object ({err})") from None
    files = [path / name for name in sorted(set(weight_map.values()))]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"{index.name} lists shards missing from {str(path)!r}: {missing}")
    return files


def tensor_table(files: list[Path]) -> dict[str, tuple[Path, str, tuple]]:
    """name -> (file, dtype, shape) for every tensor in the files, read from headers only."""
    from safetensors import SafetensorError, safe_open

    table = {}
    for file in files:
        try:
            with safe_open(file, framework="np") as f:
                for name in f.keys():
                    if name in table:
                        raise ValueError(f"tensor {name!r} is in both {table[name][0].name} "
                                         f"and {file.name}")
                    info = f.get_slice(name)
                    table[name] = (file, info.get_dtype(), tuple(info.get_shape()))
        except SafetensorError as err:
            raise ValueError(f"{file} is not a readable safetensors file: {err}") from None
    return table


def read_tensor(file: Path, name: str, dtype: str) -> np.ndarray:
    """One tensor as float32. numpy has no bfloat16, so BF16 is widened by hand."""
    if dtype == "BF16":
        return _read_bf16(file, name)
    from safetensors import safe_open

    with safe_open(file, framework="np") as f:
        return f.get_tensor(name).astype(np.float32)


def _read_bf16(file: Path, name: str) -> np.ndarray:
    """bfloat16 is the top half of a float32: shift the 16 bits up and reinterpret."""
    with open(file, "rb") as f:
        header_len = struct.unpack("<Q", f.read(8))[0]     # 8-byte length, then JSON header
        info = json.loads(f.read(header_len))[name]
    start, end = info["data_offsets"]                     # relative to the end of the header
    raw = np.fromfile(file, dtype="<u2", count=(end - start) // 2, offset=8 + header_len + start)
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(info["shape"])


# -- weights ------------------------------------------------------------------------------
def expected_tensors(config: ModelConfig) -> dict[str, tuple]:
    """Hugging Face name -> shape as stored ([out, in] for projections)."""
    c = config
    D, q_out, kv_out = c.d_model, c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    layer_shapes = {"attn_norm": (D,), "mlp_norm": (D,), "wq": (q_out, D), "wk": (kv_out, D),
                    "wv": (kv_out, D), "wo": (D, q_out), "w_gate": (c.d_ff, D),
                    "w_up": (c.d_ff, D), "w_down": (D, c.d_ff)}
    shapes = {"model.embed_tokens.weight": (c.vocab_size, D), "model.norm.weight": (D,)}
    for i in range(c.n_layers):
        for key, hf_name in LAYER_TENSORS.items():
            shapes[f"model.layers.{i}.{hf_name}"] = layer_shapes[key]
    if not c.tie_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, D)
    return shapes


def _check_table(table: dict, config: ModelConfig):
    """Every expected tensor present, float, the right shape; nothing unknown left over."""
    expected = expected_tensors(config)
    missing = [name for name in expected if name not in table]
    if missing:
        raise ValueError(f"checkpoint is missing {len(missing)} tensor(s), first {missing[0]!r}")
    for name, shape in expected.items():
        _, dtype, got = table[name]
        if got != shape:
            raise ValueError(f"tensor {name!r} has shape {list(got)}, expected {list(shape)}")
        if dtype not in FLOAT_DTYPES:
            raise ValueError(f"tensor {name!r} has dtype {dtype}, expected one of {FLOAT_DTYPES}")
    ignorable = {"lm_head.weight"} if config.tie_embeddings else set()   # tied: HF ignores it
    extra = sorted(n for n in table if n not in expected and n not in ignorable
                   and not n.endswith(IGNORED_SUFFIXES))
    if extra:
        raise ValueError(f"checkpoint has {len(extra)} tensor(s) toykv has no place for, "
                         f"first {extra[0]!r} (a bias or norm this architecture lacks?)")


def _gather_weights(table: dict, config: ModelConfig) -> dict:
    """All of ToyTransformer's arrays as float32 [in, out]; raises before anything is built."""
    _check_table(table, config)

    def load(name, transpose=False):
        array = read_tensor(table[name][0], name, table[name][1])
        return np.ascontiguousarray(array.T if transpose else array)

    norms = ("attn_norm", "mlp_norm")                             # vectors; the rest are [out, in]
    layers = [{key: load(f"model.layers.{i}.{hf_name}", transpose=key not in norms)
               for key, hf_name in LAYER_TENSORS.items()} for i in range(config.n_layers)]
    return {"embed": load("model.embed_tokens.weight"), "layers": layers,
            "final_norm": load("model.norm.weight"),
            "lm_head": None if config.tie_embeddings else load("lm_head.weight", transpose=True)}


# -- tokenizer ----------------------------------------------------------------------------
class Tokenizer:
    """A thin wrapper over a `tokenizers.Tokenizer`: text -> ids and back."""

    def __init__(self, inner):
        self.inner = inner

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        return list(self.inner.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return self.inner.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    @property
    def vocab_size(self) -> int:
        return self.inner.get_vocab_size(with_added_tokens=True)


def load_tokenizer(path: Path, vocab_size: int | None = None) -> Tokenizer | None:
    """The directory's tokenizer.json as a Tokenizer, or None when it has none."""
    file = Path(path) / "tokenizer.json"
    if not file.is_file():
        return None
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise ImportError(f"{file} needs the tokenizers package (pip install tokenizers)") from None
    try:
        tokenizer = Tokenizer(HFTokenizer.from_file(str(file)))
    except Exception as err:                        # tokenizers raises a bare Exception
        raise ValueError(f"{file} is not a readable tokenizer.json: {err}") from None
    if vocab_size is not None and tokenizer.vocab_size > vocab_size:
        raise ValueError(f"tokenizer.json has {tokenizer.vocab_size} tokens but the model's "
                         f"vocab_size is {vocab_size}: ids would fall outside the embedding")
    return tokenizer


__all__ = ["load_hf", "config_from_hf", "load_tokenizer", "Tokenizer"]
