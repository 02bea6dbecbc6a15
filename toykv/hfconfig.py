"""The one reader of Hugging Face config.json: shapes, parameter counts, and what toykv can run.

`from_hf_config` reads every family below into a ZooModel (a ModelConfig plus parameter counts,
for sizing); `config_from_hf` is the ModelConfig that ToyTransformer runs (Llama, Mistral), used
by the loaders. Field names are those of transformers' configuration_<model>.py files; a field
left out gets transformers' default (table below), shape fields are required. Every value goes
through toykv.validate, and errors name the config.json field as written (e.g. `rope_theta`).

Parameter counts are computed from the shapes, the way transformers builds each model: attention
(GQA, gated, with sinks, or MLA with q-LoRA), linear attention (Gated DeltaNet), dense and MoE
MLPs (routed and shared experts, routers), norms and embeddings. Active counts take top-k routed
experts and every other weight, the whole input-embedding table included.
"""
from __future__ import annotations

import dataclasses
import json
import reprlib

from . import validate
from .config import MAX_LAYERS, ConfigError, ModelConfig
from .zoo import ZooModel

# Traits of each supported model_type. norms: RMSNorm weights per layer (each d_model);
# qk_norm: per-head RMSNorm on q and k; gate: output gate doubles q_proj (Qwen3-Next);
# sinks: one attention-sink logit per head (gpt-oss); window: how layers choose sliding.
_FAMILIES = {
    "llama": dict(tie=False),
    "mistral": dict(tie=False, window="all"),
    "qwen2": dict(tie=False, qkv_bias=True, window="qwen"),
    "qwen3": dict(tie=False, qk_norm=True, window="qwen"),
    "gemma": dict(tie=True),
    "gemma2": dict(tie=True, norms=4, window="alternate"),
    "gemma3_text": dict(tie=True, norms=4, qk_norm=True, window="gemma3"),
    "deepseek_v2": dict(tie=False, mla=True, moe="deepseek"),
    "deepseek_v3": dict(tie=False, mla=True, moe="deepseek", router_bias=True),
    "gpt_oss": dict(tie=False, bias_default=True, sinks=True, moe="gpt_oss", window="alternate"),
    "qwen2_moe": dict(tie=False, qkv_bias=True, moe="qwen", window="qwen"),
    "qwen3_moe": dict(tie=False, qk_norm=True, moe="qwen", window="qwen"),
    "qwen3_next": dict(tie=False, qk_norm=True, gate=True, moe="qwen", window="interval"),
}

# The one set of defaults: what transformers (5.24, configuration_<model>.py) fills in for a
# field a config.json leaves out. An explicit null is not "left out": transformers then takes
# num_key_value_heads = num_attention_heads and no sliding window, and so does this reader.
_COMMON_DEFAULTS = dict(rms_norm_eps=1e-6, rope_theta=10000.0)
_HF_DEFAULTS = {
    "mistral": dict(num_key_value_heads=8, sliding_window=4096),
    "qwen2": dict(num_key_value_heads=32, sliding_window=4096),
    "qwen3": dict(num_key_value_heads=32, sliding_window=4096),
    "gemma": dict(num_key_value_heads=16),
    "gemma2": dict(num_key_value_heads=4, sliding_window=4096),
    "gemma3_text": dict(vocab_size=262208, max_position_embeddings=131072, num_key_value_heads=4,
                        sliding_window=4096, sliding_window_pattern=6, rope_theta=1_000_000.0),
    "deepseek_v2": dict(moe_layer_freq=1),
    "deepseek_v3": dict(moe_layer_freq=1, num_key_value_heads=128),
    "gpt_oss": dict(num_key_value_heads=8, sliding_window=128, rms_norm_eps=1e-5,
                    rope_theta=150000.0),
    "qwen2_moe": dict(num_key_value_heads=16, sliding_window=4096),
    "qwen3_moe": dict(num_key_value_heads=4, sliding_window=4096),
    "qwen3_next": dict(num_key_value_heads=2, full_attention_interval=4),
}

_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding",
                "linear_attention": "linear"}

# What ToyTransformer computes exactly: RMSNorm, rotate-half RoPE without scaling, SwiGLU, no
# biases. Other families parse for sizing, but their forward pass differs:
RUNNABLE_MODEL_TYPES = ("llama", "mistral")
UNSUPPORTED_WHY = {      # model_type -> what its forward pass adds that ToyTransformer lacks
    "qwen2": "adds biases to the q/k/v projections",
    "qwen3": "normalises queries and keys per head (q_norm, k_norm)",
    "gemma": "scales the embeddings, uses GELU and (1 + w) RMSNorm weights",
    "phi3": "fuses q/k/v and gate/up into single projections",
}
# toykv's ModelConfig field -> the config.json field it comes from (named in its errors)
_HF_NAME = {"vocab_size": "vocab_size", "d_model": "hidden_size", "n_layers": "num_hidden_layers",
            "n_heads": "num_attention_heads", "n_kv_heads": "num_key_value_heads",
            "head_dim": "head_dim", "d_ff": "intermediate_size",
            "max_seq_len": "max_position_embeddings", "kv_lora_rank": "kv_lora_rank",
            "rope_head_dim": "qk_rope_head_dim", "sliding_window": "sliding_window"}


class _Fields:
    """A config dict with the model_type's defaults; every read is validated and names the field,
    and where it came from when a loader says (sources: field -> e.g. "GGUF key 'llama.x'")."""

    def __init__(self, config: dict, model_type: str, sources: dict | None = None):
        self.model_type = model_type
        self.given = config                          # what the user wrote
        self.values = {**_COMMON_DEFAULTS, **_HF_DEFAULTS.get(model_type, {}), **config}
        self.sources = sources or {}

    def _name(self, key):
        return f"config.json field {key!r}"

    def error(self, message: str, *keys) -> ValueError:
        """A ValueError for a rule the fields `keys` break, saying where they came from."""
        where = [self.sources[key] for key in keys if key in self.sources]
        return ValueError(message + (f"; from {', '.join(where)}" if where else ""))

    def _check(self, key, check, value, *args):
        """check(name, value, *args) of one field; its ValueError says where the field came from."""
        try:
            return check(self._name(key), value, *args)
        except ValueError as err:
            raise self.error(str(err), key) from None

    def get(self, key, default=None):
        """The raw value, or default when the field is missing or null."""
        value = self.values.get(key)
        return default if value is None else value

    def _scalar(self, key, value, rule):
        """value, unless it is a JSON array or object where a single value belongs."""
        if isinstance(value, (list, tuple, dict)):
            raise self.error(f"{self._name(key)} must be {rule}, got a JSON "
                             f"{'object' if isinstance(value, dict) else 'array'} "
                             f"{reprlib.repr(value)}", key)
        return value

    def int(self, key, default=None, minimum=1, maximum=None):
        value = self._scalar(key, self.get(key, default), "an integer")
        if value is None:
            raise ValueError(f"config.json (model_type {self.model_type!r}) is missing the "
                             f"required field {key!r}")
        return self._check(key, validate.count, value, minimum, maximum)

    def optional_int(self, key, minimum=1):
        value = self._scalar(key, self.get(key), "an integer or null")
        return self._check(key, validate.optional_count, value, minimum)

    def number(self, key):
        return self._check(key, validate.number, self._scalar(key, self.get(key), "a number"))

    def flag(self, key, default):
        value = self._scalar(key, self.get(key, default), "true or false")
        return self._check(key, validate.flag, value)

    def mapping(self, key) -> dict:
        """A JSON object field; missing or null gives {}."""
        value = self.get(key, {})
        if not isinstance(value, dict):
            raise ValueError(f"{self._name(key)} must be a JSON object {{...}} or null, "
                             f"got {reprlib.repr(value)} ({type(value).__name__})")
        return value

    def list(self, key, kind, default=()):
        """A JSON array field whose entries are all of type kind (bools are not ints)."""
        value = self.get(key, default)
        if not isinstance(value, (list, tuple)) or any(
                isinstance(v, bool) or not isinstance(v, kind) for v in value):
            raise ValueError(f"{self._name(key)} must be a list of {kind.__name__}, "
                             f"got {reprlib.repr(value)}")
        return list(value)


def parse_config_json(text: str) -> dict:
    """The dict in a config.json text; ValueError for invalid JSON, too deep a nesting, a non-object."""
    if not isinstance(text, str):
        raise ValueError(f"config.json text must be a str, got {type(text).__name__}")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"config.json is not valid JSON: {err}") from None
    except RecursionError:
        raise ValueError("config.json nests arrays or objects too deeply to read "
                         "(a config.json is one object with a few nested objects)") from None
    if not isinstance(config, dict):
        raise ValueError(f"config.json must hold a JSON object {{...}}, got a {type(config).__name__}")
    return config


def _text_config(config):
    """The language-model part of a config (Gemma 3 nests it under 'text_config')."""
    if not isinstance(config, dict):
        raise ValueError(f"config must be a dict read from config.json, got {type(config).__name__}")
    if config.get("text_config") is None:
        return config, config.get("model_type")
    text = config["text_config"]
    if not isinstance(text, dict):
        raise ValueError(f"config.json field 'text_config' must be a JSON object {{...}}, "
                         f"got {type(text).__name__}")
    model_type = text.get("model_type") or config.get("model_type")
    if model_type == "gemma3":
        model_type = "gemma3_text"
    return text, model_type


# -- layer pattern ------------------------------------------------------------------
def _layer_kinds(f, n_layers, window_rule):
    """Per-layer 'full' / 'sliding' / 'linear', from layer_types or the family's rule."""
    if f.get("layer_types") is not None:
        types = f.list("layer_types", str)
        if len(types) != n_layers:
            raise ValueError(f"config.json field 'layer_types' has {len(types)} entries, "
                             f"num_hidden_layers is {n_layers}")
        unknown = sorted({t for t in types if t not in _LAYER_TYPES})
        if unknown:
            raise ValueError(f"config.json field 'layer_types' entries must be in "
                             f"{sorted(_LAYER_TYPES)}, got {unknown}")
        return tuple(_LAYER_TYPES[t] for t in types)
    if window_rule == "interval":                      # every k-th layer full, the rest linear
        k = f.int("full_attention_interval")
        return tuple("full" if (i + 1) % k == 0 else "linear" for i in range(n_layers))
    enabled = f.flag("use_sliding_window", False) if window_rule == "qwen" else True
    if f.get("sliding_window") is None or window_rule is None or not enabled:
        return ("full",) * n_layers
    if window_rule == "alternate":                     # sliding first: layers 0, 2, 4, ...
        return tuple("sliding" if i % 2 == 0 else "full" for i in range(n_layers))
    if window_rule == "gemma3":                        # pattern-1 sliding layers, then 1 full
        p = f.int("sliding_window_pattern")
        return tuple("full" if (i + 1) % p == 0 else "sliding" for i in range(n_layers))
    if window_rule == "qwen":                          # only with use_sliding_window
        first = f.int("max_window_layers", minimum=0)
        return tuple("sliding" if i >= first else "full" for i in range(n_layers))
    return ("sliding",) * n_layers                     # 'all': Mistral v0.1


# -- parameter counts ---------------------------------------------------------------
def _gqa_attention_params(f, traits, d, H, kv, hd):
    q_out = H * hd * (2 if traits.get("gate") else 1)   # gated: q_proj also emits the gate
    params = d * q_out + 2 * d * kv * hd + H * hd * d   # q, k, v, o
    if traits.get("qkv_bias"):
        params += q_out + 2 * kv * hd
    elif f.flag("attention_bias", traits.get("bias_default", False)):
        params += q_out + 2 * kv * hd + d
    if traits.get("qk_norm"):
        params += 2 * hd
    if traits.get("sinks"):
        params += H
    return params


def _mla_shapes(f):
    return dict(r=f.int("kv_lora_rank"), rope=f.int("qk_rope_head_dim"),
                nope=f.int("qk_nope_head_dim"), v=f.int("v_head_dim"))


def _mla_attention_params(f, d, H):
    s = _mla_shapes(f)
    q_head = s["nope"] + s["rope"]
    q_lora = f.optional_int("q_lora_rank")
    if q_lora:                                          # d -> q_lora (+ norm) -> H * q_head
        q = d * q_lora + q_lora + q_lora * H * q_head
    else:
        q = d * H * q_head
    kv = d * (s["r"] + s["rope"]) + s["r"] + s["r"] * H * (s["nope"] + s["v"])
    return q + kv + H * s["v"] * d


def _linear_attention(f, d):
    """(params, state values) of one Gated DeltaNet layer (Qwen3-Next)."""
    nk, nv = f.int("linear_num_key_heads"), f.int("linear_num_value_heads")
    dk, dv = f.int("linear_key_head_dim"), f.int("linear_value_head_dim")
    kernel = f.int("linear_conv_kernel_dim")
    key_dim, value_dim = nk * dk, nv * dv
    conv_dim = 2 * key_dim + value_dim
    params = (d * (2 * key_dim + 2 * value_dim)        # in_proj_qkvz
              + d * 2 * nv                             # in_proj_ba
              + conv_dim * kernel                      # depthwise conv1d, no bias
              + 2 * nv                                 # dt_bias, A_log
              + dv                                     # gated RMSNorm
              + value_dim * d)                         # out_proj
    state = nv * dk * dv + conv_dim * (kernel - 1)     # recurrent state + conv window
    return params, state


def _is_moe_layer(f, kind, i):
    if kind == "deepseek":
        return (f.get("n_routed_experts") is not None and i >= f.int("first_k_dense_replace", 0, 0)
                and i % f.int("moe_layer_freq") == 0)
    if kind == "qwen":
        return (f.int("num_experts", 0, minimum=0) > 0 and i not in f.list("mlp_only_layers", int)
                and (i + 1) % f.int("decoder_sparse_step", 1) == 0)
    return kind == "gpt_oss"


def _experts(f, kind):
    """(experts, experts per token) with the field names a config.json uses for them."""
    n_key = {"gpt_oss": "num_local_experts", "deepseek": "n_routed_experts"}.get(kind, "num_experts")
    k_key = "num_experts_per_tok"
    if f.get(k_key) is None and f.get("experts_per_token") is not None:
        k_key = "experts_per_token"                     # openai's own name in gpt-oss configs
    n, k = f.int(n_key), f.int(k_key)
    if k > n:
        raise ValueError(f"config.json field {k_key!r} ({k}) is more than {n_key!r} ({n}): a "
                         "token cannot be routed to more experts than the layer has")
    return n, k


def _moe_params(f, traits, d):
    """(total, active, description) of one MoE MLP block."""
    kind = traits["moe"]
    n, k = _experts(f, kind)
    if kind == "gpt_oss":
        ff = f.int("intermediate_size")
        expert = d * 2 * ff + 2 * ff + ff * d + d       # gate_up and down, with biases
        router, shared = n * d + n, 0
    else:
        ff = f.int("moe_intermediate_size")
        expert = 3 * d * ff
        router = n * d
        if kind == "deepseek":
            shared = 3 * d * ff * f.int("n_shared_experts", 0, minimum=0)
        else:
            ff_shared = f.int("shared_expert_intermediate_size", 0, minimum=0)
            shared = 3 * d * ff_shared + (d if ff_shared else 0)   # + shared_expert_gate
    if traits.get("router_bias"):                       # DeepSeek-V3's e_score_correction_bias
        router += n
    total = n * expert + shared + router
    active = k * expert + shared + router
    return total, active, f"{n} experts (d_ff {ff}), top-{k}, shared params {shared:,}"


def _count_params(f, traits, shapes, kinds, tied):
    """(total, active, notes, linear state values per layer) for the whole model."""
    d, H, kv, hd, vocab = shapes
    norms = traits.get("norms", 2) * d
    moe_kind = traits.get("moe")
    total = active = vocab * d * (1 if tied else 2) + d
    notes, moe_layers, state = [], 0, 0
    for i, kind in enumerate(kinds):
        if kind == "linear":
            attn, state = _linear_attention(f, d)
        elif traits.get("mla"):
            attn = _mla_attention_params(f, d, H)
        else:
            attn = _gqa_attention_params(f, traits, d, H, kv, hd)
        if moe_kind and _is_moe_layer(f, moe_kind, i):
            mlp_total, mlp_active, moe_text = _moe_params(f, traits, d)
            moe_layers += 1
        else:
            ff = f.int("intermediate_size")
            mlp_total = mlp_active = 3 * d * ff + (2 * ff + d if f.flag("mlp_bias", False) else 0)
        total += norms + attn + mlp_total
        active += norms + attn + mlp_active
    if moe_layers:
        notes.append(f"MoE on {moe_layers} of {len(kinds)} layers: {moe_text}. Active params "
                     f"include the whole input embedding ({vocab * d:,}); some publishers "
                     "leave it out of their active count.")
    mtp = f.int("num_nextn_predict_layers", 0, minimum=0)
    if mtp:
        notes.append(f"The {mtp} multi-token-prediction layer(s) are not counted.")
    return total, active, notes, state


# -- the entry points ---------------------------------------------------------------
def _shapes(f, traits):
    d, H = f.int("hidden_size"), f.int("num_attention_heads")
    kv = f.int("num_key_value_heads", H)
    if traits.get("mla"):
        hd = f.int("qk_nope_head_dim")
    elif f.get("head_dim") is not None:
        hd = f.int("head_dim")
    elif d % H:
        raise f.error(f"config.json field 'hidden_size' ({d}) is not divisible by "
                      f"'num_attention_heads' ({H}) and config.json gives no 'head_dim'",
                      "hidden_size", "num_attention_heads")
    else:
        hd = d // H
    if not traits.get("mla") and H % kv:
        raise f.error(f"config.json field 'num_attention_heads' ({H}) must be a multiple of "
                      f"'num_key_value_heads' ({kv}): each KV head serves a whole group",
                      "num_attention_heads", "num_key_value_heads")
    return d, H, kv, hd, f.int("vocab_size")


def _rope_theta(f) -> float:
    """rope_theta from the top level (transformers 4) or rope_parameters (transformers 5)."""
    f.mapping("rope_scaling")                          # transformers 4's name: a mapping too
    nested = f.mapping("rope_parameters").get("rope_theta")
    top = f.number("rope_theta")
    if nested is None:
        return top
    nested = validate.number("config.json field 'rope_parameters.rope_theta'", nested)
    if f.given.get("rope_theta") is not None and nested != top:
        raise ValueError(f"config.json gives two rope_theta values: rope_theta {top:g} and "
                         f"rope_parameters.rope_theta {nested:g}")
    return nested


def from_hf_config(config: dict, name: str = "custom", sources: dict | None = None) -> ZooModel:
    """Parse a config.json dict (Llama, Qwen2/3, Mistral, Gemma 1-3, DeepSeek-V2/V3, gpt-oss,
    Qwen MoE, Qwen3-Next) into a ZooModel with parameter counts computed from its shapes.
    sources: config.json field -> where its value came from, for errors (a GGUF key)."""
    text, model_type = _text_config(config)
    if not isinstance(model_type, str) or model_type not in _FAMILIES:
        raise ValueError(f"config.json field 'model_type' must be one of {sorted(_FAMILIES)}, "
                         f"got model_type {model_type!r}")
    traits = _FAMILIES[model_type]
    f = _Fields(text, model_type, sources)
    shapes = _shapes(f, traits)
    n_layers = f.int("num_hidden_layers", maximum=MAX_LAYERS)       # before looping over them
    kinds = _layer_kinds(f, n_layers, traits.get("window"))
    tied = f.flag("tie_word_embeddings", traits["tie"])
    total, active, notes, state = _count_params(f, traits, shapes, kinds, tied)
    model_config = _model_config(f, traits, shapes, n_layers, kinds, tied, state, notes)
    source = (f"Hugging Face config.json (model_type {model_type!r}) read by toykv.hfconfig; "
              "parameter counts computed from its shapes")
    return ZooModel(name, model_config, total, active, (source,), " ".join(notes), verified=False)


def _model_config(f, traits, shapes, n_layers, kinds, tied, state, notes):
    d, H, kv, hd, vocab = shapes
    moe = traits.get("moe")
    d_ff = f.int("intermediate_size" if moe in (None, "gpt_oss") else "moe_intermediate_size")
    extra = {}
    if traits.get("mla"):
        s = _mla_shapes(f)
        extra = dict(attention="mla", kv_lora_rank=s["r"], rope_head_dim=s["rope"])
        kv = None
        if s["v"] != s["nope"]:
            notes.append(f"v_head_dim {s['v']} differs from qk_nope_head_dim {s['nope']}; "
                         "the ModelConfig's head_dim is the latter.")
    if "sliding" in kinds:
        extra["sliding_window"] = f.int("sliding_window")
    if set(kinds) != {"linear"} and len(set(kinds)) == 1:
        kinds = None                       # uniform: ModelConfig derives it from sliding_window
    try:
        given_hd = hd if traits.get("mla") or f.get("head_dim") is not None else None
        return ModelConfig(vocab_size=vocab, d_model=d, n_layers=n_layers, n_heads=H,
                           n_kv_heads=kv, head_dim=given_hd, d_ff=d_ff,
                           max_seq_len=f.int("max_position_embeddings"), tie_embeddings=tied,
                           rope_theta=_rope_theta(f), norm_eps=f.number("rms_norm_eps"),
                           layer_types=kinds, linear_state_values=state, **extra)
    except ConfigError as err:     # a rule of ModelConfig's: it names the fields it concerns
        fields = [ours for ours in err.fields if ours in _HF_NAME]
        named = [f"{ours} is {_HF_NAME[ours]!r}" for ours in fields if ours != _HF_NAME[ours]]
        hint = f" (in config.json: {', '.join(named)})" if named else ""
        raise f.error(f"config.json describes a model toykv cannot build: {err}{hint}",
                      *(_HF_NAME[ours] for ours in fields)) from None


def config_from_hf(hf: dict, max_seq_len: int | None = None,
                   sources: dict | None = None) -> ModelConfig:
    """The ModelConfig ToyTransformer runs for a config.json dict; ValueError for anything it
    cannot run exactly. max_seq_len: a context shorter than max_position_embeddings. sources:
    as from_hf_config's (where each field came from, for errors)."""
    _check_runnable(hf)
    config = from_hf_config(hf, sources=sources).config
    if max_seq_len is not None:
        validate.count("max_seq_len (at most config.json's max_position_embeddings)",
                       max_seq_len, 1, config.max_seq_len)
        config = dataclasses.replace(config, max_seq_len=max_seq_len)
    return config


def _check_runnable(hf):
    """Reject architectures and options whose forward pass differs from ToyTransformer's."""
    text, model_type = _text_config(hf)
    if not isinstance(model_type, str) or model_type not in RUNNABLE_MODEL_TYPES:
        why = UNSUPPORTED_WHY.get(str(model_type), "is not a Llama-style architecture toykv knows")
        raise ValueError(f"model_type {model_type!r} is not supported: it {why}; "
                         f"toykv loads {RUNNABLE_MODEL_TYPES}")
    f = _Fields(text, model_type)
    act = f.get("hidden_act", "silu")
    if act not in ("silu", "swish"):                       # swish is silu
        raise ValueError(f"config.json field 'hidden_act' must be 'silu' (SwiGLU), got {act!r}")
    for key in ("attention_bias", "mlp_bias"):
        if f.flag(key, False):
            raise ValueError(f"config.json field {key!r} is true: toykv's projections have "
                             "no biases")
    for key in ("rope_scaling", "rope_parameters"):
        rope = f.mapping(key)
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind != "default":
            raise ValueError(f"config.json field {key!r} has rope_type {kind!r}: toykv "
                             "implements only plain RoPE ('default', no scaling)")
        if rope.get("partial_rotary_factor", 1.0) != 1.0:
            raise ValueError(f"config.json field '{key}.partial_rotary_factor' must be 1.0 "
                             f"(RoPE on the whole head), got {rope['partial_rotary_factor']!r}")


__all__ = ["from_hf_config", "config_from_hf", "parse_config_json", "RUNNABLE_MODEL_TYPES"]
