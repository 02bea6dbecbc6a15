"""load_gguf: a llama.cpp GGUF file (Llama architecture) in a ToyTransformer, with its tokenizer.

The `gguf` package reads the file and dequantizes every tensor to float32. The metadata becomes a
config.json-like dict read by the one config parser (toykv.hfconfig), and llama.cpp's row order
of the Q and K projections is undone, so RoPE pairs (i, i + d/2) as Hugging Face's rotate-half
does. Everything is read and checked before the model is built: a bad file never half-loads.
"""
from __future__ import annotations

import math
import struct
import sys
from pathlib import Path

import numpy as np

from . import validate
from .hfconfig import config_from_hf
from .model import ToyTransformer
from .tokenizer import tokenizer_from_gguf

SUPPORTED_ARCHITECTURES = ("llama",)
# Tensor types read (float, and llama.cpp's block quantizations that gguf dequantizes)
TENSOR_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
# GGUF metadata key (after "<architecture>.") -> the config.json field it is
GGUF_TO_HF = {
    "vocab_size": "vocab_size",
    "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "rope.freq_base": "rope_theta",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "context_length": "max_position_embeddings",
}
# toykv layer key -> GGUF name inside blk.{i}.; matrices are stored [out, in] like HF's
LAYER_TENSORS = {
    "attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight",
    "wv": "attn_v.weight", "wo": "attn_output.weight", "mlp_norm": "ffn_norm.weight",
    "w_gate": "ffn_gate.weight", "w_up": "ffn_up.weight", "w_down": "ffn_down.weight",
}


def load_gguf(path, max_seq_len: int | None = None, exact: bool = False):
    """(model, tokenizer) from a GGUF file; weights dequantized to float32.

    max_seq_len: a context shorter than the file's context_length, to keep the RoPE tables and
    the cache small. exact: passed to ToyTransformer. Both are checked before the file is read.
    """
    validate.optional_count("max_seq_len", max_seq_len, 1)
    validate.flag("exact", exact)
    metadata, tensors = read_gguf(path)
    config = gguf_config(metadata, tensors, max_seq_len)
    tokenizer = tokenizer_from_gguf(metadata, config.vocab_size)
    weights = gguf_weights(tensors, config)                    # every array, before the model
    return ToyTransformer(config, exact=exact, weights=weights), tokenizer


def read_gguf(path) -> tuple[dict, dict]:
    """(metadata key -> value, tensor name -> gguf ReaderTensor); ValueError if unreadable.

    Only the header is parsed (the tensors' data stay in the file, memory-mapped). A header
    that claims more than the file holds, or tensors whose data overlap or leave gaps, are
    refused, as llama.cpp refuses them.
    """
    path = validate.file_path("path", path)
    if not path.exists():
        raise FileNotFoundError(f"GGUF file {str(path)!r} does not exist")
    if path.is_dir():
        raise IsADirectoryError(f"{str(path)!r} is a folder: pass the .gguf file itself "
                                "(load_hf reads a Hugging Face model folder)")
    if not path.is_file():                       # opening a named pipe would wait forever
        raise ValueError(f"{str(path)!r} is not a regular file (a named pipe, socket or "
                         "device?): pass a .gguf file")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file: it starts with {magic!r}, not b'GGUF'")
    try:
        reader = _bounded_reader(path)
        metadata = {key: field.contents() for key, field in reader.fields.items()}
        tensors = {t.name: t for t in reader.tensors}
    except (ValueError, KeyError, IndexError, TypeError, OverflowError, UnicodeDecodeError,
            struct.error) as err:       # a truncated or corrupted header or tensor table
        raise ValueError(f"{path} is not a readable GGUF file (truncated or corrupted?): "
                         f"{type(err).__name__}: {err}") from None
    _check_layout(path, reader)
    for t in tensors.values():
        expected = _tensor_bytes(t)
        if expected is not None and t.data.nbytes != expected:
            raise ValueError(f"{path} is truncated or corrupted: tensor {t.name!r} should hold "
                             f"{expected} bytes, the file has {t.data.nbytes}")
    return metadata, tensors


def _bounded_reader(path: Path):
    """gguf's GGUFReader, refusing any count or length in the header that claims more bytes
    than the file has left: a corrupted array length would otherwise loop far past its end."""
    from gguf import GGUFReader, GGUFValueType

    class BoundedReader(GGUFReader):
        def _get(self, offset, dtype, count=1, override_order=None):
            values = super()._get(offset, dtype, count, override_order)
            if values.size != int(count):                  # gguf silently gives fewer
                raise ValueError(f"the header asks for {int(count):,} values at byte "
                                 f"{int(offset):,}, past the end of the file "
                                 f"({len(self.data):,} bytes)")
            return values

        def _claims(self, what, count, smallest, offset):
            left = len(self.data) - int(offset)
            if int(count) * smallest > left:
                raise ValueError(f"the header claims {int(count):,} {what}, more than the "
                                 f"{left:,} bytes left in the file can hold")

        def _build_fields(self, offs, count):        # key (8+), type (4), value (1+) each
            self._claims("metadata entries", count, 13, offs)
            # the same mapped bytes as a plain array: slicing a np.memmap builds a memmap
            # object each time, and the vocabulary alone takes ~250,000 slices
            self.data = self.data.view(np.ndarray)
            return super()._build_fields(offs, count)

        def _build_tensor_info(self, offs, count):   # name (8+), dims (4), type, offset (12)
            self._claims("tensors", count, 24, offs)
            return super()._build_tensor_info(offs, count)

        def _get_field_parts(self, orig_offs, raw_type):
            if raw_type == GGUFValueType.ARRAY:      # item type (4), then the length (8)
                item = GGUFValueType(int(self._get(orig_offs, np.uint32)[0]))
                length = self._get(orig_offs + 4, np.uint64)[0]
                scalar = self.gguf_scalar_to_np.get(item)
                smallest = np.dtype(scalar).itemsize if scalar else 8 if \
                    item == GGUFValueType.STRING else 12
                self._claims(f"{item.name} array items", length, smallest, orig_offs + 12)
                if item == GGUFValueType.STRING and self.byte_order == "I":
                    return self._strings(orig_offs, int(length))
            return super()._get_field_parts(orig_offs, raw_type)

        def _strings(self, orig_offs, length):
            """gguf's parts of an array of `length` strings, each a uint64 length and its
            bytes, read in one Python loop: gguf's own reader takes a few numpy calls per
            string, seconds for a 49,152-token vocabulary and its merges."""
            data, raw = self.data, memoryview(self.data).cast("B")      # the same bytes
            parts = [self._get(orig_offs, np.uint32), self._get(orig_offs + 4, np.uint64)]
            offs = orig_offs + 12
            for _ in range(length):
                if offs + 8 > len(data):
                    self._get(offs, np.uint64)              # refused: past the end
                n = int.from_bytes(raw[offs:offs + 8], sys.byteorder)
                if offs + 8 + n > len(data):
                    self._get(offs + 8, np.uint8, n)        # refused: past the end
                parts += [data[offs:offs + 8].view(np.uint64), data[offs + 8:offs + 8 + n]]
                offs += 8 + n
            types = [GGUFValueType.ARRAY] + [GGUFValueType.STRING] * (length > 0)
            return offs - orig_offs, parts, list(range(3, len(parts), 2)), types

    return BoundedReader(path)


def _check_layout(path: Path, reader):
    """Each tensor's data must start where the one before it ends (padded to the alignment):
    llama.cpp's rule, so no two tensors share bytes and none is read from a gap."""
    expected = 0
    for t in reader.tensors:                              # in the order of the tensor table
        start = int(t.data_offset) - int(reader.data_offset)
        if start != expected:
            raise ValueError(f"{path}: tensor {t.name!r} starts at byte {start:,} of the data, "
                             f"expected {expected:,}: tensors must be laid out one after "
                             "another, without overlaps or gaps (llama.cpp refuses this file)")
        nbytes = _tensor_bytes(t)
        if nbytes is None:
            return                                        # a type gguf cannot size: stop here
        expected += -(-nbytes // reader.alignment) * reader.alignment


def _tensor_bytes(tensor) -> int | None:
    """Bytes a tensor of this type and shape takes (None for a type gguf does not size)."""
    from gguf import GGML_QUANT_SIZES

    sizes = GGML_QUANT_SIZES.get(tensor.tensor_type)
    if sizes is None:
        return None
    block, nbytes = sizes
    return math.prod(int(n) for n in tensor.shape) // block * nbytes   # Python ints: no wrap


def hf_config_from_gguf(metadata: dict, tensors: dict) -> dict:
    """The config.json dict the metadata describes (what transformers builds from it)."""
    arch = metadata.get("general.architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"GGUF metadata 'general.architecture' is {arch!r}: toykv loads "
                         f"{SUPPORTED_ARCHITECTURES} (RMSNorm, RoPE, SwiGLU, no biases)")
    if metadata.get(f"{arch}.expert_count"):
        raise ValueError(f"GGUF metadata '{arch}.expert_count' is "
                         f"{metadata[f'{arch}.expert_count']}: toykv has no mixture of experts")
    hf = {"model_type": "llama", "tie_word_embeddings": "output.weight" not in tensors}
    for key, field in GGUF_TO_HF.items():
        if f"{arch}.{key}" in metadata:
            hf[field] = metadata[f"{arch}.{key}"]
    if "vocab_size" not in hf and isinstance(metadata.get("tokenizer.ggml.tokens"), list):
        hf["vocab_size"] = len(metadata["tokenizer.ggml.tokens"])     # older files
    scaling = metadata.get(f"{arch}.rope.scaling.type", "none")
    if scaling != "none":
        hf["rope_scaling"] = {"rope_type": scaling}
    rotary = metadata.get(f"{arch}.rope.dimension_count")
    d, h = hf.get("hidden_size"), hf.get("num_attention_heads")
    head_dim = hf.get("head_dim") or (d // h if isinstance(d, int) and isinstance(h, int)
                                      and h > 0 else None)
    if rotary is not None and head_dim and rotary != head_dim:
        raise ValueError(f"GGUF metadata '{arch}.rope.dimension_count' is {rotary!r} but a head "
                         f"has {head_dim} values: toykv rotates whole heads (no partial RoPE)")
    return hf


def gguf_config(metadata: dict, tensors: dict, max_seq_len: int | None = None):
    """The ModelConfig of a GGUF, read by the one config parser; errors name the GGUF key each
    config.json field came from (the parser is told where, it does not guess from the text)."""
    arch = metadata.get("general.architecture")
    hf = hf_config_from_gguf(metadata, tensors)
    sources = {field: f"GGUF key '{arch}.{key}'" for key, field in GGUF_TO_HF.items()
               if f"{arch}.{key}" in metadata}
    try:
        return config_from_hf(hf, max_seq_len, sources)
    except ValueError as err:
        raise ValueError(f"GGUF metadata: {err}") from None


def expected_shapes(config) -> dict[str, tuple]:
    """GGUF tensor name -> numpy shape of the dequantized tensor ([out, in] for matrices: each
    layer's LayerSpec shapes, reversed)."""
    c = config
    D = c.d_model
    shapes = {"token_embd.weight": (c.vocab_size, D), "output_norm.weight": (D,)}
    for i, spec in enumerate(c.layers):
        layer = spec.weight_shapes                                    # [in, out]: reversed
        for key, name in LAYER_TENSORS.items():
            shapes[f"blk.{i}.{name}"] = tuple(reversed(layer[key]))
    if not c.tie_embeddings:
        shapes["output.weight"] = (c.vocab_size, D)
    return shapes


def _check_tensors(tensors: dict, config):
    """Every expected tensor present, of a type read here and the right shape; nothing else."""
    expected = expected_shapes(config)
    missing = [name for name in expected if name not in tensors]
    if missing:
        raise ValueError(f"GGUF file is missing {len(missing)} tensor(s), first {missing[0]!r}")
    extra = sorted(set(tensors) - set(expected))
    if extra:
        raise ValueError(f"GGUF file has {len(extra)} tensor(s) toykv has no place for, first "
                         f"{extra[0]!r} (an architecture feature ToyTransformer lacks?)")
    for name, shape in expected.items():
        t = tensors[name]
        kind = t.tensor_type.name
        if kind not in TENSOR_TYPES:
            raise ValueError(f"tensor {name!r} has type {kind}: toykv dequantizes {TENSOR_TYPES}")
        got = tuple(int(n) for n in reversed(t.shape))          # GGUF lists the fastest axis first
        if got != shape:
            raise ValueError(f"tensor {name!r} has shape {list(got)}, expected {list(shape)}")


def dequantized(tensor) -> np.ndarray:
    """One tensor as a float32 array of its own (not a view of the file); NaN/inf refused."""
    from gguf import dequantize

    shape = tuple(int(n) for n in reversed(tensor.shape))
    array = np.array(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(shape)
    if not np.isfinite(array).all():
        bad = int(np.size(array) - np.isfinite(array).sum())
        raise ValueError(f"tensor {tensor.name!r} has {bad} NaN or infinite value(s)")
    return array


def unpermute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row order: per head it interleaves the two RoPE halves
    (rows 0, d/2, 1, d/2+1, ...); Hugging Face keeps them as halves. [H*d, D] -> [H*d, D]"""
    rows = w.shape[0]
    half = rows // n_heads // 2
    return w.reshape(n_heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_weights(tensors: dict, config) -> dict:
    """ToyTransformer's weights dict ([in, out] matrices, float32) from the GGUF tensors."""
    _check_tensors(tensors, config)
    heads = {"wq": config.n_heads, "wk": config.n_kv_heads}

    def matrix(key, name):                                      # [out, in] -> [in, out]
        w = dequantized(tensors[name])
        return (unpermute_rows(w, heads[key]) if key in heads else w).T

    layers = []
    for i in range(config.n_layers):
        layer = {}
        for key, name in LAYER_TENSORS.items():
            name = f"blk.{i}.{name}"
            layer[key] = dequantized(tensors[name]) if key.endswith("norm") else matrix(key, name)
        layers.append(layer)
    return {"embed": dequantized(tensors["token_embd.weight"]),           # [vocab, D]
            "layers": layers,
            "final_norm": dequantized(tensors["output_norm.weight"]),     # [D]
            "lm_head": None if config.tie_embeddings                      # [D, vocab]
            else dequantized(tensors["output.weight"]).T}


__all__ = ["load_gguf", "read_gguf", "gguf_config", "hf_config_from_gguf", "unpermute_rows"]
