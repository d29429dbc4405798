"""The static real-head figures: what they draw, their text sizes, and their refusals."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.text import Text

from mha_core.ui import real_head_figures as HM


def _texts(fig) -> list[Text]:
    fig.canvas.draw()
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


def test_maps_figure_draws_each_map_with_labels_and_a_colorbar():
    w = np.eye(4)
    fig = HM.maps_figure({"L0H1": w, "L2H3": w[::-1]}, ["a", "$5", "c", "d"], title="model X")
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 2
    np.testing.assert_array_equal(images[1].get_array(), w[::-1])
    texts = {t.get_text() for t in _texts(fig)}
    assert {"L0H1", "L2H3", "model X", "key token", "query token", "attention weight", r"\$5"} <= texts
    assert min(t.get_fontsize() for t in _texts(fig)) >= HM.FONT_PT
    assert any(ax.get_label() == "<colorbar>" for ax in fig.axes)


def test_score_grid_figure_draws_one_grid_per_pattern():
    grids = {"previous": np.zeros((30, 9)), "induction": np.ones((30, 9)) / 2}
    fig = HM.score_grid_figure(grids, title="SmolLM2 (4-bit)", cols=2)
    shown = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in shown] == ["previous", "induction"]
    assert all(ax.get_xlabel() == "head" and ax.get_ylabel() == "layer" for ax in shown)
    assert min(t.get_fontsize() for t in _texts(fig)) >= HM.FONT_PT


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda: HM.maps_figure({}, ["a"], title="t"), TypeError, "non-empty dict"),
    (lambda: HM.maps_figure({"x": np.eye(3)}, ["a", "b"], title="t"), ValueError, r"\(N, N\) = \(2, 2\)"),
    (lambda: HM.maps_figure({"x": np.eye(2)}, ["a", "b"], title="t", rows=2), ValueError, "rows"),
    (lambda: HM.maps_figure({"x": np.eye(2)}, ["a", "b"], title="t", tick_every=0), ValueError, "tick_every"),
    (lambda: HM.score_grid_figure({"x": np.ones(3)}, title="t"), ValueError, "2-D"),
    (lambda: HM.score_grid_figure({"x": np.ones((2, 2))}, title="t", cols=0), ValueError, "cols"),
])
def test_bad_arguments_are_refused(call, error, words):
    with pytest.raises(error, match=words):
        call()
