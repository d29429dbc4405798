"""The KV-cache panel: n_kv from MHA through GQA to MQA -> KV-cache bytes for a model and context.

``kv_state`` holds the arithmetic (``mha_core.core.counts.kv_cache_bytes``) and validates its
arguments; ``KVCachePanel`` is the panel; ``_KVPlot`` redraws only the highlighted bar when
n_kv moves (blitting).
"""

from __future__ import annotations

from functools import partial

import ipywidgets as widgets
import numpy as np

from ..core.config import MHAConfig
from ..core.counts import kv_cache_bytes
from .chart_size import ChartSize, PanelWidth, chart_size, redraw_for_width, text_facts
from .controls import (
    PANEL_DPI,
    PIXEL_RATIO,
    GuardedDropdown,
    GuardedSelectionSlider,
    GuardedToggleButtons,
    Panel,
    check_choice,
    check_int_in,
    divisors,
)
from .viz import canvas_png

# KV-cache panel: example model sizes (d_model, h, layers); the 4096/32 one is the texts' model.
KV_MODELS = {
    "small: d_model=512, h=8, 6 layers": (512, 8, 6),
    "medium: d_model=2048, h=16, 24 layers": (2048, 16, 24),
    "large: d_model=4096, h=32, 32 layers": (4096, 32, 32),
}
KV_CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
KV_DTYPES = {"float16": 2, "float32": 4}


def kv_state(model: str, n_kv: int, n_tokens: int, dtype: str = "float16") -> dict:
    """KV-cache bytes for one of ``KV_MODELS`` with ``n_kv`` key/value heads.

    Parameters
    ----------
    model : str, a key of KV_MODELS
    n_kv : int, a divisor of the model's h (h: MHA, 1: MQA, between: GQA)
    n_tokens : int, one of KV_CONTEXTS
    dtype : {"float16", "float32"}, default "float16"

    Returns
    -------
    dict with ``bytes`` (int), ``mha_bytes`` (the same model with n_kv = h), ``kind``
    ("MHA", "GQA" or "MQA"), ``all`` (list of (n_kv, bytes) for every divisor of h) and the sizes.
    """
    check_choice(model, "model", tuple(KV_MODELS))
    d_model, h, layers = KV_MODELS[model]
    n_kv = check_int_in(n_kv, "n_kv", 1, h)
    if h % n_kv:
        raise ValueError(f"n_kv={n_kv} does not divide h={h}; pick one of {', '.join(map(str, divisors(h)))}")
    check_choice(n_tokens, "context", KV_CONTEXTS)
    check_choice(dtype, "dtype", tuple(KV_DTYPES))
    np_dtype = np.float16 if dtype == "float16" else np.float32

    def cache(k: int) -> int:
        return kv_cache_bytes(MHAConfig(d_model, h, n_kv_heads=k), n_tokens, n_layers=layers, dtype=np_dtype)

    return {
        "model": model, "d_model": d_model, "h": h, "layers": layers, "n_kv": n_kv, "n_tokens": n_tokens,
        "dtype": dtype, "bytes": cache(n_kv), "mha_bytes": cache(h), "kind": MHAConfig(d_model, h, n_kv_heads=n_kv).kind,
        "all": [(k, cache(k)) for k in divisors(h)],
    }


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n:,} bytes ({n / size:,.2f} {unit})"
    return f"{n:,} bytes"


class KVCachePanel(Panel):
    """n_kv from MHA (n_kv = h) through GQA to MQA (n_kv = 1) -> KV-cache bytes."""

    name = "kv"

    def __init__(self, model: str | None = None, n_tokens: int = 8192):
        model = list(KV_MODELS)[-1] if model is None else model
        check_choice(model, "model", tuple(KV_MODELS))
        check_choice(n_tokens, "n_tokens", KV_CONTEXTS)
        super().__init__()
        h = KV_MODELS[model][1]
        self.model = self._control(GuardedDropdown, "model", options=list(KV_MODELS), value=model,
                                   description="model")
        self.n_kv = self._control(GuardedSelectionSlider, "n_kv", options=self._kv_options(h), value=h,
                                  description="n_kv")
        self.context = self._control(GuardedSelectionSlider, "context", options=KV_CONTEXTS, value=n_tokens,
                                     description="context")
        self.dtype = self._control(GuardedToggleButtons, "dtype", options=list(KV_DTYPES), value="float16",
                                   description="dtype")
        self.numbers = widgets.HTML()
        self.numbers.add_class("mha-kv-numbers")
        self.image, self.alt, figure = self._figure("image")
        self.plot = _KVPlot(chart_size(0, KV_ASPECT))
        self.screen = PanelWidth()  # the page reports the panel's width: the chart is drawn for it
        self.screen.observe(partial(redraw_for_width, self, _KVPlot, KV_ASPECT), names="width")
        self.widget = widgets.VBox([self._controls(widgets.HBox([self.model, self.dtype]),
                                                   widgets.HBox([self.n_kv, self.context])), self.status, self.numbers,
                                    figure, self.screen])
        self._finish(self.widget)
        self.refresh()

    @staticmethod
    def _kv_options(h: int) -> list[tuple[str, int]]:
        kinds = {k: MHAConfig(h, h, n_kv_heads=k).kind for k in divisors(h)}  # d_model = h: only the heads matter
        return [(f"{k} ({kind})", k) for k, kind in kinds.items()]  # left MQA, right MHA: as the bar chart

    def values(self) -> dict:
        return {"model": self.model.value, "n_kv": self.n_kv.value, "n_tokens": self.context.value,
                "dtype": self.dtype.value}

    def _changed(self, change) -> None:
        if not self._syncing and change["owner"] is self.model and self.model.value in KV_MODELS:
            h = KV_MODELS[self.model.value][1]
            self._replace_options(self.n_kv, self._kv_options(h), h)  # MHA: n_kv = h
        super()._changed(change)

    def _render(self, model, n_kv, n_tokens, dtype) -> None:
        s = kv_state(model, n_kv, n_tokens, dtype)
        self.numbers.value = (
            f"<div><b class='mha-kv-kind'>{s['kind']}</b>: h={s['h']} query heads share n_kv={s['n_kv']} "
            f"key/value heads (group of {s['h'] // s['n_kv']}). KV cache for {s['n_tokens']:,} tokens, "
            f"{s['layers']} layers, {dtype}: <span class='mha-kv-bytes'>{_fmt_bytes(s['bytes'])}</span>"
            + (" (the MHA baseline).</div>" if s["kind"] == "MHA" else
               f", <span class='mha-kv-ratio'>{s['mha_bytes'] // s['bytes']:,}</span>&times; smaller than MHA "
               f"({_fmt_bytes(s['mha_bytes'])}).</div>")
        )
        self.image.value = self.plot.render(s)
        sizes = dict(s["all"])
        self._set_alt(self.alt,
            f"Bar chart of the KV cache in GiB for every n_kv of the {model} model at {n_tokens:,} tokens, {dtype}: "
            f"from {sizes[1] / 2**30:,.2f} GiB at n_kv=1 (MQA) to {sizes[s['h']] / 2**30:,.2f} GiB at n_kv={s['h']} (MHA). "
            f"Highlighted: n_kv={n_kv}, {s['bytes'] / 2**30:,.2f} GiB.",
            **text_facts(self.plot.fig, self.plot.size))
        self.image.layout.width = f"{self.plot.size.width_px}px"  # with the picture drawn for it, in one go


# The chart's height / width on a laptop (7 x 2.8 in).
KV_ASPECT = 2.8 / 7


class _KVPlot:
    """KV-cache bytes for every n_kv of the chosen model; the chosen n_kv is highlighted.

    The bars depend on (model, context, dtype) and are drawn once per setting; moving n_kv only
    redraws the highlighted bar on top of the kept background (blitting).
    ``size`` (``chart_size``): the figure's size and font, for the width of the screen.
    """

    def __init__(self, size: ChartSize):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.size = size
        self.fig = Figure(figsize=(size.width_in, size.height_in), dpi=PANEL_DPI * PIXEL_RATIO, layout="constrained")
        FigureCanvasAgg(self.fig)
        self.ax = self.fig.subplots()
        self._key = None
        self._background = None
        self._bars: dict[int, object] = {}
        self.full_draws = 0

    def render(self, s: dict) -> bytes:
        """PNG bytes of the bar chart for ``kv_state`` output ``s``."""
        from matplotlib.patches import Rectangle

        key = (s["model"], s["n_tokens"], s["dtype"])
        ax = self.ax
        if key != self._key:
            ax.clear()
            ks = [k for k, _ in s["all"]]
            gib = [b / 2**30 for _, b in s["all"]]
            bars = ax.bar([str(k) for k in ks], gib, color="#3b528b")
            self._bars = dict(zip(ks, bars, strict=True))
            font = self.size.font_pt
            narrow = self.size.width_px < 500
            ax.set_xlabel("n_kv (left: MQA, right: MHA)" if narrow else "key/value heads n_kv (left: MQA, right: MHA)",
                          fontsize=font)
            ax.set_ylabel("KV cache (GiB)", fontsize=font)
            ax.set_title(f"KV cache at {s['n_tokens']:,} tokens, {s['dtype']}:" + ("\n" if narrow else " ")
                         + s["model"], fontsize=font)
            ax.tick_params(labelsize=font)
            top = max(gib)
            for i, g in enumerate(gib):
                ax.text(i, g + top * 0.02, f"{g:.2f}" if g < 10 or not narrow else f"{g:.0f}", ha="center",
                        fontsize=font)
            ax.set_ylim(0, top * 1.15)
            self.highlight = ax.add_patch(Rectangle((0, 0), 1, 1, color="#fde725", animated=True))
            self.fig.canvas.draw()
            self._background = self.fig.canvas.copy_from_bbox(self.fig.bbox)
            self._key = key
            self.full_draws += 1
        self.fig.canvas.restore_region(self._background)
        bar = self._bars[s["n_kv"]]
        self.highlight.set_bounds(bar.get_x(), 0, bar.get_width(), bar.get_height())
        ax.draw_artist(self.highlight)
        return canvas_png(self.fig, draw=False)


def kv_cache_panel(**kwargs) -> KVCachePanel:
    """The KV-cache panel: n_kv from MHA through GQA to MQA -> cache bytes for a model and context.

    Keyword arguments set the starting values: ``model`` (a key of KV_MODELS, default the
    largest) and ``n_tokens=8192`` (validated).
    """
    return KVCachePanel(**kwargs)


__all__ = ["KV_CONTEXTS", "KV_DTYPES", "KV_MODELS", "KVCachePanel", "kv_cache_panel", "kv_state"]
