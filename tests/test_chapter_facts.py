"""Facts the chapters state about the widgets they show, checked here instead of in the
chapter's reading path (the chapters show the widget; these tests hold it to the text).

Expected values come from toykv.flops (formulas tested against the model's counter in
test_flops.py), from a full recomputation, or from the source texts' published figures.
"""
from __future__ import annotations

import numpy as np
import pytest

from toykv import flops
from toykv.widgets import CacheFill


# -- chapter 3: the cache-fill widget after a 6-token prefill and 3 decode steps ----------
@pytest.fixture(scope="module")
def fill():
    return CacheFill(prompt_len=6, max_positions=24, seed=0, steps=3)


def test_ch3_fill_holds_nine_positions_in_decode(fill):
    assert fill.positions == 6 + 3 and fill.phase == "decode"


def test_ch3_fill_flops_are_the_formulas(fill):
    config = fill.model.config
    assert fill.flops_cached == flops.cached_step_flops(config, 9)
    assert fill.flops_uncached == flops.full_pass_flops(config, 9)
    assert round(fill.flops_uncached / fill.flops_cached, 1) == 9.0   # the text's ratio


def test_ch3_fill_logits_equal_a_full_recomputation(fill):
    assert fill.max_abs_diff == 0.0


def test_ch3_fill_cells_prefill_decode_this_empty(fill):
    states = fill.cells[0]                              # row: layer 0, K
    assert states[:6] == ["prefill"] * 6 and states[6:8] == ["decode"] * 2
    assert states[8] == "this" and set(states[9:]) == {"empty"}
    assert len(fill.cells) == 2 * fill.model.config.n_layers and len(states) == 24
