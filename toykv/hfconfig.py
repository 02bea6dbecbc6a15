"""Read a Hugging Face config.json dict into a ZooModel: a ModelConfig plus parameter counts.

Field names are those of transformers' configuration_<model>.py files. Parameter counts are
computed from the shapes, the way transformers builds each model: attention (GQA, gated,
with sinks, or MLA with q-LoRA), linear attention (Gated DeltaNet), dense and MoE MLPs
(routed and shared experts, routers), norms and embeddings. Active counts take top-k routed
experts and every other weight, the whole input-embedding table included.
"""
from __future__ import annotations

from .config import ModelConfig
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

# Defaults transformers fills in for fields a published config may leave out (from the
# Gemma3TextConfig and Qwen3NextConfig signatures; DeepseekV3Config has no moe_layer_freq:
# every layer after the first first_k_dense_replace is MoE).
_HF_DEFAULTS = {
    "gemma3_text": dict(vocab_size=262208, max_position_embeddings=131072,
                        sliding_window_pattern=6, rope_theta=1_000_000.0, rms_norm_eps=1e-6),
    "qwen3_next": dict(full_attention_interval=4),
    "deepseek_v2": dict(moe_layer_freq=1),
    "deepseek_v3": dict(moe_layer_freq=1),
}

_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding",
                "linear_attention": "linear"}


class _Fields:
    """A config dict with the model_type's defaults; missing required fields raise ValueError."""

    def __init__(self, config: dict, model_type: str):
        self.model_type = model_type
        self.values = {**_HF_DEFAULTS.get(model_type, {}), **config}

    def get(self, key, default=None):
        value = self.values.get(key)
        return default if value is None else value

    def int(self, key, default=None, minimum=1):
        value = self.get(key, default)
        if value is None:
            raise ValueError(f"config.json (model_type {self.model_type!r}) is missing the "
                             f"required field {key!r}")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"config.json field {key!r} must be an integer >= {minimum}, "
                             f"got {value!r}")
        return value


def _text_config(config):
    """The language-model part of a config (Gemma 3 nests it under 'text_config')."""
    if not isinstance(config, dict):
        raise ValueError(f"config must be a dict read from config.json, got {type(config).__name__}")
    text = config.get("text_config")
    if text is not None:
        if not isinstance(text, dict):
            raise ValueError(f"text_config must be a dict, got {type(text).__name__}")
        model_type = text.get("model_type") or config.get("model_type")
        if model_type == "gemma3":
            model_type = "gemma3_text"
        return text, model_type
    return config, config.get("model_type")


# -- layer pattern ------------------------------------------------------------------
def _layer_kinds(f, n_layers, window_rule):
    """Per-layer 'full' / 'sliding' / 'linear', from layer_types or the family's rule."""
    types = f.get("layer_types")
    if types is not None:
        if len(types) != n_layers:
            raise ValueError(f"layer_types has {len(types)} entries, num_hidden_layers is {n_layers}")
        unknown = sorted({t for t in types if t not in _LAYER_TYPES})
        if unknown:
            raise ValueError(f"layer_types entries must be in {sorted(_LAYER_TYPES)}, got {unknown}")
        return tuple(_LAYER_TYPES[t] for t in types)
    if window_rule == "interval":                      # every k-th layer full, the rest linear
        k = f.int("full_attention_interval")
        return tuple("full" if (i + 1) % k == 0 else "linear" for i in range(n_layers))
    if f.get("sliding_window") is None or window_rule is None:
        return ("full",) * n_layers
    if window_rule == "alternate":                     # sliding first: layers 0, 2, 4, ...
        return tuple("sliding" if i % 2 == 0 else "full" for i in range(n_layers))
    if window_rule == "gemma3":                        # pattern-1 sliding layers, then 1 full
        p = f.int("sliding_window_pattern")
        return tuple("full" if (i + 1) % p == 0 else "sliding" for i in range(n_layers))
    if window_rule == "qwen":                          # only with use_sliding_window
        if not f.get("use_sliding_window", False):
            return ("full",) * n_layers
        first = f.int("max_window_layers", minimum=0)
        return tuple("sliding" if i >= first else "full" for i in range(n_layers))
    return ("sliding",) * n_layers                     # 'all': Mistral v0.1


# -- parameter counts ---------------------------------------------------------------
def _gqa_attention_params(f, traits, d, H, kv, hd):
    q_out = H * hd * (2 if traits.get("gate") else 1)   # gated: q_proj also emits the gate
    params = d * q_out + 2 * d * kv * hd + H * hd * d   # q, k, v, o
    if traits.get("qkv_bias"):
        params += q_out + 2 * kv * hd
    elif f.get("attention_bias", traits.get("bias_default", False)):
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
    q_lora = f.get("q_lora_rank")
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
        return (f.get("n_routed_experts") is not None and i >= f.int("first_k_dense_replace", minimum=0)
                and i % f.int("moe_layer_freq") == 0)
    if kind == "qwen":
        return (f.get("num_experts", 0) > 0 and i not in f.get("mlp_only_layers", [])
                and (i + 1) % f.int("decoder_sparse_step", 1) == 0)
    return kind == "gpt_oss"


def _moe_params(f, traits, d):
    """(total, active, description) of one MoE MLP block."""
    kind = traits["moe"]
    if kind == "gpt_oss":
        n, k, ff = f.int("num_local_experts"), _top_k(f), f.int("intermediate_size")
        expert = d * 2 * ff + 2 * ff + ff * d + d       # gate_up and down, with biases
        router, shared = n * d + n, 0
    else:
        n = f.int("n_routed_experts") if kind == "deepseek" else f.int("num_experts")
        k, ff = _top_k(f), f.int("moe_intermediate_size")
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


def _top_k(f):
    if f.get("num_experts_per_tok") is not None:
        return f.int("num_experts_per_tok")
    return f.int("experts_per_token")                   # openai's own name in gpt-oss configs


def _count_params(f, traits, shapes, kinds):
    """(total, active, notes, linear state values per layer) for the whole model."""
    d, H, kv, hd, vocab = shapes
    norms = traits.get("norms", 2) * d
    moe_kind = traits.get("moe")
    total = active = vocab * d * (1 if f.get("tie_word_embeddings", traits["tie"]) else 2) + d
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
            mlp_total = mlp_active = 3 * d * ff + (2 * ff + d if f.get("mlp_bias") else 0)
        total += norms + attn + mlp_total
        active += norms + attn + mlp_active
    if moe_layers:
        notes.append(f"MoE on {moe_layers} of {len(kinds)} layers: {moe_text}. Active params "
                     f"include the whole input embedding ({vocab * d:,}); some publishers "
                     "leave it out of their active count.")
    if f.get("num_nextn_predict_layers"):
        notes.append(f"The {f.get('num_nextn_predict_layers')} multi-token-prediction layer(s) "
                     "are not counted.")
    return total, active, notes, state


# -- the entry point ----------------------------------------------------------------
def _shapes(f, traits):
    d, H = f.int("hidden_size"), f.int("num_attention_heads")
    kv = f.int("num_key_value_heads", H)
    if traits.get("mla"):
        hd = f.int("qk_nope_head_dim")
    elif f.get("head_dim") is not None:
        hd = f.int("head_dim")
    elif d % H:
        raise ValueError(f"hidden_size {d} is not divisible by num_attention_heads {H} "
                         "and config.json gives no head_dim")
    else:
        hd = d // H
    return d, H, kv, hd, f.int("vocab_size")


def from_hf_config(config: dict, name: str = "custom") -> ZooModel:
    """Parse a config.json dict (Llama, Qwen2/3, Mistral, Gemma 1-3, DeepSeek-V2/V3, gpt-oss,
    Qwen MoE, Qwen3-Next) into a ZooModel with parameter counts computed from its shapes."""
    text, model_type = _text_config(config)
    if model_type not in _FAMILIES:
        raise ValueError(f"model_type {model_type!r} is not supported; expected one of "
                         f"{sorted(_FAMILIES)}")
    traits = _FAMILIES[model_type]
    f = _Fields(text, model_type)
    shapes = _shapes(f, traits)
    n_layers = f.int("num_hidden_layers")
    kinds = _layer_kinds(f, n_layers, traits.get("window"))
    total, active, notes, state = _count_params(f, traits, shapes, kinds)
    model_config = _model_config(f, traits, shapes, n_layers, kinds, state, notes)
    source = (f"Hugging Face config.json (model_type {model_type!r}) read by toykv.hfconfig; "
              "parameter counts computed from its shapes")
    return ZooModel(name, model_config, total, active, (source,), " ".join(notes), verified=False)


def _model_config(f, traits, shapes, n_layers, kinds, state, notes):
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
    rope = f.get("rope_theta", (f.get("rope_parameters") or {}).get("rope_theta"))
    if rope is not None:
        extra["rope_theta"] = float(rope)
    if f.get("rms_norm_eps") is not None:
        extra["norm_eps"] = float(f.get("rms_norm_eps"))
    if "sliding" in kinds:
        extra["sliding_window"] = f.int("sliding_window")
    return ModelConfig(vocab_size=vocab, d_model=d, n_layers=n_layers, n_heads=H, n_kv_heads=kv,
                       head_dim=hd, d_ff=d_ff, max_seq_len=f.int("max_position_embeddings"),
                       tie_embeddings=bool(f.get("tie_word_embeddings", traits["tie"])),
                       layer_types=kinds, linear_state_values=state, **extra)


__all__ = ["from_hf_config"]
