"""CacheFill: watch the KV cache fill one decode step at a time, checked against recomputation.

Each Step feeds the greedy next token through the model with the cache, then recomputes the
whole sequence without a cache, and shows both FLOP counts (from the model's own counter,
checked against toykv.flops) and the largest logit difference between the two. A click or
slider move that fails shows a message in the widget instead of raising; after a failure
half-way through a step, Step stays off until Reset rebuilds the cache.
"""
from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from .. import flops as flop_formulas
from .. import validate
from ..cache import KV_DTYPES
from ..config import source_toy
from ..model import ToyTransformer
from ._controls import Quiet, StrictIntSlider, problem_text
from ._style import problem_html
from .cache_fill_view import grid_html, stats_html


class CacheFill:
    """The cache-fill widget. model: a ToyTransformer (default: the exact source toy).

    prompt_len tokens (a fixed random prompt from `seed`) are prefilled and `steps` decode
    steps run at creation. The grid has min(max_positions, model.config.max_seq_len)
    columns; Step turns off once the sequence fills them.
    """

    def __init__(self, model: ToyTransformer | None = None, prompt_len: int = 6,
                 max_positions: int = 24, seed: int = 0, steps: int = 0,
                 kv_dtype: str = "float32"):
        validate.count("max_positions", max_positions, 2)
        validate.count("steps", steps, 0)
        validate.count("seed", seed, 0)
        validate.choice("kv_dtype", kv_dtype, KV_DTYPES)
        if model is None:
            model = ToyTransformer(source_toy(max_seq_len=max_positions), seed=seed, exact=True)
        if not isinstance(model, ToyTransformer):
            raise ValueError(f"model must be a toykv.ToyTransformer, got {type(model).__name__}")
        self.model, self.kv_dtype = model, kv_dtype
        self.limit = min(max_positions, model.config.max_seq_len)
        self.limited_by = ("max_positions" if self.limit == max_positions
                           else "the model's max_seq_len")
        self._check_prompt_len(prompt_len)
        if prompt_len + steps > self.limit:
            raise ValueError(f"prompt_len + steps = {prompt_len + steps} exceeds the "
                             f"{self.limit} positions available ({self.limited_by})")
        rng = np.random.default_rng(seed)
        self._prompt_pool = [int(t) for t in rng.integers(0, model.config.vocab_size, self.limit)]
        self._quiet = Quiet()
        self.error = ""
        self._intact = True           # False while a step or reset is half done
        self._build_controls(prompt_len)
        self.reset(prompt_len)
        for _ in range(steps):
            self.step()

    # -- controls ---------------------------------------------------------------
    def _build_controls(self, prompt_len):
        self.step_button = widgets.Button(description="Step", button_style="primary",
                                          tooltip="one greedy decode step with the cache")
        self.reset_button = widgets.Button(description="Reset", tooltip="prefill the prompt again")
        self.prompt_slider = StrictIntSlider(value=prompt_len, min=1, max=self.limit - 1,
                                             description="prompt length",
                                             style={"description_width": "initial"},
                                             continuous_update=False)
        self.message_box = widgets.HTML()
        self.grid = widgets.HTML()
        self.stats = widgets.HTML(layout=widgets.Layout(min_width="300px"))
        self.note = widgets.HTML()
        self.step_button.on_click(lambda _: self._guarded(self.step))
        self.reset_button.on_click(lambda _: self._guarded(self.reset))
        self.prompt_slider.observe(self._on_prompt_len, names="value")
        controls = widgets.HBox([self.step_button, self.reset_button, self.prompt_slider])
        body = widgets.HBox([self.grid, self.stats],
                            layout=widgets.Layout(flex_flow="row wrap", grid_gap="16px"))
        self.widget = widgets.VBox([controls, self.message_box, body, self.note])

    def _on_prompt_len(self, change):
        if not self._quiet:
            self._guarded(lambda: self.reset(change["new"]))

    def _guarded(self, action):
        """Run a click's or a slider's action; an exception becomes a message, the slider goes
        back to the prompt in use, and Step stays off if the action failed half-way."""
        was_intact = self._intact
        try:
            action()
        except Exception as err:                    # noqa: BLE001 - shown, never raised
            self.error = problem_text(err)
            if was_intact and not self._intact:
                self.error += " Step is off: press Reset to start again."
                self.step_button.disabled = True
            with self._quiet:
                self.prompt_slider.value = self.prompt_len
            self.message_box.value = problem_html(self.error)
        else:
            self.error = ""
            self.message_box.value = ""

    @property
    def message(self) -> str:
        """The problem the last click or slider move met ('' if it worked)."""
        return self.error

    def _check_prompt_len(self, prompt_len):
        validate.count("prompt_len", prompt_len, 1)
        if prompt_len >= self.limit:
            raise ValueError(f"prompt_len must be < {self.limit} (the positions available, set "
                             f"by {self.limited_by}) to leave room for a step, got {prompt_len}")

    # -- actions ------------------------------------------------------------------
    def reset(self, prompt_len: int | None = None):
        """Empty the cache and prefill the first prompt_len tokens of the prompt."""
        prompt_len = self.prompt_slider.value if prompt_len is None else prompt_len
        self._check_prompt_len(prompt_len)
        self._intact = False
        with self._quiet:                           # moving the slider must not reset twice
            self.prompt_slider.value = prompt_len
        self.cache = self.model.new_cache(kv_dtype=self.kv_dtype)
        self.prompt_len = prompt_len
        self.tokens = list(self._prompt_pool[:prompt_len])
        self.written_by = ["prefill"] * prompt_len  # which phase wrote each position
        self.phase = "prefill"
        self._run(self.tokens)
        self._intact = True
        self._render()

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
        self._render()

    def _run(self, feed):
        """Forward `feed` through the cache, then the whole sequence without one; record both."""
        model, config, absorb = self.model, self.model.config, self.model.absorb
        before = model.flops
        self._logits = model.forward(feed, self.cache)[-1]                  # [vocab_size]
        self.flops_cached = model.flops - before
        before = model.flops
        full = model.forward(self.tokens)[-1]                               # [vocab_size]
        self.flops_uncached = model.flops - before
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
    def cells(self) -> list[list[str]]:
        """State of every grid cell ('prefill', 'decode', 'this', 'empty', or 'evicted' for a
        position a sliding layer has dropped): rows as row_labels, a column per position."""
        rows = []
        for layer in range(self.model.config.n_layers):
            first_held = self.positions - self.cache.held(layer)
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

    @property
    def values(self) -> dict:
        """The numbers shown beside the grid."""
        return {"positions": self.positions, "limit": self.limit, "phase": self.phase,
                "flops_cached": self.flops_cached, "flops_uncached": self.flops_uncached,
                "flops_match_formulas": self.flops_match_formulas,
                "max_abs_diff": self.max_abs_diff, "tokens": list(self.tokens)}

    def _render(self):
        mla = self.model.config.attention == "mla"
        what_rows = "latent c_kv or rotary key k_rope" if mla else "K or V"
        self.grid.value = grid_html(self.row_labels, self.cells, what_rows,
                                    "sliding" in self.model.config.layer_kinds)
        self.stats.value = stats_html(self)
        self.step_button.disabled = self.at_limit or not self._intact
        self.note.value = "" if not self.at_limit else (
            f"<i>The sequence fills all {self.limit} positions ({self.limited_by}): Step is "
            "off. Reset to start again.</i>")

    def __repr__(self) -> str:
        return (f"CacheFill: {self.positions} of {self.limit} positions cached ({self.phase}); "
                f"FLOPs this step {self.flops_cached:,} with the cache, {self.flops_uncached:,} "
                f"without; max |logit difference| {self.max_abs_diff:g}")

    def _repr_mimebundle_(self, **kwargs):
        """Display the widget (a bare CacheFill() at the end of a cell shows it)."""
        bundle = self.widget._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = repr(self)
        return bundle

