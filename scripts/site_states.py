"""Build-time state tables: every state a live panel on the site can show, computed by ``mha_core``.

The site has no kernel, so a panel whose controls move on the site (``LIVE``) is computed here,
once per state, by the panel's own code: ``HeadExplorer.refresh`` with the state's control values,
read back from the widgets it fills (the heatmap's weights, labels, title and alt text, the
caption). Nothing of the maths is written again: the browser (``site/site.js``) only looks a state
up and hands it to the widget's own ``heatmap.js``.

The files, under ``assets/states/<panel>/`` of the site:

    index.json     the controls (name, values in the panel's order, labels) and the states:
                   [[value of each control, ...], "file stem"], one entry per state
    <stem>.json    a state's small things: labels, title, alt, caption, the query menu's labels
    <stem>.u8      a state's weights, shape (h, N, N), one byte each: weight = byte / 255
                   (QUANT_STEP = 1/255; the tip shows 2 decimals, which the bytes hold exactly
                   enough: the error is at most half a step, 0.002)

The page loads ``index.json`` when the panel scrolls into view, and one state's two files when
the controls pick it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mha_core.teaching.demo import DEMO_MAX_TOKENS
from mha_core.ui.heads_panel import HEAD_CHOICES, HeadExplorer, toy_task, trained_available

QUANT_LEVELS = 255
QUANT_STEP = 1 / QUANT_LEVELS
TIP_DIGITS = 2  # decimals the hover tip shows for a stored weight (half a step is 0.002)


@dataclass(frozen=True)
class StateTable:
    """A live panel's states.

    panel : the panel's name (its box has the class ``mha-<panel>-panel``)
    controls : {control name: (values in the panel's order, their labels)}, the controls that pick
        a state, in the order the page resolves them (the first one's value is kept when the
        others must move to a state that exists)
    states : () -> iterator of (values, meta, weights): ``values`` one per control, ``meta`` a
        JSON-able dict, ``weights`` an ndarray of shape (h, N, N) with entries in [0, 1]
    view : controls that change only the drawing, not the state (the outlined query row: the
        widget's own script draws it); the page moves them too
    """

    panel: str
    controls: dict[str, tuple[list, list[str]]]
    states: Callable[[], Iterator[tuple[tuple, dict, np.ndarray]]]
    view: tuple[str, ...] = ()

    @property
    def live_controls(self) -> list[str]:
        """Every control of the panel that moves on the site."""
        return [*self.controls, *self.view]


def quantise(weights: np.ndarray) -> bytes:
    """Weights in [0, 1], any shape -> one byte each, ``round(w * 255)`` (C order)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.size and (np.nanmin(w) < 0 or np.nanmax(w) > 1 or np.isnan(w).any()):
        raise ValueError(f"weights must lie in [0, 1] to be stored as bytes, got [{w.min()}, {w.max()}]")
    return np.round(w * QUANT_LEVELS).astype(np.uint8).tobytes()


def stem(values: tuple) -> str:
    """A state's file name: its control values joined, ``("random", 4, 12, False) -> "random-4-12-false"``."""
    return "-".join(json.dumps(v).strip('"') for v in values)


def write_table(table: StateTable, out: Path) -> dict:
    """Write ``table`` into ``out/<panel>/`` (see the module docstring). Returns {states, bytes}."""
    folder = out / table.panel
    folder.mkdir(parents=True, exist_ok=True)
    entries, size = [], 0
    for values, meta, weights in table.states():
        if len(values) != len(table.controls):
            raise ValueError(f"{table.panel}: state {values} has {len(values)} values for "
                             f"{len(table.controls)} controls")
        name = stem(values)
        data = {**meta, "shape": list(weights.shape)}
        (folder / f"{name}.json").write_text(json.dumps(data, separators=(",", ":")), encoding="utf-8")
        (folder / f"{name}.u8").write_bytes(quantise(weights))
        entries.append([list(values), name])
        size += (folder / f"{name}.json").stat().st_size + (folder / f"{name}.u8").stat().st_size
    index = {"panel": table.panel, "scale": QUANT_LEVELS, "digits": TIP_DIGITS,
             "controls": [{"name": k, "values": v, "labels": labels} for k, (v, labels) in table.controls.items()],
             "states": entries}
    (folder / "index.json").write_text(json.dumps(index, separators=(",", ":")), encoding="utf-8")
    return {"states": len(entries), "bytes": size + (folder / "index.json").stat().st_size}


# -- the heads panel (dashboard section 2, lesson 04) ------------------------------------------------

def heads_grid() -> Iterator[tuple[str, int, int, bool]]:
    """Every (kind, h, N, causal) the heads panel can show: random weights for each h of
    ``HEAD_CHOICES``, N = 2..DEMO_MAX_TOKENS, mask off and on; trained weights for each trained h,
    N = 2..the toy task's length, mask on (the panel locks it: the model was trained causally)."""
    for h in HEAD_CHOICES:
        for n in range(2, DEMO_MAX_TOKENS + 1):
            for causal in (False, True):
                yield "random", h, n, causal
    available = trained_available()
    for h in available:
        for n in range(2, toy_task().n + 1):
            yield "trained", h, n, True


def heads_view(panel: HeadExplorer, kind: str, h: int, N: int, causal: bool) -> tuple[dict, np.ndarray]:
    """What the panel shows at one state, by the panel itself: (meta, weights of shape (h, N, N))."""
    if not panel.refresh(kind=kind, h=h, N=N, causal=causal, query=-1):
        raise ValueError(f"the heads panel refused kind={kind}, h={h}, N={N}, causal={causal}: {panel.status.value}")
    fig = panel.figure
    weights = np.frombuffer(fig.weights, dtype=np.float32).reshape(fig.h, fig.n, fig.n)  # (h, N, N)
    meta = {"labels": list(fig.labels), "title": fig.title, "alt": fig.alt, "caption": panel.caption.value,
            "query": [label for label, _ in HeadExplorer._query_options(fig.labels)],
            "texts": {"causal": panel.causal.description}}  # the toggle's text says on or off
    return meta, weights


def heads_table() -> StateTable:
    kinds = [("random init", "random"), ("trained (toy task)", "trained")]
    if not trained_available():
        kinds = kinds[:1]

    def states():
        panel = HeadExplorer(renderer="canvas")
        for kind, h, n, causal in heads_grid():
            meta, weights = heads_view(panel, kind, h, n, causal)
            yield (kind, h, n, causal), meta, weights

    return StateTable("heads", {
        "kind": ([v for _, v in kinds], [label for label, _ in kinds]),
        "h": (list(HEAD_CHOICES), [str(h) for h in HEAD_CHOICES]),
        "N": (list(range(2, DEMO_MAX_TOKENS + 1)), [str(n) for n in range(2, DEMO_MAX_TOKENS + 1)]),
        "causal": ([False, True], ["off", "on"]),
    }, states, view=("query",))


LIVE: dict[str, Callable[[], StateTable]] = {"heads": heads_table}


def live_tables() -> dict[str, StateTable]:
    """The live panels' tables, by panel name (cheap: their states are computed when written)."""
    return {name: make() for name, make in LIVE.items()}


def write_states(tables: dict[str, StateTable], out: Path) -> dict[str, dict]:
    """Every table into ``out`` (the site's ``assets/states``): {panel: {states, bytes}}."""
    return {name: write_table(table, out) for name, table in tables.items()}
