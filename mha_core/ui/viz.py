"""Figures for the notebooks and the dashboard: per-head heatmaps, tensor boxes, the shape ledger.

``HeadGrid`` draws one attention map per head and is built for sliders: matplotlib draws the
frame (head titles, colorbar, axis titles) once per ``h`` and keeps its pixels; every update
colour-maps the weights with numpy into that frame, pastes pre-rendered token labels, and
PNG-encodes a 256-colour image (a few ms for 16 heads of 64 tokens). ``render`` returns PNG
bytes for an ``ipywidgets.Image``; that route beat ``ipympl`` and ``Output`` + ``display`` in
the measurements recorded in the project's tooling notes. ``head_grid_figure`` draws the same
content as an ordinary matplotlib figure (notebooks, PNG/SVG downloads).

``ledger_html``, ``draw_shape_boxes`` and ``shape_boxes_svg`` show the output of
``mha_core.trace_shapes``; ``canvas_png`` and ``figure_bytes`` turn figures into bytes.

``show_figure(fig, alt)`` puts a figure into a notebook as an ``<img>`` with alt text, and
``rendered_font_sizes`` measures its text at the size a reader sees (projector rule: >= 10 pt).

Why an HTML ``<img>`` and not a PNG output with ``{"image/png": {"alt": ...}}`` metadata (checked
on this machine): JupyterLab 4.6's image renderer and nbconvert's ``lab`` template (used by Voila
and by ``jupyter nbconvert --to html``) ignore that metadata, and only nbconvert's ``classic``
template reads it; every one of them renders an ``<img alt=...>`` given as ``text/html``, and
JupyterLab's sanitizer keeps a ``data:`` image source in an untrusted notebook (it checks schemes
on ``href`` and ``cite`` only). strict nbval compares ``text/html``: the PNG's base64 is replaced
by a placeholder in ``tests/nbval_sanitize.cfg`` (its bytes depend on the machine's freetype),
so the comparison checks the alt text and the width, which are computed and deterministic. The
``text/plain`` alternative is the alt text too.
"""

from __future__ import annotations

import base64
import html
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
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, NullFormatter
from PIL import Image

# Weights live in [0, 1]; with N = 64 a uniform row is 1/64, invisible on a linear scale.
# A square-root colour scale (gamma 0.5) keeps both the small and the large weights readable,
# and a fixed [0, 1] range keeps the colorbar, and so the background, unchanged between redraws.
WEIGHT_GAMMA = 0.5
CMAP = "viridis"

# -- text that survives a projector -----------------------------------------------------------
# Every text of every figure must be at least MIN_FONT_PT at the size the reader sees. A notebook
# front end shows a figure at CSS_PX_PER_INCH CSS pixels per inch of figure (CSS: 96 px = 72 pt),
# shrunk to fit the output column (JupyterLab, nbviewer and GitHub cap images at 100 % of it), so
# a font of s pt renders at s * min(1, COLUMN_PX / (96 * width in inches)) pt.
MIN_FONT_PT = 10.0
CSS_PX_PER_INCH = 96
# Output column assumed, in CSS px: nbviewer's and GitHub's notebook columns are about 800-850 px
# wide; JupyterLab on a 1280 px projector gives more. The narrowest is the honest one.
COLUMN_PX = 800
# PNG pixels per inch of figure in show_figure: 1.5x the CSS density, sharp on projectors and
# high-density screens without making the stored notebooks heavy.
FIGURE_DPI = 144
# Size of mathtext sub- and superscripts relative to the text (matplotlib's mathtext SHRINK_FACTOR).
MATHTEXT_SCRIPT = 0.7


def fit_font_pt(width_inches: float, pt: float = MIN_FONT_PT) -> float:
    """The font size (pt) to use in a figure ``width_inches`` wide so that it renders at >= ``pt``."""
    return pt * max(1.0, CSS_PX_PER_INCH * width_inches / COLUMN_PX)


# At most this many token labels per axis of a matplotlib figure; more would overlap.
MAX_TICK_LABELS = 22
# Tiles per row of the head grid: 16 heads -> 4 x 4.
GRID_COLS = 4
# zlib level 1: the PNG of a 16-head grid encodes in a few ms, vs ~10x longer at the default 6.
PNG_COMPRESS_LEVEL = 1
# Outline colour of the highlighted query row: readable against both ends of viridis.
HIGHLIGHT_COLOR = "#e7298a"


def _check_weights(weights, labels) -> tuple[np.ndarray, list[str]]:
    if not isinstance(weights, np.ndarray):
        raise TypeError(f"weights must be a numpy.ndarray of shape (h, N, N), got {type(weights).__name__}")
    if weights.ndim != 3 or weights.shape[1] != weights.shape[2] or 0 in weights.shape:
        raise ValueError(f"weights must have shape (h, N, N) with h, N >= 1, got {weights.shape}")
    if not np.issubdtype(weights.dtype, np.floating):
        raise TypeError(f"weights must be a float array, got dtype {weights.dtype}")
    if isinstance(labels, str) or not isinstance(labels, Sequence):
        raise TypeError(f"labels must be a list of N str, got {type(labels).__name__}")
    if len(labels) != weights.shape[1]:
        raise ValueError(f"labels must have N={weights.shape[1]} entries (one per token), got {len(labels)}")
    return weights, [str(t) for t in labels]


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
        weights, labels = _check_weights(weights, labels)
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
    weights, labels = _check_weights(weights, labels)
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


def canvas_png(fig: Figure, *, draw: bool = True) -> bytes:
    """Draw ``fig`` on its Agg canvas and PNG-encode the pixels (faster than ``savefig``; for widgets).

    ``draw=False`` encodes the canvas as it is, e.g. after blitting a few artists onto it.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    if draw:
        fig.canvas.draw()
    rgba = np.asarray(fig.canvas.buffer_rgba())  # (H, W, 4)
    buf = io.BytesIO()
    Image.fromarray(rgba[..., :3]).save(buf, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
    return buf.getvalue()


def figure_bytes(fig: Figure, fmt: str = "png") -> bytes:
    """Save ``fig`` as ``"png"`` or ``"svg"`` and return the file's bytes."""
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    if fmt not in ("png", "svg"):
        raise ValueError(f"fmt must be 'png' or 'svg', got {fmt!r}")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=fig.dpi)
    return buf.getvalue()


# -- figures in notebooks: alt text and projector-sized text ---------------------------------------

def _check_figure(fig) -> Figure:
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    return fig


class FigureImage:
    """A matplotlib figure as a notebook output: a PNG ``<img>`` with alt text.

    ``text/html`` is ``<img src="data:image/png;base64,..." alt="..." width="...">`` shown at
    ``CSS_PX_PER_INCH`` CSS pixels per inch of figure (so an s pt font renders at s pt until the
    column shrinks it); ``text/plain`` is the alt text itself. See the module docstring for why
    this form and not image/png metadata. The output's metadata records ``min_font_pt``, the
    smallest text at rendered size (``rendered_font_sizes``), so a test can check the committed
    notebooks.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    alt : str
        What the figure shows, for a reader who cannot see it (non-empty).
    """

    def __init__(self, fig: Figure, alt: str):
        _check_figure(fig)
        if not isinstance(alt, str) or not alt.strip():
            raise ValueError(f"alt must be a non-empty str that says what the figure shows, got {alt!r}")
        self.alt = " ".join(alt.split())
        self.width_px = round(fig.get_figwidth() * CSS_PX_PER_INCH)  # CSS px
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=FIGURE_DPI)
        self.png = buf.getvalue()
        # measured after savefig, which has laid out the ticks: no second draw
        self.min_font_pt = rendered_font_sizes(fig, draw=False)[0][1] if fig.findobj(Text) else float("inf")

    def _repr_html_(self) -> tuple[str, dict]:
        data = base64.b64encode(self.png).decode("ascii")
        page = (f'<img src="data:image/png;base64,{data}" alt="{html.escape(self.alt)}" '
                f'width="{self.width_px}" style="max-width:100%;height:auto">')
        # in the output's metadata (not compared by nbval): tests read it from the committed notebooks
        return page, {"min_font_pt": round(self.min_font_pt, 2)}

    def __repr__(self) -> str:
        return self.alt


def show_figure(fig: Figure, alt: str) -> None:
    """Display ``fig`` in the notebook with ``alt`` text (see ``FigureImage``), and close it.

    Closing it keeps the inline backend from showing the same figure a second time, without alt.
    """
    from IPython.display import display

    image = FigureImage(fig, alt)
    if fig.canvas.manager is not None:  # a pyplot figure
        import matplotlib.pyplot as plt

        plt.close(fig)
    display(image)


def rendered_font_sizes(fig: Figure, *, column_px: int = COLUMN_PX, draw: bool = True) -> list[tuple[str, float]]:
    """Every visible text of ``fig`` with its size in pt as a notebook reader sees it.

    The figure is shown at ``CSS_PX_PER_INCH`` CSS px per inch and shrunk to ``column_px`` if it
    is wider (see ``MIN_FONT_PT``), so a font of s pt renders at
    ``s * min(1, column_px / (96 * width in inches))`` pt. Tick labels, titles, axis labels,
    legend entries, colorbar labels and annotations are all ``Text`` artists and all counted.

    ``draw=False`` skips the draw that lays out the ticks, for a figure just saved or drawn.

    Returns
    -------
    list of (str, float), smallest size first.
    """
    _check_figure(fig)
    if draw:
        if not isinstance(fig.canvas, FigureCanvasAgg):
            FigureCanvasAgg(fig)
        fig.canvas.draw()  # lays out the ticks and labels that will really be drawn
    scale = min(1.0, column_px / (fig.get_figwidth() * CSS_PX_PER_INCH))
    found = []
    for t in fig.findobj(Text):
        axes = t.axes
        text = t.get_text()
        if not (t.get_visible() and text.strip()) or (axes is not None and not axes.get_visible()):
            continue
        # mathtext draws sub- and superscripts (log-axis ticks such as 10^3) at 0.7 of the size
        shrink = MATHTEXT_SCRIPT if "$" in text and ("^" in text or "_" in text) else 1.0
        found.append((text, t.get_fontsize() * scale * shrink))
    return sorted(found, key=lambda item: item[1])


def plain_log_ticks(*axes) -> None:
    """Label the log-scaled axes of ``axes`` ``1e3``, ``1e4``, ... instead of mathtext ``10^3``,
    whose superscript is drawn at 0.7 of the font size (under 10 pt at the default 10 pt)."""
    for ax in axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_major_formatter(FuncFormatter(_plain_log_label))
                axis.set_minor_formatter(NullFormatter())


def _plain_log_label(value, _pos=None) -> str:
    if value <= 0:
        return ""
    exp = math.floor(math.log10(value) + 1e-9)
    return (f"{value:g}" if -2 <= exp <= 3 else f"1e{exp}") if abs(value / 10**exp - 1) < 1e-6 else ""


# -- shapes --------------------------------------------------------------------------------------

# The symbol of each axis of each step that mha_core.trace_shapes records (batched input).
# A 2-D input (no B) drops the leading "B". Unknown steps fall back to plain numbers.
STEP_SYMBOLS: dict[str, tuple[str, ...]] = {
    "X": ("B", "N", "d_model"),
    "Q = X @ W_Q": ("B", "N", "h*d_k"),
    "K = X @ W_K": ("B", "N", "h*d_k"),
    "V = X @ W_V": ("B", "N", "h*d_v"),
    "Q as heads: reshape": ("B", "N", "h", "d_k"),
    "Q heads: transpose": ("B", "h", "N", "d_k"),
    "K heads": ("B", "h", "N", "d_k"),
    "V heads": ("B", "h", "N", "d_v"),
    "Q rotated: RoPE": ("B", "h", "N", "d_k"),
    "K rotated: RoPE": ("B", "h", "N", "d_k"),
    "scores = Q K^T / sqrt(d_k)": ("B", "h", "N_q", "N_k"),
    "weights = softmax(scores)": ("B", "h", "N_q", "N_k"),
    "head outputs = weights V": ("B", "h", "N", "d_v"),
    "heads back: transpose": ("B", "N", "h", "d_v"),
    "concat: reshape": ("B", "N", "h*d_v"),
    "out = concat @ W_O": ("B", "N", "d_model"),
}


# With GQA/MQA (n_kv < h key/value heads) K and V carry n_kv heads, and the attention runs on the
# h query heads viewed as n_kv groups of h/n_kv (mha.py), so its steps are 5-D with B.
GROUPED_STEP_SYMBOLS: dict[str, tuple[str, ...]] = {
    "K = X @ W_K": ("B", "N", "n_kv*d_k"),
    "V = X @ W_V": ("B", "N", "n_kv*d_v"),
    "K heads": ("B", "n_kv", "N", "d_k"),
    "V heads": ("B", "n_kv", "N", "d_v"),
    "K rotated: RoPE": ("B", "n_kv", "N", "d_k"),
    "scores = Q K^T / sqrt(d_k)": ("B", "n_kv", "h/n_kv", "N_q", "N_k"),
    "weights = softmax(scores)": ("B", "n_kv", "h/n_kv", "N_q", "N_k"),
    "head outputs = weights V": ("B", "n_kv", "h/n_kv", "N", "d_v"),
}


def is_grouped(steps) -> bool:
    """True when a trace is of GQA/MQA: the K heads are fewer than the Q heads."""
    shapes = dict(steps)
    q, k = shapes.get("Q heads: transpose"), shapes.get("K heads")
    return q is not None and k is not None and q[-3] != k[-3]


def step_symbols(name: str, shape: tuple[int, ...], *, grouped: bool = False) -> tuple[str, ...] | None:
    """The axis symbols of trace step ``name`` with ``shape``, or None if the step is unknown.

    ``grouped``: the trace is of GQA/MQA (``is_grouped``), so K and V have n_kv heads."""
    sym = (GROUPED_STEP_SYMBOLS.get(name) if grouped else None) or STEP_SYMBOLS.get(name)
    if sym is None:
        return None
    if len(shape) == len(sym) - 1:
        sym = sym[1:]  # no batch axis
    return sym if len(sym) == len(shape) else None


def _check_steps(steps) -> list[tuple[str, tuple[int, ...]]]:
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence) or len(steps) == 0:
        raise TypeError(f"steps must be a non-empty list of (name, shape) pairs from trace_shapes, got {steps!r:.80}")
    out = []
    for i, item in enumerate(steps):
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(f"steps[{i}] must be a (name, shape) pair, got {item!r:.80}")
        shape = tuple(item[1])
        if not shape or not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape):
            raise ValueError(f"steps[{i}] shape must be a tuple of positive ints, got {item[1]!r}")
        out.append((item[0], tuple(int(d) for d in shape)))
    return out


def _fmt_shape(shape: tuple[int, ...], sym: tuple[str, ...] | None) -> str:
    if sym is None:
        return "(" + ", ".join(f"{d:,}" for d in shape) + ")"
    return "(" + ", ".join(f"{s}={d:,}" for s, d in zip(sym, shape, strict=True)) + ")"


def ledger_html(steps: Sequence[tuple[str, tuple[int, ...]]]) -> str:
    """An HTML table of the shape ledger: one row per step of ``trace_shapes``.

    Parameters
    ----------
    steps : list of (str, tuple of int)
        As returned by ``mha_core.trace_shapes``.

    Returns
    -------
    str
        ``<table>`` with columns step, shape (with symbols where known) and element count.
    """
    steps = _check_steps(steps)
    grouped = is_grouped(steps)
    rows = []
    for i, (name, shape) in enumerate(steps):
        sym = step_symbols(name, shape, grouped=grouped)
        size = int(np.prod(shape, dtype=np.int64))
        rows.append(
            f"<tr><td>{i}</td><td><code>{html.escape(name)}</code></td>"
            f"<td><code>{html.escape(_fmt_shape(shape, sym))}</code></td>"
            f"<td style='text-align:right'>{size:,}</td></tr>"
        )
    return (
        "<table class='mha-ledger'><thead><tr><th>#</th><th>step</th><th>shape</th>"
        "<th>elements</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


# Box geometry of draw_shape_boxes, in units of one grid cell.
BOX_MAX = 0.5  # side of the box of the largest dimension
BOX_MIN = 0.06  # a dimension of 1 still gets a visible side
STACK_SPAN = 0.25  # the stacked copies behind a box shift it by at most this much in total
MAX_COPIES = 11  # at most this many copies drawn behind a box; the label gives the real count
BOX_COLS = 7  # steps per row of the SVG (dashboard)
FIGURE_BOX_COLS = 4  # steps per row of the matplotlib figure: 4 cells fit a notebook column
BOX_CELL_INCHES = 2.0  # side of one step's cell in the matplotlib figure
NAME_WRAP = 16  # step names longer than this are broken after their "=" or ":"


def _side(d: int, d_max: int) -> float:
    # Square root: keeps N=4 and d_model=512 both visible in one figure while staying monotone.
    return BOX_MIN + (BOX_MAX - BOX_MIN) * math.sqrt(d / d_max)


def _wrap_name(name: str) -> list[str]:
    """A step name as one or two lines: ``"scores = Q K^T / sqrt(d_k)"`` -> ``["scores =", "Q K^T / sqrt(d_k)"]``."""
    if len(name) <= NAME_WRAP:
        return [name]
    for sep in (" = ", ": "):
        if sep in name:
            head, tail = name.split(sep, 1)
            return [head + sep.rstrip(), tail]
    return [name]


def shape_boxes(steps: Sequence[tuple[str, tuple[int, ...]]], *, cols: int = BOX_COLS) -> list[dict]:
    """Geometry of the tensor diagram, shared by ``draw_shape_boxes`` (matplotlib) and
    ``shape_boxes_svg`` (inline SVG for the dashboard).

    Each step gets one grid cell (``cols`` per row, cell side 1). Its box has width
    ``_side(last axis)`` and height ``_side(axis before it)``; the leading axes (``B``, ``h``)
    multiply into a count of matrices, drawn as that many stacked boxes (at most
    ``MAX_COPIES + 1``) and written out below (``× B=3 × h=8 = 24 matrices``).

    Returns
    -------
    list of dict, one per step, with ``name, shape, row, col, x0, y0, width, height`` (cell units,
    y downwards), ``copies`` (int, boxes drawn behind the front one), ``count`` (int, the real
    number of matrices), ``offset`` (shift between two copies), ``bottom`` / ``left`` / ``lead``
    (the side labels, str).
    """
    steps = _check_steps(steps)
    if isinstance(cols, bool) or not isinstance(cols, int) or cols < 1:
        raise ValueError(f"cols must be a positive int, got {cols!r}")
    d_max = max(max(s[-2:]) if len(s) > 1 else s[0] for _, s in steps)
    grouped = is_grouped(steps)
    boxes = []
    for i, (name, shape) in enumerate(steps):
        sym = step_symbols(name, shape, grouped=grouped) or tuple("" for _ in shape)
        r, c = divmod(i, cols)
        width = _side(shape[-1], d_max)
        height = _side(shape[-2], d_max) if len(shape) > 1 else BOX_MIN
        lead = list(zip(sym[:-2], shape[:-2], strict=True))
        count = math.prod(d for _, d in lead)
        copies = min(count - 1, MAX_COPIES)
        lead_text = " ".join(f"× {s}={d:,}".replace(" =", " ") for s, d in lead)
        if len(lead) > 1:
            lead_text += f" = {count:,}"
        boxes.append({
            "name": name, "shape": shape, "row": r, "col": c,
            "x0": c + (1 - width) / 2, "y0": r + 0.3 + (BOX_MAX - height) / 2,
            "width": width, "height": height, "copies": copies, "count": count,
            "offset": STACK_SPAN / max(copies, 5),
            "bottom": f"{sym[-1]}={shape[-1]:,}".lstrip("="),
            "left": f"{sym[-2]}={shape[-2]:,}".lstrip("=") if len(shape) > 1 else "",
            "lead": lead_text + (f" (matrices; {copies + 1} drawn)" if copies < count - 1 else ""),
        })
    return boxes


# Colours of the tensor diagram: the box, its stacked copies behind it, and their edges.
BOX_FACE, BOX_EDGE, COPY_FACE, COPY_EDGE = "#6baed6", "#08306b", "#c6dbef", "#4a6fa5"


def draw_shape_boxes(steps: Sequence[tuple[str, tuple[int, ...]]], *, title: str | None = None,
                     dpi: int = 80) -> Figure:
    """Each tensor of the ledger as a box: width = last axis, height = the axis before it.

    Leading axes (``B``, ``h``) are drawn as stacked copies behind the box, one per matrix
    (shortened past ``MAX_COPIES``), and written out (``× h=8``). Sides grow with the square root
    of the dimension (so N = 4 and d_model = 512 both stay visible), the same size looks the same
    in every step, and every side carries its symbol and value. Four steps per row, so that the
    text keeps ``MIN_FONT_PT`` in a notebook column.

    Parameters
    ----------
    steps : list of (str, tuple of int)
        As returned by ``mha_core.trace_shapes``.
    title : str, optional
    dpi : int, default 80

    Returns
    -------
    matplotlib.figure.Figure (not attached to pyplot)
    """
    boxes = shape_boxes(steps, cols=FIGURE_BOX_COLS)
    cols = min(FIGURE_BOX_COLS, len(boxes))
    rows = math.ceil(len(boxes) / FIGURE_BOX_COLS)
    width = cols * BOX_CELL_INCHES
    pt = fit_font_pt(width)
    top = 0.5 if title else 0.0  # inches for the title
    fig = Figure(figsize=(width, rows * BOX_CELL_INCHES + top), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0, 0, 1, rows * BOX_CELL_INCHES / (rows * BOX_CELL_INCHES + top)))
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_axis_off()
    for b in boxes:
        x0, y0, w, h, r, c, off = b["x0"], b["y0"], b["width"], b["height"], b["row"], b["col"], b["offset"]
        for k in range(b["copies"], 0, -1):  # the stacked copies, drawn back to front
            ax.add_patch(Rectangle((x0 + k * off, y0 - k * off), w, h,
                                   facecolor=COPY_FACE, edgecolor=COPY_EDGE, linewidth=0.6))
        ax.add_patch(Rectangle((x0, y0), w, h, facecolor=BOX_FACE, edgecolor=BOX_EDGE, linewidth=1))
        ax.text(c + 0.5, r + 0.03, "\n".join(_wrap_name(b["name"])), ha="center", va="top", fontsize=pt,
                fontweight="bold", linespacing=1.1)
        ax.text(x0 + w / 2, y0 + h + 0.03, b["bottom"], ha="center", va="top", fontsize=pt)
        if b["left"]:
            ax.text(x0 - 0.03, y0 + h / 2, b["left"], ha="right", va="center", fontsize=pt, rotation=90)
        if b["lead"]:
            ax.text(c + 0.5, r + 0.97, b["lead"].replace(" (", "\n("), ha="center", va="bottom", fontsize=pt,
                    color=COPY_EDGE, linespacing=1.1)
    if title:
        fig.suptitle(title, fontsize=1.1 * pt)
    return fig


def shape_boxes_svg(steps: Sequence[tuple[str, tuple[int, ...]]], *, title: str | None = None,
                    cell_px: int = 170) -> str:
    """The tensor diagram of ``draw_shape_boxes`` as an inline ``<svg>`` string.

    Building the markup takes well under a millisecond (matplotlib needs ~0.1 s for the same
    picture), so the dashboard's shape sliders use this one.

    Parameters
    ----------
    steps : list of (str, tuple of int)
        As returned by ``mha_core.trace_shapes``.
    title : str, optional
    cell_px : int, default 170
        Side of one step's cell in pixels.

    Returns
    -------
    str
        ``<svg ...>...</svg>`` with a ``<title>`` and one group per step.
    """
    if isinstance(cell_px, bool) or not isinstance(cell_px, int) or cell_px < 40:
        raise ValueError(f"cell_px must be an int >= 40, got {cell_px!r}")
    boxes = shape_boxes(steps)
    cols = min(BOX_COLS, len(boxes))
    rows = math.ceil(len(boxes) / BOX_COLS)
    top = 28 if title else 0
    u = cell_px

    def px(v: float) -> str:
        return f"{v * u:.1f}"

    esc = html.escape
    px_font = MIN_FONT_PT * CSS_PX_PER_INCH / 72  # 10 pt = 13.3 CSS px
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='mha-boxes' width='{cols * u}' height='{rows * u + top}' "
        f"font-family='sans-serif' font-size='{px_font:.1f}'>",
        f"<title>{esc(title or 'tensor shapes')}</title>",
    ]
    if title:
        parts.append(f"<text x='{cols * u / 2:.0f}' y='18' text-anchor='middle' font-size='{1.2 * px_font:.1f}'>"
                     f"{esc(title)}</text>")
    parts.append(f"<g transform='translate(0,{top})'>")
    for b in boxes:
        x0, y0, w, h, r, c, off = b["x0"], b["y0"], b["width"], b["height"], b["row"], b["col"], b["offset"]
        parts.append(f"<g class='mha-box' data-step='{esc(b['name'])}'>")
        for k in range(b["copies"], 0, -1):
            parts.append(f"<rect x='{px(x0 + k * off)}' y='{px(y0 - k * off)}' width='{px(w)}' "
                         f"height='{px(h)}' fill='{COPY_FACE}' stroke='{COPY_EDGE}' stroke-width='0.6'/>")
        parts.append(f"<rect x='{px(x0)}' y='{px(y0)}' width='{px(w)}' height='{px(h)}' fill='{BOX_FACE}' "
                     f"stroke='{BOX_EDGE}'/>")
        lines = _wrap_name(b["name"])
        parts.append(f"<text x='{px(c + 0.5)}' y='{px(r + 0.02) }' text-anchor='middle' font-weight='bold'>"
                     + "".join(f"<tspan x='{px(c + 0.5)}' dy='{px_font * 1.1:.1f}'>{esc(t)}</tspan>" for t in lines)
                     + "</text>")
        parts.append(f"<text x='{px(x0 + w / 2)}' y='{px(y0 + h) }' dy='{px_font * 1.1:.1f}' text-anchor='middle'>"
                     f"{esc(b['bottom'])}</text>")
        if b["left"]:
            lx, ly = x0 * u - 8, (y0 + h / 2) * u
            parts.append(f"<text x='{lx:.1f}' y='{ly:.1f}' text-anchor='middle' "
                         f"transform='rotate(-90 {lx:.1f} {ly:.1f})'>{esc(b['left'])}</text>")
        if b["lead"]:
            parts.append(f"<text x='{px(c + 0.5)}' y='{px(r + 0.97)}' text-anchor='middle' fill='{COPY_EDGE}'>"
                         f"{esc(b['lead'])}</text>")
        parts.append("</g>")
    parts.append("</g></svg>")
    return "".join(parts)
