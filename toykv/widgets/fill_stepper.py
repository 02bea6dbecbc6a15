"""FillStepper: the cache-fill widget's state and numbers, with no widget in it.

A stepper prefills a prompt into a KV cache, then runs greedy decode steps one at a time;
after each step it recomputes the whole sequence without a cache and keeps both FLOP
counts (the model's own counter) and the largest logit difference. CacheFill (chapter 3)
is a stepper with controls; the static book replays frames a stepper recorded
(`record_frames`), so recording creates no widget whose state the page would carry.

Both passes of every step also give every layer's attention weights (attention_rows.py): the
rows the cached step computed and the recomputation's, which the attention view shows.
"""
from __future__ import annotations

import base64

import numpy as np

from .. import flops as flop_formulas
from .. import validate
from ..cache import KV_DTYPES
from ..config import source_toy
from ..model import ToyTransformer
from .attention_rows import StepAttention, _attention_weights, attention_frame

MAX_POSITIONS = 256     # grid columns: wider than a page can show, and a cache allocated for them


class FillStepper:
    """Prefill `prompt_len` tokens of a fixed random prompt (from `seed`), then step.

    model: a ToyTransformer (default: the exact source toy, max_seq_len = max_positions).
    The run has room for min(max_positions, model.config.max_seq_len) positions;
    max_positions is at most MAX_POSITIONS (256), checked before anything is allocated.
    """

    def __init__(self, model: ToyTransformer | None = None, prompt_len: int = 6,
                 max_positions: int = 24, seed: int = 0, steps: int = 0,
                 kv_dtype: str = "float32"):
        max_positions = validate.count("max_positions", max_positions, 2, MAX_POSITIONS)
        steps = validate.count("steps", steps, 0, MAX_POSITIONS)
        seed = validate.count("seed", seed, 0, 2 ** 64 - 1)
        if isinstance(kv_dtype, np.dtype):           # np.dtype("float16") -> "float16"
            kv_dtype = kv_dtype.name
        validate.choice("kv_dtype", kv_dtype, KV_DTYPES)
        if model is not None and not isinstance(model, ToyTransformer):
            raise ValueError(f"model must be a toykv.ToyTransformer, got {type(model).__name__}")
        self.limit = max_positions if model is None else min(max_positions,
                                                             model.config.max_seq_len)
        self.limited_by = ("max_positions" if self.limit == max_positions
                           else "the model's max_seq_len")
        self._check_prompt_len(prompt_len)
        if prompt_len + steps > self.limit:
            raise ValueError(f"prompt_len + steps = {prompt_len + steps} exceeds the "
                             f"{self.limit} positions available ({self.limited_by})")
        self.default_model = model is None
        if model is None:                             # checked first, then built
            model = ToyTransformer(source_toy(max_seq_len=max_positions), seed=seed, exact=True)
        self.model, self.kv_dtype, self.seed = model, kv_dtype, seed
        rng = np.random.default_rng(seed)
        self._prompt_pool = [int(t) for t in rng.integers(0, model.config.vocab_size, self.limit)]
        self._intact = True           # False while a step or reset is half done
        self.reset(prompt_len)
        for _ in range(steps):
            self.step()

    def _check_prompt_len(self, prompt_len):
        validate.count("prompt_len", prompt_len, 1)
        if prompt_len >= self.limit:
            raise ValueError(f"prompt_len must be < {self.limit} (the positions available, set "
                             f"by {self.limited_by}) to leave room for a step, got {prompt_len}")

    # -- actions ------------------------------------------------------------------
    def reset(self, prompt_len: int | None = None):
        """Empty the cache and prefill the first prompt_len tokens of the prompt (default:
        the prompt length in use)."""
        prompt_len = self.prompt_len if prompt_len is None else prompt_len
        self._check_prompt_len(prompt_len)
        self._intact = False
        self.cache = self.model.new_cache(kv_dtype=self.kv_dtype)
        self.prompt_len = prompt_len
        self.tokens = list(self._prompt_pool[:prompt_len])
        self.written_by = ["prefill"] * prompt_len  # which phase wrote each position
        self.phase = "prefill"
        self.attention = []                         # a StepAttention per step, prefill first
        self._run(self.tokens)
        self._intact = True

    def step(self):
        """One greedy decode step with the cache, and a full recomputation beside it."""
        if not self._intact:
            raise ValueError("the last step or reset failed half-way; call reset()")
        if self.at_limit:
            raise ValueError(f"the sequence already fills the {self.limit} positions "
                             f"({self.limited_by}); call reset()")
        self._intact = False
        token = int(np.argmax(self._logits))
        self.tokens.append(token)
        self.written_by.append("decode")
        self.phase = "decode"
        self._run([token])
        self._intact = True

    def _run(self, feed):
        """Forward `feed` through the cache, then the whole sequence without one; record both,
        and every layer's attention weights from both passes."""
        model, config, absorb = self.model, self.model.config, self.model.absorb
        n_cached = len(self.cache)
        before = model.flops
        logits, cached_weights = _attention_weights(model, feed, self.cache)
        self._logits = logits[-1]                                           # [vocab_size]
        self.flops_cached = model.flops - before
        before = model.flops
        full_logits, full_weights = _attention_weights(model, self.tokens)
        full = full_logits[-1]                                              # [vocab_size]
        self.flops_uncached = model.flops - before
        if self.attention:                  # only the newest step keeps its recomputation
            self.attention[-1] = self.attention[-1].without_recomputation()
        self.attention.append(StepAttention.observed(model, cached_weights, full_weights,
                                                     n_cached))
        self.max_abs_diff = float(np.max(np.abs(full - self._logits)))
        n_cached = len(self.cache) - len(feed)
        self.flops_cached_formula = flop_formulas.forward_flops(config, len(feed), n_cached, absorb)
        self.flops_uncached_formula = flop_formulas.full_pass_flops(config, len(self.tokens), absorb)

    # -- what is shown -------------------------------------------------------------
    @property
    def positions(self) -> int:
        """Positions held in the cache (the sequence length so far)."""
        return len(self.cache)

    @property
    def at_limit(self) -> bool:
        return self.positions >= self.limit

    @property
    def flops_match_formulas(self) -> bool:
        """True when both counted FLOP numbers equal toykv.flops' formulas."""
        return (self.flops_cached == self.flops_cached_formula
                and self.flops_uncached == self.flops_uncached_formula)

    def _arrays(self) -> list[str]:
        """The cache's arrays per layer: ['k', 'v'], or MLA's ['c_kv', 'k_rope']."""
        return [name for name in self.cache.layers[0] if not name.endswith("_scale")]

    @property
    def row_labels(self) -> list[str]:
        """'L0 K', 'L0 V', ... (MLA: 'L0 c_kv', 'L0 k_rope'), one per grid row."""
        shown = {"k": "K", "v": "V"}
        return [f"L{i} {shown.get(name, name)}"
                for i in range(self.model.config.n_layers) for name in self._arrays()]

    @property
    def held(self) -> list[int]:
        """Positions each layer's cache holds (fewer than `positions` once a window slides)."""
        return [self.cache.held(layer) for layer in range(self.model.config.n_layers)]

    @property
    def cells(self) -> list[list[str]]:
        """State of every grid cell ('prefill', 'decode', 'this', 'empty', or 'evicted' for a
        position a sliding layer has dropped): rows as row_labels, a column per position."""
        rows = []
        for held in self.held:
            first_held = self.positions - held
            row = [self._state(p, first_held) for p in range(self.limit)]
            rows.extend(list(row) for _ in self._arrays())
        return rows

    def _state(self, position, first_held):
        if position >= self.positions:
            return "empty"
        if position < first_held:
            return "evicted"
        if self.phase == "decode" and position == self.positions - 1:
            return "this"
        return self.written_by[position]

    def attention_frame(self, layer: int = 0, head: int = 0):
        """What the attention view shows now for one layer and head (an AttentionFrame)."""
        return attention_frame(self.attention, layer, head)

    def attention_figures(self) -> dict:
        """The attention view's figures now, every layer and head, as the static page
        replays them: per layer the first key read, the cells shown, the weights computed and
        a recomputation's; per layer and head both max |differences| (None at the prefill)."""
        n_heads = self.attention[-1].rows[0].shape[0]
        frames = [[self.attention_frame(layer, head) for head in range(n_heads)]
                  for layer in range(self.model.config.n_layers)]
        short = lambda d: 0 if d == 0 else d           # noqa: E731 - '0' is shorter JSON
        past = [[short(f.past_rows_max_diff) for f in heads] for heads in frames]
        return {"key_first": [heads[0].key_first for heads in frames],
                "cells": [heads[0].cells_shown for heads in frames],
                "computed": [heads[0].weights_computed for heads in frames],
                "recompute_weights": [heads[0].recompute_weights for heads in frames],
                "new_diff": [[short(f.new_rows_max_diff) for f in heads] for heads in frames],
                "past_diff": None if self.phase == "prefill" else past}

    @property
    def values(self) -> dict:
        """The numbers shown beside the grid."""
        return {"positions": self.positions, "limit": self.limit, "phase": self.phase,
                "flops_cached": self.flops_cached, "flops_uncached": self.flops_uncached,
                "flops_match_formulas": self.flops_match_formulas,
                "max_abs_diff": self.max_abs_diff, "tokens": list(self.tokens)}

    def frame(self, attention: bool = False) -> dict:
        """This state as the static page replays it (JSON-ready: cells follow from the
        prompt length, the positions and what each layer holds); attention: with the
        attention view's figures (attention_figures)."""
        validate.flag("attention", attention)
        frame = {"positions": self.positions, "held": self.held,
                 "flops_cached": self.flops_cached, "flops_uncached": self.flops_uncached,
                 "flops_cached_formula": self.flops_cached_formula,
                 "flops_uncached_formula": self.flops_uncached_formula,
                 "max_abs_diff": self.max_abs_diff}
        if attention:
            frame["attention"] = self.attention_figures()
        return frame

    def attention_rows(self) -> dict:
        """Every row of attention computed so far, every layer and head, for the static page:
        {'row_first': per layer, the first key each row attended (a row attends the keys from
        there to its own position), 'shared': 0 (rows the page reads from another run, see
        static_twin), 'weights': the weights of every [layer][head][row] in order,
        little-endian float32 in base64 (4 bytes a weight, exact)}."""
        row_first, chunks = [], []
        for layer in range(self.model.config.n_layers):
            shown = [self.attention_frame(layer, head).weights       # [n, n] each
                     for head in range(self.attention[-1].rows[0].shape[0])]
            attended = ~np.isnan(shown[0])
            first = [int(np.argmax(row)) for row in attended]
            for i, lo in enumerate(first):                           # lo..i, nothing else
                assert attended[i].sum() == i - lo + 1 and attended[i, i], (layer, i)
            row_first.append(first)
            chunks += [w[i, lo:i + 1] for w in shown for i, lo in enumerate(first)]
        packed = np.concatenate(chunks).astype("<f4").tobytes()
        return {"row_first": row_first, "shared": 0,
                "weights": base64.b64encode(packed).decode("ascii")}

    def __repr__(self) -> str:
        return (f"{self.positions} of {self.limit} positions cached ({self.phase}); "
                f"FLOPs this step {self.flops_cached:,} with the cache, {self.flops_uncached:,} "
                f"without; max |logit difference| {self.max_abs_diff:g}")


def record_frames(model: ToyTransformer, prompt_len: int, limit: int, seed: int,
                  kv_dtype: str = "float32", attention: bool = False) -> dict:
    """Every state of one run, from the prefill of prompt_len tokens to the last position:
    {'prompt_len', 'tokens' (the whole run), 'frames' (one per state, FillStepper.frame)};
    attention: the frames carry the attention view's figures, and 'rows' every row of
    attention the run computed (FillStepper.attention_rows)."""
    validate.flag("attention", attention)
    stepper = FillStepper(model, prompt_len, limit, seed, kv_dtype=kv_dtype)
    frames = [stepper.frame(attention)]
    while not stepper.at_limit:
        stepper.step()
        frames.append(stepper.frame(attention))
    run = {"prompt_len": prompt_len, "tokens": stepper.tokens, "frames": frames}
    if attention:
        run["rows"] = stepper.attention_rows()
    return run
