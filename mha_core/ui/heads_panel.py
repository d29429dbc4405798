"""The heads panel: h, N, causal mask, query token, random/trained weights -> per-head heatmaps.

``head_weights`` computes the weights (a random layer on the demo passage, or the toy-task
model of ``mha_core.training.toy_models``) and validates its arguments; ``HeadExplorer`` is
the panel, drawn in the browser by ``heatmap_widget.HeatmapGrid`` (hover, click) or in the
kernel by ``head_grid.HeadGrid`` (PNG).
"""

from __future__ import annotations

import base64
import html
from functools import partial

import ipywidgets as widgets
import numpy as np

from ..core.config import MHAConfig, init_params
from ..core.masks import causal_mask
from ..core.mha import multi_head_attention
from ..teaching.demo import DEMO_MAX_TOKENS, SENTENCE, embed_tokens, tokens
from .controls import (
    Cache,
    GuardedDropdown,
    GuardedIntSlider,
    GuardedSelectionSlider,
    GuardedToggleButton,
    GuardedToggleButtons,
    Panel,
    check_cache,
    check_choice,
    check_int_in,
)
from .head_grid import HeadGrid, head_grid_figure
from .heatmap_widget import HeatmapGrid, heatmap_alt_text
from .viz import figure_bytes

# Head explorer: d_model of the demo layer. 128 has the divisors 1..16 used by the h slider,
# and d_k = 8 at h = 16 is still a real (if narrow) head.
HEAD_D_MODEL = 128
HEAD_CHOICES = (1, 2, 4, 8, 16)

# Head explorer renderers: "canvas" draws in the browser from the weights (hover, click, reflow
# on phones); "png" draws in the kernel (HeadGrid). Measured against each other by
# tests/test_dashboard_browser.py; docs/dashboard.md has the figures and the choice.
HEAD_RENDERERS = ("canvas", "png")
CAUSAL_TIP = "query i may attend keys 0..i only"
# Head explorer: settings whose weights are kept (each at most 16 x 64 x 64 floats = 0.5 MB).
WEIGHT_CACHE_SIZE = 16


def trained_available() -> tuple[int, ...]:
    """Head counts with trained weights (``mha_core.training.toy_models.AVAILABLE_HEADS``), () if none."""
    try:
        from ..training import toy_models
    except ImportError:
        return ()
    return tuple(getattr(toy_models, "AVAILABLE_HEADS", ()))


def toy_task():
    """The toy task the trained heads learned (``mha_core.training.toy_models.TASK``)."""
    from ..training.toy_models import TASK

    return TASK


def toy_task_line() -> str:
    """One sentence on the toy task, from the task itself (no number typed here)."""
    task = toy_task()
    a, b = task.offsets
    return (f"The toy task: {task.n} random tokens, each a number 0-{task.vocab - 1}; at every position the "
            f"model must name the tokens {a} and {b} places back. Labels read position:token. A head that "
            f"does the job puts its weight {a} or {b} cells left of the diagonal.")


def short_title(kind: str, h: int, n: int, causal: bool) -> str:
    """The figure's one-line title: which weights, how many heads and tokens, which mask."""
    what = "Trained parameters (toy task)" if kind == "trained" else "Random parameters (untrained layer)"
    return f"{what} · h={h}, N={n} · {'causal mask' if causal else 'no mask'}"


def head_weights(h: int, N: int, *, causal: bool = False, kind: str = "random",
                 seed: int = 0) -> tuple[list[str], np.ndarray, str]:
    """Attention weights of every head for the head explorer.

    Parameters
    ----------
    h : int
        Number of heads, one of ``HEAD_CHOICES``.
    N : int
        Number of tokens, ``2 <= N <= DEMO_MAX_TOKENS``.
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
    check_choice(h, "h", HEAD_CHOICES)
    N = check_int_in(N, "N", 2, DEMO_MAX_TOKENS)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
    check_choice(kind, "weights", ("random", "trained"))
    mask_txt = "causal mask" if causal else "no mask"
    if kind == "random":
        labels = list(tokens(N))
        x = embed_tokens(labels, HEAD_D_MODEL, seed=seed)  # (N, d_model)
        params = init_params(MHAConfig(HEAD_D_MODEL, h), rng=seed)
        _, weights = multi_head_attention(x, params, h, causal=bool(causal), return_weights=True)  # (h, N, N)
        title = f"RANDOM (untrained) parameters, seed {seed}: d_model={HEAD_D_MODEL}, h={h}, N={N}, {mask_txt}"
        return labels, weights, title
    available = trained_available()
    if not available:
        raise ValueError("trained weights are not available in this install (mha_core.training.toy_models is missing)")
    if h not in available:
        raise ValueError(f"no trained model with h={h}; trained models exist for h = {', '.join(map(str, available))}")
    from ..training.toy_models import attention_maps

    longest = toy_task().n  # the toy task's sequence length (what _to_kind caps N at)
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
    title = f"TRAINED parameters (toy task), h={h}, N={n}{cut}, causal mask (the model was trained causally)"
    return labels, weights, title


class HeadExplorer(Panel):
    """Sliders h and N, a causal toggle, a query selector, random/trained -> per-head heatmaps."""

    name = "heads"

    def __init__(self, h: int = 4, N: int = len(SENTENCE), causal: bool = False, kind: str = "random",
                 renderer: str = "canvas", *, cache: Cache | None = None):
        self._results_cache = check_cache(cache)
        check_choice(renderer, "renderer", HEAD_RENDERERS)
        check_choice(h, "h", HEAD_CHOICES)
        check_int_in(N, "N", 2, DEMO_MAX_TOKENS)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
        check_choice(kind, "kind", ("random", "trained"))
        super().__init__()
        self.renderer = renderer
        self.h = self._control(GuardedSelectionSlider, "h", options=HEAD_CHOICES, value=h, description="h")
        self.N = self._control(GuardedIntSlider, "N", value=N, min=2, max=DEMO_MAX_TOKENS, description="N")
        self.causal = self._control(GuardedToggleButton, "causal", value=causal, description="causal mask",
                                    tooltip=CAUSAL_TIP)
        self.query = self._control(GuardedDropdown, "query", options=self._query_options(tokens(N)), value=-1,
                                   description="query")
        kinds = [("random init", "random"), ("trained (toy task)", "trained")]
        self.kind = self._control(GuardedToggleButtons, "kind", options=kinds, value=kind, description="parameters")
        self.download = widgets.Button(description="PNG + SVG", icon="download",
                                       tooltip="prepare download links for the current figure")
        self.download.add_class("mha-heads-download")
        self.download.on_click(self._prepare_download)
        self.links = widgets.HTML()
        self.links.add_class("mha-heads-links")
        if renderer == "canvas":  # drawn in the browser: hover reads a weight, a click picks the query
            self.figure = HeatmapGrid(columns=2)  # at least two side by side: heads compared, even on a phone
            self.figure.observe(self._clicked, names="query")
        else:  # PNG drawn in the kernel (HeadGrid)
            self.grid = HeadGrid()
            self.image, self.alt, self.figure = self._figure("image")
        self.figure.add_class("mha-heads-figure")
        self.caption = widgets.HTML()
        self.caption.add_class("mha-heads-caption")
        self.widget = widgets.VBox([
            self._controls(widgets.HBox([self.h, self.N, self.causal]), widgets.HBox([self.query, self.kind])),
            widgets.HBox([self.download, self.links]),
            self.status, self.caption, self.figure,
        ])
        self._finish(self.widget)
        self._labels: list[str] = []
        self._random_settings = (h, N, causal)  # restored when the weights go back to random
        self._kind_note = ""  # what a switch of the weights moved (h, N), said once under the controls
        self._cache: dict[tuple, tuple[list[str], np.ndarray, str]] = {}
        self._shown: tuple | None = None  # (h, N, causal, kind) whose weights the canvas holds
        self.last: tuple[np.ndarray, list[str], str, int | None] | None = None
        if kind == "trained":
            self._to_kind("trained")
            # the page shows the mask on (locked): its random layer keeps it on, as the reader saw it
            self._random_settings = (h, N, True)
            self._kind_note = ""  # the page opens on these settings: nothing moved
        self.refresh()
        if renderer == "png":
            # Frames for the other h values now (~0.1 s each, while the page loads; a preheated
            # kernel has done it before anyone asks), so a first move of the h slider is as fast
            # as the next ones.
            self.grid.prepare(HEAD_CHOICES)

    @staticmethod
    def _query_options(labels) -> list[tuple[str, int]]:
        """Dropdown choices: "none" (-1) and one entry per token position ("5: it"; the toy task's
        labels already start with their position: "5:0")."""
        return [("none", -1)] + [(t if t.startswith(f"{i}:") else f"{i}: {t}", i) for i, t in enumerate(labels)]

    def _changed(self, change) -> None:
        if not self._syncing and change["owner"] is self.kind:
            self._to_kind(change["new"])
        super()._changed(change)

    def _to_kind(self, kind) -> None:
        """Make the controls show what the figure will show. Trained: h offers only the trained
        models, N stops at the toy task's length, and the causal mask is on and locked (the model
        was trained causally). Random: the earlier random settings come back."""
        available = trained_available()
        before = (self.h.value, self.N.value, self.causal.value)
        why = {}  # each moved setting's reason, said beside it
        if kind == "trained" and available:
            self._random_settings = (self.h.value, self.N.value, self.causal.value)
            longest = toy_task().n
            h = max([k for k in available if k <= self.h.value] or [available[0]])
            self._replace_options(self.h, available, h)
            self._set_n_range(longest, min(self.N.value, longest))
            with self._quiet():
                self.causal.value = True
                self.causal.disabled = True
                self.causal.tooltip = "on: the toy model was trained with the causal mask"
            why = {"h": f"the toy models were trained with h = {', '.join(map(str, available))}",
                   "N": f"the toy task has {longest} tokens", "the causal mask": "the toy model was trained with it"}
        elif kind == "random" and self.causal.disabled:
            h, N, causal = self._random_settings
            self._replace_options(self.h, HEAD_CHOICES, h)
            self._set_n_range(DEMO_MAX_TOKENS, N)
            with self._quiet():
                self.causal.disabled = False
                self.causal.tooltip = CAUSAL_TIP
                self.causal.value = causal
        # a switch that moves h, N or the mask says so where the reader looks (under the controls),
        # each with its own reason (trained), or the one reason of all (random: the earlier settings)
        on_off = {True: "on", False: "off"}
        moved = [f"{name} is now {new} (was {old})" + (f": {why[name]}" if name in why else "") for name, old, new in
                 (("h", before[0], self.h.value), ("N", before[1], self.N.value),
                  ("the causal mask", on_off[before[2]], on_off[self.causal.value])) if old != new]
        self._kind_note = ("" if not moved else "; ".join(moved) + "." if why else
                           f"{' and '.join(moved)}: the random layer reads the sentence with the settings it had before.")

    def _set_n_range(self, top: int, value: int) -> None:
        """N's slider to ``[2, top]`` at ``value``, without a redraw in between."""
        with self._quiet():
            if top < self.N.max:
                self.N.value = value
                self.N.max = top
            else:
                self.N.max = top
                self.N.value = value

    def values(self) -> dict:
        return {"h": self.h.value, "N": self.N.value, "causal": self.causal.value, "kind": self.kind.value,
                "query": self.query.value}

    def _weights(self, h, N, causal, kind) -> tuple[list[str], np.ndarray, str]:
        """``head_weights`` remembered per setting: moving the query selector recomputes nothing;
        a setting is computed by the panel's ``cache`` (``compute_here``, or one shared by every
        kernel of a server, which reads a setting another kernel has already computed)."""
        key = (h, N, causal, kind)
        if key not in self._cache:
            if len(self._cache) >= WEIGHT_CACHE_SIZE:
                self._cache.pop(next(iter(self._cache)))  # drop the oldest entry
            compute = partial(head_weights, h, N, causal=causal, kind=kind)
            self._cache[key] = self._results_cache("head_weights", key, compute)
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
        full, title = title, short_title(kind, h, len(labels), causal or kind == "trained")
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
        self.causal.description = f"causal mask: {'on' if causal or kind == 'trained' else 'off'}"
        self.causal.icon = "check" if causal or kind == "trained" else ""
        note, self._kind_note = self._kind_note, ""
        self.caption.value = (
            (f"<p class='mha-heads-moved' role='status'>{html.escape(note)}</p>" if note else "")
            + ("<div class='mha-heads-task'>" + html.escape(toy_task_line()) + "</div>" if kind == "trained" else "")
            + "Each row is one query token; its attention weights sum to 1. Point at or tap a square for its weight; "
            f"click or tap a row to pick that query.<details class='mha-spec'><summary>exact setting</summary><span class='mha-heads-title'>"
            f"{html.escape(full)}</span></details>")
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


def head_explorer(**kwargs) -> HeadExplorer:
    """The heads panel: h, N, causal, query token, random/trained weights -> per-head heatmaps.

    Keyword arguments set the starting values: ``h=4, N=len(SENTENCE), causal=False,
    kind="random"`` (validated); ``cache=`` where the weights come from (default: computed in
    this kernel; see ``controls.compute_here``). Display the returned panel to show it.
    """
    return HeadExplorer(**kwargs)


__all__ = ["HEAD_CHOICES", "HEAD_D_MODEL", "HEAD_RENDERERS", "HeadExplorer", "head_explorer", "head_weights",
           "trained_available"]
