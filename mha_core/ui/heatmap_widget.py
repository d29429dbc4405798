"""Per-head attention heatmaps drawn in the browser, with hover and click (an anywidget).

``HeatmapGrid`` sends the weights themselves (float32, shape (h, N, N)) and the colormap; the
page draws one canvas per head (``static/heatmap.js``, shipped inside the package: nothing is
fetched). Hovering a cell shows the exact weight and its query and key tokens; clicking a row,
or pressing Enter on a focused head, selects that query (the ``query`` trait, which the heads
panel observes). The heads wrap onto as many rows as the screen needs, so a phone shows one
readable map per row instead of a shrunken grid.

``heatmap_alt_text`` writes the figure's description for screen readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anywidget
import numpy as np
import traitlets
from matplotlib import colormaps

from .viz import CMAP, WEIGHT_GAMMA, check_weights

STATIC = Path(__file__).parent / "static"
# Side of one head's map in CSS pixels: 16 heads of 64 tokens stay 2.9 px per token, and one
# map with its labels (~250 px) fits a 390 px phone.
TILE_PX = 184
# 24 tokens at 12 px each: the demo sentence labelled token by token, and still 356 px wide with
# its labels on a 390 px phone.
MAX_TILE_PX = 288


def viridis_lut() -> bytes:
    """The colormap as 256 RGB triples (768 bytes), the same as the PNG figures'."""
    rgb = colormaps[CMAP](np.linspace(0, 1, 256))[:, :3]  # (256, 3)
    return (rgb * 255).round().astype(np.uint8).tobytes()


def heatmap_alt_text(weights: np.ndarray, labels: Sequence[str], *, title: str = "",
                     query: int | None = None) -> str:
    """A description of the heatmaps for screen readers: what is drawn, and what stands out.

    Parameters
    ----------
    weights : ndarray of shape (h, N, N), rows sum to 1
    labels : sequence of N str
    title : str
    query : int or None
        The outlined query row; its strongest key is named for every head.

    Returns
    -------
    str, e.g. ``"Attention heatmaps, one per head (h=2, N=5) ... head 0: strongest weight 0.41,
    query 3 'it' to key 1 'animal'; ..."``
    """
    weights, labels = check_weights(weights, labels)
    h, n, _ = weights.shape
    if query is not None and not (isinstance(query, (int, np.integer)) and 0 <= query < n):
        raise ValueError(f"query must be None or an int in [0, {n - 1}], got {query!r}")
    parts = [f"Attention heatmaps, one per head (h={h}, N={n}). {title}. Each row is a query token, "
             "each column a key token, colour is the weight from 0 (dark purple) to 1 (yellow); "
             "rows sum to 1."]
    for i in range(h):
        q, k = np.unravel_index(int(np.argmax(weights[i])), (n, n))  # the strongest cell
        text = f"Head {i}: strongest weight {weights[i, q, k]:.2f}, query {q} '{labels[q]}' to key {k} '{labels[k]}'"
        if query is not None:
            kq = int(np.argmax(weights[i, query]))
            text += f"; query {query} '{labels[query]}' attends most to key {kq} '{labels[kq]}' ({weights[i, query, kq]:.2f})"
        parts.append(text + ".")
    return " ".join(parts)


class HeatmapGrid(anywidget.AnyWidget):
    """One canvas per head, drawn in the browser from the weights; hover and click select.

    Set everything at once with ``show(weights, labels, title=..., query=...)``; read the
    query a student clicked from ``query`` (``-1`` for none).
    """

    _esm = STATIC / "heatmap.js"
    _css = STATIC / "heatmap.css"
    weights = traitlets.Bytes(b"").tag(sync=True)  # float32, C order, shape (h, n, n)
    h = traitlets.Int(0).tag(sync=True)
    n = traitlets.Int(0).tag(sync=True)
    labels = traitlets.List(traitlets.Unicode()).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    alt = traitlets.Unicode("").tag(sync=True)
    query = traitlets.Int(-1).tag(sync=True)
    lut = traitlets.Bytes(viridis_lut()).tag(sync=True)
    gamma = traitlets.Float(WEIGHT_GAMMA).tag(sync=True)
    # Decimals of a weight in the hover tip: 4 for the weights themselves; the static site shows
    # stored states (bytes, 1/255 apart) to 2 (scripts/site_states.py)
    digits = traitlets.Int(4, min=0, max=8).tag(sync=True)
    tile = traitlets.Int(TILE_PX).tag(sync=True)
    # Maps grow with N up to this side, so that every token gets a label (12 px a token), as far
    # as the page's width allows; past it, labels are thinned.
    max_tile = traitlets.Int(MAX_TILE_PX).tag(sync=True)
    # Marks drawn over every map: a dashed line before each of these token positions (on both
    # axes), and an outline on each (query, key) cell of ``stripe``.
    lines = traitlets.List(traitlets.Int()).tag(sync=True)
    stripe = traitlets.List(traitlets.List(traitlets.Int(), minlen=2, maxlen=2)).tag(sync=True)
    captions = traitlets.List(traitlets.Unicode()).tag(sync=True)  # a name per map; default "head i"
    # Small multiples (the real-model panel's thumbnails): at least ``columns`` maps side by side,
    # each shrunk to fit the page's width (two on a 390 px phone); 0: one map's width is its own.
    columns = traitlets.Int(0).tag(sync=True)
    # ``pick_head``: a click (or Enter) on a map sets ``picked`` to its index instead of selecting
    # a query row; whoever observes ``picked`` sets it back to -1 once handled.
    pick_head = traitlets.Bool(False).tag(sync=True)
    picked = traitlets.Int(-1).tag(sync=True)

    @traitlets.validate("picked")
    def _valid_picked(self, proposal):
        i = proposal["value"]
        if not -1 <= i < max(self.h, 1):
            raise traitlets.TraitError(f"picked must be -1 (none) or a map index 0..{self.h - 1}, got {i}")
        return i

    @traitlets.validate("query")
    def _valid_query(self, proposal):
        q = proposal["value"]
        if not -1 <= q < max(self.n, 1):
            raise traitlets.TraitError(f"query must be -1 (none) or a token position 0..{self.n - 1}, got {q}")
        return q

    def show(self, weights: np.ndarray, labels: Sequence[str], *, title: str = "",
             query: int | None = None, lines: Sequence[int] = (), stripe: Sequence[tuple[int, int]] = (),
             captions: Sequence[str] = (), alt: str | None = None) -> None:
        """Send new weights (h, N, N), labels, title, outlined query row and marks in one message.

        ``lines``: token positions to mark with a dashed line on both axes; ``stripe``: (query,
        key) cells to outline (the induction demo marks the repeat's start and its stripe);
        ``captions``: a name for each of the h maps (default "head 0", "head 1", ...);
        ``alt``: the description for screen readers (default ``heatmap_alt_text``).
        """
        weights, labels = check_weights(weights, labels)
        h, n, _ = weights.shape
        q = -1 if query is None else int(query)
        if not -1 <= q < n:
            raise ValueError(f"query must be None or in [0, {n - 1}], got {query!r}")
        lines = [int(p) for p in lines]
        stripe = [[int(a), int(b)] for a, b in stripe]
        if any(not 0 <= p < n for p in lines) or any(not (0 <= a < n and 0 <= b < n) for a, b in stripe):
            raise ValueError(f"lines and stripe must be token positions in [0, {n - 1}], got {lines} and {stripe}")
        captions = [str(c) for c in captions]
        if captions and len(captions) != h:
            raise ValueError(f"captions must name each of the h={h} maps, got {len(captions)}")
        with self.hold_sync():
            self.lines, self.stripe, self.captions = lines, stripe, captions
            self.h, self.n = h, n
            self.labels = list(labels)
            self.title = title
            self.query = q
            self.alt = heatmap_alt_text(weights, labels, title=title, query=None if q < 0 else q) if alt is None else alt
            self.weights = np.ascontiguousarray(weights, dtype=np.float32).tobytes()  # (h, N, N)
