"""ModelConfig: the shapes of a Llama-style decoder, checked once, used everywhere.

The same config drives the numpy model, the KV-cache sizing maths and the FLOP
formulas, so a chapter never restates a shape by hand.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace

ATTENTION_KINDS = ("mha", "gqa", "mqa", "mla")
LAYER_KINDS = ("full", "sliding", "linear")


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of the model. Leave n_kv_heads, head_dim and attention as None to derive them.

    attention: 'mha' (n_kv_heads == n_heads), 'gqa' (1 < n_kv_heads < n_heads),
    'mqa' (n_kv_heads == 1) or 'mla' (DeepSeek-V2 latent attention: the cache holds
    kv_lora_rank latent values plus one rope_head_dim rotary key per token and layer;
    head_dim is then the per-head size of the non-rotary query/key part and of V).
    layer_types: optional per-layer pattern of 'full', 'sliding' (uses sliding_window)
    and 'linear' (a linear-attention layer with a fixed state of linear_state_values
    values per sequence instead of a growing cache; for sizing only, the numpy model
    does not implement it). With sliding_window set and no layer_types, every layer slides.
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    n_kv_heads: int | None = None
    head_dim: int | None = None
    attention: str | None = None
    kv_lora_rank: int | None = None
    rope_head_dim: int | None = None
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 2048
    sliding_window: int | None = None
    tie_embeddings: bool = True
    layer_types: tuple[str, ...] | None = None
    linear_state_values: int = 0

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len"):
            _check_positive_int(name, getattr(self, name))
        for name in ("n_kv_heads", "head_dim", "kv_lora_rank", "rope_head_dim", "sliding_window"):
            if getattr(self, name) is not None:
                _check_positive_int(name, getattr(self, name))
        if not self.rope_theta > 0:
            raise ValueError(f"rope_theta must be > 0, got {self.rope_theta!r}")
        if not self.norm_eps > 0:
            raise ValueError(f"norm_eps must be > 0, got {self.norm_eps!r}")

        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}) "
                    "unless head_dim is given")
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)

        attention = self.attention
        if attention is not None and attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {attention!r}")
        if attention == "mla":
            self._check_mla()
        else:
            self._check_kv_heads(attention)

        if self.layer_types is not None:
            types = tuple(self.layer_types)
            if len(types) != self.n_layers:
                raise ValueError(
                    f"layer_types has {len(types)} entries but n_layers is {self.n_layers}")
            bad = sorted({t for t in types if t not in LAYER_KINDS})
            if bad:
                raise ValueError(f"layer_types entries must be in {LAYER_KINDS}, got {bad}")
            if "sliding" in types and self.sliding_window is None:
                raise ValueError("layer_types has 'sliding' layers but sliding_window is not set")
            if "linear" in types and self.linear_state_values <= 0:
                raise ValueError("layer_types has 'linear' layers: linear_state_values must be > 0")
            object.__setattr__(self, "layer_types", types)
        if not isinstance(self.linear_state_values, int) or self.linear_state_values < 0:
            raise ValueError(
                f"linear_state_values must be an integer >= 0, got {self.linear_state_values!r}")

    def _check_kv_heads(self, attention):
        if self.kv_lora_rank is not None or self.rope_head_dim is not None:
            raise ValueError("kv_lora_rank and rope_head_dim are for attention='mla' only")
        n_kv = self.n_kv_heads
        if n_kv is None:
            n_kv = {"mqa": 1}.get(attention, self.n_heads)
            if attention == "gqa":
                raise ValueError("attention='gqa' needs n_kv_heads (1 < n_kv_heads < n_heads)")
            object.__setattr__(self, "n_kv_heads", n_kv)
        if self.n_heads % n_kv:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({n_kv})")
        derived = "mha" if n_kv == self.n_heads else "mqa" if n_kv == 1 else "gqa"
        if attention is not None and attention != derived:
            raise ValueError(
                f"attention={attention!r} does not match n_kv_heads={n_kv} with "
                f"n_heads={self.n_heads} (that is {derived!r})")
        object.__setattr__(self, "attention", derived)

    def _check_mla(self):
        for name in ("kv_lora_rank", "rope_head_dim"):
            if getattr(self, name) is None:
                raise ValueError(f"attention='mla' needs {name} (a positive integer)")
        if self.n_kv_heads is not None and self.n_kv_heads != self.n_heads:
            raise ValueError(
                f"attention='mla' decompresses K and V for every head: n_kv_heads must be "
                f"None or n_heads ({self.n_heads}), got {self.n_kv_heads}")
        if self.rope_head_dim % 2:
            raise ValueError(f"rope_head_dim must be even for RoPE, got {self.rope_head_dim}")
        object.__setattr__(self, "n_kv_heads", self.n_heads)

    # -- derived quantities -------------------------------------------------
    @property
    def group_size(self) -> int:
        """Query heads that share one KV head."""
        return self.n_heads // self.n_kv_heads

    @property
    def kinds(self) -> tuple[str, ...]:
        """Per-layer kind: 'full', 'sliding' or 'linear'."""
        if self.layer_types is not None:
            return self.layer_types
        return ("sliding" if self.sliding_window else "full",) * self.n_layers

    def with_(self, **changes) -> "ModelConfig":
        """A copy with some fields changed; derived fields follow the change unless given.

        e.g. cfg.with_(attention="mqa") or cfg.with_(n_kv_heads=2): the attention kind and
        n_kv_heads are derived again, head_dim too when d_model or n_heads changes.
        """
        base = {f.name: getattr(self, f.name) for f in fields(self)}
        heads = {"n_heads", "n_kv_heads", "attention", "kv_lora_rank", "rope_head_dim"}
        if changes.keys() & heads:
            base["attention"] = None
            base["n_kv_heads"] = None if "attention" in changes else base["n_kv_heads"]
            if self.attention == "mla" and changes.get("attention", "mla") != "mla":
                base["kv_lora_rank"] = base["rope_head_dim"] = None
            elif self.attention == "mla" and "attention" not in changes:
                base["attention"], base["n_kv_heads"] = "mla", None
            if changes.get("n_heads") and "n_kv_heads" not in changes and self.attention == "mha":
                base["n_kv_heads"] = None
        if changes.keys() & {"d_model", "n_heads"} and "head_dim" not in changes:
            base["head_dim"] = None
        base.update(changes)
        return ModelConfig(**base)


def _check_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value}")


def source_toy(**changes) -> ModelConfig:
    """The blog post's toy: 2 layers, d_model 128, 8 heads of 16, MLP 512, vocab 512."""
    base = dict(vocab_size=512, d_model=128, n_layers=2, n_heads=8, d_ff=512, max_seq_len=2048)
    base.update(changes)
    return ModelConfig(**base)


__all__ = ["ModelConfig", "ATTENTION_KINDS", "LAYER_KINDS", "source_toy", "replace"]
