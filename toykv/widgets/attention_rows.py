"""The attention behind the cache: which rows of a layer's attention matrix each step computes.

A prefill computes every row of the causal triangle; a decode step computes one new row, the
new query scored against the keys already cached and its own. Rows of earlier steps are never
computed again, and a recomputation of the whole sequence gives them back unchanged (bit for
bit with exact=True): the past rows never change, which is why the cache is exact.

StepAttention keeps one step's weights, every layer and head, from the model's own forward pass
with the cache and from a recomputation beside it; attention_frame turns the steps of a run into
what the attention view shows for one layer and head; attention_run records a whole run.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from .. import validate
from ..model import check_model

MAX_VIEW_POSITIONS = 64       # a matrix of 64 x 64 cells still fits a page; more would not


def _attention_weights(model, ids, cache=None) -> tuple[np.ndarray, list[np.ndarray]]:
    """model.forward(ids, cache)'s logits [T, |V|] and, from that same pass, every layer's
    attention weights [H, T, Tk] over the last Tk positions (the keys the layer read). cache
    None: a pass that reads no cache.

    The one place the view observes the model: model.watch_attention, on every layer.
    """
    with contextlib.ExitStack() as stack:
        watches = [stack.enter_context(model.watch_attention(layer))
                   for layer in range(model.config.n_layers)]
        logits = model.forward(ids, cache)
    return logits, [watch.steps[0].weights for watch in watches]


def _placed(config, weights, n_cached: int) -> list[np.ndarray]:
    """Each layer's weights [H, T, Tk] set into columns 0..n-1 ([H, T, n], n = n_cached + T),
    NaN where the query did not attend (masked by the layer's own rule, or not read)."""
    out = []
    for spec, w in zip(config.layers, weights):
        H, T, Tk = w.shape
        n = n_cached + T
        keys = np.arange(n - Tk, n)
        allowed = spec.allowed(np.arange(n_cached, n), keys)           # [T, Tk] or None
        placed = np.full((H, T, n), np.nan, np.float32)
        placed[:, :, n - Tk:] = w if allowed is None else np.where(allowed, w, np.nan)
        out.append(placed)
    return out


@dataclass(frozen=True)
class StepAttention:
    """One step's attention weights, every layer and head, as the model computed them.

    n_cached tokens were in the cache and n_new were fed. rows[l]: layer l's weights of the
    rows the step computed, [H, n_new, n] (columns = key positions, NaN where not attended);
    key_first[l]: the first position it read; recomputed[l]: a recomputation's weights of the
    whole sequence [H, n, n] (None once a later step has replaced it, to keep runs small).
    """

    n_cached: int
    n_new: int
    rows: tuple
    key_first: tuple
    recomputed: tuple | None

    @property
    def positions(self) -> int:
        """Tokens in the cache after the step."""
        return self.n_cached + self.n_new

    @classmethod
    def observed(cls, model, cached_weights, full_weights, n_cached: int) -> StepAttention:
        """From the weights of a cached pass and of a recomputation (_attention_weights)."""
        n = n_cached + cached_weights[0].shape[1]
        return cls(n_cached, n - n_cached, tuple(_placed(model.config, cached_weights, n_cached)),
                   tuple(n - w.shape[-1] for w in cached_weights),
                   tuple(_placed(model.config, full_weights, 0)))

    def without_recomputation(self) -> StepAttention:
        """The same step without its recomputation (a later step has its own)."""
        return StepAttention(self.n_cached, self.n_new, self.rows, self.key_first, None)


@dataclass(frozen=True)
class AttentionFrame:
    """What the attention view shows after a step, for one layer and head.

    weights [n, n]: row i (query position i) as the step that computed it left it, NaN where
    the query did not attend. Rows first_row..n-1 were computed by this step; columns
    key_first..n_cached-1 were read from the cache, n_cached..n-1 are new. The recomputation
    of the whole sequence computes recompute_rows rows; new_rows_max_diff compares this
    step's rows with its, past_rows_max_diff the rows of earlier steps (None at the prefill).
    """

    layer: int
    head: int
    step: int                   # 0: the prefill; k: the k-th decode step
    weights: np.ndarray         # [n, n] float32
    n_cached: int
    key_first: int
    new_rows_max_diff: float
    past_rows_max_diff: float | None
    recompute_weights: int

    @property
    def positions(self) -> int:
        """n: the rows (queries) and columns (keys) of the matrix so far."""
        return self.weights.shape[0]

    @property
    def phase(self) -> str:
        """'prefill' or 'decode'."""
        return "prefill" if self.step == 0 else "decode"

    @property
    def rows_computed(self) -> int:
        """Rows this step computed: the prompt's at the prefill, 1 at a decode step."""
        return self.positions - self.n_cached

    @property
    def first_row(self) -> int:
        """The first row this step computed (rows above it are earlier steps')."""
        return self.n_cached

    @property
    def cached_columns(self) -> int:
        """Keys (and values) this step read from the cache."""
        return self.n_cached - self.key_first

    @property
    def new_columns(self) -> int:
        """Keys (and values) this step computed and stored."""
        return self.rows_computed

    @property
    def cells_shown(self) -> int:
        """Attention weights in the matrix: the cells some query attended."""
        return int(np.count_nonzero(~np.isnan(self.weights)))

    @property
    def weights_computed(self) -> int:
        """Weights this step computed (the attended cells of its rows)."""
        return int(np.count_nonzero(~np.isnan(self.weights[self.first_row:])))

    @property
    def recompute_rows(self) -> int:
        """Rows a recomputation of the whole sequence computes: all n."""
        return self.positions

    @property
    def new_row_keys(self) -> list[int]:
        """Key positions the newest query (the last row) attended."""
        return [int(j) for j in np.flatnonzero(~np.isnan(self.weights[-1]))]

    @property
    def new_row(self) -> np.ndarray:
        """The newest query's weights over new_row_keys, float32."""
        return self.weights[-1, self.new_row_keys]

    @property
    def caption(self) -> str:
        """What the step did, in a sentence or two (caption())."""
        return caption(self)


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| over the cells both attended (0.0 when there are none)."""
    if not a.size:
        return 0.0
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        raise AssertionError("a step attended other cells than its recomputation")
    diff = np.abs(a - b)
    return float(np.nanmax(diff)) if not np.isnan(diff).all() else 0.0


def attention_frame(steps, layer: int, head: int) -> AttentionFrame:
    """The view after the last of `steps` (a run's StepAttention, prefill first), for one layer
    and head: each row as the step that computed it left it, compared with the last step's
    recomputation of the whole sequence."""
    if isinstance(steps, (str, bytes, dict)) or not hasattr(steps, "__iter__"):
        raise ValueError(f"steps must be a non-empty list of StepAttention, prefill first, got "
                         f"{type(steps).__name__}")
    steps = list(steps)
    if not steps or not all(isinstance(s, StepAttention) for s in steps):
        raise ValueError("steps must be a non-empty list of StepAttention, prefill first")
    last = steps[-1]
    if last.recomputed is None:
        raise ValueError("the last step has no recomputation (a later step replaced it)")
    n_layers, n_heads = len(last.rows), last.rows[0].shape[0]
    layer = validate.count("layer", layer, 0, n_layers - 1)
    head = validate.count("head", head, 0, n_heads - 1)
    n = last.positions
    weights = np.full((n, n), np.nan, np.float32)                     # [n, n]
    for s in steps:
        rows = s.rows[layer][head]                                    # [n_new, n_s]
        weights[s.n_cached:s.positions, :s.positions] = rows
    recomputed = last.recomputed[layer][head]                         # [n, n]
    c = last.n_cached
    return AttentionFrame(
        layer, head, len(steps) - 1, weights, c, last.key_first[layer],
        _max_diff(weights[c:], recomputed[c:]),
        None if c == 0 else _max_diff(weights[:c], recomputed[:c]),
        int(np.count_nonzero(~np.isnan(recomputed))))


def check_frame(frame) -> AttentionFrame:
    """frame, if it is an AttentionFrame (attention_frame gives one); else a ValueError."""
    if not isinstance(frame, AttentionFrame):
        raise ValueError(f"frame must be an AttentionFrame (attention_frame gives one), got "
                         f"{type(frame).__name__}")
    return frame


def difference_text(diff: float) -> str:
    """A max |difference| as the view shows it: '0 (identical bits)', or '1.2e-07'."""
    diff = validate.number("diff", diff, 0.0, allow_minimum=True)
    return "0 (identical bits)" if diff == 0 else f"{diff:.1e}"


def caption(frame: AttentionFrame) -> str:
    """One or two sentences from the numbers, e.g. for a decode step 'Layer 0, head 0, decode
    step 3: 1 row of 9 weights computed (...); a recomputation would compute 9 rows, 45
    weights. ...' The page's script writes the same words (static/attention_view.js)."""
    check_frame(frame)
    f, where = frame, f"Layer {frame.layer}, head {frame.head}"
    n, k = f.positions, len(f.new_row_keys)
    if f.phase == "prefill":
        return (f"{where}, prefill: {f.rows_computed:,} rows, {f.weights_computed:,} weights "
                f"computed ({f.rows_computed:,} queries against {f.new_columns:,} new keys); a "
                f"recomputation computes the same {f.recompute_rows:,} rows, "
                f"{f.recompute_weights:,} weights.")
    return (f"{where}, decode step {f.step}: 1 row of {k:,} weights computed (the query at "
            f"position {n - 1} against {k - 1:,} cached keys and its own); a recomputation "
            f"would compute {f.recompute_rows:,} rows, {f.recompute_weights:,} weights. The "
            f"{f.first_row:,} rows above are the earlier steps' own, unchanged; the "
            f"recomputation gives them back with max |difference| "
            f"{difference_text(f.past_rows_max_diff)}.")


def attention_run(model, tokens, prompt_len: int, kv_dtype: str = "float32") -> list:
    """Every step of one run, as StepAttention (each with its recomputation): the prefill of
    tokens[:prompt_len], then one decode step per further token, with the cache."""
    check_model(model)
    tokens = validate.token_ids("tokens", tokens, model.config.vocab_size,
                                min(MAX_VIEW_POSITIONS, model.config.max_seq_len))
    prompt_len = validate.count("prompt_len", prompt_len, 1, len(tokens))
    cache = model.new_cache(kv_dtype=kv_dtype, capacity=len(tokens))
    steps = []
    for start, end in [(0, prompt_len)] + [(n, n + 1) for n in range(prompt_len, len(tokens))]:
        _, cached = _attention_weights(model, tokens[start:end], cache)
        _, full = _attention_weights(model, tokens[:end])
        steps.append(StepAttention.observed(model, cached, full, start))
    return steps


__all__ = ["AttentionFrame", "StepAttention", "attention_frame", "attention_run", "caption",
           "check_frame", "difference_text", "MAX_VIEW_POSITIONS"]
