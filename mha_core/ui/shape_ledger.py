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
    "Q rotated: RoPE": ("B", "h", "N", "d_k"),
    "K rotated: RoPE": ("B", "h", "N", "d_k"),
    "scores = Q K^T / sqrt(d_k)": ("B", "h", "N_q", "N_k"),
    "weights = softmax(scores)": ("B", "h", "N_q", "N_k"),
    "head outputs = weights V": ("B", "h", "N", "d_v"),
    "heads back: transpose": ("B", "N", "h", "d_v"),
    "concat: reshape": ("B", "N", "h*d_v"),
    "out = concat @ W_O": ("B", "N", "d_model"),
}


# With GQA/MQA (n_kv < h key/value heads) K and V carry n_kv heads, each repeated for its h/n_kv
# query heads before the attention (mha.py), which then runs on h heads as without GQA.
GROUPED_STEP_SYMBOLS: dict[str, tuple[str, ...]] = {
    "K = X @ W_K": ("B", "N", "n_kv*d_k"),
    "V = X @ W_V": ("B", "N", "n_kv*d_v"),
    "K heads": ("B", "n_kv", "N", "d_k"),
    "V heads": ("B", "n_kv", "N", "d_v"),
    "K rotated: RoPE": ("B", "n_kv", "N", "d_k"),
    "K, V heads repeated (GQA)": ("B", "h", "N", "d_k"),
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
BOX_MIN = 0.1  # a dimension of 1 still gets a side that reads as a box (17 px in the dashboard)
STACK_SPAN = 0.25  # the stacked copies behind a box shift it by at most this much in total
MAX_COPIES = 11  # at most this many copies drawn behind a box; the label gives the real count
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


def shape_boxes(steps: Sequence[tuple[str, tuple[int, ...]]], *, cols: int = FIGURE_BOX_COLS) -> list[dict]:
    """Geometry of the tensor diagram, shared by ``draw_shape_boxes`` (matplotlib) and
    ``shape_boxes_svg`` (inline SVG for the dashboard).

    Each step gets one grid cell (``cols`` per row, cell side 1). Its box has width
    ``_side(last axis)`` and height ``_side(axis before it)``; the leading axes (``B``, ``h``)
    multiply into a count of matrices, drawn as that many stacked boxes (at most
    ``MAX_COPIES + 1``) and written out below as a short tag (``× B=3 × h=8 = 24``, with
    ``12 of 24 drawn`` when the stack is shortened).

    Returns
    -------
    list of dict, one per step, with ``name, shape``, ``sym`` (the axis symbols of ``step_symbols``,
    or None), ``row, col, x0, y0, width, height`` (cell units, y downwards), ``copies`` (int, boxes
    drawn behind the front one), ``count`` (int, the real number of matrices), ``offset`` (shift between two copies), ``bottom`` / ``left`` / ``lead``
    (the side labels, str) and ``drawn`` (``"12 of 24 drawn"``, or ``""`` when every matrix is drawn).
    """
    steps = _check_steps(steps)
    if isinstance(cols, bool) or not isinstance(cols, int) or cols < 1:
        raise ValueError(f"cols must be a positive int, got {cols!r}")
    d_max = max(max(s[-2:]) if len(s) > 1 else s[0] for _, s in steps)
    grouped = is_grouped(steps)
    boxes = []
    for i, (name, shape) in enumerate(steps):
        known = step_symbols(name, shape, grouped=grouped)
        sym = known or tuple("" for _ in shape)
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
            "name": name, "shape": shape, "sym": known, "row": r, "col": c,
            "x0": c + (1 - width) / 2, "y0": r + 0.3 + (BOX_MAX - height) / 2,
            "width": width, "height": height, "copies": copies, "count": count,
            "offset": STACK_SPAN / max(copies, 5),
            "bottom": f"{sym[-1]}={shape[-1]:,}".lstrip("="),
            "left": f"{sym[-2]}={shape[-2]:,}".lstrip("=") if len(shape) > 1 else "",
            "lead": lead_text,
            "drawn": f"{copies + 1} of {count:,} drawn" if copies < count - 1 else "",
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
            ax.text(c + 0.5, r + 0.97, "\n".join(filter(None, (b["lead"], b["drawn"]))), ha="center",
                    va="bottom", fontsize=pt, color=COPY_EDGE, linespacing=1.1)
    if title:
        fig.suptitle(title, fontsize=1.1 * pt)
    return fig


# Text of the dashboard's diagram: 10 pt = 13.3 CSS px; LINE is one line's height. Label widths
# are estimated at CHAR_EM em per character (sans-serif digits and letters are 0.5-0.6 em; "m"
# and "_" wider), an over-estimate, so the layout leaves room rather than overprinting.
SVG_FONT_PX = MIN_FONT_PT * CSS_PX_PER_INCH / 72
SVG_LINE = 1.2 * SVG_FONT_PX
CHAR_EM = 0.64


def _text_px(text: str, bold: bool = False) -> float:
    """Estimated width of ``text`` in the diagram's font, in px."""
    return len(text) * CHAR_EM * SVG_FONT_PX * (1.08 if bold else 1.0)


def _svg_cell(b: dict, u: int) -> str:
    """One step as its own ``<svg>``: name on top, the stack, the side labels, the count tag.

    Everything is placed from the labels' (over-)estimated sizes so that no text meets another:
    the name block, then the stack (its copies rise up to ``STACK_SPAN`` above the box), the
    left label beside the box (rotated; it may be longer than a short box, so the box moves
    down and the bottom label below it), the bottom label, then the count tag and ``drawn``.
    """
    esc = html.escape
    f, line = SVG_FONT_PX, SVG_LINE
    names = _wrap_name(b["name"])
    w, h = b["width"] * u, b["height"] * u
    rise = b["copies"] * b["offset"] * u  # how far the stacked copies reach up and right
    left_len = _text_px(b["left"]) if b["left"] else 0.0
    margin = f + 8  # room for the rotated left label beside the box
    top = len(names) * line + 6  # below the name block
    y_box = top + max(rise, (left_len - h) / 2) + 4
    x_box = (u - margin - w - rise) / 2 + margin
    mid = y_box + h / 2
    below = max(y_box + h, mid + left_len / 2) + 3  # the bottom label starts here
    lines_below = [t for t in (b["bottom"], b["lead"], b["drawn"]) if t]
    height = below + len(lines_below) * line + 4

    def fmt(v: float) -> str:
        return f"{v:.1f}"

    label = f"{b['name']}: {_fmt_shape(b['shape'], b['sym'])}"
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' class='mha-box' data-step='{esc(b['name'])}' role='img' "
             f"aria-label='{esc(label, quote=True)}' viewBox='0 0 {u} {fmt(height)}' width='{u}' "
             f"height='{fmt(height)}' font-family='sans-serif' font-size='{fmt(f)}'>"]
    parts.append(f"<text class='mha-box-name' x='{u / 2:.1f}' y='0' text-anchor='middle' font-weight='bold'>"
                 + "".join(f"<tspan x='{u / 2:.1f}' dy='{fmt(line)}'>{esc(t)}</tspan>" for t in names) + "</text>")
    off = b["offset"] * u
    for k in range(b["copies"], 0, -1):  # the stacked copies, back to front
        parts.append(f"<rect x='{fmt(x_box + k * off)}' y='{fmt(y_box - k * off)}' width='{fmt(w)}' "
                     f"height='{fmt(h)}' fill='{COPY_FACE}' stroke='{COPY_EDGE}' stroke-width='0.6'/>")
    parts.append(f"<rect x='{fmt(x_box)}' y='{fmt(y_box)}' width='{fmt(w)}' height='{fmt(h)}' fill='{BOX_FACE}' "
                 f"stroke='{BOX_EDGE}'/>")
    if b["left"]:
        lx = x_box - 5
        parts.append(f"<text class='mha-box-left' x='{fmt(lx)}' y='{fmt(mid)}' text-anchor='middle' "
                     f"transform='rotate(-90 {fmt(lx)} {fmt(mid)})'>{esc(b['left'])}</text>")
    y = below
    for t, css in zip(lines_below, ("mha-box-bottom", "mha-box-lead", "mha-box-drawn"), strict=False):
        y += line
        width = _text_px(t)
        cx = x_box + w / 2 if css == "mha-box-bottom" else u / 2
        cx = min(max(cx, width / 2 + 2), u - width / 2 - 2)  # inside the cell
        colour = "" if css == "mha-box-bottom" else f" fill='{COPY_EDGE}'"
        parts.append(f"<text class='{css}' x='{fmt(cx)}' y='{fmt(y - 0.25 * f)}' text-anchor='middle'{colour}>"
                     f"{esc(t)}</text>")
    parts.append("</svg>")
    return "".join(parts)


def shape_boxes_svg(steps: Sequence[tuple[str, tuple[int, ...]]], *, title: str | None = None,
                    cell_px: int = 170) -> str:
    """The tensor diagram of ``draw_shape_boxes`` for the dashboard: one inline ``<svg>`` per step.

    The steps are separate pictures in a wrapping row, so the page lays them out for its width
    (two per row on a phone, seven at 1366 px) and scales them with the text (the page's CSS).
    Inside a step, every label is placed from its estimated size, so no text overprints another
    (tests/test_dashboard_browser.py measures the rendered label boxes at 390 to 1920 px).
    Building the markup takes well under a millisecond (matplotlib needs ~0.1 s for the same
    picture), so the dashboard's shape sliders use this one.

    Parameters
    ----------
    steps : list of (str, tuple of int)
        As returned by ``mha_core.trace_shapes``.
    title : str, optional
    cell_px : int, default 170
        Width of one step's picture in CSS pixels (its height follows its labels).

    Returns
    -------
    str
        ``<figure class='mha-boxes'>`` with a caption and one ``<svg class='mha-box'>`` per step.
    """
    if isinstance(cell_px, bool) or not isinstance(cell_px, int) or cell_px < 120:
        raise ValueError(f"cell_px must be an int >= 120 (room for a label beside a box), got {cell_px!r}")
    boxes = shape_boxes(steps)
    caption = f"<figcaption class='mha-boxes-title'>{html.escape(title)}</figcaption>" if title else ""
    return (f"<figure class='mha-boxes' style='margin:0'>{caption}"
            "<div class='mha-boxes-row' style='display:flex;flex-wrap:wrap;gap:6px 8px;align-items:flex-start'>"
            + "".join(_svg_cell(b, cell_px) for b in boxes) + "</div></figure>")
