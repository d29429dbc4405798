"""A layers x heads overview of a score, drawn in the browser; a click (or Enter) opens a head.

``ScoreGrid`` shows one square per head of a model, coloured by a score in [0, 1] (a pattern
score of ``mha_core.models.patterns``: previous token, first token, ...), the chosen head
outlined. Clicking a square, or pressing Enter on it after moving there with the arrow keys
(the grid is one tab stop), sets ``picked`` to ``[layer, head]``; the real-model panel observes it.
"""

from __future__ import annotations

from pathlib import Path

import anywidget
import numpy as np
import traitlets

from .heatmap_widget import viridis_lut

STATIC = Path(__file__).parent / "static"


class ScoreGrid(anywidget.AnyWidget):
    """One coloured square per (layer, head); ``picked`` is the square last clicked or chosen by key."""

    _esm = STATIC / "score_grid.js"
    _css = STATIC / "score_grid.css"
    scores = traitlets.Bytes(b"").tag(sync=True)  # float32, C order, shape (layers, h), values in [0, 1]
    layers = traitlets.Int(0).tag(sync=True)
    heads = traitlets.Int(0).tag(sync=True)
    title = traitlets.Unicode("").tag(sync=True)
    what = traitlets.Unicode("score").tag(sync=True)  # what a square's number is, for its tip and label
    current = traitlets.List(traitlets.Int(), [0, 0], minlen=2, maxlen=2).tag(sync=True)
    picked = traitlets.List(traitlets.Int(), [-1, -1], minlen=2, maxlen=2).tag(sync=True)
    lut = traitlets.Bytes(viridis_lut()).tag(sync=True)

    @traitlets.validate("picked")
    def _valid_pick(self, proposal):
        layer, head = proposal["value"]
        if (layer, head) != (-1, -1) and not (0 <= layer < self.layers and 0 <= head < self.heads):
            raise traitlets.TraitError(f"picked must be a [layer, head] inside ({self.layers}, {self.heads}), "
                                       f"got {[layer, head]}")
        return [layer, head]

    def show(self, scores: np.ndarray, *, title: str, what: str, current: tuple[int, int]) -> None:
        """Send the (layers, h) ``scores`` (each in [0, 1]), the title, what they measure, and the open head."""
        if not isinstance(scores, np.ndarray) or scores.ndim != 2 or 0 in scores.shape:
            raise ValueError(f"scores must be an ndarray of shape (layers, h), got {getattr(scores, 'shape', scores)!r}")
        if not np.isfinite(scores).all() or scores.min() < 0 or scores.max() > 1 + 1e-6:
            raise ValueError("scores must be finite and in [0, 1]")
        layers, heads = scores.shape
        layer, head = current
        if not (0 <= layer < layers and 0 <= head < heads):
            raise ValueError(f"current must be a (layer, head) inside {scores.shape}, got {current!r}")
        with self.hold_sync():
            self.layers, self.heads = layers, heads
            self.title, self.what = title, what
            self.current = [int(layer), int(head)]
            self.scores = np.ascontiguousarray(scores, dtype=np.float32).tobytes()  # (layers, h)
