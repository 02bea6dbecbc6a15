"""FLOP formulas for a forward pass, matching what ToyTransformer's counter counts.

Conventions: only matrix products count, 2 FLOPs per multiply-add (norms, RoPE,
softmax and the SwiGLU gate are left out: they are O(S D), not O(S D^2)). A full
pass over S tokens scores every query against all S keys, masked ones included,
as a plain implementation does. A cached step at context S is one new token
attending over S keys (the S-1 cached ones plus its own). A batch of B sequences
costs B times one sequence: nothing in a forward pass is shared between rows but the
weights, which cost bytes, not FLOPs.

With D = H d_h, MHA and a two-matrix MLP, these reduce to the formulas of
source_lecture_memory_bound and source_blog_numpy_toy, L(8 S D^2 + 4 S^2 D + 4 S D F)
+ 2 S D |V| and L(8 D^2 + 4 S D + 4 D F) + 2 D |V|; SwiGLU's third matrix adds
L 2 S D F, and GQA/MQA shrink the K and V projections (H_kv < H).
"""
from __future__ import annotations

from . import validate
from .config import ModelConfig, check_config

MAX_STEPS = 1_000_000       # generation_flops lists one count per step: a bound on its length


def keys_attended(config: ModelConfig, layer: int, n_new: int, n_cached: int) -> int:
    """Keys a layer's new queries are scored against: cached ones held plus the new ones."""
    return config.layers[layer].mask_sizes(n_new, n_cached)[0]


def layer_flops(config: ModelConfig, T: int, Tk: int, absorb: bool = False) -> int:
    """One layer, T new tokens scored against Tk keys (its LayerSpec's flops)."""
    if "linear" in config.layer_kinds:
        raise ValueError("toykv.flops has no formula for linear-attention layers")
    return config.layers[0].flops(T, Tk, absorb)


def forward_flops(config: ModelConfig, n_new: int, n_cached: int = 0, absorb: bool = False,
                  batch: int = 1) -> int:
    """A forward pass over n_new tokens that follow n_cached cached ones (0: no cache), for
    each of `batch` sequences: batch x the count of one."""
    check_config(config)
    n_new = validate.count("n_new", n_new, 1)
    n_cached = validate.count("n_cached", n_cached, 0)
    validate.flag("absorb", absorb)               # MLA's absorbed form; others ignore it
    batch = validate.count("batch", batch, 1)
    if "linear" in config.layer_kinds:
        raise ValueError("toykv.flops has no formula for linear-attention layers")
    layers = sum(n * spec.flops(n_new, spec.mask_sizes(n_new, n_cached)[0], absorb)
                 for spec, n in config.layer_groups)
    return batch * (layers + 2 * n_new * config.d_model * config.vocab_size)   # + output head


def full_pass_flops(config: ModelConfig, seq_len: int, absorb: bool = False,
                    batch: int = 1) -> int:
    """Recompute a whole sequence of seq_len tokens (each of `batch` sequences) without a cache."""
    return forward_flops(config, validate.count("seq_len", seq_len, 1), 0, absorb, batch)


def cached_step_flops(config: ModelConfig, context: int, absorb: bool = False,
                      batch: int = 1) -> int:
    """One decode step with the cache: the context-th token against context keys (x batch)."""
    return forward_flops(config, 1, validate.count("context", context, 1) - 1, absorb, batch)


def generation_flops(config: ModelConfig, prompt_len: int, new_tokens: int,
                     use_cache: bool = True, absorb: bool = False, batch: int = 1) -> list[int]:
    """FLOPs of each step of greedy generation (step 0 is the prefill), as toykv.generate runs
    it, for `batch` sequences generated together. new_tokens: at most MAX_STEPS."""
    prompt_len = validate.count("prompt_len", prompt_len, 1)
    new_tokens = validate.count("new_tokens", new_tokens, 0, MAX_STEPS)
    validate.flag("use_cache", use_cache)
    steps = [full_pass_flops(config, prompt_len, absorb, batch)] if new_tokens else []
    for j in range(1, new_tokens):
        context = prompt_len + j
        steps.append(cached_step_flops(config, context, absorb, batch) if use_cache
                     else full_pass_flops(config, context, absorb, batch))
    return steps


def source_full_pass_flops(config: ModelConfig, seq_len: int) -> int:
    """The source texts' formula L(8 S D^2 + 4 S^2 D + 4 S D F) + 2 S D |V| (MHA, two-matrix
    MLP), as source_lecture_memory_bound and source_blog_numpy_toy print it."""
    check_config(config)
    S = validate.count("seq_len", seq_len, 1)
    L, D, F, V = config.n_layers, config.d_model, config.d_ff, config.vocab_size
    return L * (8 * S * D**2 + 4 * S**2 * D + 4 * S * D * F) + 2 * S * D * V


def source_cached_step_flops(config: ModelConfig, context: int) -> int:
    """The source texts' formula L(8 D^2 + 4 S D + 4 D F) + 2 D |V| for one cached step at
    context S (source_lecture_memory_bound, source_blog_numpy_toy)."""
    check_config(config)
    S = validate.count("context", context, 1)
    L, D, F, V = config.n_layers, config.d_model, config.d_ff, config.vocab_size
    return L * (8 * D**2 + 4 * S * D + 4 * D * F) + 2 * D * V


def attention_flops(config: ModelConfig, n_new: int, n_cached: int = 0, absorb: bool = False,
                    batch: int = 1) -> int:
    """Attention's own FLOPs in a forward pass (no weight matrix): the n_new queries scored
    against the keys each layer holds and the values averaged, x batch. The part of
    forward_flops that grows with the keys (MLA's expanded form: with the keys it rebuilds)."""
    check_config(config)
    n_new = validate.count("n_new", n_new, 1)
    n_cached = validate.count("n_cached", n_cached, 0)
    validate.flag("absorb", absorb)
    batch = validate.count("batch", batch, 1)
    if "linear" in config.layer_kinds:
        raise ValueError("toykv.flops has no formula for linear-attention layers")
    keys = ((spec, n, spec.mask_sizes(n_new, n_cached)[0]) for spec, n in config.layer_groups)
    return batch * sum(n * (spec.flops(n_new, tk, absorb) - spec.flops(n_new, 0, absorb))
                       for spec, n, tk in keys)
