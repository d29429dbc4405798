"""The interactive panels of the dashboard (and of notebooks 02 and 04), built from ipywidgets.

Four panels, each a small class whose ``widget`` is an ``ipywidgets.VBox`` (displaying the panel
object displays that box):

    shape_explorer()   sliders B, N, d_model, h -> shape ledger, tensor boxes, d_k, params, MACs
    head_explorer()    sliders h, N, causal, query token, random/trained -> per-head heatmaps
    cost_panel()       params and MACs against N and h; the crossover at N = 2 d_model
    kv_cache_panel()   n_kv from MHA through GQA to MQA -> KV-cache bytes

Each panel keeps the arithmetic in a pure function (``shape_state``, ``head_weights``,
``cost_state``, ``kv_state``) that validates its arguments, so tests can call it directly.

Safety: a widget's value can be set by any message the browser sends. Every control is a
"guarded" widget: a value that fails ipywidgets' own checks (an index past the options, a
string for an int) is refused and the panel says so in its status line; and every callback
validates what it reads (``h`` must divide ``d_model``, ...) and shows a readable message instead
of a traceback. The page stays alive either way.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable

import ipywidgets as widgets
import numpy as np

from ..core.checks import check_positive_int
from ..core.config import MHAConfig, init_params
from ..core.counts import count_macs, count_params, kv_cache_bytes
from ..core.ledger import trace_shapes
from ..core.masks import causal_mask
from ..core.mha import multi_head_attention
from ..teaching.demo import MAX_TOKENS, SENTENCE, embed_tokens, tokens
from .heatmap import HeatmapGrid, heatmap_alt_text
from .viz import HeadGrid, canvas_png, figure_bytes, head_grid_figure, ledger_html, shape_boxes_svg

# -- limits and choices (each a "why") ------------------------------------------------------------

# The cost and KV plots are shown one PNG pixel per CSS pixel (96 per inch), so drawing them at
# 96 dpi makes a 10 pt font read as 10 pt on the page (at 80 dpi it read as 8.3 pt).
PANEL_DPI = 96

# Shape explorer: the ledger runs the real layer (trace_shapes); these bounds keep one run
# well under 0.1 s on a laptop CPU while still reaching the worked example (N=100, d_model=512).
SHAPE_MAX_B = 4
SHAPE_MAX_N = 128
SHAPE_D_MODELS = (16, 32, 64, 128, 256, 512, 768, 1024)
# Real models use at most ~128 heads; more would make the h slider unusably long.
MAX_HEADS = 64
# Head explorer: d_model of the demo layer. 128 has the divisors 1..16 used by the h slider,
# and d_k = 8 at h = 16 is still a real (if narrow) head.
HEAD_D_MODEL = 128
HEAD_CHOICES = (1, 2, 4, 8, 16)
# Cost panel choices: widths of common models, and lengths that include the worked example's
# N = 100 and N = 2000.
COST_D_MODELS = (64, 128, 256, 512, 768, 1024, 2048, 4096)
COST_NS = (16, 32, 64, 100, 128, 256, 512, 1000, 1024, 2000, 2048, 4096, 8192, 16384)
# The worked example of the source text.
WORKED_D_MODEL, WORKED_H, WORKED_NS = 512, 8, (100, 2000)
# KV-cache panel: example model sizes (d_model, h, layers); the 4096/32 one is the texts' model.
KV_MODELS = {
    "small: d_model=512, h=8, 6 layers": (512, 8, 6),
    "medium: d_model=2048, h=16, 24 layers": (2048, 16, 24),
    "large: d_model=4096, h=32, 32 layers": (4096, 32, 32),
}
KV_CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072)
KV_DTYPES = {"float16": 2, "float32": 4}
# Head explorer renderers: "canvas" draws in the browser from the weights (hover, click, reflow
# on phones); "png" draws in the kernel (HeadGrid). Measured against each other by
# tests/test_dashboard_browser.py; docs/dashboard.md has the figures and the choice.
HEAD_RENDERERS = ("canvas", "png")
# Head explorer: settings whose weights are kept (each at most 16 x 64 x 64 floats = 0.5 MB).
WEIGHT_CACHE_SIZE = 16


def divisors(n: int, limit: int | None = None) -> tuple[int, ...]:
    """The divisors of ``n`` in increasing order, optionally only those ``<= limit``.

    Parameters
    ----------
    n : int, positive
    limit : int, optional
        Keep only divisors ``<= limit``.

    Returns
    -------
    tuple of int, e.g. ``divisors(12) == (1, 2, 3, 4, 6, 12)``
    """
    n = check_positive_int(n, "n")
    top = n if limit is None else min(n, check_positive_int(limit, "limit"))
    return tuple(d for d in range(1, top + 1) if n % d == 0)


def _check_choice(value, name: str, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of the allowed values {', '.join(map(str, choices))}")


def _check_int_in(value, name: str, lo: int, hi: int) -> int:
    value = check_positive_int(value, name)
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be between {lo} and {hi}, got {name}={value}")
    return value


def _check_heads(d_model: int, h: int) -> None:
    if d_model % h:
        raise ValueError(
            f"h={h} does not divide d_model={d_model}; the heads split d_model evenly, "
            f"so h must be one of {', '.join(map(str, divisors(d_model, MAX_HEADS)))}"
        )


# -- pure state functions ------------------------------------------------------------------------

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
        Seeds the input and the weights (the shapes do not depend on it).

    Returns
    -------
    dict with ``steps`` (the ledger, list of (name, shape)), ``d_k``, ``params`` (int),
    ``macs`` (dict from ``count_macs``) and the sizes themselves.
    """
    B = _check_int_in(B, "B", 1, SHAPE_MAX_B)
    N = _check_int_in(N, "N", 1, SHAPE_MAX_N)
    _check_choice(d_model, "d_model", SHAPE_D_MODELS)
    h = _check_int_in(h, "h", 1, MAX_HEADS)
    _check_heads(d_model, h)
    config = MHAConfig(d_model, h)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, N, d_model), dtype=np.float32)  # (B, N, d_model)
    steps = trace_shapes(x, init_params(config, rng), h)
    return {
        "B": B, "N": N, "d_model": d_model, "h": h, "d_k": config.d_k, "steps": steps,
        "params": count_params(config)["total"], "macs": count_macs(config, N, batch=B),
    }


def trained_available() -> tuple[int, ...]:
    """Head counts with trained weights (``mha_core.training.toy_models.AVAILABLE_HEADS``), () if none."""
    try:
        from ..training import toy_models
    except ImportError:
        return ()
    return tuple(getattr(toy_models, "AVAILABLE_HEADS", ()))


def head_weights(h: int, N: int, *, causal: bool = False, kind: str = "random",
                 seed: int = 0) -> tuple[list[str], np.ndarray, str]:
    """Attention weights of every head for the head explorer.

    Parameters
    ----------
    h : int
        Number of heads, one of ``HEAD_CHOICES``.
    N : int
        Number of tokens, ``2 <= N <= MAX_TOKENS``.
    causal : bool
        Apply the causal mask (query i sees keys 0..i).
    kind : {"random", "trained"}
        ``"random"``: a freshly initialised layer (d_model = ``HEAD_D_MODEL``) on the demo
        passage. ``"trained"``: ``mha_core.training.toy_models.attention_maps`` (a toy-task model that
        was trained with the causal mask, so its weights are causal whatever ``causal`` says,
        and the title says so). They are re-normalised over the allowed keys, which is exactly
        softmax with the mask applied and leaves causal weights unchanged.
    seed : int

    Returns
    -------
    labels : list of N str
    weights : ndarray of shape (h, N, N), rows sum to 1
    title : str, saying which weights these are
    """
    _check_choice(h, "h", HEAD_CHOICES)
    N = _check_int_in(N, "N", 2, MAX_TOKENS)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
    _check_choice(kind, "weights", ("random", "trained"))
    mask_txt = "causal mask" if causal else "no mask"
    if kind == "random":
        labels = list(tokens(N))
        x = embed_tokens(labels, HEAD_D_MODEL, seed=seed)  # (N, d_model)
        params = init_params(MHAConfig(HEAD_D_MODEL, h), rng=seed)
        _, weights = multi_head_attention(x, params, h, causal=bool(causal), return_weights=True)  # (h, N, N)
        title = f"RANDOM (untrained) weights, seed {seed}: d_model={HEAD_D_MODEL}, h={h}, N={N}, {mask_txt}"
        return labels, weights, title
    available = trained_available()
    if not available:
        raise ValueError("trained weights are not available in this install (mha_core.training.toy_models is missing)")
    if h not in available:
        raise ValueError(f"no trained model with h={h}; trained models exist for h = {', '.join(map(str, available))}")
    from ..training.toy_models import attention_maps

    longest = len(attention_maps(h)[0])  # the toy task's sequence length
    n = min(N, longest)
    labels, weights = attention_maps(h, n=n, seed=seed)  # (h, n, n)
    labels = [str(t) for t in labels]
    weights = np.asarray(weights, dtype=np.float64)
    if weights.shape != (h, n, n) or len(labels) != n:
        raise ValueError(f"toy_models.attention_maps returned {weights.shape} and {len(labels)} labels, "
                         f"expected ({h}, {n}, {n})")
    weights = weights * causal_mask(n)  # (h, N, N): forbidden keys -> 0
    weights = weights / weights.sum(axis=-1, keepdims=True)  # (h, N, N): = masked softmax
    cut = f" (its sequences have {longest} tokens)" if N > longest else ""
    title = f"TRAINED weights (toy task), h={h}, N={n}{cut}, causal mask (the model was trained causally)"
    return labels, weights, title


def crossover_n(d_model: int) -> int:
    """Sequence length where attention MACs (2 N^2 d_model) equal projection MACs (4 N d_model^2).

    ``4 N d^2 = 2 N^2 d``  <=>  ``N = 2 d``. Below it the layer is projection-bound, above it
    attention-bound (``tests/test_widgets.py`` checks this against ``count_macs``).

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
    _check_choice(d_model, "d_model", COST_D_MODELS)
    h = _check_int_in(h, "h", 1, MAX_HEADS)
    _check_heads(d_model, h)
    N = _check_int_in(N, "N", 1, max(COST_NS))
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
    _check_choice(model, "model", tuple(KV_MODELS))
    d_model, h, layers = KV_MODELS[model]
    n_kv = _check_int_in(n_kv, "n_kv", 1, h)
    if h % n_kv:
        raise ValueError(f"n_kv={n_kv} does not divide h={h}; pick one of {', '.join(map(str, divisors(h)))}")
    _check_choice(n_tokens, "context", KV_CONTEXTS)
    _check_choice(dtype, "dtype", tuple(KV_DTYPES))
    np_dtype = np.float16 if dtype == "float16" else np.float32

    def cache(k: int) -> int:
        return kv_cache_bytes(MHAConfig(d_model, h, n_kv_heads=k), n_tokens, n_layers=layers, dtype=np_dtype)

    kind = "MHA" if n_kv == h else ("MQA" if n_kv == 1 else "GQA")
    return {
        "model": model, "d_model": d_model, "h": h, "layers": layers, "n_kv": n_kv, "n_tokens": n_tokens,
        "dtype": dtype, "bytes": cache(n_kv), "mha_bytes": cache(h), "kind": kind,
        "all": [(k, cache(k)) for k in divisors(h)],
    }


# -- guarded widgets -----------------------------------------------------------------------------

class _Guarded:
    """Mixin: a value from the browser that ipywidgets refuses is reported, not raised.

    ``set_state`` is what the kernel runs when the browser sends a widget update. Without this
    guard a forged index or a string for an int raises ``TraitError`` in the kernel: the panel
    would silently ignore it and the browser's view would drift from the kernel's value.
    """

    def __init__(self, *args, on_invalid: Callable | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._on_invalid = on_invalid

    def set_state(self, sync_data):
        try:
            super().set_state(sync_data)
        except Exception as err:  # any refused value: report it, never let it escape as a traceback
            self.send_state()  # put the browser's view back on the kernel's (unchanged) value
            if self._on_invalid is None:
                raise
            self._on_invalid(self, sync_data, err)


class GuardedIntSlider(_Guarded, widgets.IntSlider):
    """``IntSlider`` that reports refused values (see ``_Guarded``)."""


class GuardedSelectionSlider(_Guarded, widgets.SelectionSlider):
    """``SelectionSlider`` that reports refused values (see ``_Guarded``)."""


class GuardedDropdown(_Guarded, widgets.Dropdown):
    """``Dropdown`` that reports refused values (see ``_Guarded``)."""


class GuardedToggleButtons(_Guarded, widgets.ToggleButtons):
    """``ToggleButtons`` that reports refused values (see ``_Guarded``)."""


class GuardedToggleButton(_Guarded, widgets.ToggleButton):
    """``ToggleButton`` that reports refused values (see ``_Guarded``)."""


def _fmt_big(n: int) -> str:
    """``1,048,576 (1.05 M)``: exact with separators, plus a rounded reading."""
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n:,} ({n / size:.3g} {unit})"
    return f"{n:,}"


def _fmt_bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n:,} bytes ({n / size:,.2f} {unit})"
    return f"{n:,} bytes"


# -- panels --------------------------------------------------------------------------------------

class _Panel:
    """Shared plumbing: a status line, error display, and display as the panel's VBox."""

    name = "panel"
    _syncing = False  # True while the panel itself rewrites a control's options

    def __init__(self):
        self.status = widgets.HTML(value="")
        self.status.add_class("mha-status")
        self.errors = 0  # messages shown so far (tests read it)
        self.renders = 0
        self.widget: widgets.VBox | None = None

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def _figure(self, css: str) -> tuple[widgets.Image, widgets.HTML, widgets.Box]:
        """A PNG image with its alt text: the image, the (hidden) text, and the box holding both.

        ipywidgets' Image has no ``alt`` (and its ``tooltip`` breaks the view in Voila 0.5), so
        the text travels in an HTML widget beside it; the page's template copies it into the
        image's ``alt`` whenever it changes. On a narrow screen the image shrinks to fit.
        """
        image = widgets.Image(format="png")
        image.add_class(f"mha-{self.name}-{css}")
        alt = widgets.HTML()
        alt.add_class("mha-alt")
        box = widgets.Box([image, alt])
        box.add_class("mha-figure")
        return image, alt, box

    @staticmethod
    def _set_alt(alt: widgets.HTML, text: str) -> None:
        alt.value = f"<div aria-hidden='true'>{html.escape(text)}</div>"

    def _finish(self, box: widgets.VBox) -> widgets.VBox:
        """Name the panel's box for the page's CSS (``mha-panel``: stacks on small screens)."""
        box.add_class(f"mha-{self.name}-panel")
        box.add_class("mha-panel")
        return box

    def _control(self, cls, css: str, **kwargs):
        w = cls(on_invalid=self._invalid, **kwargs)
        w.add_class(f"mha-{self.name}-{css}")
        w.observe(self._changed, names="value")
        return w

    def _invalid(self, widget, sync_data, err) -> None:
        keys = ", ".join(f"{k}={v!r:.40}" for k, v in sync_data.items())
        self.show_error(f"ignored a value the page sent for {widget.description or 'a control'} "
                        f"({keys}): {err}. The panel keeps {widget.description}={widget.value!r}.")

    def show_error(self, message: str) -> None:
        self.errors += 1
        self.status.value = f"<div class='mha-error' style='color:#b00020'>&#9888; {html.escape(str(message))}</div>"

    def _changed(self, change) -> None:
        if not self._syncing:
            self.refresh()

    def _replace_options(self, widget, options, value) -> None:
        """Give ``widget`` new options and value without a refresh for the values in between."""
        self._syncing = True
        try:
            widget.options = options
            widget.value = value
        finally:
            self._syncing = False

    def refresh(self, **overrides) -> bool:
        """Recompute from the controls' values (``overrides`` replace some, as a forged message would).

        Returns True if the panel updated, False if the values were refused (the message is in
        ``status`` and the previous figures stay).
        """
        values = self.values()
        values.update(overrides)
        try:
            self._render(**values)
        except (ValueError, TypeError, KeyError) as err:
            self.show_error(str(err))
            return False
        except Exception as err:  # never a traceback in the page
            self.show_error(f"could not update ({type(err).__name__}: {err})")
            return False
        self.status.value = ""
        self.renders += 1
        return True

    def values(self) -> dict:  # pragma: no cover - overridden
        raise NotImplementedError

    def _render(self, **values) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


def _changed_offering_divisors(panel, change) -> None:
    """``_changed`` for panels with d_model and h: h offers only the divisors of d_model.

    When d_model moves, h keeps its value if it still divides, else takes the largest smaller divisor.
    """
    if not panel._syncing and change["owner"] is panel.d_model:
        options = divisors(panel.d_model.value, MAX_HEADS)
        keep = panel.h.value if panel.h.value in options else max(k for k in options if k <= panel.h.value)
        panel._replace_options(panel.h, options, keep)
    _Panel._changed(panel, change)


class ShapeExplorer(_Panel):
    """Sliders B, N, d_model, h -> the shape ledger, the tensor boxes, d_k, params and MACs."""

    name = "shape"

    def __init__(self, B: int = 2, N: int = 10, d_model: int = 512, h: int = 8):
        _check_int_in(B, "B", 1, SHAPE_MAX_B)
        _check_int_in(N, "N", 1, SHAPE_MAX_N)
        _check_choice(d_model, "d_model", SHAPE_D_MODELS)
        _check_int_in(h, "h", 1, MAX_HEADS)
        _check_heads(d_model, h)
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
            widgets.HBox([widgets.VBox([self.B, self.N]), widgets.VBox([self.d_model, self.h])]),
            self.status, self.summary, self.ledger, self.boxes,
        ])
        self._finish(self.widget)
        self.refresh()

    def values(self) -> dict:
        return {"B": self.B.value, "N": self.N.value, "d_model": self.d_model.value, "h": self.h.value}

    _changed = _changed_offering_divisors

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
        self.ledger.value = ledger_html(s["steps"])
        self.boxes.value = shape_boxes_svg(
            s["steps"], title=f"B={B}, N={N}, d_model={d_model}, h={h}, d_k={s['d_k']}")


class HeadExplorer(_Panel):
    """Sliders h and N, a causal toggle, a query selector, random/trained -> per-head heatmaps."""

    name = "heads"

    def __init__(self, h: int = 4, N: int = len(SENTENCE), causal: bool = False, kind: str = "random",
                 renderer: str = "canvas"):
        _check_choice(renderer, "renderer", HEAD_RENDERERS)
        _check_choice(h, "h", HEAD_CHOICES)
        _check_int_in(N, "N", 2, MAX_TOKENS)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
        _check_choice(kind, "kind", ("random", "trained"))
        super().__init__()
        self.renderer = renderer
        self.h = self._control(GuardedSelectionSlider, "h", options=HEAD_CHOICES, value=h, description="h")
        self.N = self._control(GuardedIntSlider, "N", value=N, min=2, max=MAX_TOKENS, description="N")
        self.causal = self._control(GuardedToggleButton, "causal", value=causal, description="causal mask",
                                    tooltip="query i may attend keys 0..i only")
        self.query = self._control(GuardedDropdown, "query", options=self._query_options(tokens(N)), value=-1,
                                   description="query")
        kinds = [("random init", "random"), ("trained (toy task)", "trained")]
        self.kind = self._control(GuardedToggleButtons, "kind", options=kinds, value=kind, description="weights")
        self.download = widgets.Button(description="PNG + SVG", icon="download",
                                       tooltip="prepare download links for the current figure")
        self.download.add_class("mha-heads-download")
        self.download.on_click(self._prepare_download)
        self.links = widgets.HTML()
        self.links.add_class("mha-heads-links")
        if renderer == "canvas":  # drawn in the browser: hover reads a weight, a click picks the query
            self.figure = HeatmapGrid()
            self.figure.observe(self._clicked, names="query")
        else:  # PNG drawn in the kernel (HeadGrid)
            self.grid = HeadGrid()
            self.image, self.alt, self.figure = self._figure("image")
        self.figure.add_class("mha-heads-figure")
        self.caption = widgets.HTML()
        self.caption.add_class("mha-heads-caption")
        self.widget = widgets.VBox([
            widgets.HBox([self.h, self.N, self.causal]),
            widgets.HBox([self.query, self.kind]),
            widgets.HBox([self.download, self.links]),
            self.status, self.caption, self.figure,
        ])
        self._finish(self.widget)
        self._labels: list[str] = []
        self._cache: dict[tuple, tuple[list[str], np.ndarray, str]] = {}
        self._shown: tuple | None = None  # (h, N, causal, kind) whose weights the canvas holds
        self.last: tuple[np.ndarray, list[str], str, int | None] | None = None
        self.refresh()
        if renderer == "png":
            # Frames for the other h values now (~0.1 s each, while the page loads; a preheated
            # kernel has done it before anyone asks), so a first move of the h slider is as fast
            # as the next ones.
            self.grid.prepare(HEAD_CHOICES)

    @staticmethod
    def _query_options(labels) -> list[tuple[str, int]]:
        """Dropdown choices: "none" (-1) and one entry per token position."""
        return [("none", -1)] + [(f"{i}: {t}", i) for i, t in enumerate(labels)]

    def values(self) -> dict:
        return {"h": self.h.value, "N": self.N.value, "causal": self.causal.value, "kind": self.kind.value,
                "query": self.query.value}

    def _weights(self, h, N, causal, kind) -> tuple[list[str], np.ndarray, str]:
        """``head_weights`` remembered per setting: moving the query selector recomputes nothing."""
        key = (h, N, causal, kind)
        if key not in self._cache:
            if len(self._cache) >= WEIGHT_CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))  # drop the oldest entry
            self._cache[key] = head_weights(h, N, causal=causal, kind=kind)
        return self._cache[key]

    def _render(self, h, N, causal, kind, query) -> None:
        labels, weights, title = self._weights(h, N, causal, kind)
        if labels != self._labels:  # new tokens: rebuild the query choices, keep the row if it exists
            keep = query if isinstance(query, int) and -1 <= query < len(labels) else -1
            self._replace_options(self.query, self._query_options(labels), keep)
            self._labels = labels
            query = self.query.value
        if isinstance(query, bool) or not isinstance(query, (int, np.integer)) or not -1 <= query < len(labels):
            raise ValueError(f"query must be -1 (none) or a token position 0..{len(labels) - 1}, got {query!r}")
        q = None if query < 0 else int(query)
        self.last = (weights, labels, title, q)
        if self.renderer == "png":
            self.image.value = self.grid.render(weights, labels, title=title, query=q)
            self._set_alt(self.alt, heatmap_alt_text(weights, labels, title=title, query=q))
        elif self._shown == (h, N, causal, kind):  # only the query moved: no weights to send
            with self.figure.hold_sync():
                self.figure.query = int(query)
                self.figure.alt = heatmap_alt_text(weights, labels, title=title, query=q)
        else:
            self.figure.show(weights, labels, title=title, query=q)
            self._shown = (h, N, causal, kind)
        self.caption.value = (f"<span class='mha-heads-title'>{html.escape(title)}</span>; "
                              f"each row is one query token and sums to 1")
        self.links.value = ""

    def _clicked(self, change) -> None:
        """A click on a heatmap row (or Enter on a focused head) picked a query: move the selector."""
        if change["new"] != self.query.value and change["new"] in dict(self.query.options).values():
            self.query.value = change["new"]

    def _prepare_download(self, _button=None) -> None:
        try:
            if self.last is None:
                raise RuntimeError("nothing drawn yet")
            weights, labels, title, query = self.last
            fig = head_grid_figure(weights, labels, title=title, query=query)
            png, svg = figure_bytes(fig, "png"), figure_bytes(fig, "svg")
        except Exception as err:  # never a traceback in the page
            self.show_error(f"could not export the figure ({err})")
            return
        self.links.value = (
            f"<a download='attention_heads.png' href='data:image/png;base64,{base64.b64encode(png).decode()}'>"
            f"attention_heads.png ({len(png) / 1e3:,.0f} kB)</a> &nbsp; "
            f"<a download='attention_heads.svg' href='data:image/svg+xml;base64,{base64.b64encode(svg).decode()}'>"
            f"attention_heads.svg ({len(svg) / 1e3:,.0f} kB)</a>"
        )


class CostPanel(_Panel):
    """Params and MACs against N and h; the crossover at N = 2 d_model; the worked example."""

    name = "cost"

    def __init__(self, d_model: int = WORKED_D_MODEL, h: int = WORKED_H, N: int = WORKED_NS[0]):
        _check_choice(d_model, "d_model", COST_D_MODELS)
        _check_int_in(h, "h", 1, MAX_HEADS)
        _check_heads(d_model, h)
        _check_choice(N, "N", COST_NS)
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
        self.plot = _CostPlot()
        self.widget = widgets.VBox([widgets.HBox([self.d_model, self.h, self.N]), self.status, self.numbers,
                                    widgets.HBox([figure, self.by_h]), self.worked])
        self._finish(self.widget)
        self.refresh()

    def values(self) -> dict:
        return {"d_model": self.d_model.value, "h": self.h.value, "N": self.N.value}

    _changed = _changed_offering_divisors

    def _render(self, d_model, h, N) -> None:
        s = cost_state(d_model, h, N)
        m = s["macs"]
        regime = "projection-bound" if m["projections"] > m["attention"] else "attention-bound"
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
            f"at N = {s['crossover']:,}. Marker at N = {N:,}: {m['total']:,} MACs, {regime}.")
        self.by_h.value = _by_h_html(s)
        rows = "".join(
            f"<tr><td>{n:,}</td><td>{mm['projections']:,}</td><td>{mm['attention']:,}</td><td>{mm['total']:,}</td>"
            f"<td>{mm['projections'] / mm['attention']:.2f}</td></tr>" for n, mm in s["worked"]
        )
        self.worked.value = (
            f"<b>Worked example</b> (d_model={WORKED_D_MODEL}, h={WORKED_H}, d_k={WORKED_D_MODEL // WORKED_H}): "
            f"params = {s['worked_params']:,}"
            "<table class='mha-worked'><tr><th>N</th><th>projections</th><th>attention</th><th>total MACs</th>"
            f"<th>proj / attn</th></tr>{rows}</table>"
        )


def _by_h_html(s: dict) -> str:
    """Counts for every h at the current N as an HTML table with bars: only the softmax grows."""
    rows = []
    top = max(max(mm["projections"], mm["attention"], mm["softmax_exps"]) for _, mm in s["by_h"])
    for k, mm in s["by_h"]:
        cells = []
        for key, colour in (("projections", "#3b528b"), ("attention", "#5ec962"), ("softmax_exps", "#fde725")):
            width = max(1, round(160 * np.log1p(mm[key]) / np.log1p(top)))  # log scale: 1e4 .. 1e11 all visible
            cells.append(f"<td style='text-align:right'>{mm[key]:,}</td><td><div style='width:{width}px;"
                         f"height:9px;background:{colour}'></div></td>")
        bold = " style='font-weight:bold'" if k == s["h"] else ""
        rows.append(f"<tr{bold}><td>{k}</td>{''.join(cells)}</tr>")
    return (f"<b>Against h</b> (N={s['N']:,}, d_model={s['d_model']:,}): projection and attention MACs do not "
            "change with h; only the softmax's h&middot;N&sup2; exponentials grow. Bar lengths are on a log scale."
            "<table class='mha-worked mha-cost-by-h'><tr><th>h</th><th colspan='2'>projection MACs</th>"
            "<th colspan='2'>attention MACs</th><th colspan='2'>softmax exps</th></tr>" + "".join(rows) + "</table>")


def _plain_log(value, _pos=None) -> str:
    """Tick label for a log axis without mathtext (which costs ~0.1 s per figure to parse)."""
    if value <= 0:
        return ""
    exp = int(np.floor(np.log10(value) + 1e-9))
    mant = value / 10**exp
    return f"1e{exp}" if abs(mant - 1) < 1e-6 else ""


class _CostPlot:
    """MACs against N (log-log) with the crossover marked; reused between slider moves.

    The curves depend only on d_model: they are drawn once per d_model and kept as a
    background. Moving N only pastes that background back and draws the marker (blitting).
    """

    def __init__(self):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

        self.fig = Figure(figsize=(7.5, 3.4), dpi=PANEL_DPI)
        FigureCanvasAgg(self.fig)
        self.fig.subplots_adjust(left=0.1, right=0.98, bottom=0.15, top=0.9)
        ax = self.ax = self.fig.subplots()
        self.proj, = ax.plot([1, 2], [1, 2], label="projections 4 N d_model^2", color="#3b528b")
        self.attn, = ax.plot([1, 2], [1, 2], label="attention 2 N^2 d_model", color="#5ec962")
        self.total, = ax.plot([1, 2], [1, 2], label="total", color="#21918c", linestyle="--")
        self.cross = ax.axvline(1, color="gray", linestyle=":", label="crossover N = 2 d_model")
        self.marker, = ax.plot([1], [1], "o", color="#440154", label="this N", animated=True)
        self.note = ax.text(0.98, 0.04, "", transform=ax.transAxes, ha="right", fontsize=10, animated=True)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(min(COST_NS) / 1.2, max(COST_NS) * 1.2)
        ax.set_xlabel("sequence length N")
        ax.set_ylabel("MACs per forward pass")
        ax.legend(fontsize=10, loc="upper left")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10, numticks=8))
            axis.set_major_formatter(FuncFormatter(_plain_log))
            axis.set_minor_locator(NullLocator())
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
            self.ax.set_title(f"MACs against N (d_model={s['d_model']:,}; the same for every h), "
                              f"crossover at N = {s['crossover']:,}", fontsize=10)
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


class KVCachePanel(_Panel):
    """n_kv from MHA (n_kv = h) through GQA to MQA (n_kv = 1) -> KV-cache bytes."""

    name = "kv"

    def __init__(self, model: str | None = None, n_tokens: int = 8192):
        model = list(KV_MODELS)[-1] if model is None else model
        _check_choice(model, "model", tuple(KV_MODELS))
        _check_choice(n_tokens, "n_tokens", KV_CONTEXTS)
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
        self.plot = _KVPlot()
        self.widget = widgets.VBox([widgets.HBox([self.model, self.dtype]), widgets.HBox([self.n_kv, self.context]),
                                    self.status, self.numbers, figure])
        self._finish(self.widget)
        self.refresh()

    @staticmethod
    def _kv_options(h: int) -> list[tuple[str, int]]:
        def kind(k):
            return "MHA" if k == h else ("MQA" if k == 1 else "GQA")

        return [(f"{k} ({kind(k)})", k) for k in reversed(divisors(h))]

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
            f"Highlighted: n_kv={n_kv}, {s['bytes'] / 2**30:,.2f} GiB.")


class _KVPlot:
    """KV-cache bytes for every n_kv of the chosen model; the chosen n_kv is highlighted.

    The bars depend on (model, context, dtype) and are drawn once per setting; moving n_kv only
    redraws the highlighted bar on top of the kept background (blitting).
    """

    def __init__(self):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.fig = Figure(figsize=(7, 2.8), dpi=PANEL_DPI)
        FigureCanvasAgg(self.fig)
        self.fig.subplots_adjust(left=0.09, right=0.99, bottom=0.17, top=0.9)
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
            ax.set_xlabel("key/value heads n_kv (left: MQA, right: MHA)")
            ax.set_ylabel("KV cache (GiB)")
            ax.set_title(f"KV cache at {s['n_tokens']:,} tokens, {s['dtype']}: {s['model']}", fontsize=10)
            top = max(gib)
            for i, g in enumerate(gib):
                ax.text(i, g + top * 0.02, f"{g:.2f}", ha="center", fontsize=10)
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


def shape_explorer(**kwargs) -> ShapeExplorer:
    """The shape panel: sliders B, N, d_model, h -> ledger (from ``trace_shapes``), boxes, d_k, params, MACs.

    Keyword arguments set the starting values: ``B=2, N=10, d_model=512, h=8`` (validated:
    ValueError/TypeError naming the argument). Display the returned panel to show it.
    """
    return ShapeExplorer(**kwargs)


def head_explorer(**kwargs) -> HeadExplorer:
    """The heads panel: h, N, causal, query token, random/trained weights -> per-head heatmaps.

    Keyword arguments set the starting values: ``h=4, N=len(SENTENCE), causal=False,
    kind="random"`` (validated). Display the returned panel to show it.
    """
    return HeadExplorer(**kwargs)


def cost_panel(**kwargs) -> CostPanel:
    """The cost panel: params and MACs against N and h, crossover at N = 2 d_model, the worked example.

    Keyword arguments set the starting values: ``d_model=512, h=8, N=100`` (validated).
    """
    return CostPanel(**kwargs)


def kv_cache_panel(**kwargs) -> KVCachePanel:
    """The KV-cache panel: n_kv from MHA through GQA to MQA -> cache bytes for a model and context.

    Keyword arguments set the starting values: ``model`` (a key of KV_MODELS, default the
    largest) and ``n_tokens=8192`` (validated).
    """
    return KVCachePanel(**kwargs)


__all__ = [
    "CostPanel", "HeadExplorer", "KVCachePanel", "ShapeExplorer", "cost_panel", "cost_state", "crossover_n",
    "divisors", "head_explorer", "head_weights", "kv_cache_panel", "kv_state", "shape_explorer", "shape_state",
    "trained_available",
]
