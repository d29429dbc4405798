"""Tests for mha_core.ui.shape_ledger: the shape ledger and the tensor boxes."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

import mha_core as m
from mha_core.ui import shape_ledger


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
    grouped = shape_ledger.is_grouped(steps)
    assert grouped == (n_kv < h)
    for name, shape in steps:
        sym = shape_ledger.step_symbols(name, shape, grouped=grouped)
        assert sym is not None, f"no symbols for step {name!r}"
        assert tuple(sizes[s] for s in sym) == shape, name
        if grouped and name.startswith(("K", "V")) and "repeated" not in name:
            assert "h" not in sym and "h*d_k" not in sym and "h*d_v" not in sym, (name, sym)


def test_gqa_ledger_names_n_kv_and_the_repeated_heads():
    # the example of issue 21: h=4, n_kv=2, d_k=4, B=2, N=5
    table = shape_ledger.ledger_html(_steps(B=2, N=5, d_model=16, h=4, n_kv=2))
    assert "(B=2, N=5, n_kv*d_k=8)" in table  # K = X @ W_K
    assert "(B=2, n_kv=2, N=5, d_k=4)" in table  # K heads
    assert "K, V heads repeated (GQA)</code></td><td><code>(B=2, h=4, N=5, d_k=4)" in table  # each for h/n_kv heads
    assert "(B=2, h=4, N_q=5, N_k=5)" in table  # scores and weights: every query head
    assert "(B=2, h=4, N=5, d_k=4)" in table  # Q heads keep h
    assert "(2, 2, 2, 5, 5)" not in table
    mqa = shape_ledger.ledger_html(_steps(B=0, N=5, d_model=16, h=4, n_kv=1))
    assert "(h=4, N_q=5, N_k=5)" in mqa and "(N=5, n_kv*d_k=4)" in mqa and "(n_kv=1, N=5, d_k=4)" in mqa


def test_gqa_svg_labels_say_n_kv_like_the_ledger():
    # the diagram's screen-reader labels carry the grouped symbols too, not h for the K heads
    svg = shape_ledger.shape_boxes_svg(_steps(B=2, N=5, d_model=16, h=4, n_kv=2))
    assert "aria-label='K heads: (B=2, n_kv=2, N=5, d_k=4)'" in svg
    assert "aria-label='scores = Q K^T / sqrt(d_k): (B=2, h=4, N_q=5, N_k=5)'" in svg
    assert "aria-label='Q heads: transpose: (B=2, h=4, N=5, d_k=4)'" in svg
    assert "K heads: (B=2, h=2" not in svg


def test_step_symbols_unknown_step():
    assert shape_ledger.step_symbols("something new", (2, 3)) is None


def test_ledger_html_has_one_row_per_step_with_symbols_and_sizes():
    steps = _steps(B=2, N=10, d_model=64, h=8)
    table = shape_ledger.ledger_html(steps)
    assert table.count("<tr>") == len(steps) + 1  # + header
    assert "(B=2, h=8, N=10, d_k=8)" in table
    assert "(B=2, h=8, N_q=10, N_k=10)" in table
    assert f"{2 * 8 * 10 * 10:,}" in table
    assert "Q K^T / sqrt(d_k)" in table


def test_ledger_html_escapes_and_falls_back_to_numbers():
    table = shape_ledger.ledger_html([("<b>odd</b>", (3, 4))])
    assert "&lt;b&gt;odd&lt;/b&gt;" in table and "(3, 4)" in table


@pytest.mark.parametrize(
    ("steps", "exc"),
    [("X", TypeError), ([], TypeError), ([("X",)], TypeError), ([("X", (0, 3))], ValueError),
     ([("X", (2.5, 3))], ValueError), ([(1, (2, 3))], TypeError)],
)
def test_steps_are_validated(steps, exc):
    with pytest.raises(exc):
        shape_ledger.ledger_html(steps)
    with pytest.raises(exc):
        shape_ledger.shape_boxes(steps)


def test_box_sides_grow_with_the_dimensions():
    boxes = {b["name"]: b for b in shape_ledger.shape_boxes(_steps(B=2, N=10, d_model=64, h=8))}
    x, heads, scores = boxes["X"], boxes["Q heads: transpose"], boxes["scores = Q K^T / sqrt(d_k)"]
    assert x["width"] > heads["width"]  # d_model = 64 > d_k = 8
    assert x["height"] == heads["height"]  # both N = 10
    assert scores["width"] == scores["height"]  # N_q = N_k
    assert (x["count"], x["copies"]) == (2, 1)  # (B, N, d_model): B = 2 matrices, one behind the front
    assert (heads["count"], heads["copies"]) == (16, shape_ledger.MAX_COPIES)  # B * h = 16, the stack shortened
    assert heads["lead"] == "× B=2 × h=8 = 16" and heads["drawn"] == "12 of 16 drawn"
    assert x["lead"] == "× B=2" and x["drawn"] == ""  # both matrices drawn
    assert x["bottom"] == "d_model=64" and x["left"] == "N=10"


def test_draw_shape_boxes_and_svg_show_every_step():
    steps = _steps()
    fig = shape_ledger.draw_shape_boxes(steps, title="boxes")
    assert isinstance(fig, Figure) and fig._suptitle.get_text() == "boxes"
    texts = [t.get_text().replace("\n", " ") for t in fig.axes[0].texts]
    assert all(name in texts for name, _ in steps)  # long names wrapped onto two lines
    svg = shape_ledger.shape_boxes_svg(steps, title="boxes <1>")
    assert svg.startswith("<figure") and svg.endswith("</figure>")
    assert svg.count("<svg") == svg.count("class='mha-box'") == len(steps)  # one picture per step
    assert "boxes &lt;1&gt;" in svg and "d_k=8" in svg
    assert "aria-label='scores = Q K^T / sqrt(d_k): (B=2, h=8, N_q=10, N_k=10)'" in svg
    with pytest.raises(ValueError, match="cell_px"):
        shape_ledger.shape_boxes_svg(steps, cell_px=10)



def test_shape_boxes_stack_the_real_number_of_matrices():
    for B, h in ((1, 1), (1, 3), (2, 4), (3, 4)):
        boxes = {b["name"]: b for b in shape_ledger.shape_boxes(_steps(B=B, N=5, d_model=12, h=h))}
        scores = boxes["scores = Q K^T / sqrt(d_k)"]
        assert scores["count"] == B * h and scores["copies"] == B * h - 1  # all drawn: <= MAX_COPIES + 1
        assert ("× h=" in scores["lead"]) and ("drawn" not in scores["lead"])
