"""mha_core.ui.heatmap_widget: the browser-drawn heatmaps' data, validation and description."""

from __future__ import annotations

import numpy as np
import pytest
from traitlets import TraitError

from mha_core.ui.heads_panel import head_explorer
from mha_core.ui.heatmap_widget import HeatmapGrid, heatmap_alt_text


def _weights(h=2, n=5, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.random((h, n, n))  # (h, N, N)
    return w / w.sum(-1, keepdims=True), [f"t{i}" for i in range(n)]


def test_show_sends_float32_weights_in_order():
    weights, labels = _weights()
    grid = HeatmapGrid()
    grid.show(weights, labels, title="T", query=3)
    back = np.frombuffer(grid.weights, dtype=np.float32).reshape(2, 5, 5)  # (h, N, N)
    np.testing.assert_allclose(back, weights, rtol=1e-6)
    assert (grid.h, grid.n, grid.labels, grid.title, grid.query) == (2, 5, labels, "T", 3)
    assert len(grid.lut) == 256 * 3


def test_alt_text_names_the_strongest_cells_and_the_query():
    weights, labels = _weights()
    weights[1, 2, 4] = 5.0  # the strongest cell of head 1
    text = heatmap_alt_text(weights, labels, title="random", query=2)
    assert "h=2, N=5" in text and "random" in text
    assert "Head 1: strongest weight 5.00, query 2 't2' to key 4 't4'" in text
    assert "query 2 't2' attends most to key 4 't4'" in text


def test_show_takes_a_given_alt_text_instead_of_its_own():
    weights, labels = _weights()
    grid = HeatmapGrid()
    grid.show(weights, labels, title="T")
    assert grid.alt == heatmap_alt_text(weights, labels, title="T")
    grid.show(weights, labels, title="T", alt="the real model's head")
    assert grid.alt == "the real model's head"


@pytest.mark.parametrize("query", [5, -2])
def test_bad_query_is_refused(query):
    weights, labels = _weights()
    grid = HeatmapGrid()
    with pytest.raises(ValueError, match="query"):
        grid.show(weights, labels, query=query)
    grid.show(weights, labels)
    with pytest.raises(TraitError, match="query"):
        grid.query = query  # as a forged message from the page would


def test_bad_weights_are_refused():
    with pytest.raises(ValueError, match="shape"):
        HeatmapGrid().show(np.zeros((2, 3, 4)), ["a", "b", "c"])
    with pytest.raises(ValueError, match="labels"):
        heatmap_alt_text(np.zeros((1, 3, 3)), ["a"])


def test_a_click_on_a_row_moves_the_query_selector():
    panel = head_explorer(h=2, N=6)
    panel.figure.query = 4  # what heatmap.js sends when row 4 is clicked
    assert panel.query.value == 4
    assert panel.figure.query == 4
    assert "query 4" in panel.figure.alt
    panel.query.value = -1
    assert panel.figure.query == -1


def test_png_renderer_keeps_the_kernel_drawn_figure():
    panel = head_explorer(h=2, N=6, renderer="png")
    assert panel.image.value[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Attention heatmaps" in panel.alt.value
    with pytest.raises(ValueError, match="renderer"):
        head_explorer(renderer="svg")


def test_marks_and_captions_are_sent_and_checked():
    w = np.full((2, 4, 4), 0.25)
    labels = ["a", "b", "c", "d"]
    grid = HeatmapGrid()
    grid.show(w, labels, lines=[2], stripe=[(3, 1)], captions=["layer 1, head 0", "layer 1, head 1"])
    assert grid.lines == [2] and grid.stripe == [[3, 1]] and grid.captions[1] == "layer 1, head 1"
    grid.show(w, labels)  # marks of an earlier input do not stay
    assert grid.lines == [] and grid.stripe == [] and grid.captions == []
    for kwargs in ({"lines": [4]}, {"stripe": [(0, 9)]}, {"captions": ["only one"]}):
        with pytest.raises(ValueError):
            grid.show(w, labels, **kwargs)


def test_the_tips_decimals_are_a_checked_trait():
    """The tip shows 4 decimals of a weight unless told fewer (the static site's stored bytes: 2)."""
    grid = HeatmapGrid()
    assert grid.digits == 4
    grid.digits = 2
    with pytest.raises(TraitError):
        grid.digits = 9
