"""Build-time state tables: every state a live panel on the site can show, computed by ``mha_core``.

The site has no kernel, so a panel whose controls move on the site (``LIVE``) is computed here,
once per state, by the panel's own code: ``HeadExplorer.refresh`` with the state's control values,
read back from the widgets it fills (the heatmap's weights, labels, title and alt text, the
caption). Nothing of the maths is written again: the browser (``site/site.js``) only looks a state
up and hands it to the widget's own ``heatmap.js``.

The files, under ``assets/states/<panel>/`` of the site:

    index.json     the controls (name, values in the panel's order, labels) and the states:
                   [[value of each control, ...], "file stem"], one entry per state (and the
                   name of its bundle, third, for a table with ``bundle``)
    <stem>.json.gz a state's small things: "html" {a widget's CSS class: its new HTML} (captions,
                   numbers), "texts" {control: its new text}, and for a heatmap its labels,
                   title, alt text and shape, for a picture its alt text
    <stem>.u8.gz   a heatmap's weights, shape (h, N, N), one byte each: weight = byte / 255
                   (QUANT_STEP = 1/255; the tip shows 2 decimals, which the bytes hold exactly
                   enough: the error is at most half a step, 0.002)
    <stem>.png     a picture (the KV panel's bar chart), as the panel drew it, in fewer colours;
                   a picture that many states share (the cost chart: the same for every h) is
                   stored once, as <its content's hash>.png, which the state's JSON names
    <stem>.phone.png  the same chart as the panel draws it for a phone (``PHONE_WIDTH``: larger
                   text for its width), which the page shows in a panel narrower than
                   ``chart_size.PHONE_PX`` (index.json's "phone_below")

A state's JSON and weights are gzipped (``PACKED``: HTML and random-looking bytes shrink 2 to 6
times; a PNG is compressed already), and the page inflates them (``DecompressionStream``).
``read_state`` reads one back as the page sees it.

A table with ``bundle`` (the shape panel) stores its states' JSON many at once instead:

    <bundle>.json.gz  {stem: what <stem>.json.gz would hold} (the shape panel: one file per d_model
                   and h, its B x N states; states that differ in one number compress together
                   3 times better than alone)

The page loads ``index.json`` when the panel scrolls into view, and one state's two files (or its
bundle, once) when the controls pick it.

The write panel (``write_panel_table``) has one state per prepared prompt (``WRITE_PROMPTS``):
its JSON's "write" holds the tokens SmolLM2 wrote, the panel's HTML of the text after each new
token and its caption; its .u8 every new token's attention row in every layer and head, shape
(layers, h, R). Its length, layer and head only pick from them: ``site/write.js`` draws the rows.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bs4 import BeautifulSoup

from mha_core.models.store import is_cached
from mha_core.teaching.demo import DEMO_MAX_TOKENS
from mha_core.ui.chart_size import PHONE_PX
from mha_core.ui.controls import MAX_HEADS, divisors
from mha_core.ui.cost_panel import COST_D_MODELS, COST_NS, CostPanel
from mha_core.ui.heads_panel import HEAD_CHOICES, HeadExplorer, toy_task, trained_available
from mha_core.ui.kv_panel import KV_CONTEXTS, KV_DTYPES, KV_MODELS, KVCachePanel
from mha_core.ui.real_heads_panel import EXAMPLE, MODELS, RealHeadsPanel
from mha_core.ui.shapes_panel import SHAPE_D_MODELS, SHAPE_MAX_B, SHAPE_MAX_N, ShapeExplorer
from mha_core.ui.write_panel import EXAMPLE_PROMPT, MAX_NEW_TOKENS, MIN_ALPHA, SHADE_RGB, WritePanel
from mha_core.ui.write_panel import MODEL as WRITE_MODEL

QUANT_LEVELS = 255
QUANT_STEP = 1 / QUANT_LEVELS
TIP_DIGITS = 2  # decimals the hover tip shows for a stored weight (half a step is 0.002)
PACKED = ("json", "u8")  # the state files stored gzipped, as <stem>.<suffix>.gz


@dataclass(frozen=True)
class StateTable:
    """A live panel's states.

    panel : the panel's name (its box has the class ``mha-<panel>-panel``)
    controls : {control name: (values in the panel's order, their labels)}, the controls that pick
        a state, in the order the page resolves them (the first one's value is kept when the
        others must move to a state that exists). Labels that depend on the first control's
        value are a dict {its value: labels, None where the value is not offered}. A toggle's
        labels are "off", "on" (site/live.js reads its aria-pressed so); an integer slider's
        values run without a gap.
    states : () -> iterator of (values, meta, files): ``values`` one per control, ``meta`` a
        JSON-able dict, ``files`` {suffix: bytes} ("u8": ``quantise(weights)``, "png")
    view : controls that act on the drawing, not the state (the outlined query row, the maps as
        files: the widget's own script draws them); the page moves them too
    bundle : values -> the name of the bundle file that holds the state's JSON (None: a file per
        state). Only for a table whose states have no other files.
    recall : True: going back to a value of the first control brings back the settings the others
        had under it (the heads panel's weights); False: the others stay (the shape panel's B)
    note : a sentence the page shows above the controls once they are live (a grid: which values
        a control moves over here, and which the notebook offers)
    because : {control: why it moves when another one does}, as the notebook's panel says it;
        "{name}" stands for another control's value ("h must divide d_model = {d_model}")
    """

    panel: str
    controls: dict[str, tuple[list, list[str]]]
    states: Callable[[], Iterator[tuple[tuple, dict, dict[str, bytes]]]]
    view: tuple[str, ...] = ()
    files: tuple[str, ...] = ()  # the suffixes of every state's files besides its JSON
    # of those, the suffixes whose files many states share (the cost chart is the same for every
    # h): stored once, named by their content, and named in each state's JSON ("files")
    shared: tuple[str, ...] = ()
    bundle: Callable[[tuple], str] | None = None
    recall: bool = True
    note: str = ""
    because: dict[str, str] = field(default_factory=dict)

    @property
    def live_controls(self) -> list[str]:
        """Every control of the panel that moves on the site."""
        return [*self.controls, *self.view]


def quantise(weights: np.ndarray) -> bytes:
    """Weights in [0, 1], any shape -> one byte each, ``round(w * 255)`` (C order)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.size and (np.isnan(w).any() or w.min() < 0 or w.max() > 1):
        raise ValueError(f"weights must lie in [0, 1] to be stored as bytes, got [{w.min()}, {w.max()}]")
    return np.round(w * QUANT_LEVELS).astype(np.uint8).tobytes()


def stem(values: tuple) -> str:
    """A state's file name: its control values joined, ``("random", 4, 12, False) -> "random-4-12-false"``;
    a run of other characters than letters, digits and dots becomes one "_" ("small: d_model=512" ->
    "small_d_model_512")."""
    return "-".join(re.sub(r"[^A-Za-z0-9.]+", "_", json.dumps(v).strip('"')) for v in values)


def packed(data: bytes) -> bytes:
    """``data`` gzipped, with no time stamp: the same state makes the same file."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def read_state(folder: Path, stem: str, suffix: str) -> bytes:
    """A state's file ``<stem>.<suffix>`` in a panel's ``folder`` as the page reads it (inflated
    when it is one of ``PACKED``)."""
    if suffix in PACKED:
        return gzip.decompress((folder / f"{stem}.{suffix}.gz").read_bytes())
    return (folder / f"{stem}.{suffix}").read_bytes()


def read_bundle(folder: Path, bundle: str) -> dict[str, dict]:
    """A bundle of states' JSON in a panel's ``folder``, as the page reads it: {stem: JSON}."""
    return json.loads(gzip.decompress((folder / f"{bundle}.json.gz").read_bytes()))


def write_table(table: StateTable, out: Path) -> dict:
    """Write ``table`` into ``out/<panel>/`` (see the module docstring). Returns {states, bytes}."""
    folder = out / table.panel
    folder.mkdir(parents=True, exist_ok=True)
    if table.bundle and table.files:
        raise ValueError(f"{table.panel}: a bundled table stores only its states' JSON, not {table.files}")
    entries, size = [], 0
    bundles: dict[str, dict[str, dict]] = {}  # bundle name -> {stem: the state's JSON}
    for values, meta, files in table.states():
        if len(values) != len(table.controls) or set(files) != set(table.files):
            raise ValueError(f"{table.panel}: state {values} has {len(values)} values for "
                             f"{len(table.controls)} controls and files {sorted(files)}, not {table.files}")
        name = stem(values)
        if table.bundle:
            bundles.setdefault(table.bundle(values), {})[name] = meta
            entries.append([list(values), name, table.bundle(values)])
            continue
        files = dict(files)  # the caller's dict stays as it was
        named = {}
        for suffix in table.shared:  # one file per distinct content
            data = files.pop(suffix)
            named[suffix] = f"{hashlib.sha1(data).hexdigest()[:16]}.{suffix}"
            if not (folder / named[suffix]).exists():
                (folder / named[suffix]).write_bytes(data)
                size += len(data)
        meta = {**meta, "files": named} if named else meta
        files = {"json": json.dumps(meta, separators=(",", ":")).encode(), **files}
        for suffix, data in files.items():
            if suffix in PACKED:
                data, suffix = packed(data), f"{suffix}.gz"
            (folder / f"{name}.{suffix}").write_bytes(data)
            size += len(data)
        entries.append([list(values), name])
    for bundle, metas in bundles.items():
        data = packed(json.dumps(metas, separators=(",", ":")).encode())
        (folder / f"{bundle}.json.gz").write_bytes(data)
        size += len(data)
    index = {"panel": table.panel, "files": list(table.files), "scale": QUANT_LEVELS, "digits": TIP_DIGITS,
             "phone_below": PHONE_PX,
             "controls": [{"name": k, "values": v, "labels": labels} for k, (v, labels) in table.controls.items()],
             "states": entries, "recall": table.recall, "note": table.note, "because": table.because}
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


def _shown(panel, values: dict) -> None:
    """Set the panel to ``values`` (its ``refresh``, as a message from the page would)."""
    if not panel.refresh(**values):
        raise ValueError(f"the {panel.name} panel refused {values}: {panel.status.value}")


def heads_view(panel: HeadExplorer, kind: str, h: int, N: int, causal: bool) -> tuple[dict, np.ndarray]:
    """What the panel shows at one state, by the panel itself: (meta, weights of shape (h, N, N))."""
    _shown(panel, {"kind": kind, "h": h, "N": N, "causal": causal, "query": -1})
    fig = panel.figure
    weights = np.frombuffer(fig.weights, dtype=np.float32).reshape(fig.h, fig.n, fig.n)  # (h, N, N)
    meta = {"heatmap": {"labels": list(fig.labels), "title": fig.title, "alt": fig.alt,
                        "shape": list(weights.shape)},
            "html": {"mha-heads-caption": panel.caption.value},
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
            yield (kind, h, n, causal), meta, {"u8": quantise(weights)}

    return StateTable("heads", {
        "kind": ([v for _, v in kinds], [label for label, _ in kinds]),
        "h": (list(HEAD_CHOICES), [str(h) for h in HEAD_CHOICES]),
        "N": (list(range(2, DEMO_MAX_TOKENS + 1)), [str(n) for n in range(2, DEMO_MAX_TOKENS + 1)]),
        "causal": ([False, True], ["off", "on"]),
    }, states, view=("query", "download"), files=("u8",))


# -- the KV-cache panel (dashboard section 5, lesson 06) ----------------------------------------------

PNG_COLOURS = 64  # a bar chart needs no more: the PNG shrinks about 3 times
# The width (CSS px) of a chart panel on the site on a 390 px phone: its charts are drawn for it
# too, as the dashboard draws them for the width the page reports (chart_size).
PHONE_WIDTH = 348


def phone_panel(make: Callable):
    """A chart panel (``make()``) that draws its charts for a phone, as told by the page's width."""
    panel = make()
    panel.screen.width = PHONE_WIDTH
    return panel


def _same_words(a: dict, b: dict) -> None:
    """The laptop's and the phone's views of one state say the same (only the picture differs)."""
    if a != b:
        raise ValueError(f"the phone's chart changed what the panel says: {a} != {b}")


def fewer_colours(png: bytes) -> bytes:
    """The PNG redrawn with at most ``PNG_COLOURS`` colours (a palette), same pixels otherwise."""
    from PIL import Image

    out = io.BytesIO()
    fast = Image.Quantize.FASTOCTREE  # 0.04 s a chart, against 0.1 s for the default
    Image.open(io.BytesIO(png)).convert("RGB").quantize(PNG_COLOURS, method=fast).save(out, "PNG", optimize=True)
    return out.getvalue()


def kv_view(panel: KVCachePanel, model: str, n_kv: int, n_tokens: int, dtype: str) -> tuple[dict, bytes]:
    """What the panel shows at one state, by the panel itself: (meta, its chart as a PNG)."""
    _shown(panel, {"model": model, "n_kv": n_kv, "n_tokens": n_tokens, "dtype": dtype})
    alt = BeautifulSoup(panel.alt.value, "html.parser").get_text()
    return {"html": {"mha-kv-numbers": panel.numbers.value}, "image": {"class": "mha-kv-image", "alt": alt}}, \
        panel.image.value


def kv_table() -> StateTable:
    """Every model, n_kv (the divisors of its h), context and dtype of the KV panel: 270 states."""
    n_kvs = sorted({k for _, h, _ in KV_MODELS.values() for k in divisors(h)})
    labels = {}  # the slider's labels say MQA / GQA / MHA, which depends on the model's h
    for model, (_, h, _) in KV_MODELS.items():
        named = dict((k, label) for label, k in KVCachePanel._kv_options(h))
        labels[model] = [named.get(k) for k in n_kvs]

    def states():
        panel, phone = KVCachePanel(), phone_panel(KVCachePanel)
        for model, (_, h, _) in KV_MODELS.items():
            for n_tokens in KV_CONTEXTS:
                for dtype in KV_DTYPES:
                    for n_kv in divisors(h):  # innermost: the panel redraws only the highlighted bar
                        meta, png = kv_view(panel, model, n_kv, n_tokens, dtype)
                        small, phone_png = kv_view(phone, model, n_kv, n_tokens, dtype)
                        _same_words(meta, small)
                        yield (model, n_kv, n_tokens, dtype), meta, \
                            {"png": fewer_colours(png), "phone.png": fewer_colours(phone_png)}

    return StateTable("kv", {
        "model": (list(KV_MODELS), list(KV_MODELS)),
        "n_kv": (n_kvs, labels),
        "context": (list(KV_CONTEXTS), [str(n) for n in KV_CONTEXTS]),
        "dtype": (list(KV_DTYPES), list(KV_DTYPES)),
    }, states, files=("png", "phone.png"))


# -- the cost panel (dashboard section 3) ----------------------------------------------------------------

def cost_view(panel: CostPanel, d_model: int, h: int, N: int) -> tuple[dict, bytes]:
    """What the panel shows at one state, by the panel itself: (meta, its chart as a PNG). The
    worked example below the chart is the same in every state, so it stays as saved."""
    _shown(panel, {"d_model": d_model, "h": h, "N": N})
    alt = BeautifulSoup(panel.alt.value, "html.parser").get_text()
    return ({"html": {"mha-cost-numbers": panel.numbers.value, "mha-cost-by-h": panel.by_h.value},
             "image": {"class": "mha-cost-image", "alt": alt}}, panel.image.value)


def cost_table() -> StateTable:
    """Every d_model, h (its divisors up to MAX_HEADS) and N of the cost panel: 854 states, one
    chart per (d_model, N)."""
    hs = sorted({h for d in COST_D_MODELS for h in divisors(d, MAX_HEADS)})

    def states():
        panel, phone = CostPanel(), phone_panel(CostPanel)
        charts: dict[bytes, bytes] = {}  # the panel's PNG's hash -> the PNG in fewer colours, made once
        for d_model in COST_D_MODELS:
            for n in COST_NS:
                for h in divisors(d_model, MAX_HEADS):
                    meta, png = cost_view(panel, d_model, h, n)
                    small, phone_png = cost_view(phone, d_model, h, n)
                    _same_words(meta, small)
                    for one in (png, phone_png):
                        seen = hashlib.sha1(one).digest()
                        if seen not in charts:
                            charts[seen] = fewer_colours(one)
                    yield (d_model, h, n), meta, {"png": charts[hashlib.sha1(png).digest()],
                                                  "phone.png": charts[hashlib.sha1(phone_png).digest()]}

    return StateTable("cost", {
        "d_model": (list(COST_D_MODELS), [str(d) for d in COST_D_MODELS]),
        "h": (hs, [str(h) for h in hs]),
        "N": (list(COST_NS), [str(n) for n in COST_NS]),
    }, states, files=("png", "phone.png"), shared=("png", "phone.png"),
        because={"h": "h must divide d_model = {d_model}"})


# -- the shape panel (dashboard section 1, lesson 02) --------------------------------------------------

# N on the site: every value 1..SHAPE_MAX_N is 29,696 states with every B, d_model and h, about
# 19 MB even bundled as below (650 to 670 B a state); these 16 are 3,712 states, 2.6 MB. They hold
# the panel's default N (10), lesson 02's N (5) and the worked example's (100), and reach the
# ends, 1 and 128.
SHAPE_SITE_NS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64, 100, 128)


def shape_view(panel: ShapeExplorer, B: int, N: int, d_model: int, h: int) -> dict:
    """What the panel shows at one state, by the panel itself: the HTML of its summary line, its
    ledger and its boxes."""
    _shown(panel, {"B": B, "N": N, "d_model": d_model, "h": h})
    return {"html": {"mha-shape-summary": panel.summary.value, "mha-shape-ledger": panel.ledger.value,
                     "mha-shape-boxes": panel.boxes.value}}


def shape_table() -> StateTable:
    """Every B, d_model and h (its divisors up to MAX_HEADS) of the shape panel, and N on
    ``SHAPE_SITE_NS``: 3,712 states, bundled by (d_model, h) (one file of its 64 states)."""
    hs = sorted({h for d in SHAPE_D_MODELS for h in divisors(d, MAX_HEADS)})
    Bs = list(range(1, SHAPE_MAX_B + 1))
    shown = ", ".join(map(str, SHAPE_SITE_NS[:-1])) + f" and {SHAPE_SITE_NS[-1]}"

    def states():
        panel = ShapeExplorer()
        for d_model in SHAPE_D_MODELS:
            for h in divisors(d_model, MAX_HEADS):  # the layer's weights are made once per (d_model, h)
                for n in SHAPE_SITE_NS:
                    for B in Bs:  # innermost: neighbours differ in fewer numbers, and compress better
                        yield (B, n, d_model, h), shape_view(panel, B, n, d_model, h), {}

    return StateTable("shape", {
        "B": (Bs, [str(B) for B in Bs]),
        "N": (list(SHAPE_SITE_NS), [str(n) for n in SHAPE_SITE_NS]),
        "d_model": (list(SHAPE_D_MODELS), [str(d) for d in SHAPE_D_MODELS]),
        "h": (hs, [str(h) for h in hs]),
    }, states, bundle=lambda values: f"{values[2]}-{values[3]}", recall=False,
        because={"h": "h must divide d_model = {d_model}"},
        note=f"N moves over {len(SHAPE_SITE_NS)} computed values here ({shown}); in the notebook it "
             f"takes every value from 1 to {SHAPE_MAX_N}.")


# -- the write panel (dashboard section 1, under the real heads): SmolLM2 writes after a prompt ----------

# The prompts the site offers (free text needs a kernel): the panel's example and three short
# lessons, each continued greedily by SmolLM2 for MAX_NEW_TOKENS tokens when the site is built.
WRITE_PROMPTS = {
    "example": EXAMPLE_PROMPT,  # a fact, then the small model rambles
    "count": "1, 2, 3, 4, 5,",  # it counts on: each number looks back at the ones before
    "copy": "The cat sat on the mat. The dog sat on the",  # it ends it as the first one ended (induction)
    "story": "Once upon a time, there was a little",  # a story, as its training texts go on
}


def write_panel_view(panel: WritePanel, prompt: str) -> tuple[dict, np.ndarray]:
    """What the panel writes after ``prompt``, by the panel itself (``write``, then ``redraw``):
    (meta, rows), rows of shape (layers, h, R): every new token's attention row, one after another
    (row k, from 0, has n_prompt + k entries; R is their sum). meta["write"] holds the tokens, the
    panel's HTML of the text at each length, and its caption with ``{layer}`` and ``{head}`` in
    place of the rows' layer and head (checked against the panel's own at two of them)."""
    panel.prompt.value = prompt
    panel.length.value = MAX_NEW_TOKENS
    if not panel.write():
        raise ValueError(f"the write panel refused {prompt!r}: {panel.status.value}")
    m = panel.model()
    steps, n_prompt = panel.steps, len(panel.prompt_ids)
    ids = np.asarray([*panel.prompt_ids, *(s.id for s in steps)], dtype=np.int64)
    texts = []
    for k in range(1, len(steps) + 1):  # the text as the panel shows it after k new tokens
        panel.steps = steps[:k]
        panel.redraw()
        texts.append(panel.text.value)
    panel.steps = steps
    caption = None
    for layer, head in ((0, 0), (m.n_layers - 1, m.n_heads - 1)):
        panel.layer.value, panel.head.value = layer, head  # each move redraws
        shown = panel.caption.value.replace(f"layer {layer}, head {head}", "layer {layer}, head {head}")
        if caption not in (None, shown) or shown.count("{layer}") != 1:
            raise ValueError(f"the write panel's caption names its layer and head in an unknown way: {shown}")
        caption = shown
    panel.layer.value = panel.head.value = 0
    rows = np.concatenate([s.weights for s in steps], axis=-1)  # (layers, h, R)
    meta = {"write": {"prompt": prompt, "tokens": m.tokens(ids), "n_prompt": n_prompt,
                      "shape": list(rows.shape), "texts": texts, "caption": caption,
                      "shade": list(SHADE_RGB), "min_alpha": MIN_ALPHA}}
    return meta, rows


def write_panel_table() -> StateTable | None:
    """The write panel's prompts (``WRITE_PROMPTS``), one state each; None without SmolLM2 (the
    panel then shows its "run `make models`" message, frozen)."""
    if not is_cached(WRITE_MODEL):
        return None

    def states():
        panel = WritePanel()
        for name, prompt in WRITE_PROMPTS.items():
            meta, rows = write_panel_view(panel, prompt)
            yield (name,), meta, {"u8": quantise(rows)}

    return StateTable("write", {"prompt": (list(WRITE_PROMPTS), list(WRITE_PROMPTS.values()))}, states,
                      view=("length", "layer", "head", "run"), files=("u8",))


LIVE: dict[str, Callable[[], StateTable | None]] = {"heads": heads_table, "kv": kv_table, "cost": cost_table}
LIVE["write"] = write_panel_table
LIVE["shape"] = shape_table


def live_tables() -> dict[str, StateTable]:
    """The live panels' tables, by panel name (cheap: their states are computed when written);
    a panel whose table is None (its model is not here) stays frozen."""
    tables = {name: make() for name, make in LIVE.items()}
    return {name: table for name, table in tables.items() if table is not None}


CACHE = Path(__file__).resolve().parents[1] / "build" / "site-states"  # states of earlier builds


def code_digest() -> str:
    """What the states depend on: every file of ``mha_core`` (code and stored weights), this file,
    and the versions of the libraries that draw and encode them. A new digest, new states."""
    import matplotlib
    import PIL

    import mha_core

    package = Path(mha_core.__file__).parent
    h = hashlib.sha1(f"{np.__version__} {matplotlib.__version__} {PIL.__version__}".encode())
    for path in sorted([*package.rglob("*"), Path(__file__).resolve()]):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(path.relative_to(package.parent).as_posix().encode() if path.is_relative_to(package.parent)
                     else path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _write_live(name: str, out: Path, cache: Path | None) -> dict:
    """``LIVE[name]``'s table into ``out`` (in a worker process: a table is made there, not sent),
    copied from ``cache`` when an earlier build with the same code stored it there, else computed
    and stored there too. Returns {states, bytes, seconds (to compute them, kept with them), cached}."""
    kept = cache / name if cache else None
    if kept and (kept / "done.json").exists():
        shutil.copytree(kept, out / name, ignore=shutil.ignore_patterns("done.json"))
        return {**json.loads((kept / "done.json").read_text(encoding="utf-8")), "cached": True}
    start = time.perf_counter()
    facts = {**write_table(LIVE[name](), out), "seconds": round(time.perf_counter() - start, 1)}  # kept with it
    if kept:
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(out / name, kept)
        (kept / "done.json").write_text(json.dumps(facts), encoding="utf-8")  # last: a whole copy
    return {**facts, "cached": False}


def write_states(names: list[str], out: Path, workers: int = 2, cache: Path | None = CACHE) -> dict[str, dict]:
    """The live panels ``names`` into ``out`` (the site's ``assets/states``), ``workers`` tables at
    a time in processes of their own: {panel: {states, bytes, cached}}. ``cache``: where the states
    of earlier builds are kept, by ``code_digest`` (None: compute them all)."""
    here = str(Path(__file__).resolve().parent)  # a worker started afresh imports this module from here
    cache = cache / code_digest() if cache else None
    with ProcessPoolExecutor(max_workers=workers, initializer=_importable, initargs=(here,)) as pool:
        done = {name: pool.submit(_write_live, name, out, cache) for name in names}
        facts = {name: job.result() for name, job in done.items()}
    for older in (cache.parent.iterdir() if cache else []):  # only the current code's states are kept
        if older != cache:
            shutil.rmtree(older, ignore_errors=True)
    return facts


def _importable(folder: str) -> None:
    if folder not in sys.path:
        sys.path.insert(0, folder)


# -- the real-heads panel (dashboard section 1) ----------------------------------------------------------
#
# The site cannot run a model on free text, so the panel is live on prepared inputs: each shipped
# model on each of REAL_SENTENCES, and the induction demo's input (on SmolLM2, as the panel runs it).
# A state is what the panel shows at (model, input, pattern, layer, head): ``pattern`` is the score
# the overview is coloured by (a find button sets it). Each is read back from the panel's widgets
# (``real_view``), then stored once at the level where it stops changing (``real_split``):
#
#     <model>-<input>-<layer>.json.gz  "layer": what the layer's heads share (the thumbnails' title);
#                                    "heads": per head, "head" (its label, its map's title, alt text,
#                                    captions) and "pattern" {pattern: what also depends on it (the
#                                    sentence under the map, the lit button)}
#     <model>-<input>-<layer>.u8.gz    the layer's weights (h, N, N), one byte each (the big map is
#                                    one of them)
#     <hash>.in.json                 what the input's states share, named by every layer's JSON
#                                    ("files"): "shared" (tokens, reading line, buttons off and
#                                    why, ...), "pattern" {pattern: the overview}, "found" {button:
#                                    [layer, head] that the panel's show_pattern opens, or null},
#                                    "demo" [model, layer, head] that its induction demo opens,
#                                    "demo_note" {model before the demo: the demo's note}
#
# site/real_live.js merges shared, pattern, layer, head and (head, pattern) parts into the view;
# ``real_split`` checks, for every state, that the merge gives back exactly what the panel showed.

REAL_MODELS = ("minilm", "smollm2")  # the shipped models (mha_core.ui.real_heads_panel.SHIPPED)
# the prepared sentences (input name -> text), 10 to 16 tokens each: the example has "it" -> "animal";
# a count, where each word follows a comma (previous token); repeated words (a head on the first copy)
REAL_SENTENCES = {
    "example": EXAMPLE,
    "counting": "One, two, three, four, five, six, seven.",
    "repeats": "The cat sat on the mat and then the cat slept.",
    "capitals": "Paris is in France and Rome is in Italy.",
}
REAL_DEMO = "induction"  # the induction demo's input, after the sentences


def real_models_available() -> bool:
    """True when both shipped models are in the cache (``make models``); else the panel stays frozen."""
    from mha_core.models import open_cached

    try:
        for name in REAL_MODELS:
            open_cached(name)
    except Exception:  # missing or broken: the panel shows its "run make models" message
        return False
    return True


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def real_view(panel: RealHeadsPanel) -> tuple[dict, np.ndarray]:
    """What the real-heads panel shows now, read back from its widgets: (a flat dict of every part,
    the thumbnails' weights (h, N, N), the big map being one of them)."""
    if not isinstance(panel, RealHeadsPanel):
        raise TypeError(f"panel must be a RealHeadsPanel, got {type(panel).__name__}")
    big, thumbs, grid = panel.big_map, panel.thumbs, panel.overview
    layer_w = np.frombuffer(thumbs.weights, dtype=np.float32).reshape(thumbs.h, thumbs.n, thumbs.n)  # (h, N, N)
    big_w = np.frombuffer(big.weights, dtype=np.float32).reshape(big.h, big.n, big.n)  # (1, N, N)
    if not np.array_equal(big_w[0], layer_w[panel.head.value]):
        raise ValueError("the big map is not the open head of the thumbnails' layer")
    lit = [b.description for b in [*panel.presets.values(), panel.induction] if "mha-active" in b._dom_classes]
    view = {f"html.{css}": w.value for css, w in (
        ("mha-real-label", panel.label), ("mha-real-about", panel.about), ("mha-real-reading-line", panel.reading),
        ("mha-real-find-note", panel.find_note), ("mha-real-demo-note", panel.demo_note),
        ("mha-real-tokens", panel.tokens_html), ("mha-status", panel.status))}
    view.update({"big.title": big.title, "big.alt": big.alt, "big.captions": list(big.captions),
                 "big.lines": list(big.lines), "big.stripe": [list(c) for c in big.stripe], "labels": list(big.labels),
                 "thumbs.title": thumbs.title, "thumbs.alt": thumbs.alt, "thumbs.captions": list(thumbs.captions),
                 "overview.title": grid.title, "overview.what": grid.what, "overview.scores": _b64(grid.scores),
                 "overview.shape": [grid.layers, grid.heads], "overview.current": list(grid.current),
                 "layer": [panel.layer.value, panel.layer.max], "head": [panel.head.value, panel.head.max],
                 "model": panel.model.value, "sentence": panel.sentence.value, "lit": lit,
                 "back": panel.back.layout.display != "none"})
    for name, button in panel.presets.items():
        view[f"preset.{name}"] = [button.disabled, button.tooltip]
    return view, layer_w


def real_split(views: dict[tuple[str, int, int], dict]) -> tuple[dict, dict, dict, dict, dict]:
    """One input's views {(pattern, layer, head): view} -> each part stored once, at the level
    where it stops changing: (shared, {pattern: part}, {layer: part}, {(layer, head): part},
    {(pattern, layer, head): part}). Checked: merging the five gives back every view exactly."""
    if not isinstance(views, dict) or not views:
        raise ValueError(f"views must be a non-empty dict {{(pattern, layer, head): view}}, got {views!r}")
    keys = next(iter(views.values())).keys()
    text = {at: {k: json.dumps(view[k]) for k in keys} for at, view in views.items()}

    def same_within(group) -> set[str]:  # the parts that never change inside any one group
        seen: dict = {}
        for at, view in text.items():
            for k in keys:
                seen.setdefault((group(at), k), set()).add(view[k])
        return {k for k in keys if all(len(v) == 1 for (_, kk), v in seen.items() if kk == k)}

    everywhere = same_within(lambda at: 0)
    by_pattern = same_within(lambda at: at[0]) - everywhere
    by_layer = same_within(lambda at: at[1]) - everywhere - by_pattern
    by_head = same_within(lambda at: at[1:]) - everywhere - by_pattern - by_layer
    rest = set(keys) - everywhere - by_pattern - by_layer - by_head
    parts: tuple[dict, dict, dict, dict, dict] = ({}, {}, {}, {}, {})
    for (pattern, layer, head), view in views.items():
        for part, at, names in zip(parts, (0, pattern, layer, (layer, head), (pattern, layer, head)),
                                   (everywhere, by_pattern, by_layer, by_head, rest), strict=True):
            part.setdefault(at, {}).update({k: view[k] for k in names})
    shared = parts[0].get(0, {})
    for (pattern, layer, head), view in views.items():
        merged = {**shared, **parts[1][pattern], **parts[2][layer], **parts[3][(layer, head)],
                  **parts[4][(pattern, layer, head)]}
        if merged != view:
            raise ValueError(f"the real panel's state {(pattern, layer, head)} does not survive its split")
    return shared, parts[1], parts[2], parts[3], parts[4]


def real_input_states(panel: RealHeadsPanel) -> dict[tuple[str, int, int], tuple[dict, np.ndarray]]:
    """Every (pattern, layer, head) of the input on show: {(pattern, layer, head): real_view}.
    The patterns are those the panel measures on it (a find button's pattern stays when the
    input changes, if it is measured there, so each can be reached)."""
    found = panel.pattern_scores(*panel._view)
    n_layers, h = panel.layer.max + 1, panel.head.max + 1
    states = {}
    for pattern in found:
        panel.pattern = pattern  # as a find button leaves it
        for layer in range(n_layers):
            for head in range(h):
                with panel._quiet():  # as a click on the overview opens a head (RealHeadsPanel._open)
                    panel.layer.value, panel.head.value = layer, head
                if not panel.refresh() or panel.pattern != pattern:
                    raise ValueError(f"the real panel refused {pattern}, layer {layer}, head {head}: "
                                     f"{panel.status.value}")
                states[(pattern, layer, head)] = real_view(panel)
    return states


def real_found(panel: RealHeadsPanel) -> dict[str, list[int] | None]:
    """The head each find button opens on the input on show (the panel's ``show_pattern``), or
    None where the button is off."""
    found = {}
    for name, button in panel.presets.items():
        best = None if button.disabled else panel.show_pattern(name)
        found[name] = None if best is None else [int(best[0]), int(best[1])]
    return found


def real_table(load: Callable | None = None) -> StateTable:
    """Each shipped model on each prepared sentence, and SmolLM2 on the induction demo's input:
    every pattern, layer and head, one state per (model, input, layer). ``load``: the models'
    loader (the tests pass a fake one)."""
    inputs = [*REAL_SENTENCES, REAL_DEMO]
    # the layer control's values: 0 .. the deepest model's last layer, known once the models are
    # loaded (by states(), before write_table writes the index)
    layers: list[int] = []
    layer_labels: list[str] = []

    def states():
        panel = RealHeadsPanel(load=load, start=None)
        for model in REAL_MODELS:
            for name, sentence in REAL_SENTENCES.items():
                panel.model.value = model  # as the page's menu and box change them
                panel.sentence.value = sentence
                if panel.mode != "sentence" or not panel.refresh():
                    raise ValueError(f"the real panel could not show {model} on {sentence!r}: {panel.status.value}")
                if panel.layer.max >= len(layers):
                    layers[:] = range(panel.layer.max + 1)
                    layer_labels[:] = [str(i) for i in layers]
                yield from _real_input(panel, model, name, {"found": real_found(panel),
                                                            "demo": _real_demo(panel, model)})
        demo_notes = {}
        for model in REAL_MODELS:  # the demo's note names the model it left, when it switched
            panel.leave_demo()
            panel.model.value = model
            panel.sentence.value = EXAMPLE
            panel.induction_demo()
            demo_notes[model] = panel.demo_note.value
        found = real_found(panel)  # on the demo's input
        panel.induction_demo()  # back to the demo's head, its pattern the induction score
        yield from _real_input(panel, panel.model.value, REAL_DEMO,
                               {"found": found, "demo": _real_demo(panel, panel.model.value), "demo_note": demo_notes})

    return StateTable("real", {
        "model": (list(REAL_MODELS), [MODELS[m] for m in REAL_MODELS]),
        "sentence": (inputs, [*REAL_SENTENCES.values(), "the induction demo's input"]),  # the box's menu
        "layer": (layers, layer_labels),
    }, states, view=("head", "run", "example", "induction", "back", "preset"), files=("u8", "in.json"),
        shared=("in.json",))


def _real_demo(panel: RealHeadsPanel, model: str) -> list:
    """[model, layer, head] that the induction demo opens from ``model``, as the panel finds it
    (and the panel left as it was: back to the input it showed)."""
    demo = panel.mode == "induction"
    before = (panel.model.value, panel.sentence.value, panel.layer.value, panel.head.value, panel.pattern)
    best = panel.induction_demo()
    if best is None:
        raise ValueError(f"the induction demo did not run: {panel.status.value}")
    target = [panel.model.value, int(best[0]), int(best[1])]
    if not demo:
        panel.leave_demo()
        if (panel.model.value, panel.sentence.value, panel.layer.value, panel.head.value, panel.pattern) != before:
            raise ValueError("back to your sentence did not restore the panel")
    return target


def _real_input(panel: RealHeadsPanel, model: str, name: str, extra: dict):
    """The states of the input on show, one per layer: (values, meta, files)."""
    states = real_input_states(panel)
    views = {at: view for at, (view, _) in states.items()}
    shared, by_pattern, by_layer, by_head, rest = real_split(views)
    common = json.dumps({"shared": shared, "pattern": by_pattern, **extra}, separators=(",", ":")).encode()
    n_layers, h = panel.layer.max + 1, panel.head.max + 1
    patterns = list(by_pattern) or [next(iter(states))[0]]
    for layer in range(n_layers):
        weights = states[(patterns[0], layer, 0)][1]  # (h, N, N): the same for every pattern and head
        heads = [{"head": by_head.get((layer, head), {}),
                  "pattern": {p: rest[(p, layer, head)] for p in patterns if rest.get((p, layer, head))}}
                 for head in range(h)]
        yield (model, name, layer), {"layer": by_layer.get(layer, {}), "heads": heads}, \
            {"u8": quantise(weights), "in.json": common}


if real_models_available():
    LIVE["real"] = real_table  # (only with both models fetched: else the panel shows "run make models", frozen)
