"""Charts drawn for the screen's width (mha_core.ui.chart_size): text readable on a phone and a wall.

The browser test (tests/test_dashboard_first_sight.py) measures the text as shown; here, the
sizes the kernel draws for each width, and that the panels redraw when the page reports one.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from mha_core.ui.chart_size import PHONE_PX, WALL_PX, chart_size, smallest_text_px
from mha_core.ui.cost_panel import COST_ASPECT, CostPanel
from mha_core.ui.kv_panel import KV_ASPECT, KVCachePanel


@pytest.mark.parametrize("width", [320, 390, PHONE_PX - 1, PHONE_PX, 1366, WALL_PX - 1, WALL_PX, 1920, 3840])
def test_the_chart_fits_the_panel(width):
    size = chart_size(width, COST_ASPECT)
    assert size.width_px <= width
    px = size.font_pt * 96 / 72
    assert px >= 10 and (px >= 20 if width >= WALL_PX else True)


def test_an_unknown_width_draws_for_a_laptop():
    assert replace(chart_size(0, KV_ASPECT), for_width=1366) == chart_size(1366, KV_ASPECT)


@pytest.mark.parametrize("width, aspect", [(-1, 0.5), (390.5, 0.5), (True, 0.5), (390, 0), (390, 3)])
def test_bad_sizes_are_refused(width, aspect):
    with pytest.raises(ValueError, match="width|aspect"):
        chart_size(width, aspect)


@pytest.mark.parametrize("panel", [CostPanel, KVCachePanel])
@pytest.mark.parametrize("width, least_px", [(390, 10), (1920, 20)])
def test_a_reported_width_redraws_the_chart_for_it(panel, width, least_px):
    p = panel()
    before = p.image.value
    p.screen.width = width - 30  # the panel inside the page's margins
    assert p.plot.size.width_px <= width - 30 and p.image.layout.width == f"{p.plot.size.width_px}px"
    assert p.image.value != before and smallest_text_px(p.plot.fig) >= least_px
    assert f"data-text-px='{round(smallest_text_px(p.plot.fig), 2):g}'" in p.alt.value and f"data-for-width='{width - 30}'" in p.alt.value


def test_a_forged_width_is_refused():
    p = CostPanel()
    with pytest.raises(Exception, match="width"):
        p.screen.width = 10**9


def _drawn_texts(fig):
    """Every text the figure draws: its title, the axes' titles, axis labels, legends, notes, and the tick labels of the
    ticks inside the axes' limits (a locator also labels ticks beyond them, which are not drawn)."""
    shown = [fig._suptitle] if fig._suptitle else []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            shown += [t.label1 for t in axis.get_major_ticks() if lo <= t.get_loc() <= hi]
        shown += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts]
        if ax.get_legend():
            shown += ax.get_legend().get_texts()
    return [t for t in shown if t.get_visible() and t.get_text().strip()]


@pytest.mark.parametrize("panel", [CostPanel, KVCachePanel])
@pytest.mark.parametrize("width", [320, 390, 768, 1366, 1920])
def test_no_text_of_a_chart_is_cut_off(panel, width):
    """Issue 34: on a phone the cost chart's title ran off its right edge ("..., crossov")."""
    p = panel()
    p.screen.width = width - 20  # the panel inside the page's margins (370 at 390, as measured)
    p.refresh()
    fig = p.plot.fig
    renderer = fig.canvas.get_renderer()
    W, H = fig.bbox.width, fig.bbox.height
    out = [(t.get_text()[:40], [round(v) for v in e.extents]) for t in _drawn_texts(fig)
           if (e := t.get_window_extent(renderer)).x0 < 0 or e.y0 < 0 or e.x1 > W or e.y1 > H]
    assert out == [], (W, H, out)
