"""Tests for mha_core.ui.head_grid: the kernel-drawn per-head heatmaps (HeadGrid, head_grid_figure)."""

from __future__ import annotations

import io

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib import colormaps
from PIL import Image

from mha_core.teaching import demo
from mha_core.ui import head_grid, viz

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _weights(h: int, n: int, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).random((h, n, n))  # (h, N, N)
    return w / w.sum(axis=-1, keepdims=True)


def _labels(n: int) -> list[str]:
    return list(demo.tokens(n))


def test_render_returns_a_png_of_the_drawn_pixels():
    grid = head_grid.HeadGrid()
    png = grid.render(_weights(4, 10), _labels(10), title="t")
    assert png.startswith(PNG_MAGIC)
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    np.testing.assert_array_equal(img, grid.palette[grid.indices])


def test_frames_are_reused_and_rebuilt_only_when_h_changes():
    grid = head_grid.HeadGrid()
    grid.update(_weights(4, 10), _labels(10))
    assert grid.frames_built == 1
    grid.update(_weights(4, 20, seed=1), _labels(20), title="other title", query=3)  # N, title, query
    assert grid.frames_built == 1
    grid.update(_weights(8, 20), _labels(20))
    assert grid.frames_built == 2
    grid.update(_weights(4, 12), _labels(12))  # back to h = 4: its frame is kept
    assert grid.frames_built == 2


def test_prepare_builds_frames_ahead():
    grid = head_grid.HeadGrid()
    grid.prepare([1, 4])
    assert grid.frames_built == 2
    grid.update(_weights(4, 6), _labels(6))
    assert grid.frames_built == 2
    with pytest.raises(ValueError, match="head_counts"):
        grid.prepare([0])


def test_each_tile_shows_its_head_in_viridis_on_a_square_root_scale():
    grid = head_grid.HeadGrid()
    h, n = 4, 8
    values = np.array([0.0, 0.04, 0.25, 1.0])  # one constant per head
    w = np.broadcast_to(values[:, None, None], (h, n, n)).copy()  # (h, N, N)
    rgb = grid.update(w, _labels(n))
    _, corners = grid._frame(h)
    s = grid.tile_px
    for value, (x, y) in zip(values, corners, strict=True):
        tile = rgb[y: y + s, x: x + s].reshape(-1, 3)
        expected = np.array(colormaps["viridis"](np.sqrt(value))[:3]) * 255
        assert np.abs(tile - expected).max() <= 3, value  # palette of 224 viridis steps


def test_tiles_follow_the_weights_cell_by_cell():
    grid = head_grid.HeadGrid()
    n = 5
    w = np.zeros((1, n, n))
    w[0, 2, 4] = 1.0  # query 2 attends key 4 only
    rgb = grid.update(w, _labels(n))
    (x, y), s = grid._frame(1)[1][0], grid.tile_px
    bright = np.array(colormaps["viridis"](1.0)[:3]) * 255
    row, col = (2 * s) // n + s // (2 * n), (4 * s) // n + s // (2 * n)  # centre of cell (2, 4)
    assert np.abs(rgb[y + row, x + col] - bright).max() <= 3
    assert np.abs(rgb[y + s // (2 * n), x + s // (2 * n)] - bright).max() > 50  # cell (0, 0) is dark


def test_query_row_is_outlined_in_every_head():
    grid = head_grid.HeadGrid()
    w = _weights(4, 10)
    plain = grid.update(w, _labels(10)).copy()
    marked = grid.update(w, _labels(10), query=3)
    colour = np.array([int(head_grid.HIGHLIGHT_COLOR[i: i + 2], 16) for i in (1, 3, 5)])
    assert not (plain == colour).all(-1).any()
    s, n = grid.tile_px, 10
    for x, y in grid._frame(4)[1]:
        top = y + 3 * s // n
        assert (marked[top, x: x + s] == colour).all()


def test_different_weights_give_different_images():
    grid = head_grid.HeadGrid()
    a = grid.render(_weights(2, 6, seed=0), _labels(6))
    b = grid.render(_weights(2, 6, seed=1), _labels(6))
    assert a != b


def test_export_png_and_svg():
    grid = head_grid.HeadGrid()
    with pytest.raises(RuntimeError, match="nothing drawn"):
        grid.export("png")
    grid.update(_weights(2, 6), _labels(6), title="my title", query=1)
    assert grid.export("png").startswith(PNG_MAGIC)
    svg = grid.export("svg").decode()
    assert "<svg" in svg and "my title" in svg
    with pytest.raises(ValueError, match="fmt"):
        grid.export("gif")


@pytest.mark.parametrize(
    ("weights", "labels", "kwargs", "exc", "match"),
    [
        ([[0.5]], ["a"], {}, TypeError, "weights"),
        (np.ones((2, 3)), ["a"] * 3, {}, ValueError, r"\(h, N, N\)"),
        (np.ones((2, 3, 4)), ["a"] * 3, {}, ValueError, r"\(h, N, N\)"),
        (np.ones((1, 3, 3), dtype=int), ["a"] * 3, {}, TypeError, "float"),
        (np.ones((1, 3, 3)), ["a"] * 2, {}, ValueError, "labels"),
        (np.ones((1, 3, 3)), "abc", {}, TypeError, "labels"),
        (np.ones((1, 3, 3)), ["a"] * 3, {"query": 3}, ValueError, "query"),
        (np.ones((1, 3, 3)), ["a"] * 3, {"query": True}, TypeError, "query"),
        (np.ones((1, 3, 3)), ["a"] * 3, {"title": 5}, TypeError, "title"),
    ],
)
def test_head_grid_validates(weights, labels, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        head_grid.HeadGrid().update(weights, labels, **kwargs)


@pytest.mark.parametrize(("kwargs", "match"), [({"panel_inches": 0}, "panel_inches"), ({"dpi": 1.5}, "dpi")])
def test_head_grid_constructor_validates(kwargs, match):
    with pytest.raises(ValueError, match=match):
        head_grid.HeadGrid(**kwargs)


def test_head_grid_figure_has_one_visible_axes_per_head():
    fig = head_grid.head_grid_figure(_weights(6, 7), _labels(7), title="six heads", query=2)
    heat = [ax for ax in fig.axes if ax.get_visible() and ax.images and ax.get_label() != "<colorbar>"]
    assert len(heat) == 6
    assert fig._suptitle.get_text() == "six heads"
    assert heat[0].get_ylabel() == "query token (N_q)"


@pytest.mark.parametrize("query", [1, 8, 19])
def test_the_outlined_query_is_labelled_on_its_axis(query):
    """Notebook 04 outlines "it" (position 8 of 20), which every-third-token labels once skipped."""
    labels = [f"w{i}" for i in range(20)]
    fig = head_grid.head_grid_figure(_weights(8, 20), labels, title="t", query=query)
    first = next(ax for ax in fig.axes if ax.images and ax.get_ylabel())
    shown = {t.get_text() for t in first.get_yticklabels()}
    assert labels[query] in shown and len(shown) <= len(head_grid._tick_positions(20, 20))
    plt.close(fig)



@pytest.mark.parametrize("dpi", [60, 80, 96, 120])
def test_head_grid_text_renders_at_10_pt_or_more(dpi):
    # HeadGrid's PNG is shown one pixel per CSS pixel: compare the pixel height of its token label
    # with the same text drawn at 10 pt at 96 px per inch (10 CSS pt).
    grid = head_grid.HeadGrid(dpi=dpi)
    label = grid._stamps.get("Hg", grid.font_pt)
    reference = head_grid._TextStamps(viz.CSS_PX_PER_INCH).get("Hg", viz.MIN_FONT_PT)
    assert label.shape[0] >= reference.shape[0] - 1  # within a pixel of rounding
    grid.render(_weights(8, 20), _labels(20), title="t", query=2)
    assert grid.frames_built == 1
