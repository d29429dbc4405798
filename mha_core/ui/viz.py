"""Figure helpers every lesson imports: show a figure with alt text, at a size a projector can read.

``show_figure(fig, alt)`` puts a figure into a notebook as an ``<img>`` with alt text, and
``rendered_font_sizes`` measures its text at the size a reader sees (projector rule: >= 10 pt).
``canvas_png`` and ``figure_bytes`` turn figures into bytes; ``plain_log_ticks`` labels log
axes without mathtext; ``CMAP``, ``WEIGHT_GAMMA`` and ``check_weights`` are shared by every
attention-map renderer (``head_grid``, ``heatmap_widget``, ``real_head_figures``).

Why an HTML ``<img>`` and not a PNG output with ``{"image/png": {"alt": ...}}`` metadata:
JupyterLab 4.6's image renderer and nbconvert's ``lab`` template (used by Voila
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
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FixedLocator, FuncFormatter, LogFormatter, NullFormatter
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


# zlib level 1: the PNG of a 16-head grid encodes in a few ms, vs ~10x longer at the default 6.
PNG_COMPRESS_LEVEL = 1


def check_weights(weights, labels) -> tuple[np.ndarray, list[str]]:
    """Validate attention maps ``weights`` (h, N, N), float, and their N token ``labels``; labels as str."""
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
    whose superscript is drawn at 0.7 of the font size (under 10 pt at the default 10 pt).

    An axis whose ticks were given their own labels (``ax.set_xticks(ticks, labels)``: fixed
    ticks, and a formatter that is no longer a log formatter) keeps them: they are plain text already.
    """
    for ax in axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            labelled = (isinstance(axis.get_major_locator(), FixedLocator)
                        and not isinstance(axis.get_major_formatter(), LogFormatter))
            if scale == "log" and not labelled:
                axis.set_major_formatter(FuncFormatter(_plain_log_label))
                axis.set_minor_formatter(NullFormatter())


def _plain_log_label(value, _pos=None) -> str:
    if value <= 0:
        return ""
    exp = math.floor(math.log10(value) + 1e-9)
    return (f"{value:g}" if -2 <= exp <= 3 else f"1e{exp}") if abs(value / 10**exp - 1) < 1e-6 else ""
