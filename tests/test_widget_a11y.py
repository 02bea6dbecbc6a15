"""The widgets' colours and words for readers who see less, or not at all: text keeps WCAG AA
contrast (4.5:1), a graphic's parts 3:1 against the white view, every series stays apart
without colour, and the block pool's picture says in words what it shows. The twins' keyboard
operation and status line are checked in a browser (tests/test_static_twins.py,
tests/test_block_pool_view.py, tests/live_widgets_check.py)."""
from __future__ import annotations

import re

import pytest

import a11y
from toykv.widgets import _style, block_pool, cache_fill_view, share_explorer, static_twin
from toykv.widgets._svg_plot import SHAPES

WHITE = "#FFFFFF"


def test_the_contrast_formula_on_known_pairs():
    assert a11y.contrast("#000000", WHITE) == pytest.approx(21.0)
    assert a11y.contrast(WHITE, WHITE) == pytest.approx(1.0)
    assert a11y.contrast("#767676", WHITE) == pytest.approx(4.54, abs=0.01)  # the AA grey
    assert a11y.contrast("#176DE8", "#ECF3FF") == pytest.approx(4.29, abs=0.01)  # axe's finding


@pytest.mark.parametrize("owner", range(len(block_pool.OWNER_COLOURS)))
def test_block_pool_numbers_read_on_their_colour(owner):
    html = block_pool.frame_html({"num_blocks": 1, "block_size": 4, "frames": [
        {"iteration": 0, "kind": "decode", "owners": [owner], "used": 1, "free": 0,
         "running": 1, "waiting": 0, "held": 4}]}, 0)
    background = re.search(r"background:(#\w{6})", html).group(1)
    text = re.search(r";color:(#\w{6})", html).group(1)
    assert a11y.contrast(text, background) >= 4.5, (owner, text, background)


def test_free_blocks_and_the_prefill_cells_stand_out_from_the_white_view():
    assert a11y.contrast(block_pool.FREE_BORDER, WHITE) >= 3
    for state, (_, border) in cache_fill_view.CELL_CSS.items():
        colour = re.search(r"#\w{6}", border).group(0)
        assert a11y.contrast(colour, WHITE) >= 3, (state, border)


def test_warning_words_and_focus_ring_keep_their_contrast():
    assert a11y.contrast(_style.VERMILLION_TEXT, WHITE) >= 4.5
    assert a11y.contrast(_style.VERMILLION_TEXT, "#FFF4EC") >= 4.5   # the problem box
    css = (static_twin.STATIC_DIR / "live.css").read_text()
    ring = re.search(r":focus-visible \{ outline: (\d+)px solid (#\w{6})", css)
    assert int(ring.group(1)) >= 2 and a11y.contrast(ring.group(2), WHITE) >= 3
    text = re.search(r"\.toykv-live \{ background: (#\w{6}); color: (#\w{6})", css).groups()
    hint = re.search(r"\.toykv-hint \{[^}]*color: (#\w{6})", css).group(1)
    primary = re.search(r"toykv-primary \{ background: (#\w{6});[^}]*color: (#\w{6})", css).groups()
    for background, colour in (text, (text[0], hint), primary):
        assert a11y.contrast(colour, background) >= 4.5, (colour, background)


def test_each_model_of_the_share_explorer_has_its_own_shape():
    shapes = [shape for _, shape in share_explorer.MODEL_STYLES]
    assert len(set(shapes)) == len(shapes) == share_explorer.MAX_MODELS
    assert set(shapes) <= set(SHAPES)
    svg = share_explorer.plots_svg(["llama-2-7b", "mistral-7b-v0.1"], 10000)
    circles, squares = svg.count("r='3.5'"), svg.count("width='7.0'")
    assert circles > 8 and squares > 8           # the shapes ride on the curves of both panels


def test_the_block_pool_picture_says_what_it_shows():
    run = {"num_blocks": 6, "block_size": 4, "frames": [
        {"iteration": 3, "kind": "decode", "owners": [0, 0, -1, 2, -1, -1], "used": 3,
         "free": 3, "running": 2, "waiting": 1, "held": 9}]}
    assert block_pool.pool_words(run, 0) == "the pool's 6 blocks: 3 used (by requests 0, 2), 3 free"
    assert "role='img' aria-label='the pool&#x27;s 6 blocks" in block_pool.frame_html(run, 0) \
        or "role='img' aria-label='the pool's 6 blocks" in block_pool.frame_html(run, 0)


def test_every_twin_has_a_status_line_for_screen_readers():
    html = static_twin.page("cache-fill", "cacheFill", {}, "<button data-control='step'>Step"
                            "</button>", "cache fill")
    assert re.search(r"<div data-part='status' class='toykv-sr-only' role='status' "
                     r"aria-live='polite'></div>", html)
