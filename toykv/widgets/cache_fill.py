"""CacheFill: watch the KV cache fill one decode step at a time, checked against recomputation.

A FillStepper (fill_stepper.py: the state and the numbers) with controls. Each Step feeds the
greedy next token through the model with the cache, then recomputes the whole sequence
without a cache, and shows both FLOP counts (from the model's own counter, checked against
toykv.flops) and the largest logit difference between the two. Below, the attention view
(attention_view.py) shows a chosen layer's and head's attention matrix from the same two
passes: the rows this step computed, the keys it read from the cache, and the earlier rows,
unchanged. A click or slider move that fails shows a message in the widget instead of
raising; after a failure half-way through a step, Step stays off until Reset rebuilds the
cache.
"""
from __future__ import annotations

import ipywidgets as widgets

from .. import validate
from ..layers import attention_kind
from ..model import ToyTransformer
from ._controls import Quiet, StrictIntSlider, problem_text
from ._style import problem_html
from .attention_rows import MAX_VIEW_POSITIONS
from .attention_view import caption_html, view_html
from .cache_fill_view import grid_html, stats_html
from .fill_stepper import MAX_POSITIONS, FillStepper
from .static_twin import cache_fill_html, twin_bundle


class CacheFill(FillStepper):
    """The cache-fill widget. model: a ToyTransformer (default: the exact source toy).

    prompt_len tokens (a fixed random prompt from `seed`) are prefilled and `steps` decode
    steps run at creation. The grid has min(max_positions, model.config.max_seq_len)
    columns, max_positions <= 256; Step turns off once the sequence fills them.
    attention: show the attention view (default: when the grid has at most 64 columns, the
    most a page shows as a matrix).
    """

    MAX_POSITIONS = MAX_POSITIONS

    def __init__(self, model=None, prompt_len: int = 6, max_positions: int = 24, seed: int = 0,
                 steps: int = 0, kv_dtype: str = "float32", attention: bool | None = None):
        if attention is not None:
            validate.flag("attention", attention)
        limit = validate.count("max_positions", max_positions, 2, MAX_POSITIONS)
        if isinstance(model, ToyTransformer):
            limit = min(limit, model.config.max_seq_len)
        if attention and limit > MAX_VIEW_POSITIONS:
            raise ValueError(f"attention=True shows at most {MAX_VIEW_POSITIONS} positions, got "
                             f"{limit}; give max_positions <= {MAX_VIEW_POSITIONS} or "
                             "attention=False")
        self.show_attention = limit <= MAX_VIEW_POSITIONS if attention is None else attention
        self._quiet = Quiet()
        self.error = ""
        self.prompt_slider = None            # built on the first reset, once limit is known
        super().__init__(model, prompt_len, max_positions, seed, steps, kv_dtype)

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
        parts = [controls, self.message_box, body, self.note]
        if self.show_attention:
            parts += self._build_attention_controls()
        self.widget = widgets.VBox(parts)

    def _build_attention_controls(self) -> list:
        """The layer and head menus, the caption (a live region) and the attention view."""
        n_heads = self.model.config.n_heads
        self.layer_select = widgets.Dropdown(
            options=[(str(i), i) for i in range(self.model.config.n_layers)], value=0,
            description="layer", style={"description_width": "initial"})
        self.head_select = widgets.Dropdown(options=[(str(h), h) for h in range(n_heads)],
                                            value=0, description="head",
                                            style={"description_width": "initial"})
        self.attention_caption = widgets.HTML()
        self.attention_view = widgets.HTML()
        for menu in (self.layer_select, self.head_select):
            menu.observe(self._on_layer_head, names="value")
        return [widgets.HBox([self.layer_select, self.head_select]), self.attention_caption,
                self.attention_view]

    def _on_layer_head(self, change):
        if not self._quiet:
            self._guarded(self._render_attention)

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

    # -- actions ------------------------------------------------------------------
    def reset(self, prompt_len: int | None = None):
        """Empty the cache and prefill the first prompt_len tokens of the prompt (default: the
        slider's value)."""
        if self.prompt_slider is None:              # the first reset, from the constructor
            self._build_controls(prompt_len)
        prompt_len = self.prompt_slider.value if prompt_len is None else prompt_len
        self._check_prompt_len(prompt_len)
        with self._quiet:                           # moving the slider must not reset twice
            self.prompt_slider.value = prompt_len
        super().reset(prompt_len)
        self._render()

    def step(self):
        """One greedy decode step with the cache, and a full recomputation beside it."""
        super().step()
        self._render()

    # -- what is shown -------------------------------------------------------------
    def _render(self):
        what_rows = attention_kind(self.model.config).cached
        self.grid.value = grid_html(self.row_labels, self.cells, what_rows,
                                    "sliding" in self.model.config.layer_kinds)
        self.stats.value = stats_html(self)
        self.step_button.disabled = self.at_limit or not self._intact
        self.note.value = "" if not self.at_limit else (
            f"<i>The sequence fills all {self.limit} positions ({self.limited_by}): Step is "
            "off. Reset to start again.</i>")
        if self.show_attention:
            self._render_attention()

    def _render_attention(self):
        """The attention view of the layer and head chosen, as the last step left it."""
        frame = self.attention_frame(self.layer_select.value, self.head_select.value)
        self.attention_caption.value = caption_html(frame)
        self.attention_view.value = view_html(frame, self.limit)

    def __repr__(self) -> str:
        return f"CacheFill: {super().__repr__()}"

    def _repr_mimebundle_(self, **kwargs):
        """Display the widget (a bare CacheFill() at the end of a cell shows it), with a
        readable text form and, in the book build, its static twin."""
        return twin_bundle(self.widget, repr(self), lambda: cache_fill_html(self))
