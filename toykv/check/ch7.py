"""Self-checks for chapter 7's exercises (shrinking the cache). Each prints right or a hint.

Expected values are computed here with toykv, so the check and the chapter cannot drift.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..config import ModelConfig
from ..flops import cached_step_flops
from ..model import ToyTransformer, apply_rope
from ..sizing import kv_bytes_per_token, kv_cache_bytes
from ..zoo import get
from ._core import answer_check, describe, not_a_function, plain, _say, whole


def _ex1_config():
    """The exercise's model: 32 layers, 32 query heads of 128, 4 KV heads."""
    return ModelConfig(vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=4,
                       d_ff=14336)


def ch7_ex1(answer):
    """Bytes one token adds to an int8 cache with float32 scales (32 layers, 4 KV heads of 128)."""
    c = _ex1_config()
    int8 = lambda config: kv_cache_bytes(config, 1, bytes_per_value=1, scale_bytes=4)
    one_scale = kv_cache_bytes(c, 1, bytes_per_value=1) + c.n_layers * 2 * 4
    hints = [
        (kv_cache_bytes(c, 1, bytes_per_value=1),
         "that is the int8 values alone: add a 4-byte scale per position, KV head, and K or V."),
        (int8(replace(c, n_kv_heads=c.n_heads)),
         "you used the 32 query heads; the cache stores the 4 KV heads."),
        (int8(c) // 2, "a token stores a key and a value in every layer: the factor 2."),
        (kv_cache_bytes(c, 1, bytes_per_value=2),
         "that is 2 bytes per value (bf16) without scales; int8 stores 1 byte per value."),
        (one_scale, "the scales are per KV head: 2 x 4 of them per layer, not 2."),
    ]
    return answer_check(answer, int8(c), hints,
                        what="a whole number of bytes")


def ch7_ex2(answer):
    """How many times smaller Kimi K2's MLA cache is than MHA with its 64 heads of 128."""

    def mha_over_mla(config):
        mha = replace(config, attention=None, n_kv_heads=config.n_heads, kv_lora_rank=None,
                      rope_head_dim=None)
        return kv_bytes_per_token(mha) / kv_bytes_per_token(config)

    k2 = get("kimi-k2").config
    expected = mha_over_mla(k2)
    hints = [
        (mha_over_mla(get("deepseek-v2").config),
         "that is DeepSeek-V2's factor, with 128 heads; Kimi K2 has 64."),
        (expected / 2, "MHA caches a key and a value per head: 2 x 64 x 128 values per layer."),
        (1 / expected, "that is MLA / MHA; the question asks MHA / MLA."),
        (2 * k2.n_heads * k2.head_dim / k2.kv_lora_rank,
         "the MLA cache also holds the 64-value rotary key beside the 512-value latent."),
    ]
    return answer_check(answer, expected, hints, rel=0.005,
                        what="a ratio (a number)")


def ch7_ex3(answer):
    """Smallest context at which Gemma 3 27B's global layers hold more cache than its local ones."""
    c = get("gemma-3-27b").config
    n_global, n_local = c.layer_kinds.count("full"), c.layer_kinds.count("sliding")
    w = c.sliding_window
    expected = n_local * w // n_global + 1              # past the window: n_global S > n_local w
    hints = [
        (expected - 1, f"at that context the global layers still hold a little less than the "
                       f"local ones ({n_global} x {expected - 1:,} <= {n_local} x {w:,})."),
        (5 * w, "that assumes 5 local layers per global one exactly; count the layers: layers "
                "5, 11, ..., 59 are global."),
        ((c.n_layers - 11) * w // 11 + 1,
         "62 layers hold 10 global ones (5, 11, ..., 59), not 11."),
        (w, "the window is where the local layers stop growing, not where the global ones pass "
            "them."),
    ]
    return answer_check(answer, expected, hints,
                        what="a whole number of tokens")


def ch7_ex4(answer):
    """DeepSeek-V2: FLOPs per extra cached position, expanded over absorbed (toykv.flops)."""
    c = get("deepseek-v2").config
    per_position = {absorb: cached_step_flops(c, 1001, absorb) - cached_step_flops(c, 1000, absorb)
                    for absorb in (False, True)}
    expected = per_position[False] / per_position[True]
    hints = [
        (c.head_dim, "that is the hand value d_h; toykv also counts the scores: the rotary ones "
                     "(2 H d_h^R) in both forms, the non-rotary ones (4 H d_h) in the expanded "
                     "form (use the difference of flops.cached_step_flops at two contexts)."),
        (1 / expected, "that is absorbed / expanded; the question asks expanded / absorbed."),
    ]
    return answer_check(answer, expected, hints, rel=0.01,
                        what="a ratio (a number)")


# -- exercise 5: the absorbed MLA step, run against toykv's own MLA layer ---------------------
MLA_TOY = ModelConfig(vocab_size=64, d_model=64, n_layers=1, n_heads=4, head_dim=16, d_ff=64,
                      attention="mla", kv_lora_rank=32, rope_head_dim=8, max_seq_len=64)


def _mla_cases():
    """Inputs of one decode step of toykv's expanded MLA layer, and its output: for prompts of
    5 and 11 tokens, (q_nope [H, d_h], q_rope [H, d_h^R], c_kv [S, r], k_rope [S, d_h^R], w_uk,
    w_uv [r, H d_h], w_o [H d_h, D], toykv's output [D]), the new token's entries included."""
    c = MLA_TOY
    H, hd, rd = c.n_heads, c.head_dim, c.rope_head_dim
    model = ToyTransformer(c, seed=7, absorb=False)
    layer, rng, cases = model.layers[0], np.random.default_rng(7), []
    for n in (5, 11):
        cache = model.new_cache()
        model.forward([int(t) for t in rng.integers(0, c.vocab_size, n)], cache)
        h = rng.standard_normal((1, c.d_model)).astype(np.float32)        # the new token
        positions = np.array([n])
        out = model.mla_attention(h, layer, 0, positions, cache)[0]       # [D], toykv's
        cache.advance(1)                                   # keep the new token's entries
        q = (h @ layer["wq"]).reshape(H, 1, hd + rd)                     # [H, 1, d_h + d_h^R]
        cos, sin = model.rope(positions)                                 # [1, d_h^R]
        q_rope = apply_rope(q[..., hd:], cos, sin)[:, 0]                 # [H, d_h^R]
        cases.append((q[:, 0, :hd], q_rope, np.array(cache.stored(0, "c_kv")),
                      np.array(cache.stored(0, "k_rope")), np.array(layer["w_uk"]),
                      np.array(layer["w_uv"]), np.array(layer["wo"]), out))
    return cases


def _expanded(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, mistake=None):
    """One query's MLA attention the expanded way, [H, d_h]; `mistake` makes a typical bug."""
    H, rd = q_rope.shape
    hd = q_nope.shape[1]
    order = "C" if mistake != "layout" else "F"               # head h: columns h d_h..(h+1) d_h
    k = (c_kv @ w_uk).reshape(-1, H, hd, order=order)         # [S, H, d_h]
    v = (c_kv @ w_uv).reshape(-1, H, hd, order=order)
    scores = np.einsum("hd,shd->hs", q_nope, k)               # [H, S]
    if mistake != "no rope":
        scores = scores + q_rope @ k_rope.T
    scores = scores / np.sqrt(hd if mistake == "scale" else hd + rd)
    axis = 0 if mistake == "heads" else 1
    p = np.exp(scores - scores.max(axis=axis, keepdims=True))
    p /= p.sum(axis=axis, keepdims=True)
    return np.einsum("hs,shd->hd", p, v)                      # [H, d_h]


MLA_MISTAKES = ("no rope", "scale", "heads", "layout")


class _Watched(np.ndarray):
    """An up-projection that notes when it meets an array with a positions axis in a product
    (c_kv @ W_UK, an einsum over the cached latents...): the expanded form, which builds every
    head's key or value. The absorbed form meets only per-head vectors of the new token."""

    positions: int = -1
    met: list

    def __array_finalize__(self, obj):
        self.positions = getattr(obj, "positions", -1)
        self.met = getattr(obj, "met", [])

    def _note(self, args):
        for a in args:
            for x in (a if isinstance(a, (list, tuple)) else (a,)):
                if not isinstance(x, _Watched) and self.positions in np.shape(x):
                    self.met.append(np.shape(x))

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        self._note(inputs)
        plain_in = [x.view(np.ndarray) if isinstance(x, _Watched) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(x.view(np.ndarray) if isinstance(x, _Watched) else x
                                  for x in kwargs["out"])
        return getattr(ufunc, method)(*plain_in, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in (np.einsum, np.dot, np.tensordot, np.inner, np.outer, np.matmul, np.vdot,
                    np.kron, np.multiply):
            self._note(args)
        return super().__array_function__(func, types, args, kwargs)


def _watched(w, positions: int, met: list) -> "_Watched":
    out = np.array(w).view(_Watched)
    out.positions, out.met = positions, met
    return out


def ch7_ex5(answer):
    """answer: your absorbed_attention(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv) function, run
    on decode steps of toykv's MLA layer and compared with what the layer itself computes."""
    if answer is None or answer is Ellipsis:
        return answer_check(answer, "right")
    if not callable(answer):
        return _say(False, "Not right yet: answer should be your absorbed_attention function "
                           f"itself (answer = absorbed_attention), got {describe(plain(answer))}.")
    outcome, met = "right", []
    for q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, w_o, out in _mla_cases():
        H, hd = q_nope.shape
        S = len(c_kv)                        # no other axis of the inputs has this length
        try:
            got = np.asarray(answer(q_nope.copy(), q_rope.copy(), c_kv.copy(), k_rope.copy(),
                                    _watched(w_uk, S, met), _watched(w_uv, S, met)),
                             dtype=np.float64)
        except Exception as err:                              # noqa: BLE001 - the student's code
            return _say(False, f"Not right yet: absorbed_attention raised {type(err).__name__}: "
                               f"{err}")
        if got.shape == (H, w_uk.shape[0]):
            outcome = "latent"
            break
        if got.shape != (H, hd):
            return _say(False, f"Not right yet: give one output per head, shape (H, d_h) = "
                               f"{(H, hd)}, got shape {got.shape}.")
        if np.abs(got.reshape(-1) @ w_o - out).max() <= 1e-4 * np.abs(out).max():
            if met:                                           # right, the expanded way
                outcome = "expanded"
                break
            continue                                          # toykv's own layer agrees
        close = lambda ref: np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
        outcome = next((m for m in MLA_MISTAKES
                        if close(_expanded(q_nope, q_rope, c_kv, k_rope, w_uk, w_uv, m))), "other")
        break
    return answer_check(outcome, "right", hints=[
        ("expanded", "those are the right outputs, computed the expanded way: your function "
                     "multiplies the cached latents by W_UK or W_UV, building every head's keys "
                     "or values. Absorb instead: fold W_UK into the query (q_nope W_UK^(a)T, r "
                     "values per head) and apply W_UV once, after the weighted sum of latents."),
        ("latent", "that is the weighted sum of latents, [H, r]: multiply each head's by its "
                   "W_UV^(a) (r x d_h) to get its output."),
        ("no rope", "the score also has a rotary part: add q_rope . k_rope for every position "
                    "(one rotary key, shared by every head)."),
        ("scale", "the scores are scaled by 1 / sqrt(d_h + d_h^R): a query has both parts."),
        ("heads", "each head's softmax runs over the positions (one distribution per head), not "
                  "over the heads."),
        ("layout", "head h's columns of W_UK and W_UV are h*d_h to (h+1)*d_h: reshape them to "
                   "(r, H, d_h), not (r, d_h, H)."),
        ("other", "for each head: q_lat = W_UK^(a) q_nope^(a) (r values), scores = c_kv q_lat + "
                  "k_rope q_rope^(a), softmax of the scaled scores, then (p c_kv) W_UV^(a)."),
    ])


# -- exercise 6: a sliding window's ring buffer, against toykv's own ring ----------------------
RING_WINDOWS = (1, 3, 4, 8)


def _ring_slots(window: int, n_max: int) -> list[list[int]]:
    """toykv's ring: after each of n = 1..n_max tokens, the position each slot holds, read from
    a SlidingLayer whose keys are their positions (+ 1, so an empty slot shows as -1)."""
    c = ModelConfig(vocab_size=8, d_model=8, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=8,
                    sliding_window=window, max_seq_len=n_max + 1)
    cache, seen = ToyTransformer(c).new_cache(), []
    for p in range(n_max):
        x = np.full((1, 1, c.head_dim), p + 1, np.float32)   # [T, H_kv, d_h]
        cache.update(0, k=x, v=x)
        cache.advance(1)
        slots = cache.layers[0]["k"][:, 0, 0].astype(int) - 1          # [slots]
        seen.append([int(s) for s in slots[:min(p + 1, window)]])
    return seen


def _in_use(n: int, w: int) -> list[int]:
    """The slots of a ring of w in use after n tokens, 0 first (it is full from n = w on)."""
    return list(range(min(n, w)))


RING_MISTAKES = {          # typical wrong answers, from the slots in use and the window
    "time order": lambda n, w: list(range(max(0, n - w), n)),
    "from one": lambda n, w: [n - ((n - 1 - s) % w) for s in _in_use(n, w)],
    "not full": lambda n, w: [n - 1 - ((n - 1 - s) % w) for s in range(w)],
}


def ch7_ex6(answer):
    """answer: your ring_positions(n_seen, window) function (the position each slot of a window
    ring holds after n_seen tokens), compared with toykv's own sliding-window cache."""
    refused = not_a_function(answer, "ring_positions")
    if refused is not None:
        return refused
    try:
        answer(5, 4)
    except Exception as err:                                  # noqa: BLE001 - the student's code
        return _say(False, f"Not right yet: ring_positions(5, 4) raised "
                           f"{type(err).__name__}: {err}")
    cases = [(n, w, tuple(slots)) for w in RING_WINDOWS
             for n, slots in enumerate(_ring_slots(w, 3 * w + 2), start=1)]
    got = {}
    for n, w, _ in cases:
        try:
            positions = tuple(whole(p) for p in np.asarray(answer(n, w)).reshape(-1))
        except Exception:                                     # noqa: BLE001 - the student's code
            positions = None
        if positions is not None and None in positions:      # 8.5 is no position
            return _say(False, f"Not right yet: ring_positions({n}, {w}) returned a position "
                               "that is not a whole number; positions are 0, 1, 2, ...")
        got[n, w] = positions
    if all(got[n, w] == slots for n, w, slots in cases):      # toykv's own ring agrees
        outcome = "right"
    else:
        outcome = next((name for name, rule in RING_MISTAKES.items()
                        if all(got[n, w] == tuple(rule(n, w)) for n, w, _ in cases)), "other")
        if outcome == "other" and all(got[n, w] is not None and len(got[n, w]) == min(n, w)
                                      for n, w, _ in cases):
            outcome = "other, right length"
    return answer_check(outcome, "right", hints=[
        ("time order", "those are the right positions, oldest first; a ring writes position p "
                       "into slot p % w, so once it has wrapped slot 0 need not hold the oldest."),
        ("from one", "after n_seen tokens the newest position is n_seen - 1 (positions count "
                     "from 0): the window holds n_seen - w to n_seen - 1."),
        ("not full", "before the ring is full it has only n_seen slots in use: give "
                     "min(n_seen, window) positions."),
        ("other, right length", "slot s holds the latest position p < n_seen with p % window "
                                "== s."),
        ("other", "give one position per slot in use, min(n_seen, window) of them, slot 0 "
                  "first: slot s holds the latest position p < n_seen with p % window == s."),
    ])


__all__ = ["ch7_ex1", "ch7_ex2", "ch7_ex3", "ch7_ex4", "ch7_ex5", "ch7_ex6"]
