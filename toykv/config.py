"""ModelConfig: the shapes of a Llama-style decoder, checked once, used everywhere.

The same config drives the numpy model, the KV-cache sizing maths and the FLOP
formulas, so a chapter never restates a shape by hand. Symbols follow the notation page
of the book: L = n_layers, D = d_model, H = n_heads, H_kv = n_kv_heads, d_h = head_dim,
F = d_ff, |V| = vocab_size, w = sliding_window, r = kv_lora_rank, d_h^R = rope_head_dim,
s = kv_sharing.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from . import layers, validate

ATTENTION_KINDS = tuple(layers.ATTENTION)     # 'mha', 'gqa', 'mqa', 'mla', 'lowrank'
LAYER_KINDS = ("full", "sliding", "linear")
MAX_LAYERS = 100_000          # far above any published model; refuses typos like 10**8


class Derived(int):
    """An integer the config worked out itself (n_kv_heads, head_dim) rather than one given.

    It behaves as a plain int in Python arithmetic. It exists so that
    dataclasses.replace(config, n_heads=16) works it out again from the new fields instead of
    keeping the old model's value. numpy sees it as an int64 scalar rather than a Python int,
    so `float32_array / config.head_dim` would give float64: write int(config.head_dim) there.
    """

    def __repr__(self) -> str:
        return int.__repr__(self)


class DerivedKind(str):
    """The attention kind when the config worked it out from n_kv_heads (see Derived)."""

    def __repr__(self) -> str:
        return str.__repr__(self)


class ConfigError(ValueError):
    """A rule of ModelConfig broken. `fields` names the fields it concerns, so a loader can
    say where they came from (a config.json field, a GGUF key) without reading the message."""

    def __init__(self, message: str, fields: tuple[str, ...] = ()):
        super().__init__(message)
        self.fields = tuple(fields)


def _fail(message: str, *fields: str):
    raise ConfigError(message, fields)


def _field(name: str, check, *args):
    """check(name, value, *args) of one field, its ValueError as a ConfigError naming it."""
    def run(value):
        try:
            return check(name, value, *args)
        except ValueError as err:
            raise ConfigError(str(err), (name,)) from None
    return run


def _given(value):
    """The value the user gave: None where the config derived it."""
    return None if isinstance(value, (Derived, DerivedKind)) else value


@dataclass(frozen=True)
class ModelConfig:
    """Shapes of the model. n_kv_heads, head_dim and attention may be left out (None).

    n_kv_heads defaults to n_heads (1 with attention='mqa'); head_dim to d_model // n_heads;
    attention to the kind n_kv_heads makes: 'mha' (H_kv = H), 'gqa' (1 < H_kv < H) or
    'mqa' (H_kv = 1). attention='mla' is DeepSeek-V2's latent attention: the cache holds
    kv_lora_rank latent values plus one rope_head_dim rotary key per token and layer, and
    head_dim is the per-head size of the non-rotary query/key part and of V.
    attention='lowrank' caches one latent of kv_lora_rank values per token and layer, from which
    a step rebuilds the keys and values of n_kv_heads heads; RoPE turns the rebuilt keys (MLA's
    expanded form without a decoupled rotary key: no absorbed form exists, see toykv.convert).
    kv_sharing = s: cross-layer KV sharing (brandon2024cla); of each kind's layers, taken s at a
    time in order, the first stores keys and values and the other s - 1 attend to them.
    layer_types: an optional per-layer pattern of 'full', 'sliding' (attends to the last
    sliding_window tokens) and 'linear' (a linear-attention layer with a fixed state of
    linear_state_values values per sequence; for sizing only, the numpy model has none).
    With sliding_window set and no layer_types, every layer slides.

    Derived values are recomputed by dataclasses.replace: replace(c, n_heads=16) of an MHA
    config is MHA with 16 heads and head_dim d_model // 16.
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
    kv_sharing: int = 1

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "max_seq_len"):
            self._set(name, _field(name, validate.count, 1)(getattr(self, name)))
        self._set("n_layers", _field("n_layers", validate.count, 1, MAX_LAYERS)(self.n_layers))
        for name in ("kv_lora_rank", "rope_head_dim", "sliding_window"):
            self._set(name, _field(name, validate.optional_count, 1)(getattr(self, name)))
        for name in ("n_kv_heads", "head_dim"):
            self._set(name, _field(name, validate.optional_count, 1)(_given(getattr(self, name))))
        self._set("rope_theta", _field("rope_theta", validate.number)(self.rope_theta))
        self._set("norm_eps", _field("norm_eps", validate.number)(self.norm_eps))
        self._set("linear_state_values", _field("linear_state_values", validate.count, 0)(
            self.linear_state_values))
        _field("tie_embeddings", validate.flag)(self.tie_embeddings)

        attention = _given(self.attention)
        if attention is not None:
            _field("attention", validate.choice, ATTENTION_KINDS)(attention)
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                _fail(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}) "
                      "unless head_dim is given", "d_model", "n_heads")
            self._set("head_dim", Derived(self.d_model // self.n_heads))
        if attention == "mla":
            self._check_mla()
        elif attention == "lowrank":
            self._check_lowrank()
        else:
            self._check_kv_heads(attention)
        self._check_layer_types()
        self._set("kv_sharing", _field("kv_sharing", validate.count, 1, self.n_layers)(
            self.kv_sharing))

    def _set(self, name, value):
        object.__setattr__(self, name, value)     # frozen: only __post_init__ writes

    def _check_kv_heads(self, attention):
        if self.kv_lora_rank is not None or self.rope_head_dim is not None:
            _fail("kv_lora_rank and rope_head_dim are for attention='mla' only (kv_lora_rank "
                  "also for 'lowrank')", "kv_lora_rank", "rope_head_dim", "attention")
        self._check_heads(attention)

    def _check_heads(self, attention):
        """head_dim even, n_kv_heads (default: by attention) dividing n_heads."""
        if self.head_dim % 2:
            _fail(f"head_dim must be even: RoPE rotates pairs of values, got {self.head_dim}",
                  "head_dim")
        n_kv = self.n_kv_heads
        if n_kv is None:
            if attention == "gqa":
                _fail("attention='gqa' needs n_kv_heads (1 < n_kv_heads < n_heads)",
                      "attention", "n_kv_heads")
            n_kv = Derived(1 if attention == "mqa" else self.n_heads)
            self._set("n_kv_heads", n_kv)
        if self.n_heads % n_kv:
            _fail(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({n_kv})",
                  "n_heads", "n_kv_heads")
        kind = "mha" if n_kv == self.n_heads else "mqa" if n_kv == 1 else "gqa"
        if attention == "lowrank":
            return
        if attention is not None and attention != kind:
            _fail(f"attention={attention!r} does not match n_kv_heads={n_kv} with "
                  f"n_heads={self.n_heads} (that is {kind!r})", "attention", "n_kv_heads",
                  "n_heads")
        self._set("attention", attention if attention is not None else DerivedKind(kind))

    def _check_lowrank(self):
        if self.kv_lora_rank is None:
            _fail("attention='lowrank' needs kv_lora_rank (a positive integer)", "kv_lora_rank")
        if self.rope_head_dim is not None:
            _fail("attention='lowrank' has no decoupled rotary key: rope_head_dim must be None "
                  f"(RoPE turns the rebuilt keys), got {self.rope_head_dim}", "rope_head_dim")
        self._check_heads("lowrank")

    def _check_mla(self):
        for name in ("kv_lora_rank", "rope_head_dim"):
            if getattr(self, name) is None:
                _fail(f"attention='mla' needs {name} (a positive integer)", name)
        if self.n_kv_heads is not None and self.n_kv_heads != self.n_heads:
            _fail(f"attention='mla' decompresses K and V for every head: n_kv_heads must be "
                  f"None or n_heads ({self.n_heads}), got {self.n_kv_heads}", "n_kv_heads")
        if self.rope_head_dim % 2:
            _fail(f"rope_head_dim must be even for RoPE, got {self.rope_head_dim}",
                  "rope_head_dim")
        if self.n_kv_heads is None:
            self._set("n_kv_heads", Derived(self.n_heads))

    def _check_layer_types(self):
        if self.layer_types is None:
            return
        if isinstance(self.layer_types, str) or not hasattr(self.layer_types, "__len__"):
            _fail(f"layer_types must be a list or tuple of {LAYER_KINDS}, "
                  f"got {self.layer_types!r}", "layer_types")
        types = tuple(self.layer_types)
        if len(types) != self.n_layers:
            _fail(f"layer_types has {len(types)} entries but n_layers is {self.n_layers}",
                  "layer_types", "n_layers")
        bad = sorted({repr(t) for t in types if not isinstance(t, str) or t not in LAYER_KINDS})
        if bad:
            _fail(f"layer_types entries must be in {LAYER_KINDS}, got {bad}", "layer_types")
        if "sliding" in types and self.sliding_window is None:
            _fail("layer_types has 'sliding' layers but sliding_window is not set",
                  "layer_types", "sliding_window")
        if "linear" in types and self.linear_state_values <= 0:
            _fail("layer_types has 'linear' layers: linear_state_values must be > 0",
                  "layer_types", "linear_state_values")
        self._set("layer_types", types)

    # -- derived quantities -------------------------------------------------
    @property
    def group_size(self) -> int:
        """Query heads that share one KV head: H / H_kv."""
        return self.n_heads // self.n_kv_heads

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """Each layer's kind: 'full', 'sliding' or 'linear'."""
        if self.layer_types is not None:
            return self.layer_types
        return ("sliding" if self.sliding_window else "full",) * self.n_layers

    @functools.cached_property
    def layers(self) -> tuple:
        """Each layer described once (toykv.layers.describe): its kind, window, cache entries,
        weight shapes, the positions it holds at a context, its FLOPs."""
        return layers.describe(self)

    @functools.cached_property
    def kv_sources(self) -> tuple[int, ...]:
        """For each layer, the layer whose cached keys and values it attends to: itself, or with
        kv_sharing = s > 1 the first of its group of s layers of its kind (toykv.layers)."""
        return layers.kv_sources(self)

    @functools.cached_property
    def layer_groups(self) -> list:
        """(spec, number of layers) per distinct layer (toykv.layers.groups)."""
        return layers.groups(self)


def check_config(config, name: str = "config") -> ModelConfig:
    """config, if it is a ModelConfig; else a ValueError that says what was given instead."""
    if isinstance(config, ModelConfig):
        return config
    hint = ""
    if isinstance(getattr(config, "config", None), ModelConfig):      # a model or a cache
        hint = f" (a {type(config).__name__}: pass its .config)"
    raise ValueError(f"{name} must be a toykv.ModelConfig, got {type(config).__name__}{hint}")


# -- the course's toy models: one place for each --------------------------------------------
def source_toy(**changes) -> ModelConfig:
    """The blog post's toy (references.bib: source_blog_numpy_toy): 2 layers, d_model 128,
    8 heads of 16, MLP 512, vocab 512."""
    base = dict(vocab_size=512, d_model=128, n_layers=2, n_heads=8, d_ff=512, max_seq_len=2048)
    base.update(changes)
    return ModelConfig(**base)


def recap_toy(**changes) -> ModelConfig:
    """Chapter 1's model, small enough to print: d_model 32, 4 heads of 8, 2 layers, d_ff 64,
    vocab 64 (its self-checks rebuild it from here)."""
    return ModelConfig(**{**dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, d_ff=64),
                          **changes})


def decode_toy(max_seq_len: int = 4096) -> ModelConfig:
    """Chapters 5 and 6's model: 6 layers, d_model 1024, 16 query heads of 64 and 4 KV heads
    (GQA), d_ff 2816, vocab 8192, tied embeddings. About 76M parameters, 0.3 GB of float32
    weights a decode step reads: far above a CPU's last-level cache, so they stream from memory."""
    return ModelConfig(vocab_size=8192, d_model=1024, n_layers=6, n_heads=16, n_kv_heads=4,
                       d_ff=2816, max_seq_len=validate.count("max_seq_len", max_seq_len, 1))


def long_context_toy(max_seq_len: int = 16_448) -> ModelConfig:
    """Chapters 7 and 8's toy: 4 layers, d_model 768, 12 heads of 64, d_ff 2048, vocab 2048.

    About 30M parameters, 120 MB in float32: well above a CPU's last-level cache, so a decode
    step streams its weights from memory. Its MHA cache at 16,384 tokens is 3.4 times that.
    """
    return ModelConfig(vocab_size=2048, d_model=768, n_layers=4, n_heads=12, d_ff=2048,
                       max_seq_len=validate.count("max_seq_len", max_seq_len, 1))


def bench_toy() -> ModelConfig:
    """The benchmark's decode model (python -m toykv.bench, sections 1, 2 and 8): 8 layers,
    d_model 1024, 16 heads, d_ff 4096, vocab 8192; ~0.57 GB of float32 weights (143M
    parameters: 8 x (4 D^2 + 3 D d_ff) + vocab x D)."""
    return ModelConfig(vocab_size=8192, d_model=1024, n_layers=8, n_heads=16, d_ff=4096,
                       max_seq_len=1024)


__all__ = ["ModelConfig", "ConfigError", "check_config", "ATTENTION_KINDS", "LAYER_KINDS",
           "source_toy", "recap_toy", "decode_toy", "long_context_toy", "bench_toy"]
