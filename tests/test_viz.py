"""Tests for mha_core.ui.viz: figure bytes, alt text and projector-sized text."""

from __future__ import annotations

import io

import numpy as np
import pytest
from matplotlib.figure import Figure
from PIL import Image

import mha_core as m
from mha_core.teaching import demo
from mha_core.ui import head_grid, shape_ledger, viz

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _weights(h: int, n: int, seed: int = 0) -> np.ndarray:
    w = np.random.default_rng(seed).random((h, n, n))  # (h, N, N)
    return w / w.sum(axis=-1, keepdims=True)


def _labels(n: int) -> list[str]:
    return list(demo.tokens(n))


def _steps(B=2, N=10, d_model=64, h=8):
    cfg = m.MHAConfig(d_model, h)
    x = np.zeros((B, N, d_model), np.float32) if B else np.zeros((N, d_model), np.float32)
    return m.trace_shapes(x, m.init_params(cfg, 0), h)



def test_canvas_png_and_figure_bytes():
    fig = shape_ledger.draw_shape_boxes(_steps())
    assert viz.canvas_png(fig).startswith(PNG_MAGIC)
    assert viz.figure_bytes(fig, "png").startswith(PNG_MAGIC)
    assert b"<svg" in viz.figure_bytes(fig, "svg")
    with pytest.raises(TypeError, match="Figure"):
        viz.canvas_png("not a figure")
    with pytest.raises(TypeError, match="Figure"):
        viz.figure_bytes(None)



def test_figure_image_is_an_img_with_alt_text_and_plain_text_alt():
    fig = shape_ledger.draw_shape_boxes(_steps(), title="boxes")
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
        viz.FigureImage(shape_ledger.draw_shape_boxes(_steps()), alt)


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
        yield f"head_grid_figure h={h} N={n}", head_grid.head_grid_figure(_weights(h, n), _labels(n), title="t", query=0)
    for B, h in ((0, 4), (3, 4), (2, 16)):
        yield f"draw_shape_boxes B={B} h={h}", shape_ledger.draw_shape_boxes(_steps(B=B, N=5, d_model=64, h=h), title="t")


def test_every_text_of_the_core_figures_renders_at_10_pt_or_more():
    smallest = {name: viz.rendered_font_sizes(fig)[0] for name, fig in _core_figures()}
    for name, (text, pt) in smallest.items():
        assert pt >= viz.MIN_FONT_PT - 1e-9, f"{name}: {text!r} renders at {pt:.1f} pt"



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


def test_plain_log_ticks_keeps_labels_set_by_hand():
    """An axis given its own tick labels (notebook 05's h = 1, 2, 4, ...) keeps every one of them."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([1, 8], [1, 2])
    ax.set(xscale="log", yscale="log")
    ax.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
    viz.plain_log_ticks(ax)
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8"]
    assert all("$" not in t.get_text() for t in ax.get_yticklabels())  # the other axis is still plain
    plt.close(fig)
