"""ToyTransformer: a Llama-style decoder in numpy, float32, with an optional KV cache.

embedding -> n_layers x [RMSNorm -> attention -> residual, RMSNorm -> SwiGLU MLP -> residual]
-> RMSNorm -> output head. RoPE is applied as Hugging Face's Llama does (rotate_half).
Weights are stored as [in, out] so every projection reads x @ W.
"""
from __future__ import annotations

import numpy as np

from .cache import KVCache
from .config import ModelConfig
from .ops import Ops


def rope_tables(head_dim: int, theta: float, n_positions: int):
    """cos and sin for every position, computed once. [n_positions, head_dim] each."""
    inv_freq = (1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32)
                                / head_dim)).astype(np.float32)          # [head_dim/2]
    freqs = np.arange(n_positions, dtype=np.float32)[:, None] * inv_freq  # [P, head_dim/2]
    angles = np.concatenate([freqs, freqs], axis=-1).astype(np.float64)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotate pairs (i, i + d/2) of x [..., T, d] by each position's angle (cos, sin [T, d])."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)   # rotate_half
    return x * cos + rotated * sin


def weight_layout(w: np.ndarray) -> np.ndarray:
    """A [n_in, n_out] float32 matrix, column-major when n_out <= n_in (as a checkpoint's
    [out, in] matrix read transposed is): OpenBLAS streams those faster in x @ W."""
    order = "F" if w.shape[1] <= w.shape[0] else "C"
    return np.asarray(w, dtype=np.float32, order=order)


class ToyTransformer:
    """A Llama-style model with seeded random weights, or the given `weights` (a loader's).

    exact=True sums every product in one fixed order, so cached and recomputed logits are
    identical bit for bit; the default BLAS backend differs by float32 rounding (see toykv.ops).
    absorb=True (MLA only) attends in latent space, with W_UK folded into the query and W_UV
    applied after the weighted sum, instead of expanding every cached latent into K and V.
    """

    def __init__(self, config: ModelConfig, seed: int = 0, exact: bool = False,
                 weights: dict | None = None, absorb: bool = False):
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a toykv.ModelConfig, got {type(config).__name__}")
        if "linear" in config.layer_kinds:
            raise ValueError("ToyTransformer has no linear-attention layers; layer_types with "
                             "'linear' are for sizing only")
        self.config = config
        self.ops = Ops(exact)
        if not isinstance(absorb, bool) or (absorb and config.attention != "mla"):
            raise ValueError(f"absorb must be True or False, and True only for attention='mla'; "
                             f"got absorb={absorb!r} with attention={config.attention!r}")
        self.absorb = absorb         # MLA: attend in latent space instead of expanding K and V
        if weights is None:
            self._init_weights(np.random.default_rng(seed))
        else:    # given arrays (a loader's): {"embed", "layers", "final_norm", "lm_head"}
            self.embed, self.final_norm = weights["embed"], weights["final_norm"]
            self.layers = [{name: weight_layout(a) if a.ndim == 2 else a for name, a in x.items()}
                           for x in weights["layers"]]
            head = weights["lm_head"]
            self.lm_head = None if head is None else weight_layout(head)
        self.set_rope()

    # -- weights ----------------------------------------------------------------
    def _init_weights(self, rng):
        c = self.config
        D, H, hd = c.d_model, c.n_heads, c.head_dim
        out_scale = 1.0 / np.sqrt(2 * c.n_layers)        # keeps the residual stream's size sane

        def w(n_in, n_out, scale=1.0):                  # [n_in, n_out], variance 1/n_in
            return weight_layout(rng.standard_normal((n_in, n_out)) * scale / np.sqrt(n_in))

        self.embed = (rng.standard_normal((c.vocab_size, D)) / np.sqrt(D)).astype(np.float32)
        self.layers = []
        for _ in range(c.n_layers):
            layer = {"attn_norm": np.ones(D, np.float32), "mlp_norm": np.ones(D, np.float32),
                     "w_gate": w(D, c.d_ff), "w_up": w(D, c.d_ff),
                     "w_down": w(c.d_ff, D, out_scale), "wo": w(H * hd, D, out_scale)}
            if c.attention == "mla":
                r, rd = c.kv_lora_rank, c.rope_head_dim
                layer.update(wq=w(D, H * (hd + rd)), w_dkv=w(D, r + rd),
                             kv_norm=np.ones(r, np.float32),
                             w_uk=w(r, H * hd), w_uv=w(r, H * hd))
            else:
                layer.update(wq=w(D, H * hd), wk=w(D, c.n_kv_heads * hd),
                             wv=w(D, c.n_kv_heads * hd))
            self.layers.append(layer)
        self.final_norm = np.ones(D, np.float32)
        self.lm_head = None if c.tie_embeddings else w(D, c.vocab_size)

    def set_rope(self):
        """(Re)build the RoPE tables from the config."""
        c = self.config
        rope_dim = c.rope_head_dim if c.attention == "mla" else c.head_dim
        self.cos, self.sin = rope_tables(rope_dim, c.rope_theta, c.max_seq_len)

    @property
    def exact(self) -> bool:
        return self.ops.exact

    @property
    def flops(self) -> int:
        """Matmul FLOPs performed so far (2 per multiply-add); take differences to time a step."""
        return self.ops.flops

    def new_cache(self, kv_dtype: str = "float32") -> KVCache:
        """An empty cache shaped for this model."""
        return KVCache(self.config, kv_dtype)

    # -- forward ----------------------------------------------------------------
    def forward(self, token_ids, cache: KVCache | None = None) -> np.ndarray:
        """Logits [len(token_ids), vocab_size]. With a cache, the tokens follow what it holds."""
        ids = self._check_ids(token_ids)
        start = 0
        if cache is not None:
            if not isinstance(cache, KVCache) or cache.config != self.config:
                raise ValueError("cache was made for a model with another config; "
                                 "use model.new_cache()")
            start = len(cache)
        if start + len(ids) > self.config.max_seq_len:
            raise ValueError(f"{start} cached + {len(ids)} new tokens exceeds max_seq_len "
                             f"{self.config.max_seq_len}")
        positions = np.arange(start, start + len(ids))
        x = self.embed[ids]                                              # [T, D]
        for i, layer in enumerate(self.layers):
            h = self.rms_norm(x, layer["attn_norm"])
            x = x + self.attention(h, layer, i, positions, cache)
            h = self.rms_norm(x, layer["mlp_norm"])
            x = x + self.mlp(h, layer)
        if cache is not None:
            cache.advance(len(ids))
        x = self.rms_norm(x, self.final_norm)
        head = self.embed.T if self.lm_head is None else self.lm_head    # [D, V]
        return self.ops.matmul(x, head)                                  # [T, V]

    __call__ = forward

    def _check_ids(self, token_ids) -> np.ndarray:
        ids = np.asarray(token_ids)
        if ids.ndim != 1:
            raise ValueError(f"token_ids must be a 1-D sequence, got shape {ids.shape}")
        if ids.size == 0:
            raise ValueError("token_ids is empty: give at least one token")
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"token_ids must be integers, got dtype {ids.dtype}")
        bad = np.flatnonzero((ids < 0) | (ids >= self.config.vocab_size))
        if bad.size:
            raise ValueError(f"token id {ids[bad[0]]} at index {bad[0]} is outside "
                             f"[0, vocab_size={self.config.vocab_size})")
        return ids

    def rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        """x / sqrt(mean(x^2) + eps) * weight, over the last axis."""
        mean_sq = self.ops.sum_last(x * x) / np.float32(x.shape[-1])
        return x / np.sqrt(mean_sq + np.float32(self.config.norm_eps)) * weight

    def mlp(self, h: np.ndarray, layer: dict) -> np.ndarray:
        """SwiGLU: down(silu(gate(h)) * up(h)). [T, D] -> [T, D]"""
        gate = self.ops.matmul(h, layer["w_gate"])                       # [T, d_ff]
        up = self.ops.matmul(h, layer["w_up"])                           # [T, d_ff]
        act = np.negative(gate)              # silu(gate) * up = gate / (1 + e^-gate) * up,
        np.exp(act, out=act)                 # computed in place: no [T, d_ff] temporaries
        act += 1
        np.divide(gate, act, out=act)
        act *= up
        return self.ops.matmul(act, layer["w_down"])

    def attention(self, h, layer, i, positions, cache):
        if self.config.attention == "mla":
            return self.mla_attention(h, layer, i, positions, cache)
        c, mm = self.config, self.ops.matmul
        T, H, Hkv, hd = len(h), c.n_heads, c.n_kv_heads, c.head_dim
        cos, sin = self.cos[positions], self.sin[positions]
        q = mm(h, layer["wq"]).reshape(T, H, hd).transpose(1, 0, 2)      # [H, T, hd]
        k = mm(h, layer["wk"]).reshape(T, Hkv, hd)                       # [T, Hkv, hd]
        v = mm(h, layer["wv"]).reshape(T, Hkv, hd)                       # [T, Hkv, hd]
        q = apply_rope(q, cos, sin)
        k = apply_rope(k.transpose(1, 0, 2), cos, sin).transpose(1, 0, 2)
        if cache is None:
            key_pos = positions
        else:
            kv, key_pos = cache.update(i, k=k, v=v)
            k, v = kv["k"], kv["v"]                                      # [Tk, Hkv, hd]
        q = q.reshape(Hkv, H // Hkv, T, hd)                              # query heads grouped by KV head
        kT = k.transpose(1, 2, 0)[:, None]                               # [Hkv, 1, hd, Tk]
        scores = mm(q, kT)                                               # [Hkv, G, T, Tk]
        scores *= np.float32(1 / np.sqrt(hd))
        p = self.softmax(scores, self.mask(positions, key_pos, i))
        out = mm(p, v.transpose(1, 0, 2)[:, None])                       # [Hkv, G, T, hd]
        out = out.reshape(H, T, hd).transpose(1, 0, 2).reshape(T, H * hd)
        return mm(out, layer["wo"])                                      # [T, D]

    def mla_attention(self, h, layer, i, positions, cache):
        """DeepSeek-V2 latent attention; self.absorb picks the absorbed or expanded form."""
        c, mm = self.config, self.ops.matmul
        T, H, hd, r, rd = len(h), c.n_heads, c.head_dim, c.kv_lora_rank, c.rope_head_dim
        cos, sin = self.cos[positions], self.sin[positions]
        q = mm(h, layer["wq"]).reshape(T, H, hd + rd).transpose(1, 0, 2)  # [H, T, hd+rd]
        q_nope, q_rope = q[..., :hd], apply_rope(q[..., hd:], cos, sin)
        ckv = mm(h, layer["w_dkv"])                                      # [T, r+rd]
        c_kv = self.rms_norm(ckv[:, :r], layer["kv_norm"])               # [T, r] the latent
        k_rope = apply_rope(ckv[:, r:], cos, sin)                        # [T, rd] shared by heads
        if cache is None:
            key_pos = positions
        else:
            kv, key_pos = cache.update(i, c_kv=c_kv, k_rope=k_rope)
            c_kv, k_rope = kv["c_kv"], kv["k_rope"]                      # [Tk, r], [Tk, rd]
        Tk = len(key_pos)
        rope_scores = mm(q_rope, k_rope.T[None])                         # [H, T, Tk]
        if self.absorb:      # fold W_UK into the query, W_UV after the weighted sum
            w_uk = layer["w_uk"].reshape(r, H, hd).transpose(1, 2, 0)    # [H, hd, r]
            q_lat = mm(q_nope, w_uk)                                     # [H, T, r]
            scores = mm(q_lat, c_kv.T[None]) + rope_scores               # [H, T, Tk]
        else:                # expand every cached latent into per-head K and V
            k_nope = mm(c_kv, layer["w_uk"]).reshape(Tk, H, hd).transpose(1, 0, 2)
            v = mm(c_kv, layer["w_uv"]).reshape(Tk, H, hd).transpose(1, 0, 2)  # [H, Tk, hd]
            scores = mm(q_nope, k_nope.transpose(0, 2, 1)) + rope_scores
        scores *= np.float32(1 / np.sqrt(hd + rd))
        p = self.softmax(scores, self.mask(positions, key_pos, i))
        if self.absorb:
            w_uv = layer["w_uv"].reshape(r, H, hd).transpose(1, 0, 2)    # [H, r, hd]
            out = mm(mm(p, c_kv[None]), w_uv)                            # [H, T, hd]
        else:
            out = mm(p, v)                                               # [H, T, hd]
        return mm(out.transpose(1, 0, 2).reshape(T, H * hd), layer["wo"])

    def mask(self, positions, key_pos, layer):
        """True where query position may see key position: causal, and inside the window."""
        allowed = key_pos[None, :] <= positions[:, None]                 # [T, Tk]
        if self.config.layer_kinds[layer] == "sliding":
            allowed &= key_pos[None, :] > positions[:, None] - self.config.sliding_window
        return allowed

    def softmax(self, scores, allowed):
        """Softmax over the last axis where allowed (elsewhere 0). Works in place on scores."""
        np.copyto(scores, np.float32(-np.inf), where=~allowed)
        scores -= scores.max(axis=-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= self.ops.sum_last(scores)
        return scores
