"""Per-head attention heatmaps drawn in the kernel, fast enough for sliders (``HeadGrid``).

``HeadGrid`` draws one attention map per head and is built for sliders: matplotlib draws the
frame (head titles, colorbar, axis titles) once per ``h`` and keeps its pixels; every update
colour-maps the weights with numpy into that frame, pastes pre-rendered token labels, and
PNG-encodes a 256-colour image (a few ms for 16 heads of 64 tokens). ``render`` returns PNG
bytes for an ``ipywidgets.Image``; that route beat ``ipympl`` and ``Output`` + ``display`` in
the project's measurements. ``head_grid_figure`` draws the same content as an ordinary
matplotlib figure (notebooks, PNG/SVG downloads).

The same maps drawn in the browser (hover, click): ``heatmap_widget``. Real models' chosen heads
and score grids for the notebooks: ``real_head_figures``.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import PowerNorm, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from PIL import Image

from .viz import (
    CMAP,
    CSS_PX_PER_INCH,
    MIN_FONT_PT,
    PNG_COMPRESS_LEVEL,
    WEIGHT_GAMMA,
    check_weights,
    figure_bytes,
    fit_font_pt,
)

# At most this many token labels per axis of a matplotlib figure; more would overlap.
MAX_TICK_LABELS = 22
# Tiles per row of the head grid: 16 heads -> 4 x 4.
GRID_COLS = 4
# Outline colour of the highlighted query row: readable against both ends of viridis.
HIGHLIGHT_COLOR = "#e7298a"


def _tick_positions(n: int, max_labels: int = MAX_TICK_LABELS) -> np.ndarray:
    """Every k-th position, so that at most ``max_labels`` labels show: shape (<= max_labels,)."""
    step = max(1, math.ceil(n / max_labels))
    return np.arange(0, n, step)


class _TextStamps:
    """Token labels rendered once by matplotlib, then pasted as alpha masks (a few us each).

    Drawing ~200 tick labels through matplotlib costs ~0.2 s per frame; a label's pixels do not
    change between frames, so each distinct ``(text, size, rotation)`` is rendered once.
    """

    def __init__(self, dpi: int):
        self.dpi = dpi
        self._cache: dict[tuple[str, float, int], np.ndarray] = {}

    def get(self, text: str, size: float, rotation: int = 0) -> np.ndarray:
        """Coverage mask of ``text``: float32 array of shape (height_px, width_px), values in [0, 1]."""
        key = (text, size, rotation)
        if key not in self._cache:
            if rotation:
                self._cache[key] = np.rot90(self.get(text, size, 0), rotation // 90).copy()
            else:
                fig = Figure(figsize=(0.2 + 0.8 * size / 72 * max(1, len(text)), 0.2 + 2 * size / 72),
                             dpi=self.dpi, facecolor="none")
                FigureCanvasAgg(fig)
                t = fig.text(0.05, 0.5, text, fontsize=size, va="center", ha="left")
                fig.canvas.draw()
                alpha = np.asarray(fig.canvas.buffer_rgba())[..., 3]  # (H, W): ink coverage
                x0, y0, x1, y1 = t.get_window_extent().extents  # display px, origin bottom-left
                rows = alpha.shape[0]
                crop = alpha[max(0, int(rows - y1)): int(np.ceil(rows - y0)), max(0, int(x0)): int(np.ceil(x1))]
                self._cache[key] = crop.astype(np.float32) / 255.0
        return self._cache[key]



# HeadGrid draws into a 256-colour palette image: one byte per pixel instead of three makes the
# PNG encode (the slowest step of an update) about 3x faster. Palette layout:
N_MAP_COLOURS = 224  # entries 0..223: viridis, for the attention weights
N_GREYS = 16  # entries 224..239: white (224) to black (239), for antialiased text on white
HIGHLIGHT_INDEX = N_MAP_COLOURS + N_GREYS  # entry 240: the query-row outline


def _palette() -> np.ndarray:
    """The 256 RGB colours of HeadGrid's images: shape (256, 3), uint8."""
    pal = np.zeros((256, 3))
    pal[:N_MAP_COLOURS] = colormaps[CMAP](np.linspace(0, 1, N_MAP_COLOURS))[:, :3]
    pal[N_MAP_COLOURS:HIGHLIGHT_INDEX] = np.linspace(1, 0, N_GREYS)[:, None]
    pal[HIGHLIGHT_INDEX] = to_rgb(HIGHLIGHT_COLOR)
    return (pal * 255).round().astype(np.uint8)


def _quantize(rgb: np.ndarray, palette: np.ndarray) -> np.ndarray:
    """Nearest palette index of every pixel of ``rgb`` (H, W, 3) uint8 -> (H, W) uint8.

    Most of a frame is white paper; only the other pixels are matched (about 10x faster).
    """
    white = int(np.flatnonzero((palette == 255).all(axis=1))[0])  # the palette's white
    out = np.full(rgb.shape[:2], white, dtype=np.uint8)  # (H, W)
    ink = (rgb != 255).any(axis=-1)  # (H, W): pixels that are not white
    flat = rgb[ink].astype(np.int32)  # (K, 3)
    keys = (flat[:, 0] << 16) | (flat[:, 1] << 8) | flat[:, 2]  # (K,): one int per colour
    uniq, inverse = np.unique(keys, return_inverse=True)  # (U,), (K,)
    colours = np.stack([uniq >> 16, (uniq >> 8) & 255, uniq & 255], axis=1)  # (U, 3)
    dist = ((colours[:, None, :] - palette[None, :, :].astype(np.int32)) ** 2).sum(-1)  # (U, 256)
    out[ink] = dist.argmin(axis=1).astype(np.uint8)[inverse]  # (K,)
    return out


def _paste(canvas: np.ndarray, alpha: np.ndarray, x: int, y: int) -> None:
    """Write a text mask as grey palette indices into ``canvas`` (H, W) uint8, top-left at (x, y); clips."""
    h, w = alpha.shape
    H, W = canvas.shape
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + w, W), min(y + h, H)
    if x0 >= x1 or y0 >= y1:
        return
    a = alpha[y0 - y: y1 - y, x0 - x: x1 - x]  # (h', w')
    ink = a > 0.5 / N_GREYS
    region = canvas[y0:y1, x0:x1]
    region[ink] = N_MAP_COLOURS + np.rint(a[ink] * (N_GREYS - 1)).astype(np.uint8)


class HeadGrid:
    """A reusable grid of per-head attention heatmaps that renders to PNG bytes, for sliders.

    What is drawn when:

    * ``h`` changes: matplotlib draws the frame once for that ``h`` (head titles, colorbar,
      axis titles) and the pixels are kept as a background (one per ``h`` seen, at most 5).
    * every update: the ``h`` maps are colour-mapped with numpy (viridis lookup table, nearest
      upsampling) into their tiles of a copy of that background; token labels and the title are
      pasted from pre-rendered masks; the query row is outlined; the pixels are PNG-encoded.

    This keeps matplotlib's per-text and per-axes work (~0.2-0.5 s for a 16-head grid with tick
    labels) out of the slider path: an update of 16 heads at N = 64 takes milliseconds.
    ``export`` draws the same content as a classic matplotlib figure (vector SVG or PNG).

    Parameters
    ----------
    panel_inches : float, default 2.3
        Side of one head's tile.
    dpi : int, default 80
        Pixels per inch of the rendered PNG.
    tile_titles : bool, default True
        Write "head i" above each tile (off for a single head whose title names it).

    Examples
    --------
    >>> grid = HeadGrid()
    >>> png = grid.render(weights, labels, title="random weights", query=3)  # weights (h, N, N)
    """

    # Margins around the tiles, in inches: labels left and below, colorbar right, titles on top.
    LEFT, RIGHT, TOP, BOTTOM, GUTTER = 1.35, 1.5, 0.75, 1.3, 0.45

    def __init__(self, panel_inches: float = 2.3, dpi: int = 80, tile_titles: bool = True):
        if isinstance(panel_inches, bool) or not isinstance(panel_inches, (int, float)) or not panel_inches > 0:
            raise ValueError(f"panel_inches must be a positive number, got {panel_inches!r}")
        if isinstance(dpi, bool) or not isinstance(dpi, int) or dpi <= 0:
            raise ValueError(f"dpi must be a positive int, got {dpi!r}")
        self.panel_inches = float(panel_inches)
        self.dpi = dpi
        self.tile_titles = bool(tile_titles)
        # The PNG is shown one image pixel per CSS pixel, so s pt renders at s * dpi / 96 pt:
        # every text of the grid is drawn at font_pt, which renders at MIN_FONT_PT.
        self.font_pt = max(MIN_FONT_PT, MIN_FONT_PT * CSS_PX_PER_INCH / dpi)
        self.label_px = math.ceil(1.15 * self.font_pt * dpi / 72)  # least distance between token labels
        self.norm = PowerNorm(gamma=WEIGHT_GAMMA, vmin=0.0, vmax=1.0)
        self.palette = _palette()  # (256, 3)
        self._stamps = _TextStamps(dpi)
        self._frames: dict[int, tuple[np.ndarray, list[tuple[int, int]]]] = {}
        self.frames_built = 0  # matplotlib draws so far (the tests check that they are reused)
        self.last: tuple[np.ndarray, list[str], str, int | None] | None = None
        self.indices: np.ndarray | None = None  # (H, W) palette indices of the last update

    @property
    def tile_px(self) -> int:
        """Side of one head's tile in pixels."""
        return round(self.panel_inches * self.dpi)

    def _frame(self, h: int) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """The background pixels (H, W, 3) for ``h`` heads and the top-left pixel of each tile."""
        if h in self._frames:
            return self._frames[h]
        cols = min(h, GRID_COLS)
        rows = math.ceil(h / cols)
        dpi, s = self.dpi, self.tile_px
        left, top, gutter = (round(v * dpi) for v in (self.LEFT, self.TOP, self.GUTTER))
        width = left + cols * s + (cols - 1) * gutter + round(self.RIGHT * dpi)
        height = top + rows * s + (rows - 1) * gutter + round(self.BOTTOM * dpi)
        fig = Figure(figsize=(width / dpi, height / dpi), dpi=dpi)
        FigureCanvasAgg(fig)
        corners = []
        for i in range(h):
            r, c = divmod(i, cols)
            x, y = left + c * (s + gutter), top + r * (s + gutter)
            corners.append((x, y))
            if self.tile_titles:
                fig.text((x + s / 2) / width, 1 - (y - 4) / height, f"head {i}", ha="center", va="bottom",
                         fontsize=self.font_pt)
        grid_w, grid_h = cols * s + (cols - 1) * gutter, rows * s + (rows - 1) * gutter
        cax = fig.add_axes(((left + grid_w + 0.3 * dpi) / width, 1 - (top + grid_h) / height,
                            0.16 * dpi / width, grid_h / height))
        bar = fig.colorbar(ScalarMappable(norm=self.norm, cmap=CMAP), cax=cax)
        bar.set_label("attention weight (square-root scale)", fontsize=self.font_pt)
        bar.ax.tick_params(labelsize=self.font_pt)
        fig.text(0.2 * dpi / width, 1 - (top + grid_h / 2) / height, "query token (N_q)", rotation=90,
                 ha="center", va="center", fontsize=self.font_pt)
        fig.text((left + grid_w / 2) / width, 0.18 * dpi / height, "key token (N_k)", ha="center",
                 va="center", fontsize=self.font_pt)
        fig.canvas.draw()
        pixels = np.asarray(fig.canvas.buffer_rgba())[..., :3]  # (H, W, 3)
        self._frames[h] = (_quantize(pixels, self.palette), corners)  # (H, W) palette indices
        self.frames_built += 1
        return self._frames[h]

    # -- public -----------------------------------------------------------------------------
    def prepare(self, head_counts: Sequence[int]) -> None:
        """Build the frames for these ``h`` values now, so that a first move to them is fast.

        Parameters
        ----------
        head_counts : sequence of int
            Each a positive number of heads.
        """
        for h in head_counts:
            if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 1:
                raise ValueError(f"head_counts must hold positive ints, got {h!r}")
            self._frame(int(h))

    def update(self, weights: np.ndarray, labels: Sequence[str], *, title: str | Sequence[str] = "",
               query: int | None = None) -> np.ndarray:
        """Draw ``weights`` into the grid and return the pixels.

        Parameters
        ----------
        weights : ndarray of shape (h, N, N)
            One attention map per head; row = query, column = key; values in [0, 1].
        labels : sequence of N str
            Token labels for both axes.
        title : str or sequence of str
            Figure title (say what the weights are: random or trained, causal or not). A
            sequence is drawn piece by piece, side by side, and each piece's pixels are kept:
            a title that changes only in a number (``("layer ", "3")``) costs no new text
            rendering once the pieces have been seen.
        query : int or None
            Query position ``0 <= query < N`` whose row is outlined in every head.

        Returns
        -------
        ndarray of shape (height_px, width_px, 3), uint8: the RGB pixels
        """
        weights, labels = check_weights(weights, labels)
        h, n, _ = weights.shape
        if query is not None:
            if isinstance(query, bool) or not isinstance(query, (int, np.integer)):
                raise TypeError(f"query must be an int or None, got {type(query).__name__} {query!r}")
            if not 0 <= query < n:
                raise ValueError(f"query must be in [0, N-1] = [0, {n - 1}], got query={query}")
        pieces = [title] if isinstance(title, str) else title
        if not isinstance(pieces, (list, tuple)) or not all(isinstance(p, str) for p in pieces):
            raise TypeError(f"title must be a str or a sequence of str, got {type(title).__name__}")
        background, corners = self._frame(h)
        out = background.copy()  # (H, W) palette indices
        s = self.tile_px
        cell = np.arange(s) * n // s  # (S,): the token shown at each pixel row/column of a tile
        level = np.sqrt(np.clip(weights, 0.0, 1.0))  # (h, N, N): the PowerNorm of the colorbar
        colours = np.rint(level * (N_MAP_COLOURS - 1)).astype(np.uint8)  # (h, N, N) palette indices
        for i, (x, y) in enumerate(corners):
            out[y: y + s, x: x + s] = colours[i][cell][:, cell]  # (S, S), nearest upsampling
        edges = np.arange(n + 1) * s // n  # (N+1,): pixel where each token's row/column starts
        step = max(1, math.ceil(self.label_px / (s / n)))  # skip labels that would overlap
        cols = min(h, GRID_COLS)
        for i, (x, y) in enumerate(corners):
            for t in range(0, n, step):
                mid = (edges[t] + edges[t + 1]) // 2
                if i % cols == 0:  # first column: query labels on the left
                    a = self._stamps.get(labels[t], self.font_pt)
                    _paste(out, a, x - 3 - a.shape[1], y + mid - a.shape[0] // 2)
                if i + cols >= h:  # last tile of its column: key labels below
                    a = self._stamps.get(labels[t], self.font_pt, 90)
                    _paste(out, a, x + mid - a.shape[1] // 2, y + s + 3)
            if query is not None:
                y0, y1 = y + edges[query], y + edges[query + 1]
                c = HIGHLIGHT_INDEX
                out[max(y0 - 1, 0): y0 + 1, x: x + s] = c  # top edge of the row
                out[y1 - 1: y1 + 1, x: x + s] = c  # bottom edge
                out[y0: y1, x: x + 2] = c  # left edge
                out[y0: y1, x + s - 2: x + s] = c  # right edge
        stamps = [self._stamps.get(p, 1.2 * self.font_pt) for p in pieces if p]
        x = (out.shape[1] - sum(a.shape[1] for a in stamps)) // 2
        for a in stamps:  # one line: every stamp of one font size has the same height
            _paste(out, a, x, round(0.12 * self.dpi))
            x += a.shape[1]
        self.last = (weights, labels, "".join(pieces), query)
        self.indices = out
        return self.palette[out]  # (H, W, 3)

    def png(self) -> bytes:
        """PNG bytes of what ``update`` last drew."""
        if self.indices is None:
            raise RuntimeError("nothing drawn yet: call update() or render() first")
        image = Image.fromarray(self.indices, mode="P")
        image.putpalette(self.palette.tobytes())
        buf = io.BytesIO()
        image.save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
        return buf.getvalue()

    def render(self, weights: np.ndarray, labels: Sequence[str], *, title: str | Sequence[str] = "",
               query: int | None = None) -> bytes:
        """``update(...)`` then ``png()``: the PNG bytes for an ``ipywidgets.Image``."""
        self.update(weights, labels, title=title, query=query)
        return self.png()

    def export(self, fmt: str) -> bytes:
        """What ``update`` last drew, as a standalone matplotlib ``"png"`` or vector ``"svg"`` file."""
        if self.last is None:
            raise RuntimeError("nothing drawn yet: call update() or render() first")
        weights, labels, title, query = self.last
        return figure_bytes(head_grid_figure(weights, labels, title=title, query=query), fmt)


def head_grid_figure(weights: np.ndarray, labels: Sequence[str], *, title: str = "",
                     query: int | None = None, panel_inches: float = 2.3) -> Figure:
    """One heatmap per head as a classic matplotlib figure (for notebooks and downloads).

    Parameters
    ----------
    weights : ndarray of shape (h, N, N)
    labels : sequence of N str
    title : str
    query : int or None
        Outline this query row in every head.
    panel_inches : float, default 2.3

    Returns
    -------
    matplotlib.figure.Figure (not attached to pyplot)
    """
    weights, labels = check_weights(weights, labels)
    h, n, _ = weights.shape
    if query is not None and not (isinstance(query, (int, np.integer)) and 0 <= query < n):
        raise ValueError(f"query must be None or an int in [0, {n - 1}], got {query!r}")
    cols = min(h, GRID_COLS)
    rows = math.ceil(h / cols)
    width = cols * panel_inches + 1.6
    fig = Figure(figsize=(width, rows * panel_inches + 1.4), layout="constrained")
    FigureCanvasAgg(fig)
    pt = fit_font_pt(width)  # renders at >= MIN_FONT_PT once the notebook column shrinks the figure
    axes = fig.subplots(rows, cols, squeeze=False)
    norm = PowerNorm(gamma=WEIGHT_GAMMA, vmin=0.0, vmax=1.0)
    # as many token labels as fit in a panel at this font size (1.3 line heights each)
    ticks = _tick_positions(n, max_labels=max(2, int(panel_inches * 72 / (1.3 * pt))))
    if query is not None and query not in ticks:  # the outlined query always carries its label
        ticks[np.abs(ticks - query).argmin()] = query
    for i, ax in enumerate(axes.flat):
        if i >= h:
            ax.set_visible(False)
            continue
        ax.imshow(weights[i], cmap=CMAP, norm=norm, interpolation="nearest")
        ax.set_title(f"head {i}", fontsize=pt)
        r, c = divmod(i, cols)
        ax.set_xticks(ticks, [labels[t] for t in ticks] if i + cols >= h else [], rotation=90, fontsize=pt)
        ax.set_yticks(ticks, [labels[t] for t in ticks] if c == 0 else [], fontsize=pt)
        if i + cols >= h:
            ax.set_xlabel("key token (N_k)", fontsize=pt)
        if c == 0:
            ax.set_ylabel("query token (N_q)", fontsize=pt)
        if query is not None:
            ax.add_patch(Rectangle((-0.5, query - 0.5), n, 1, fill=False, edgecolor=HIGHLIGHT_COLOR, linewidth=1.5))
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=CMAP), ax=axes.ravel().tolist(), shrink=0.8)
    bar.set_label("attention weight (square-root scale)", fontsize=pt)
    bar.ax.tick_params(labelsize=pt)
    if title:
        fig.suptitle(title, fontsize=1.1 * pt)
    return fig
