"""ToyTransformer: a Llama-style decoder in numpy, float32, with an optional KV cache.

embedding -> L x [RMSNorm -> attention -> residual, RMSNorm -> SwiGLU MLP -> residual]
-> RMSNorm -> output head: Llama's block (touvron2023llama2), small enough to read, as the
numpy toy of source_blog_numpy_toy is. RoPE (su2024roformer) is applied as Hugging Face's
Llama does (rotate_half). Weights are stored [in, out], so every projection of the row
vectors h reads h @ W. Shapes in comments: B sequences, T new tokens, Tk keys attended,
D = d_model, H query heads and H_kv KV heads of d_h = head_dim, F = d_ff, |V| = vocab_size.

token_ids of shape [T] is one sequence and gives logits [T, |V|]; [B, T] is a batch of B
sequences of equal length and gives [B, T, |V|], each row exactly what that sequence alone
gives (bit for bit with exact=True).
"""
from __future__ import annotations

import numpy as np

from . import validate
from .cache import KVCache, check_cache, new_pool
from .config import ModelConfig, check_config
from .kinds.base import Seen
from .layers import RESIDUAL_OUTPUTS, attention_kind, check_absorb
from .ops import Ops
from .rope import RopeTable, apply_rope, rope_cos_sin  # noqa: F401  (toykv.model.apply_rope)
from .sizing import param_count
from .watch import AttentionWatch


def weight_layout(w: np.ndarray) -> np.ndarray:
    """A [n_in, n_out] float32 matrix stored column-major, as a checkpoint's [out, in] matrix
    read transposed is: x @ W reads each output's weights as one contiguous column, and a
    block of columns as one piece (Ops.matmul's few-row product keeps a block in cache)."""
    return np.asarray(w, dtype=np.float32, order="F")


def embedding_layout(embed: np.ndarray) -> np.ndarray:
    """The embedding [|V|, D] as float32 rows: a token's vector is one contiguous row, and the
    tied head, its transpose [D, |V|], is column-major like every other weight."""
    return np.ascontiguousarray(embed, dtype=np.float32)


class Layer(dict):
    """One layer's weights by name, [in, out] matrices and norm vectors, as a dict.

    Projections that read the same input sit side by side in one matrix, so a step does one
    larger product instead of two or three (BLAS streams a wide matrix faster than several
    narrow ones): fused["qkv"] = [W_q | W_k | W_v] and fused["gate_up"] = [W_gate | W_up].
    layer["wq"] and the others are views into them, and assigning one writes into them.
    A layer that reuses another's keys and values (kv_sharing; makes_kv=False) has no W_k and
    W_v: its fused["qkv"] is W_q alone, so the product gives queries and no keys or values.
    """

    GROUPS = {"qkv": ("wq", "wk", "wv"), "gate_up": ("w_gate", "w_up")}

    def __init__(self, weights: dict, makes_kv: bool = True):
        super().__init__(weights)
        self.fused, self.makes_kv = {}, makes_kv
        for group, names in self.GROUPS.items():
            if not makes_kv:
                names = tuple(name for name in names if name not in ("wk", "wv"))
            if all(name in weights for name in names):           # MLA has no wk, wv
                matrix = weight_layout(np.concatenate([weights[n] for n in names], axis=1))
                self.fused[group], start = matrix, 0
                for name in names:                                # the views, in order
                    width = weights[name].shape[1]
                    super().__setitem__(name, matrix[:, start:start + width])
                    start += width

    def __setitem__(self, name, value):
        if name in self and any(name in self.GROUPS[group] for group in self.fused):
            if np.shape(value) != self[name].shape:
                raise ValueError(f"layer[{name!r}] has shape {self[name].shape}, got "
                                 f"{np.shape(value)}")
            self[name][...] = value                               # into the fused matrix
        else:
            super().__setitem__(name, value)

    def update(self, *args, **kwargs):
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def __reduce__(self):                     # copy, deepcopy and pickle rebuild the views
        return type(self), (dict(self), self.makes_kv)

    @classmethod
    def of(cls, layer: dict) -> Layer:
        """layer itself, or a Layer made from a plain dict of weights."""
        return layer if isinstance(layer, cls) else cls(layer)


def rows(x: np.ndarray, width: int | None = None) -> np.ndarray:
    """x [..., T, width] as the 2-D [B T, width] matrix every projection multiplies."""
    return x.reshape(-1, x.shape[-1] if width is None else width)


def weight_shapes(config: ModelConfig) -> dict:
    """The shape of every weight: {'embed', 'final_norm', 'lm_head' (None when tied), 'layers':
    a {name: shape} per layer (its LayerSpec's; with kv_sharing the reusing layers have no K/V
    projections)}. Projections are [in, out]; norms vectors."""
    c = check_config(config)
    return {"embed": (c.vocab_size, c.d_model), "final_norm": (c.d_model,),
            "lm_head": None if c.tie_embeddings else (c.d_model, c.vocab_size),
            "layers": [spec.weight_shapes for spec in c.layers]}


def _checked(name: str, array, shape, layout=weight_layout) -> np.ndarray:
    """A float32 copy of one given weight in its layout, after checking type, shape and values."""
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        what = array.dtype if isinstance(array, np.ndarray) else type(array).__name__
        raise ValueError(f"weights{name} must be a floating-point numpy array, got {what}")
    if array.shape != shape:
        raise ValueError(f"weights{name} has shape {array.shape}, the config needs {shape}")
    with np.errstate(over="ignore"):                   # too large for float32 -> inf: refused
        array = layout(array) if array.ndim == 2 else array.astype(np.float32)
    if not np.isfinite(array).all():
        raise ValueError(f"weights{name} holds NaN or infinite values (or values too large "
                         "for float32)")
    return array


def check_weights(weights, config: ModelConfig) -> dict:
    """Given weights as float32 arrays, after checking names, shapes and values against the
    config: {'embed', 'final_norm', 'lm_head', 'layers': [a dict per layer]} (weight_shapes)."""
    shapes = weight_shapes(config)
    if not isinstance(weights, dict):
        raise ValueError(f"weights must be a dict, got {type(weights).__name__}")
    required = {"embed", "final_norm", "layers"} | ({"lm_head"} if shapes["lm_head"] else set())
    missing, unknown = sorted(required - set(weights)), sorted(set(weights) - set(shapes))
    if missing or unknown:
        raise ValueError(f"weights needs the keys {sorted(required)}; missing {missing}, "
                         f"unexpected {unknown}")
    if shapes["lm_head"] is None and weights.get("lm_head") is not None:
        raise ValueError("weights['lm_head'] must be None: the config ties the output head "
                         "to the embedding (tie_embeddings=True)")
    layers = weights["layers"]
    if not isinstance(layers, (list, tuple)) or len(layers) != config.n_layers:
        got = len(layers) if isinstance(layers, (list, tuple)) else type(layers).__name__
        raise ValueError(f"weights['layers'] must be a list of n_layers={config.n_layers} "
                         f"dicts, got {got}")
    checked = {key: None if shapes[key] is None else
               _checked(f"[{key!r}]", weights[key], shapes[key],
                        embedding_layout if key == "embed" else weight_layout)
               for key in ("embed", "final_norm", "lm_head")}
    checked["layers"] = []
    for i, (layer, spec) in enumerate(zip(layers, config.layers)):
        expected = spec.weight_shapes
        names = set(layer) if isinstance(layer, dict) else set()
        if names != set(expected):
            raise ValueError(f"weights['layers'][{i}] must be a dict with the keys "
                             f"{sorted(expected)}; missing {sorted(set(expected) - names)}, "
                             f"unexpected {sorted(names - set(expected))}")
        checked["layers"].append({key: _checked(f"['layers'][{i}][{key!r}]", array,
                                                expected[key])
                                  for key, array in layer.items()})
    return checked


def check_model(model, name: str = "model") -> ToyTransformer:
    """model, if it is a ToyTransformer; else a ValueError that says what was given instead."""
    if isinstance(model, ToyTransformer):
        return model
    hint = ""
    if isinstance(model, (ModelConfig, KVCache)):
        hint = " (build one with toykv.ToyTransformer(config))"
    raise ValueError(f"{name} must be a toykv.ToyTransformer, got {type(model).__name__}{hint}")


class ToyTransformer:
    """A Llama-style model with seeded random weights, or the given `weights` (a loader's).

    exact=True sums every product in one fixed order, so cached and recomputed logits are
    identical bit for bit, and so is every row of a batch to its sequence run alone; the
    default BLAS backend differs by float32 rounding (see toykv.ops).
    absorb=True (MLA only) attends in latent space, with W_UK folded into the query and W_UV
    applied after the weighted sum, instead of expanding every cached latent into K and V
    (deepseek2024v2, section 2.1).
    """

    def __init__(self, config: ModelConfig, seed: int = 0, exact: bool = False,
                 weights: dict | None = None, absorb: bool = False):
        check_config(config)
        if "linear" in config.layer_kinds:
            raise ValueError("ToyTransformer has no linear-attention layers; layer_types with "
                             "'linear' are for sizing only")
        validate.flag("exact", exact)
        self.config = config
        self._eps = np.float32(config.norm_eps)     # RMSNorm's epsilon, as float32
        self.ops = Ops(exact)
        self.absorb = check_absorb(config, absorb)   # MLA: attend in latent space
        if weights is None:
            seed = validate.count("seed", seed, 0)
            validate.fits_in_memory(
                f"a ToyTransformer of {param_count(config):,} float32 parameters",
                4 * param_count(config), "toykv runs small models; use toykv.sizing for big ones")
            self._init_weights(np.random.default_rng(seed))
        else:    # given arrays (a loader's): {"embed", "layers", "final_norm", "lm_head"}
            given = check_weights(weights, config)
            self.embed, self.final_norm = given["embed"], given["final_norm"]
            self.layers = [Layer(layer, not spec.shares_kv)
                           for layer, spec in zip(given["layers"], config.layers)]
            self.lm_head = given["lm_head"]
        self._watching = {}                         # layer -> an AttentionWatch recording it
        rope_dim = config.layers[0].rope_dim
        self.cos = RopeTable(0, config.max_seq_len, rope_dim, config.rope_theta)
        self.sin = RopeTable(1, config.max_seq_len, rope_dim, config.rope_theta)

    # -- weights ----------------------------------------------------------------
    def _init_weights(self, rng):
        """Seeded weights of every layer's shapes (its LayerSpec), drawn in the spec's order:
        matrices with variance 1/n_in (smaller for those that feed the residual stream), norms
        of ones."""
        c = self.config
        out_scale = 1.0 / np.sqrt(2 * c.n_layers)        # keeps the residual stream's size sane

        def w(n_in, n_out, scale=1.0):                  # [n_in, n_out], variance 1/n_in
            return weight_layout(rng.standard_normal((n_in, n_out)) * scale / np.sqrt(n_in))

        self.embed = embedding_layout(rng.standard_normal((c.vocab_size, c.d_model))
                                      / np.sqrt(c.d_model))
        self.layers = [Layer({name: np.ones(shape, np.float32) if len(shape) == 1 else
                              w(*shape, out_scale if name in RESIDUAL_OUTPUTS else 1.0)
                              for name, shape in spec.weights}, not spec.shares_kv)
                       for spec in c.layers]
        self.final_norm = np.ones(c.d_model, np.float32)
        self.lm_head = None if c.tie_embeddings else w(c.d_model, c.vocab_size)

    @property
    def weight_nbytes(self) -> int:
        """Bytes of every weight array, a tied embedding once: what a decode step reads, where
        the output head is the tied embedding (an untied input embedding is only looked up)."""
        arrays = [self.embed, self.final_norm] + [a for layer in self.layers
                                                  for a in layer.values()]
        if self.lm_head is not None:
            arrays.append(self.lm_head)
        return sum(a.nbytes for a in arrays)

    def rope(self, positions) -> tuple[np.ndarray, np.ndarray]:
        """(cos, sin) of RoPE's angles at `positions`: [T, d] each (d = d_h, or d_h^R for MLA)."""
        return self.cos[positions], self.sin[positions]

    @property
    def attend(self):
        """The attention form of this model's layers, as its attention kind says
        (toykv.layers.ATTENTION): attention (H_kv heads of keys and values), mla_attention
        (MLA's latent) or lowrank_attention (a latent rebuilt into H_kv heads)."""
        return getattr(self, attention_kind(self.config).forward)

    @property
    def exact(self) -> bool:
        return self.ops.exact

    @property
    def flops(self) -> int:
        """Matmul FLOPs performed so far (2 per multiply-add); take differences to time a step."""
        return self.ops.flops

    def new_cache(self, batch: int | None = None, kv_dtype: str = "float32",
                  capacity: int | None = None, policy=None, quant=None, pool=None) -> KVCache:
        """An empty cache for this model: one sequence (batch=None) or B sequences (batch=B).
        capacity: positions to allocate per layer now (default max_seq_len; it grows).
        policy: what it keeps (a toykv.CachePolicy; default every token); quant: quantized
        storage (a toykv.kvquant.QuantScheme); pool: a BlockPool whose blocks it uses."""
        cache = KVCache(self.config, batch, kv_dtype, capacity, policy, quant, pool)
        cache._claim(self)
        return cache

    def new_paged_cache(self, num_blocks: int, block_size: int = 16,
                        kv_dtype: str = "float32"):
        """A pool of num_blocks blocks of block_size tokens for many sequences of this model
        (toykv.paged): pool.new_sequence() gives each one a cache forward accepts."""
        return new_pool(self, num_blocks, block_size, kv_dtype)

    # -- forward ----------------------------------------------------------------
    def forward(self, token_ids, cache: KVCache | None = None) -> np.ndarray:
        """Logits [T, |V|] of token_ids [T], or [B, T, |V|] of a batch [B, T]. With a cache the
        tokens follow the len(cache) tokens it holds (per sequence), and are added to it: all
        or nothing, so a pass that fails leaves the cache as it was. Without a cache, a model
        whose layers share keys and values (kv_sharing) reads them through a cache of the pass
        alone, dropped after it."""
        ids, batched = self.check_ids(token_ids)                         # [B, T]
        B, T = ids.shape
        start = 0
        if cache is not None:
            self.check_cache(cache, B if batched else None)
            start = len(cache)
        elif self.config.kv_sharing > 1 and T <= self.config.max_seq_len:
            cache = self.new_cache(B if batched else None, capacity=T)   # the pass's own
        if start + T > self.config.max_seq_len:
            raise ValueError(f"{start} cached + {T} new tokens exceeds max_seq_len "
                             f"{self.config.max_seq_len}")
        validate.fits_in_memory(
            f"attention scores of {B} x {T} new tokens against {start + T} keys",
            4 * B * self.config.n_heads * T * (start + T),                # [B, H, T, Tk] float32
            "feed a long sequence in chunks through a cache")
        if cache is not None:
            cache.check_step(T)                       # a finished sequence, too few blocks
            cache._claim(self)                        # every check passed: now it is ours
        positions = np.arange(start, start + T)
        rope = self.cos[start:start + T], self.sin[start:start + T]      # [T, d], every layer
        x = self.embed[ids if batched else ids[0]]                       # [..., T, D]
        attend = self.attend
        try:
            for i, layer in enumerate(self.layers):
                h = self.rms_norm(x, layer["attn_norm"])
                x = x + attend(h, layer, i, positions, cache, rope)
                h = self.rms_norm(x, layer["mlp_norm"])
                x = x + self.mlp(h, layer)
        except BaseException:                         # a step is all or nothing
            if cache is not None:
                cache.discard()
            raise
        if cache is not None:
            cache.advance(T, ids if batched else ids[0])
        x = self.rms_norm(x, self.final_norm)
        head = self.embed.T if self.lm_head is None else self.lm_head    # [D, |V|]
        return self.ops.matmul(rows(x), head).reshape(*x.shape[:-1], -1)   # [..., T, |V|]

    __call__ = forward

    def check_ids(self, token_ids) -> tuple[np.ndarray, bool]:
        """(ids as [B, T], whether they came as a batch): one sequence [T] is a batch of one.
        Integers only (numpy integers welcome), each in [0, vocab_size); ValueError otherwise."""
        if isinstance(token_ids, (str, bytes)):
            raise ValueError(f"token_ids must be integers, got a {type(token_ids).__name__} "
                             f"({token_ids[:20]!r}): a tokenizer's encode() gives the ids")
        try:
            ids = np.asarray(token_ids)
        except ValueError:                             # numpy refuses rows of unequal length
            raise ValueError("token_ids rows have different lengths (ragged); a batch needs "
                             "B rows of the same length T") from None
        if ids.dtype == object:
            raise ValueError("token_ids rows have different lengths (ragged), or hold "
                             "something other than integers")
        if ids.ndim not in (1, 2):
            raise ValueError(f"token_ids must be 1-D [T] (one sequence) or 2-D [B, T] (a batch), "
                             f"got shape {ids.shape}")
        if ids.size == 0:
            raise ValueError(f"token_ids is empty (shape {ids.shape}): give at least one "
                             "token per sequence and at least one sequence")
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"token_ids must be integers, got dtype {ids.dtype}")
        bad = np.flatnonzero((ids < 0) | (ids >= self.config.vocab_size))
        if bad.size:
            where = tuple(int(j) for j in np.unravel_index(bad[0], ids.shape))
            index = where if ids.ndim == 2 else where[0]
            raise ValueError(f"token id {ids[where]} at index {index} is outside "
                             f"[0, vocab_size={self.config.vocab_size})")
        return (ids, True) if ids.ndim == 2 else (ids[None], False)

    def check_cache(self, cache, rows: int | None):
        """The cache must be a KVCache of this config, this model's or no model's yet, batched as
        the input is (rows None: one sequence). Claims nothing: forward does, once every check
        has passed."""
        if isinstance(cache, KVCache) and cache.batch == rows and cache.owned_by(self):
            return                                       # checked when this model claimed it
        check_cache(cache)
        if cache.config != self.config:
            raise ValueError("cache was made for a model with another config; "
                             "use model.new_cache()")
        if cache._owner is not None and not cache.owned_by(self):
            cache._claim(self)                           # raises: another model's cache
        if rows is None and cache.batch is not None:
            raise ValueError(f"token_ids is 1-D (one sequence) but the cache holds a batch of "
                             f"{cache.batch}; give token_ids of shape [{cache.batch}, T]")
        if rows is not None and cache.batch is None:
            raise ValueError(f"token_ids is 2-D ({rows} rows) but the cache holds one sequence; "
                             "a batch of B rows needs a cache from new_cache(batch=B)")
        if rows is not None and rows != cache.batch:
            raise ValueError(f"token_ids has {rows} rows but the cache holds a batch of "
                             f"{cache.batch} sequences")

    def rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """x / sqrt(mean(x^2) + eps) * weight, over the last axis."""
        mean_sq = self.ops.sum_last(x * x) / np.float32(x.shape[-1])
        return x / np.sqrt(mean_sq + self._eps) * weight

    def mlp(self, h: np.ndarray, layer: dict) -> np.ndarray:
        """SwiGLU: (silu(h W_gate) * (h W_up)) W_down. [..., T, D] -> the same shape"""
        F = self.config.d_ff
        gate_up = self.ops.matmul(rows(h), Layer.of(layer).fused["gate_up"])   # [B T, 2F]
        gate, up = gate_up[:, :F], gate_up[:, F:]                        # [B T, F] each
        act = np.negative(gate)              # silu(gate) * up = gate / (1 + e^-gate) * up,
        np.exp(act, out=act)                 # computed in place: no [B T, F] temporaries
        act += 1
        np.divide(gate, act, out=act)
        act *= up
        return self.ops.matmul(act, layer["w_down"]).reshape(h.shape)

    def attention(self, h, layer, i, positions, cache=None, rope=None):
        """Layer i's attention (MHA, GQA, MQA) for the new tokens at
        `positions` [T]: h [..., T, D] -> [..., T, D] (... : one sequence,
        or B). With a cache (forward has checked it) their keys and values
        join it, and the queries attend over every key it holds.
        rope: (cos, sin) [T, d_h] of the positions, if already looked up."""
        c, mm = self.config, self.ops.matmul
        H, Hkv, G, hd = c.n_heads, c.n_kv_heads, c.group_size, c.head_dim
        *lead, T, D = h.shape
        # project: every head's query, key and value in one product
        qkv = mm(rows(h), Layer.of(layer).fused["qkv"])  # [B T, (H+2H_kv) d_h]
        qkv = qkv.reshape(*lead, T, -1, hd)         # [..., T, heads, d_h]
        q = qkv[..., :H, :]                         # [..., T, H, d_h]
        k = qkv[..., H:H + Hkv, :]                  # [..., T, H_kv, d_h]
        v = qkv[..., H + Hkv:, :]                   # [..., T, H_kv, d_h]
        # rotate: RoPE turns each query and key by its position's angle
        cos, sin = self.rope(positions) if rope is None else rope  # [T, d_h]
        cos, sin = cos[:, None], sin[:, None]       # [T, 1, d_h]
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        # append to the cache: attend over all it holds, the new keys too
        if cache is None:
            seen = self.alone(i, positions, k=k, v=v)  # new keys only
        else:
            seen = cache.append(i, k=k, v=v)        # every key it holds
        k, v = seen.kv["k"], seen.kv["v"]           # [..., Tk, H_kv, d_h]
        # group the query heads: the G queries that share each KV head
        q = np.swapaxes(q, -3, -2)                  # [..., H, T, d_h]
        q = q.reshape(*lead, Hkv, G, T, hd)         # [..., H_kv, G, T, d_h]
        k = np.swapaxes(k, -3, -2)[..., None, :, :]  # [..., H_kv, 1, Tk, d_h]
        v = np.swapaxes(v, -3, -2)[..., None, :, :]  # [..., H_kv, 1, Tk, d_h]
        # attend: softmax(q k^T / sqrt(d_h)) v, over the keys a query sees
        scores = mm(q, np.swapaxes(k, -1, -2))      # [..., H_kv, G, T, Tk]
        scores *= np.float32(1 / np.sqrt(hd))
        p = self.softmax(scores, seen)              # 0 where the mask hides
        out = mm(p, v)                              # [..., H_kv, G, T, d_h]
        # project out: the heads side by side, through W_O
        out = out.reshape(*lead, H, T, hd)          # [..., H, T, d_h]
        out = np.swapaxes(out, -3, -2)              # [..., T, H, d_h]
        out = mm(rows(out, H * hd), layer["wo"])    # [B T, D]
        return out.reshape(h.shape)                 # [..., T, D]

    def mla_attention(self, h, layer, i, positions, cache=None, rope=None):
        """DeepSeek-V2's latent attention (deepseek2024v2), h [..., T, D] -> the same shape, as
        attention() takes it (rope: cos, sin [T, d_h^R]); the cache holds c_kv [r] and k_rope
        [d_h^R] per token. self.absorb picks the absorbed or expanded form. Every query head
        shares the latent and the rotary key: a product with them broadcasts over the heads,
        and Ops.matmul reads a long one once for all heads."""
        c, mm = self.config, self.ops.matmul
        *lead, T, D = h.shape
        H, hd, r, rd = c.n_heads, c.head_dim, c.kv_lora_rank, c.rope_head_dim
        cos, sin = self.rope(positions) if rope is None else rope        # [T, d_h^R]
        # project: per-head queries, and one latent and rotary key per token for all heads
        q = mm(rows(h), layer["wq"]).reshape(*lead, T, H, hd + rd)
        q = np.swapaxes(q, -3, -2)                                       # [..., H, T, d_h + d_h^R]
        q_nope, q_rope = q[..., :hd], apply_rope(q[..., hd:], cos, sin)  # RoPE: rotary parts
        new = {}                             # none for a layer that reuses another's (kv_sharing)
        if "w_dkv" in layer:
            ckv = mm(rows(h), layer["w_dkv"])                            # [B T, r + d_h^R]
            new["c_kv"] = self.rms_norm(ckv[:, :r], layer["kv_norm"]).reshape(*lead, T, r)
            new["k_rope"] = apply_rope(ckv[:, r:].reshape(*lead, T, rd), cos, sin)  # shared
        # append to the cache: the latent and the rotary key of every position held
        if cache is None:
            seen = self.alone(i, positions, **new)                      # these only, causally
        else:
            seen = cache.append(i, **new)                               # + positions, mask
        c_kv, k_rope = seen.kv["c_kv"], seen.kv["k_rope"]                # [..., Tk, r], [.., d_h^R]
        Tk = len(seen.positions)
        # attend: every head scores the shared rotary keys (and, absorbed, the latents)
        rope_scores = mm(q_rope, np.swapaxes(k_rope, -1, -2)[..., None, :, :])  # [.., H, T, Tk]
        if self.absorb:      # fold W_UK into the query, score against the latent itself
            w_uk = layer["w_uk"].reshape(r, H, hd).transpose(1, 2, 0)    # [H, d_h, r]
            q_lat = mm(q_nope, w_uk)                                     # [..., H, T, r]
            scores = mm(q_lat, np.swapaxes(c_kv, -1, -2)[..., None, :, :])   # [..., H, T, Tk]
        else:                # expand every cached latent into per-head K and V
            k_nope = mm(rows(c_kv), layer["w_uk"]).reshape(*lead, Tk, H, hd)
            v = mm(rows(c_kv), layer["w_uv"]).reshape(*lead, Tk, H, hd)
            k_nope, v = np.swapaxes(k_nope, -3, -2), np.swapaxes(v, -3, -2)   # [..., H, Tk, d_h]
            scores = mm(q_nope, np.swapaxes(k_nope, -1, -2))             # [..., H, T, Tk]
        scores = scores + rope_scores
        scores *= np.float32(1 / np.sqrt(hd + rd))
        p = self.softmax(scores, seen)                                   # [..., H, T, Tk]
        if self.absorb:      # the weighted sum of latents, then W_UV per head
            w_uv = layer["w_uv"].reshape(r, H, hd).transpose(1, 0, 2)    # [H, r, d_h]
            out = mm(mm(p, c_kv[..., None, :, :]), w_uv)                 # [..., H, T, d_h]
        else:
            out = mm(p, v)                                               # [..., H, T, d_h]
        # project out: the heads side by side, through W_O
        out = np.swapaxes(out, -3, -2)                                   # [..., T, H, d_h]
        return mm(rows(out, H * hd), layer["wo"]).reshape(h.shape)       # [..., T, D]

    def lowrank_attention(self, h, layer, i, positions, cache=None, rope=None):
        """A latent per token rebuilt into H_kv heads of keys and values ('lowrank', as
        toykv.convert.low_rank_kv makes it), h [..., T, D] -> the same shape, as attention()
        takes it. The cache holds c_kv [r] per token; a step rebuilds K = RoPE(c_kv W_UK), at
        the positions the cache says the keys have, and V = c_kv W_UV, then attends as
        attention() does. With RoPE after the rebuild, W_UK cannot be folded into the query:
        DeepSeek-V2 keeps a rotary key apart for that (deepseek2024v2)."""
        c, mm = self.config, self.ops.matmul
        H, Hkv, G, hd = c.n_heads, c.n_kv_heads, c.group_size, c.head_dim
        *lead, T, D = h.shape
        cos, sin = self.rope(positions) if rope is None else rope        # [T, d_h]
        # project: per-head queries, and one latent of r values per token
        q = mm(rows(h), layer["wq"]).reshape(*lead, T, H, hd)
        q = apply_rope(q, cos[:, None], sin[:, None])                    # [..., T, H, d_h]
        new = {}                             # none for a layer that reuses another's (kv_sharing)
        if "w_dkv" in layer:
            new["c_kv"] = mm(rows(h), layer["w_dkv"]).reshape(*lead, T, -1)   # [..., T, r]
        # append to the cache: the latents of every position held
        seen = self.alone(i, positions, **new) if cache is None else cache.append(i, **new)
        c_kv, Tk = seen.kv["c_kv"], len(seen.positions)                  # [..., Tk, r]
        # rebuild every held position's keys and values; RoPE turns the keys where they sit
        k = mm(rows(c_kv), layer["w_uk"]).reshape(*lead, Tk, Hkv, hd)
        v = mm(rows(c_kv), layer["w_uv"]).reshape(*lead, Tk, Hkv, hd)
        k_cos, k_sin = self.rope(seen.positions)                         # [Tk, d_h]
        k = apply_rope(k, k_cos[:, None], k_sin[:, None])
        # attend as attention() does: G query heads per rebuilt KV head
        q = np.swapaxes(q, -3, -2).reshape(*lead, Hkv, G, T, hd)         # [..., H_kv, G, T, d_h]
        k = np.swapaxes(k, -3, -2)[..., None, :, :]                      # [..., H_kv, 1, Tk, d_h]
        v = np.swapaxes(v, -3, -2)[..., None, :, :]
        scores = mm(q, np.swapaxes(k, -1, -2))                           # [..., H_kv, G, T, Tk]
        scores *= np.float32(1 / np.sqrt(hd))
        out = mm(self.softmax(scores, seen), v).reshape(*lead, H, T, hd)
        out = np.swapaxes(out, -3, -2)                                   # [..., T, H, d_h]
        return mm(rows(out, H * hd), layer["wo"]).reshape(h.shape)       # [..., T, D]

    def alone(self, layer: int, positions, **new: np.ndarray) -> Seen:
        """What a step without a cache attends over in layer `layer`: its own keys and values
        (new: [..., T, ...] per name), causally (and inside a sliding window). A layer that
        reuses another's (kv_sharing) has none of its own: forward runs such a model through a
        cache of the pass."""
        source = self.config.kv_sources[layer]
        if source != layer:
            raise ValueError(f"layer {layer} reuses layer {source}'s keys and values "
                             f"(kv_sharing={self.config.kv_sharing}): run it with a cache")
        name, shape = self.config.layers[layer].entries[0]
        value = new[name]                                   # [T, ...] or [B, T, ...]
        batch = value.shape[0] if value.ndim > len(shape) + 1 else None
        return Seen(new, positions, self.mask(positions, positions, layer), positions,
                    layer=layer, batch=batch)

    def mask(self, positions, key_pos, layer):
        """Bool [T, Tk]: True where a query position may see a key position (causal, and inside
        a sliding window); None when every query sees every key (a decode step of a full
        layer), as the layer's LayerSpec says."""
        return self.config.layers[layer].allowed(positions, key_pos)

    def softmax(self, scores, seen=None):
        """Softmax over the last axis where `seen` lets a query see a key (elsewhere 0): seen is
        a Seen (its mask), a bool mask [T, Tk], or None (everywhere). Works in place on scores.
        A Seen's weights are then shown to whoever asked for them: its cache layer (H2O counts
        them) and anyone watching that layer (watch_attention). A Seen with `rows` (a kind whose
        keys for a query depend on the weights of the queries before it, as H2O's do) goes one
        query at a time: it asks which keys query t sees, then shows it query t's weights."""
        rows = seen.rows if isinstance(seen, Seen) else None
        if rows is not None:
            for t in range(scores.shape[-2]):                # [..., Tk] each, in order
                row = scores[..., t, :]
                np.copyto(row, np.float32(-np.inf), where=~rows.visible(t))
                self._normalise(row)
                rows.saw(t, row)
        else:
            allowed = seen.mask if isinstance(seen, Seen) else seen
            if allowed is not None:
                np.copyto(scores, np.float32(-np.inf), where=~allowed)
            self._normalise(scores)
        if isinstance(seen, Seen):
            if seen.observe is not None and rows is None:
                seen.observe(scores)
            if seen.layer in self._watching:
                self._watching[seen.layer].see(scores, seen)
        return scores

    def _normalise(self, scores):
        """exp(scores - max) / sum over the last axis, in place (-inf: weight 0)."""
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= self.ops.sum_last(scores)

    def watch_attention(self, layer: int = 0) -> AttentionWatch:
        """Record layer `layer`'s attention weights during forward passes: `with
        model.watch_attention(0) as watch: model.forward(...)`, then watch.steps (one
        AttentionStep per pass: weights [H, T, Tk] ([B, H, T, Tk]), queries [T], keys [Tk])."""
        layer = validate.count("layer", layer, 0, self.config.n_layers - 1)
        return AttentionWatch(self, layer)
