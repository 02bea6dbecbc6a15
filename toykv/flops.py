"""FLOP formulas for a forward pass, matching what ToyTransformer's counter counts.

Conventions: only matrix products count, 2 FLOPs per multiply-add (norms, RoPE,
softmax and the SwiGLU gate are left out: they are O(S*D), not O(S*D^2)). A full
pass over S tokens scores every query against all S keys, masked ones included,
as a plain implementation does. A cached step at context S is one new token
attending over S keys (the S-1 cached ones plus its own).

With D = d_model = n_heads*head_dim, MHA and a two-matrix MLP, these reduce to the
source's L(8SD^2 + 4S^2D + 4SDF) + 2SDV and L(8D^2 + 4SD + 4DF) + 2DV; SwiGLU's
third matrix adds L*2SDF, and GQA/MQA shrink the K and V projections.
"""
from __future__ import annotations

from .config import ModelConfig


def keys_attended(config: ModelConfig, layer: int, n_new: int, n_cached: int) -> int:
    """Keys a layer's new queries are scored against: cached ones held plus the new ones."""
    held = n_cached
    if config.layer_kinds[layer] == "sliding":
        held = min(n_cached, config.sliding_window)     # a ring holds only the window
    return held + n_new


def layer_flops(config: ModelConfig, T: int, Tk: int, absorb: bool = False) -> int:
    """One layer, T new tokens scored against Tk keys."""
    c = config
    D, H, hd, F = c.d_model, c.n_heads, c.head_dim, c.d_ff
    mlp = 3 * 2 * T * D * F                             # gate, up, down
    out_proj = 2 * T * H * hd * D
    if c.attention != "mla":
        proj = 2 * T * D * H * hd + 2 * 2 * T * D * c.n_kv_heads * hd      # q; k and v
        attn = 2 * (2 * H * T * Tk * hd)                                   # q.k and p.v
        return proj + attn + out_proj + mlp
    r, rd = c.kv_lora_rank, c.rope_head_dim
    proj = 2 * T * D * H * (hd + rd) + 2 * T * D * (r + rd)                # q; latent + rope key
    rope_scores = 2 * H * T * Tk * rd
    if absorb:       # q into latent space, attend over latents, then up-project
        attn = 2 * H * T * hd * r + 2 * (2 * H * T * Tk * r) + 2 * H * T * r * hd
    else:            # expand all Tk latents to K and V for every head
        attn = 2 * (2 * Tk * r * H * hd) + 2 * (2 * H * T * Tk * hd)
    return proj + rope_scores + attn + out_proj + mlp


def forward_flops(config: ModelConfig, n_new: int, n_cached: int = 0, absorb: bool = False) -> int:
    """A forward pass over n_new tokens that follow n_cached cached ones (0: no cache)."""
    if n_new < 1 or n_cached < 0:
        raise ValueError(f"need n_new >= 1 and n_cached >= 0, got {n_new} and {n_cached}")
    layers = sum(layer_flops(config, n_new, keys_attended(config, i, n_new, n_cached), absorb)
                 for i in range(config.n_layers))
    return layers + 2 * n_new * config.d_model * config.vocab_size          # output head


def full_pass_flops(config: ModelConfig, seq_len: int, absorb: bool = False) -> int:
    """Recompute a whole sequence of seq_len tokens without a cache."""
    return forward_flops(config, seq_len, 0, absorb)


def cached_step_flops(config: ModelConfig, context: int, absorb: bool = False) -> int:
    """One decode step with the cache: the context-th token against context keys."""
    return forward_flops(config, 1, context - 1, absorb)


def generation_flops(config: ModelConfig, prompt_len: int, new_tokens: int,
                     use_cache: bool = True, absorb: bool = False) -> list[int]:
    """FLOPs of each step of greedy generation (step 0 is the prefill), as toykv.generate runs it."""
    steps = [full_pass_flops(config, prompt_len, absorb)] if new_tokens else []
    for j in range(1, new_tokens):
        context = prompt_len + j
        steps.append(cached_step_flops(config, context, absorb) if use_cache
                     else full_pass_flops(config, context, absorb))
    return steps


def source_full_pass_flops(config: ModelConfig, seq_len: int) -> int:
    """The source texts' formula L(8SD^2 + 4S^2D + 4SDF) + 2SDV (MHA, two-matrix MLP)."""
    L, D, F, V, S = config.n_layers, config.d_model, config.d_ff, config.vocab_size, seq_len
    return L * (8 * S * D**2 + 4 * S**2 * D + 4 * S * D * F) + 2 * S * D * V


def source_cached_step_flops(config: ModelConfig, context: int) -> int:
    """The source texts' formula L(8D^2 + 4SD + 4DF) + 2DV for one cached step at context S."""
    L, D, F, V, S = config.n_layers, config.d_model, config.d_ff, config.vocab_size, context
    return L * (8 * D**2 + 4 * S * D + 4 * D * F) + 2 * D * V
