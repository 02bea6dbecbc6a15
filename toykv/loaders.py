"""load_hf: a Hugging Face Llama-family checkpoint (config.json + safetensors) in a ToyTransformer.

Only architectures whose forward pass is exactly what ToyTransformer computes are accepted
(toykv.hfconfig.config_from_hf says which). Everything is checked (config, tensor names, shapes,
dtypes, finite values) before the model is built, so a bad checkpoint never half-loads.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from . import validate
from .config import ModelConfig
from .hfconfig import config_from_hf, parse_config_json
from .model import ToyTransformer
from .tokenizer import Tokenizer, load_tokenizer

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
    the cache (allocated for max_seq_len tokens) small. exact: passed to ToyTransformer. Both
    are checked before any file is read. directory may be a snapshot folder of the Hugging
    Face hub cache (models--org--name/snapshots/<revision>/, whose files link into blobs/).
    """
    validate.optional_count("max_seq_len", max_seq_len, 1)
    validate.flag("exact", exact)
    path = _check_directory(directory)
    config = config_from_hf(_read_config(path), max_seq_len)
    tokenizer = load_tokenizer(path, config.vocab_size)
    tensors = tensor_table(weight_files(path))
    weights = _gather_weights(tensors, config)                # every array, before the model
    return ToyTransformer(config, exact=exact, weights=weights), tokenizer


# -- files --------------------------------------------------------------------------------
def _check_directory(directory) -> Path:
    path = validate.file_path("directory", directory)
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
        return parse_config_json(file.read_text())
    except ValueError as err:
        raise ValueError(f"{file}: {err}") from None


def weight_files(path: Path) -> list[Path]:
    """model.safetensors, or the shards that model.safetensors.index.json lists; each must
    stay inside the model (see _inside)."""
    single, index = path / "model.safetensors", path / "model.safetensors.index.json"
    if single.is_file():
        if not _inside(path, single.name):
            raise ValueError(f"{single} links to {single.resolve()}, outside the model "
                             f"directory {str(path)!r}")
        return [single]
    if not index.is_file():
        raise FileNotFoundError(f"{str(path)!r} has no model.safetensors nor "
                                f"model.safetensors.index.json (toykv reads safetensors only)")
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        names = sorted(set(weight_map.values()))
    except (json.JSONDecodeError, RecursionError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{index} must be JSON with a 'weight_map' object of tensor name -> "
                         f"file name ({type(err).__name__}: {err})") from None
    bad = [n for n in names if not isinstance(n, str) or not _inside(path, n)]
    if bad:
        raise ValueError(f"{index.name} names shard {bad[0]!r}, which is not a file name inside "
                         f"the model directory {str(path)!r}")
    files = [path / name for name in names]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"{index.name} lists shards missing from {str(path)!r}: {missing}")
    return files


def _inside(directory: Path, name: str) -> bool:
    """True when name is a relative path inside directory (no '..', not absolute) whose file,
    links followed, stays in the model: the directory itself, or for a snapshot of the hub
    cache the model's own tree models--org--name/ (snapshots link into its blobs/)."""
    if not name or Path(name).is_absolute() or "\\" in name or ".." in Path(name).parts:
        return False
    folder = directory.resolve()
    return (folder / name).resolve().is_relative_to(_model_tree(folder))


def _model_tree(folder: Path) -> Path:
    """models--org--name/ when folder is its snapshots/<revision>/, else folder itself."""
    snapshots = folder.parent
    if snapshots.name == "snapshots" and snapshots.parent.name.startswith("models--"):
        return snapshots.parent
    return folder


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
    """Hugging Face name -> shape as stored ([out, in] for projections: each layer's
    LayerSpec shapes, reversed)."""
    c = config
    D = c.d_model
    shapes = {"model.embed_tokens.weight": (c.vocab_size, D), "model.norm.weight": (D,)}
    for i, spec in enumerate(c.layers):
        layer_shapes = spec.weight_shapes                             # [in, out]
        for key, hf_name in LAYER_TENSORS.items():
            shapes[f"model.layers.{i}.{hf_name}"] = tuple(reversed(layer_shapes[key]))
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
        if not np.isfinite(array).all():
            bad = int(array.size - np.isfinite(array).sum())
            raise ValueError(f"tensor {name!r} has {bad} NaN or infinite value(s)")
        return array.T if transpose else array                  # [out, in] -> [in, out]

    norms = ("attn_norm", "mlp_norm")                             # vectors; the rest are [out, in]
    layers = [{key: load(f"model.layers.{i}.{hf_name}", transpose=key not in norms)
               for key, hf_name in LAYER_TENSORS.items()} for i in range(config.n_layers)]
    return {"embed": load("model.embed_tokens.weight"), "layers": layers,
            "final_norm": load("model.norm.weight"),
            "lm_head": None if config.tie_embeddings else load("lm_head.weight", transpose=True)}


__all__ = ["load_hf", "config_from_hf", "load_tokenizer", "Tokenizer"]
