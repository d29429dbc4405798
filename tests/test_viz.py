"""Tests for mha_core.ui.viz: the head grid, the shape ledger and the tensor boxes."""

from __future__ import annotations

import io

import numpy as np
import pytest
from matplotlib import colormaps
from matplotlib.figure import Figure
from PIL import Image

import mha_core as m
from mha_core.teaching import demo
from mha_core.ui import viz

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _weights(h: int, n: int, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).random((h, n, n))  # (h, N, N)
    return w / w.sum(axis=-1, keepdims=True)


def _labels(n: int) -> list[str]:
    return list(demo.tokens(n))


# -- HeadGrid ---------------------------------------------------------------------------------------

def test_render_returns_a_png_of_the_drawn_pixels():
    grid = viz.HeadGrid()
    png = grid.render(_weights(4, 10), _labels(10), title="t")
    assert png.startswith(PNG_MAGIC)
    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    np.testing.assert_array_equal(img, grid.palette[grid.indices])


def test_frames_are_reused_and_rebuilt_only_when_h_changes():
    grid = viz.HeadGrid()
    grid.update(_weights(4, 10), _labels(10))
    assert grid.frames_built == 1
    grid.update(_weights(4, 20, seed=1), _labels(20), title="other title", query=3)  # N, title, query
    assert grid.frames_built == 1
    grid.update(_weights(8, 20), _labels(20))
    assert grid.frames_built == 2
    grid.update(_weights(4, 12), _labels(12))  # back to h = 4: its frame is kept
    assert grid.frames_built == 2


def test_prepare_builds_frames_ahead():
    grid = viz.HeadGrid()
    grid.prepare([1, 4])
    assert grid.frames_built == 2
    grid.update(_weights(4, 6), _labels(6))
    assert grid.frames_built == 2
    with pytest.raises(ValueError, match="head_counts"):
        grid.prepare([0])


def test_each_tile_shows_its_head_in_viridis_on_a_square_root_scale():
    grid = viz.HeadGrid()
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
    grid = viz.HeadGrid()
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
    grid = viz.HeadGrid()
    w = _weights(4, 10)
    plain = grid.update(w, _labels(10)).copy()
    marked = grid.update(w, _labels(10), query=3)
    colour = np.array([int(viz.HIGHLIGHT_COLOR[i: i + 2], 16) for i in (1, 3, 5)])
    assert not (plain == colour).all(-1).any()
    s, n = grid.tile_px, 10
    for x, y in grid._frame(4)[1]:
        top = y + 3 * s // n
        assert (marked[top, x: x + s] == colour).all()


def test_different_weights_give_different_images():
    grid = viz.HeadGrid()
    a = grid.render(_weights(2, 6, seed=0), _labels(6))
    b = grid.render(_weights(2, 6, seed=1), _labels(6))
    assert a != b


def test_export_png_and_svg():
    grid = viz.HeadGrid()
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
        viz.HeadGrid().update(weights, labels, **kwargs)


@pytest.mark.parametrize(("kwargs", "match"), [({"panel_inches": 0}, "panel_inches"), ({"dpi": 1.5}, "dpi")])
def test_head_grid_constructor_validates(kwargs, match):
    with pytest.raises(ValueError, match=match):
        viz.HeadGrid(**kwargs)


def test_head_grid_figure_has_one_visible_axes_per_head():
    fig = viz.head_grid_figure(_weights(6, 7), _labels(7), title="six heads", query=2)
    heat = [ax for ax in fig.axes if ax.get_visible() and ax.images and ax.get_label() != "<colorbar>"]
    assert len(heat) == 6
    assert fig._suptitle.get_text() == "six heads"
    assert heat[0].get_ylabel() == "query token (N_q)"


# -- ledger and boxes ---------------------------------------------------------------------------------

def _steps(B=2, N=10, d_model=64, h=8, n_kv=None, **kwargs):
    cfg = m.MHAConfig(d_model, h, n_kv)
    x = np.zeros((B, N, d_model), np.float32) if B else np.zeros((N, d_model), np.float32)
    return m.trace_shapes(x, m.init_params(cfg, 0), h, n_kv_heads=n_kv, **kwargs)


@pytest.mark.parametrize("rope", [False, True])
@pytest.mark.parametrize("n_kv", [8, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("B", [0, 3])
def test_every_traced_step_has_symbols_that_match_its_sizes(B, n_kv, rope):
    N, d_model, h = 10, 64, 8
    d_k = d_model // h
    sizes = {"B": B, "N": N, "N_q": N, "N_k": N, "d_model": d_model, "h": h, "d_k": d_k, "d_v": d_k,
             "h*d_k": h * d_k, "h*d_v": h * d_k, "n_kv": n_kv, "h/n_kv": h // n_kv,
             "n_kv*d_k": n_kv * d_k, "n_kv*d_v": n_kv * d_k}
    steps = _steps(B, N, d_model, h, n_kv, rope_base=10_000.0 if rope else None)
    grouped = viz.is_grouped(steps)
    assert grouped == (n_kv < h)
    for name, shape in steps:
        sym = viz.step_symbols(name, shape, grouped=grouped)
        assert sym is not None, f"no symbols for step {name!r}"
        assert tuple(sizes[s] for s in sym) == shape, name
        if grouped and name.startswith(("K", "V")):
            assert "h" not in sym and "h*d_k" not in sym and "h*d_v" not in sym, (name, sym)


def test_gqa_ledger_names_n_kv_and_the_grouped_scores():
    # the example of issue 21: h=4, n_kv=2, d_k=4, B=2, N=5
    table = viz.ledger_html(_steps(B=2, N=5, d_model=16, h=4, n_kv=2))
    assert "(B=2, N=5, n_kv*d_k=8)" in table  # K = X @ W_K
    assert "(B=2, n_kv=2, N=5, d_k=4)" in table  # K heads
    assert "(B=2, n_kv=2, h/n_kv=2, N_q=5, N_k=5)" in table  # scores and weights, 5-D
    assert "(B=2, h=4, N=5, d_k=4)" in table  # Q heads keep h
    assert "(2, 2, 2, 5, 5)" not in table
    mqa = viz.ledger_html(_steps(B=0, N=5, d_model=16, h=4, n_kv=1))
    assert "(n_kv=1, h/n_kv=4, N_q=5, N_k=5)" in mqa and "(N=5, n_kv*d_k=4)" in mqa


def test_step_symbols_unknown_step():
    assert viz.step_symbols("something new", (2, 3)) is None


def test_ledger_html_has_one_row_per_step_with_symbols_and_sizes():
    steps = _steps(B=2, N=10, d_model=64, h=8)
    table = viz.ledger_html(steps)
    assert table.count("<tr>") == len(steps) + 1  # + header
    assert "(B=2, h=8, N=10, d_k=8)" in table
    assert "(B=2, h=8, N_q=10, N_k=10)" in table
    assert f"{2 * 8 * 10 * 10:,}" in table
    assert "Q K^T / sqrt(d_k)" in table


def test_ledger_html_escapes_and_falls_back_to_numbers():
    table = viz.ledger_html([("<b>odd</b>", (3, 4))])
    assert "&lt;b&gt;odd&lt;/b&gt;" in table and "(3, 4)" in table


@pytest.mark.parametrize(
    ("steps", "exc"),
    [("X", TypeError), ([], TypeError), ([("X",)], TypeError), ([("X", (0, 3))], ValueError),
     ([("X", (2.5, 3))], ValueError), ([(1, (2, 3))], TypeError)],
)
def test_steps_are_validated(steps, exc):
    with pytest.raises(exc):
        viz.ledger_html(steps)
    with pytest.raises(exc):
        viz.shape_boxes(steps)


def test_box_sides_grow_with_the_dimensions():
    boxes = {b["name"]: b for b in viz.shape_boxes(_steps(B=2, N=10, d_model=64, h=8))}
    x, heads, scores = boxes["X"], boxes["Q heads: transpose"], boxes["scores = Q K^T / sqrt(d_k)"]
    assert x["width"] > heads["width"]  # d_model = 64 > d_k = 8
    assert x["height"] == heads["height"]  # both N = 10
    assert scores["width"] == scores["height"]  # N_q = N_k
    assert (x["count"], x["copies"]) == (2, 1)  # (B, N, d_model): B = 2 matrices, one behind the front
    assert (heads["count"], heads["copies"]) == (16, viz.MAX_COPIES)  # B * h = 16, the stack shortened
    assert heads["lead"] == "× B=2 × h=8 = 16 (matrices; 12 drawn)"
    assert x["bottom"] == "d_model=64" and x["left"] == "N=10"


def test_draw_shape_boxes_and_svg_show_every_step():
    steps = _steps()
    fig = viz.draw_shape_boxes(steps, title="boxes")
    assert isinstance(fig, Figure) and fig._suptitle.get_text() == "boxes"
    texts = [t.get_text().replace("\n", " ") for t in fig.axes[0].texts]
    assert all(name in texts for name, _ in steps)  # long names wrapped onto two lines
    svg = viz.shape_boxes_svg(steps, title="boxes <1>")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("class='mha-box'") == len(steps)
    assert "boxes &lt;1&gt;" in svg and "d_k=8" in svg
    with pytest.raises(ValueError, match="cell_px"):
        viz.shape_boxes_svg(steps, cell_px=10)


def test_canvas_png_and_figure_bytes():
    fig = viz.draw_shape_boxes(_steps())
    assert viz.canvas_png(fig).startswith(PNG_MAGIC)
    assert viz.figure_bytes(fig, "png").startswith(PNG_MAGIC)
    assert b"<svg" in viz.figure_bytes(fig, "svg")
    with pytest.raises(TypeError, match="Figure"):
        viz.canvas_png("not a figure")
    with pytest.raises(TypeError, match="Figure"):
        viz.figure_bytes(None)


def test_shape_boxes_stack_the_real_number_of_matrices():
    for B, h in ((1, 1), (1, 3), (2, 4), (3, 4)):
        boxes = {b["name"]: b for b in viz.shape_boxes(_steps(B=B, N=5, d_model=12, h=h))}
        scores = boxes["scores = Q K^T / sqrt(d_k)"]
        assert scores["count"] == B * h and scores["copies"] == B * h - 1  # all drawn: <= MAX_COPIES + 1
        assert ("× h=" in scores["lead"]) and ("drawn" not in scores["lead"])


# -- alt text and projector-sized text ----------------------------------------------------------

def test_figure_image_is_an_img_with_alt_text_and_plain_text_alt():
    fig = viz.draw_shape_boxes(_steps(), title="boxes")
    image = viz.FigureImage(fig, 'Boxes for "X" <and> heads,\n   two lines')
    page, metadata = image._repr_html_()
    assert metadata == {"min_font_pt": 10.0}
    assert page.startswith('<img src="data:image/png;base64,')
    assert 'alt="Boxes for &quot;X&quot; &lt;and&gt; heads, two lines"' in page
    assert f'width="{round(fig.get_figwidth() * 96)}"' in page and "max-width:100%" in page
    assert repr(image) == 'Boxes for "X" <and> heads, two lines'
    assert image.png.startswith(PNG_MAGIC)
    width, _ = Image.open(io.BytesIO(image.png)).size
    assert width == round(fig.get_figwidth() * viz.FIGURE_DPI)


@pytest.mark.parametrize("alt", ["", "   ", None, 3])
def test_figure_image_requires_alt_text(alt):
    with pytest.raises(ValueError, match="alt"):
        viz.FigureImage(viz.draw_shape_boxes(_steps()), alt)


def test_figure_image_and_font_sizes_validate_the_figure():
    with pytest.raises(TypeError, match="Figure"):
        viz.FigureImage("not a figure", "alt")
    with pytest.raises(TypeError, match="Figure"):
        viz.rendered_font_sizes(None)


def test_show_figure_closes_a_pyplot_figure(monkeypatch):
    import matplotlib.pyplot as plt
    from IPython import display as ipd

    shown = []
    monkeypatch.setattr(ipd, "display", shown.append)
    fig, ax = plt.subplots()
    ax.plot([0, 1])
    viz.show_figure(fig, "a line")
    assert not plt.fignum_exists(fig.number)  # closed: the inline backend will not show it again
    assert len(shown) == 1 and repr(shown[0]) == "a line"


def test_rendered_font_sizes_scale_a_wide_figure_to_the_column():
    narrow, wide = Figure(figsize=(4, 3)), Figure(figsize=(16, 3))
    for fig in (narrow, wide):
        fig.text(0.5, 0.5, "ten", fontsize=10)
    assert viz.rendered_font_sizes(narrow) == [("ten", 10.0)]
    assert viz.rendered_font_sizes(wide) == [("ten", pytest.approx(10 * viz.COLUMN_PX / (16 * 96)))]


def _core_figures():
    for h, n in ((1, 5), (2, 12), (8, 20), (16, 64)):
        yield f"head_grid_figure h={h} N={n}", viz.head_grid_figure(_weights(h, n), _labels(n), title="t", query=0)
    for B, h in ((0, 4), (3, 4), (2, 16)):
        yield f"draw_shape_boxes B={B} h={h}", viz.draw_shape_boxes(_steps(B=B, N=5, d_model=64, h=h), title="t")


def test_every_text_of_the_core_figures_renders_at_10_pt_or_more():
    smallest = {name: viz.rendered_font_sizes(fig)[0] for name, fig in _core_figures()}
    for name, (text, pt) in smallest.items():
        assert pt >= viz.MIN_FONT_PT - 1e-9, f"{name}: {text!r} renders at {pt:.1f} pt"


@pytest.mark.parametrize("dpi", [60, 80, 96, 120])
def test_head_grid_text_renders_at_10_pt_or_more(dpi):
    # HeadGrid's PNG is shown one pixel per CSS pixel: compare the pixel height of its token label
    # with the same text drawn at 10 pt at 96 px per inch (10 CSS pt).
    grid = viz.HeadGrid(dpi=dpi)
    label = grid._stamps.get("Hg", grid.font_pt)
    reference = viz._TextStamps(viz.CSS_PX_PER_INCH).get("Hg", viz.MIN_FONT_PT)
    assert label.shape[0] >= reference.shape[0] - 1  # within a pixel of rounding
    grid.render(_weights(8, 20), _labels(20), title="t", query=2)
    assert grid.frames_built == 1


def test_mathtext_superscripts_count_at_their_drawn_size():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.loglog([1, 1000], [1, 1e6])
    sizes = dict(viz.rendered_font_sizes(fig))
    assert min(sizes.values()) == pytest.approx(10 * viz.MATHTEXT_SCRIPT)  # the 10^k tick labels
    viz.plain_log_ticks(ax)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert "1000" in labels and "1e6" in labels
    assert viz.rendered_font_sizes(fig)[0][1] == pytest.approx(10.0)
    plt.close(fig)
