"""Static figures of real heads for the notebooks: chosen heads' maps and layer x head score grids.

    maps_figure(maps, labels, ...)      one attention map (N, N) per chosen head, token labels
    score_grid_figure(grids, ...)       one (layers, h) grid of scores per pattern

Both return a ``matplotlib.figure.Figure`` (not attached to pyplot) with text of at least
``FONT_PT`` points, viridis on a fixed [0, 1] scale (weights and scores are both fractions of
a row), titles, axis labels and a colorbar. The dashboard's fast per-head grid is
``head_grid.HeadGrid``; these are for reading, printing and projecting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .viz import CMAP
from .viz import MIN_FONT_PT as FONT_PT


def _check_maps(maps, ndim: int, what: str) -> dict[str, np.ndarray]:
    if not isinstance(maps, Mapping) or not maps:
        raise TypeError(f"{what} must be a non-empty dict of title -> array, got {type(maps).__name__}")
    out = {}
    for title, a in maps.items():
        if not isinstance(title, str):
            raise TypeError(f"{what} keys must be str titles, got {title!r}")
        if not isinstance(a, np.ndarray) or a.ndim != ndim or 0 in a.shape:
            raise ValueError(f"{what}[{title!r}] must be a non-empty {ndim}-D ndarray, got "
                             f"{getattr(a, 'shape', type(a).__name__)}")
        out[title] = a
    return out


def _figure(rows: int, cols: int, figsize) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False)


def maps_figure(maps: Mapping[str, np.ndarray], labels: Sequence[str], *, title: str, rows: int = 1,
                tick_every: int = 1, figsize: tuple[float, float] = (8.3, 3.8)) -> Figure:
    """One attention map per entry of ``maps``, side by side (``rows`` rows).

    Parameters
    ----------
    maps : dict str -> ndarray of shape (N, N)
        Panel title (say which layer and head) -> attention weights, row = query, column = key.
    labels : sequence of N str
        Token labels of both axes.
    title : str
        Figure title (say which model, and whether its weights are quantised).
    rows : int, default 1
    tick_every : int, default 1
        Label every k-th token (long sequences).
    figsize : (float, float), default (8.3, 3.8)
        Inches; 8.3 in fits an 800 px notebook column unshrunk.

    Returns
    -------
    matplotlib.figure.Figure
    """
    maps = _check_maps(maps, 2, "maps")
    n = len(labels)
    for key, w in maps.items():
        if w.shape != (n, n):
            raise ValueError(f"maps[{key!r}] must have shape (N, N) = ({n}, {n}) to match labels, got {w.shape}")
    if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows <= len(maps):
        raise ValueError(f"rows must be an int in [1, {len(maps)}], got {rows!r}")
    if isinstance(tick_every, bool) or not isinstance(tick_every, int) or tick_every < 1:
        raise ValueError(f"tick_every must be a positive int, got {tick_every!r}")
    fig, axes = _figure(rows, math.ceil(len(maps) / rows), figsize)
    ticks = np.arange(0, n, tick_every)
    names = [str(labels[t]).replace("$", r"\$") for t in ticks]  # "$" would start mathtext
    for ax in axes.flat[len(maps):]:
        ax.set_visible(False)
    for ax, (panel, w) in zip(axes.flat, maps.items(), strict=False):
        im = ax.imshow(w, cmap=CMAP, vmin=0.0, vmax=1.0)
        ax.set_title(panel, fontsize=FONT_PT + 1)
        ax.set_xticks(ticks, names, rotation=90, fontsize=FONT_PT)
        ax.set_yticks(ticks, names, fontsize=FONT_PT)
        ax.set_xlabel("key token", fontsize=FONT_PT + 1)
        ax.set_ylabel("query token", fontsize=FONT_PT + 1)
    bar = fig.colorbar(im, ax=axes, shrink=0.8)
    bar.set_label("attention weight", fontsize=FONT_PT + 1)
    bar.ax.tick_params(labelsize=FONT_PT)
    fig.suptitle(title, fontsize=FONT_PT + 2)
    return fig


def score_grid_figure(grids: Mapping[str, np.ndarray], *, title: str, cols: int = 3,
                      figsize: tuple[float, float] = (8.3, 6.0)) -> Figure:
    """One layer x head grid of scores per entry of ``grids``, on one [0, 1] colour scale.

    Parameters
    ----------
    grids : dict str -> ndarray of shape (layers, h)
        Pattern name -> score of every head, each in [0, 1].
    title : str
    cols : int, default 3
    figsize : (float, float), default (8.3, 6.0)

    Returns
    -------
    matplotlib.figure.Figure
    """
    grids = _check_maps(grids, 2, "grids")
    if isinstance(cols, bool) or not isinstance(cols, int) or cols < 1:
        raise ValueError(f"cols must be a positive int, got {cols!r}")
    cols = min(cols, len(grids))
    fig, axes = _figure(math.ceil(len(grids) / cols), cols, figsize)
    for ax in axes.flat[len(grids):]:
        ax.set_visible(False)
    for ax, (name, g) in zip(axes.flat, grids.items(), strict=False):
        layers, h = g.shape
        im = ax.imshow(g, cmap=CMAP, vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_title(name, fontsize=FONT_PT + 1)
        ax.set_xlabel("head", fontsize=FONT_PT + 1)
        ax.set_ylabel("layer", fontsize=FONT_PT + 1)
        ax.set_xticks(range(0, h, 1 if h <= 12 else 2))
        ax.set_yticks(range(0, layers, 1 if layers <= 12 else 5))
        ax.tick_params(labelsize=FONT_PT)
    bar = fig.colorbar(im, ax=axes, shrink=0.8)
    bar.set_label("score (mean attention weight)", fontsize=FONT_PT + 1)
    bar.ax.tick_params(labelsize=FONT_PT)
    fig.suptitle(title, fontsize=FONT_PT + 2)
    return fig
