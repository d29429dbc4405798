"""The cost panel: params and MACs against N and h, the crossover at N = 2 d_model, the worked example.

``cost_state`` holds the arithmetic (from ``mha_core.core.counts``) and validates its arguments;
``CostPanel`` is the panel; ``_CostPlot`` redraws only the marker when N moves (blitting).
"""

from __future__ import annotations

from functools import partial

import ipywidgets as widgets
import numpy as np

from ..core.config import MHAConfig
from ..core.counts import count_macs, count_params
from ..core.validate import check_positive_int
from .chart_size import (
    ChartSize,
    PanelWidth,
    chart_size,
    redraw_for_width,
    text_facts,
    wrapped_title,
)
from .controls import (
    MAX_HEADS,
    PANEL_DPI,
    PIXEL_RATIO,
    GuardedSelectionSlider,
    Panel,
    changed_offering_divisors,
    check_choice,
    check_heads,
    check_int_in,
    divisors,
    scrolling_table,
)
from .viz import canvas_png, plain_log_ticks

# Cost panel choices: widths of common models, and lengths that include the worked example's
# N = 100 and N = 2000.
COST_D_MODELS = (64, 128, 256, 512, 768, 1024, 2048, 4096)
COST_NS = (16, 32, 64, 100, 128, 256, 512, 1000, 1024, 2000, 2048, 4096, 8192, 16384)
# The worked example of the source text.
WORKED_D_MODEL, WORKED_H, WORKED_NS = 512, 8, (100, 2000)


def crossover_n(d_model: int) -> int:
    """Sequence length where attention MACs (2 N^2 d_model) equal projection MACs (4 N d_model^2).

    ``4 N d^2 = 2 N^2 d``  <=>  ``N = 2 d``. Below it the layer is projection-dominated, above it
    attention-dominated (``tests/test_cost_panel.py`` checks this against ``count_macs``).

    Parameters
    ----------
    d_model : int, positive

    Returns
    -------
    int, ``2 * d_model``
    """
    return 2 * check_positive_int(d_model, "d_model")


def cost_state(d_model: int, h: int, N: int) -> dict:
    """Params and MACs for the cost panel: the current point, the curves against N, the worked example.

    Parameters
    ----------
    d_model : int, one of COST_D_MODELS
    h : int, a divisor of d_model, at most MAX_HEADS
    N : int, 1 .. max(COST_NS)

    Returns
    -------
    dict with ``params``, ``macs`` (``count_macs`` at N), ``crossover``, ``curve_n`` (ndarray),
    ``curve_proj``, ``curve_attn`` (ndarrays of MACs), ``by_h`` (list of (h, macs dict) for every
    divisor of d_model up to MAX_HEADS), ``worked`` (list of (N, macs dict) of the worked example).
    """
    check_choice(d_model, "d_model", COST_D_MODELS)
    h = check_int_in(h, "h", 1, MAX_HEADS)
    check_heads(d_model, h)
    N = check_int_in(N, "N", 1, max(COST_NS))
    config = MHAConfig(d_model, h)
    curve_n = np.unique(np.geomspace(min(COST_NS), max(COST_NS), 64).astype(np.int64))  # (K,)
    curves = [count_macs(config, int(n)) for n in curve_n]
    worked_cfg = MHAConfig(WORKED_D_MODEL, WORKED_H)
    return {
        "d_model": d_model, "h": h, "N": N,
        "params": count_params(config)["total"],
        "macs": count_macs(config, N),
        "crossover": crossover_n(d_model),
        "curve_n": curve_n,
        "curve_proj": np.array([m["projections"] for m in curves]),  # (K,)
        "curve_attn": np.array([m["attention"] for m in curves]),  # (K,)
        "by_h": [(k, count_macs(MHAConfig(d_model, k), N)) for k in divisors(d_model, MAX_HEADS)],
        "worked": [(n, count_macs(worked_cfg, n)) for n in WORKED_NS],
        "worked_params": count_params(worked_cfg)["total"],
    }


class CostPanel(Panel):
    """Params and MACs against N and h; the crossover at N = 2 d_model; the worked example."""

    name = "cost"

    def __init__(self, d_model: int = WORKED_D_MODEL, h: int = WORKED_H, N: int = WORKED_NS[0]):
        check_choice(d_model, "d_model", COST_D_MODELS)
        check_int_in(h, "h", 1, MAX_HEADS)
        check_heads(d_model, h)
        check_choice(N, "N", COST_NS)
        super().__init__()
        self.d_model = self._control(GuardedSelectionSlider, "d_model", options=COST_D_MODELS, value=d_model,
                                     description="d_model")
        self.h = self._control(GuardedSelectionSlider, "h", options=divisors(d_model, MAX_HEADS), value=h,
                               description="h")
        self.N = self._control(GuardedSelectionSlider, "N", options=COST_NS, value=N, description="N")
        self.numbers = widgets.HTML()
        self.numbers.add_class("mha-cost-numbers")
        self.image, self.alt, figure = self._figure("image")
        self.worked = widgets.HTML()
        self.worked.add_class("mha-cost-worked")
        self.by_h = widgets.HTML()
        self.by_h.add_class("mha-cost-by-h")
        self.plot = _CostPlot(chart_size(0, COST_ASPECT))
        self.screen = PanelWidth()  # the page reports the panel's width: the chart is drawn for it
        self.screen.observe(partial(redraw_for_width, self, _CostPlot, COST_ASPECT), names="width")
        self.widget = widgets.VBox([self._controls(widgets.HBox([self.d_model, self.h, self.N])), self.status, self.numbers,
                                    widgets.HBox([figure, self.by_h]), self.worked, self.screen])
        self._finish(self.widget)
        self.refresh()

    def values(self) -> dict:
        return {"d_model": self.d_model.value, "h": self.h.value, "N": self.N.value}

    _changed = changed_offering_divisors

    def _render(self, d_model, h, N) -> None:
        s = cost_state(d_model, h, N)
        m = s["macs"]
        regime = "projection-dominated" if m["projections"] > m["attention"] else "attention-dominated"
        self.numbers.value = (
            f"<div>params = <span class='mha-cost-params'>{s['params']:,}</span> (the same for every h) "
            f"&nbsp;|&nbsp; MACs at N={N:,}: projections <span class='mha-cost-proj'>{m['projections']:,}</span>, "
            f"attention <span class='mha-cost-attn'>{m['attention']:,}</span>, total "
            f"<span class='mha-cost-total'>{m['total']:,}</span> (~{2 * m['total']:,} FLOPs) &nbsp;|&nbsp; "
            f"<b>{regime}</b>; crossover at N = 2 &times; d_model = "
            f"<span class='mha-cost-crossover'>{s['crossover']:,}</span></div>"
        )
        self.image.value = self.plot.render(s)
        self._set_alt(self.alt,
            f"Log-log plot of MACs per forward pass against sequence length N, d_model={d_model:,}: projections "
            f"(4 N d_model squared) grow linearly, attention (2 N squared d_model) quadratically, and they cross "
            f"at N = {s['crossover']:,}. Marker at N = {N:,}: {m['total']:,} MACs, {regime}.",
            **text_facts(self.plot.fig, self.plot.size))
        self.image.layout.width = f"{self.plot.size.width_px}px"  # with the picture drawn for it, in one go
        self.by_h.value = _by_h_html(s)
        rows = "".join(
            f"<tr><td>{n:,}</td><td>{mm['projections']:,}</td><td>{mm['attention']:,}</td><td>{mm['total']:,}</td>"
            f"<td>{mm['projections'] / mm['attention']:.2f}</td></tr>" for n, mm in s["worked"]
        )
        self.worked.value = (
            f"<b>Worked example</b> (d_model={WORKED_D_MODEL}, h={WORKED_H}, d_k={WORKED_D_MODEL // WORKED_H}): "
            f"params = {s['worked_params']:,}"
            + scrolling_table("<table class='mha-worked'><tr><th>N</th><th>projections</th><th>attention</th>"
                              f"<th>total MACs</th><th>proj / attn</th></tr>{rows}</table>", "worked example table")
        )


# The longest bar of the "Against h" table, in CSS px (the page's --mha-bar: shorter on a phone).
BAR_PX = 120


def _by_h_html(s: dict) -> str:
    """Counts for every h at the current N as an HTML table with bars: only the softmax grows."""
    rows = []
    keys = ("projections", "attention", "softmax_exps")
    top = {key: max(mm[key] for _, mm in s["by_h"]) for key in keys}  # each column's largest value
    for k, mm in s["by_h"]:
        cells = []
        for key, colour in zip(keys, ("#3b528b", "#5ec962", "#fde725"), strict=True):
            share = mm[key] / top[key]  # linear, against its own column's largest; the page sets --mha-bar
            cells.append(f"<td style='text-align:right'>{mm[key]:,}</td><td><div class='mha-bar' data-share='{share:.4f}' "
                         f"style='width:max(1px, calc({share:.4f} * var(--mha-bar, {BAR_PX}px)));"
                         f"height:9px;background:{colour}'></div></td>")
        bold = " style='font-weight:bold'" if k == s["h"] else ""
        rows.append(f"<tr{bold}><td>{k}</td>{''.join(cells)}</tr>")
    return (f"<b>Against h</b> (N={s['N']:,}, d_model={s['d_model']:,}): projection and attention MACs do not "
            "change with h; only the softmax's h&middot;N&sup2; exponentials grow. Each bar is drawn against the "
            "largest value of its own column: equal bars, equal counts."
            + scrolling_table("<table class='mha-worked mha-cost-by-h'><tr><th>h</th><th colspan='2'>projection MACs</th>"
                              "<th colspan='2'>attention MACs</th><th colspan='2'>softmax exps</th></tr>"
                              + "".join(rows) + "</table>", "counts against h table"))


# The chart's height / width on a laptop (7.5 x 3.4 in).
COST_ASPECT = 3.4 / 7.5


class _CostPlot:
    """MACs against N (log-log) with the crossover marked; reused between slider moves.

    The curves depend only on d_model: they are drawn once per d_model and kept as a
    background. Moving N only pastes that background back and draws the marker (blitting).
    ``size`` (``chart_size``): the figure's size and font, for the width of the screen.
    """

    def __init__(self, size: ChartSize):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import LogLocator, NullLocator

        self.size = size
        font = size.font_pt
        self.fig = Figure(figsize=(size.width_in, size.height_in), dpi=PANEL_DPI * PIXEL_RATIO, layout="constrained")
        FigureCanvasAgg(self.fig)
        ax = self.ax = self.fig.subplots()
        self.proj, = ax.plot([1, 2], [1, 2], label="projections 4 N d_model^2", color="#3b528b")
        self.attn, = ax.plot([1, 2], [1, 2], label="attention 2 N^2 d_model", color="#5ec962")
        self.total, = ax.plot([1, 2], [1, 2], label="total", color="#21918c", linestyle="--")
        self.cross = ax.axvline(1, color="gray", linestyle=":", label="crossover N = 2 d_model")
        self.marker, = ax.plot([1], [1], "o", color="#440154", label="this N", animated=True)
        self.note = ax.text(0.98, 0.04, "", transform=ax.transAxes, ha="right", fontsize=font, animated=True)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(min(COST_NS) / 1.2, max(COST_NS) * 1.2)
        ax.set_xlabel("sequence length N", fontsize=font)
        ax.set_ylabel("MACs per forward pass", fontsize=font)
        ax.legend(fontsize=font, loc="upper left")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10, numticks=8 if size.width_px > 500 else 5))
            axis.set_minor_locator(NullLocator())
        plain_log_ticks(ax)
        ax.tick_params(labelsize=font)
        self._d_model = None
        self._background = None
        self.full_draws = 0

    def render(self, s: dict) -> bytes:
        """PNG bytes of the plot for ``cost_state`` output ``s``."""
        if s["d_model"] != self._d_model:
            n = s["curve_n"]
            self.proj.set_data(n, s["curve_proj"])
            self.attn.set_data(n, s["curve_attn"])
            self.total.set_data(n, s["curve_proj"] + s["curve_attn"])
            self.cross.set_xdata([s["crossover"], s["crossover"]])
            top = float((s["curve_proj"] + s["curve_attn"]).max())
            self.ax.set_ylim(float(s["curve_attn"].min()) / 2, top * 2)
            wrapped_title(self.fig, f"MACs against N (d_model={s['d_model']:,}; the same for every h), "
                                    f"crossover at N = {s['crossover']:,}", self.size.font_pt)
            self.fig.canvas.draw()  # the animated marker and note are left out
            self._background = self.fig.canvas.copy_from_bbox(self.fig.bbox)
            self._d_model = s["d_model"]
            self.full_draws += 1
        self.fig.canvas.restore_region(self._background)
        m = s["macs"]
        self.marker.set_data([s["N"]], [m["total"]])
        self.note.set_text(f"N = {s['N']:,}: {m['total']:,} MACs")
        self.ax.draw_artist(self.marker)
        self.ax.draw_artist(self.note)
        return canvas_png(self.fig, draw=False)


def cost_panel(**kwargs) -> CostPanel:
    """The cost panel: params and MACs against N and h, crossover at N = 2 d_model, the worked example.

    Keyword arguments set the starting values: ``d_model=512, h=8, N=100`` (validated).
    """
    return CostPanel(**kwargs)


__all__ = ["COST_D_MODELS", "COST_NS", "CostPanel", "cost_panel", "cost_state", "crossover_n"]
