"""The shape ledger and the tensor boxes: the output of ``mha_core.trace_shapes`` as a table and a picture.

    step_symbols(name, shape)   the axis symbols (B, N, h, d_k, ...) of a traced step
    ledger_html(steps)          the ledger as an HTML table
    shape_boxes(steps)          the boxes' geometry, shared by the two drawings below
    draw_shape_boxes(steps)     the boxes as a matplotlib figure (notebooks)
    shape_boxes_svg(steps)      the boxes as inline SVG (the dashboard's sliders)
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .viz import CSS_PX_PER_INCH, MIN_FONT_PT, fit_font_pt

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
    "scores = Q K^T / sqrt(d_k)": ("B", "h", "N_q", "N_k"),
    "weights = softmax(scores)": ("B", "h", "N_q", "N_k"),
    "head outputs = weights V": ("B", "h", "N", "d_v"),
    "heads back: transpose": ("B", "N", "h", "d_v"),
    "concat: reshape": ("B", "N", "h*d_v"),
    "out = concat @ W_O": ("B", "N", "d_model"),
}


def step_symbols(name: str, shape: tuple[int, ...]) -> tuple[str, ...] | None:
    """The axis symbols of trace step ``name`` with ``shape``, or None if the step is unknown."""
    sym = STEP_SYMBOLS.get(name)
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
    rows = []
    for i, (name, shape) in enumerate(steps):
        sym = step_symbols(name, shape)
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
    boxes = []
    for i, (name, shape) in enumerate(steps):
        sym = step_symbols(name, shape) or tuple("" for _ in shape)
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
