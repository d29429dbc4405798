"""The shape panel: sliders B, N, d_model, h -> the shape ledger, the tensor boxes, d_k, params, MACs.

``shape_state`` holds the arithmetic (it runs the real layer through ``trace_shapes``) and
validates its arguments, so tests call it directly; ``ShapeExplorer`` is the panel.
"""

from __future__ import annotations

import functools
import numbers

import ipywidgets as widgets
import numpy as np

from ..core.config import MHAConfig, init_params
from ..core.counts import count_macs, count_params
from ..core.ledger import trace_shapes
from .controls import (
    MAX_HEADS,
    GuardedIntSlider,
    GuardedSelectionSlider,
    Panel,
    changed_offering_divisors,
    check_choice,
    check_heads,
    check_int_in,
    divisors,
    scrolling_table,
)
from .shape_ledger import ledger_html, shape_boxes_svg

# Shape explorer: the ledger runs the real layer (trace_shapes); these bounds keep one run
# well under 0.1 s on a laptop CPU while still reaching the worked example (N=100, d_model=512).
SHAPE_MAX_B = 4
SHAPE_MAX_N = 128
SHAPE_D_MODELS = (16, 32, 64, 128, 256, 512, 768, 1024)


@functools.lru_cache(maxsize=4)
def layer_params(d_model: int, h: int, seed: int) -> dict[str, np.ndarray]:
    """The panel's layer weights for (d_model, h), made once and read-only: they do not depend on
    B or N, and at d_model = 1024 making them takes longer than running the layer (a move of N
    or B reuses them)."""
    params = init_params(MHAConfig(d_model, h), rng=seed)
    for w in params.values():
        w.flags.writeable = False
    return params


def shape_state(B: int, N: int, d_model: int, h: int, *, seed: int = 0) -> dict:
    """Everything the shape explorer shows, for one setting of its sliders.

    Runs the real layer once through ``trace_shapes`` on a seeded input of shape (B, N, d_model).

    Parameters
    ----------
    B : int, 1 .. SHAPE_MAX_B
    N : int, 1 .. SHAPE_MAX_N
    d_model : int, one of SHAPE_D_MODELS
    h : int, a divisor of d_model, at most MAX_HEADS
    seed : int, default 0
        Seeds the input; ``seed + 1`` the weights (``layer_params``). The shapes do not depend on it.

    Returns
    -------
    dict with ``steps`` (the ledger, list of (name, shape)), ``d_k``, ``params`` (int),
    ``macs`` (dict from ``count_macs``) and the sizes themselves.
    """
    B = check_int_in(B, "B", 1, SHAPE_MAX_B)
    N = check_int_in(N, "N", 1, SHAPE_MAX_N)
    check_choice(d_model, "d_model", SHAPE_D_MODELS)
    h = check_int_in(h, "h", 1, MAX_HEADS)
    check_heads(d_model, h)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be 0 or more, got seed={seed}")
    config = MHAConfig(d_model, h)
    x = np.random.default_rng(seed).standard_normal((B, N, d_model), dtype=np.float32)  # (B, N, d_model)
    steps = trace_shapes(x, layer_params(d_model, h, seed + 1), h)
    return {
        "B": B, "N": N, "d_model": d_model, "h": h, "d_k": config.d_k, "steps": steps,
        "params": count_params(config)["total"], "macs": count_macs(config, N, batch=B),
    }


class ShapeExplorer(Panel):
    """Sliders B, N, d_model, h -> the shape ledger, the tensor boxes, d_k, params and MACs."""

    name = "shape"

    def __init__(self, B: int = 2, N: int = 10, d_model: int = 512, h: int = 8):
        check_int_in(B, "B", 1, SHAPE_MAX_B)
        check_int_in(N, "N", 1, SHAPE_MAX_N)
        check_choice(d_model, "d_model", SHAPE_D_MODELS)
        check_int_in(h, "h", 1, MAX_HEADS)
        check_heads(d_model, h)
        super().__init__()
        self.B = self._control(GuardedIntSlider, "B", value=B, min=1, max=SHAPE_MAX_B, description="B",
                               continuous_update=False)
        self.N = self._control(GuardedIntSlider, "N", value=N, min=1, max=SHAPE_MAX_N, description="N",
                               continuous_update=False)
        self.d_model = self._control(GuardedSelectionSlider, "d_model", options=SHAPE_D_MODELS, value=d_model,
                                     description="d_model", continuous_update=False)
        self.h = self._control(GuardedSelectionSlider, "h", options=divisors(d_model, MAX_HEADS), value=h,
                               description="h", continuous_update=False)
        self.summary = widgets.HTML()
        self.summary.add_class("mha-shape-summary")
        self.ledger = widgets.HTML()
        self.ledger.add_class("mha-shape-ledger")
        self.boxes = widgets.HTML()
        self.boxes.add_class("mha-shape-boxes")
        self.widget = widgets.VBox([
            self._controls(widgets.HBox([widgets.VBox([self.B, self.N]), widgets.VBox([self.d_model, self.h])])),
            self.status, self.summary, self.ledger, self.boxes,
        ])
        self._finish(self.widget)
        self.refresh()

    def values(self) -> dict:
        return {"B": self.B.value, "N": self.N.value, "d_model": self.d_model.value, "h": self.h.value}

    _changed = changed_offering_divisors

    def _render(self, B, N, d_model, h) -> None:
        s = shape_state(B, N, d_model, h)
        m = s["macs"]
        self.summary.value = (
            f"<div class='mha-shape-numbers'><b>d_k = d_model / h = {s['d_model']:,} / {s['h']:,} = "
            f"<span class='mha-dk'>{s['d_k']:,}</span></b> &nbsp;|&nbsp; params (W_Q, W_K, W_V, W_O) = "
            f"<span class='mha-params'>{s['params']:,}</span> = 4 &times; {s['d_model']:,}&sup2; "
            f"&nbsp;|&nbsp; MACs = <span class='mha-macs'>{m['total']:,}</span> "
            f"(projections {m['projections']:,} + attention {m['attention']:,})</div>"
        )
        self.ledger.value = scrolling_table(ledger_html(s["steps"]), "shape after every step")
        self.boxes.value = shape_boxes_svg(
            s["steps"], title=f"B={B}, N={N}, d_model={d_model}, h={h}, d_k={s['d_k']}")


def shape_explorer(**kwargs) -> ShapeExplorer:
    """The shape panel: sliders B, N, d_model, h -> ledger (from ``trace_shapes``), boxes, d_k, params, MACs.

    Keyword arguments set the starting values: ``B=2, N=10, d_model=512, h=8`` (validated:
    ValueError/TypeError naming the argument). Display the returned panel to show it.
    """
    return ShapeExplorer(**kwargs)


__all__ = ["SHAPE_D_MODELS", "SHAPE_MAX_B", "SHAPE_MAX_N", "ShapeExplorer", "shape_explorer", "shape_state"]
