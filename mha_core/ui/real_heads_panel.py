"""The dashboard's real-model panel: the heads of a pretrained transformer on the reader's sentence.

    real_heads_panel()   model picker, sentence box, layer and head selectors -> the chosen head
                         drawn in the browser (hover a cell for its weight, click a row for a
                         query), one sentence naming its pattern with its score, a layers x heads
                         overview where a click opens a head, the layer's heads as small maps
                         (a click opens one);
                         buttons that find the head with the highest score for a pattern
                         (previous token, first token, itself, "it" -> "animal"; a button is off
                         when the input lacks the pattern's words or no head reaches CLEAR_SCORE on
                         it, and one line under the buttons, "Not offered on this input: ...", names
                         every button that is off with its reason); a line under the map naming what the maps
                         read (the sentence, or the demo's input); and a one-click
                         induction demo (random tokens repeated twice, the repeat and the stripe marked)

The models come from ``mha_core.models.load`` (``make models`` fetches them); the panel takes
any ``load`` with the same interface, so the tests pass a small fake one. The pattern scores are
``mha_core.models.patterns``'; no layer or head is written into this file.

What the page shows is never confusable with the random or toy weights of the other panels:
the label above the maps names the model, the layer, the head, and whether the weights are
quantised. Every token is HTML-escaped wherever it appears as HTML (the token list); the maps
draw tokens as canvas text, so a sentence such as ``<img src=x onerror=alert(1)>`` shows as text.

Speed: one forward pass per (model, sentence), kept in a small cache, with a busy sign while it
runs (``cache=`` can pass a cache shared by every kernel of a server, as the served dashboard
does, so a sentence one kernel has run is read by the others); moving the head sends one (N, N) map to the page, moving the layer also the layer's
(h, N, N) weights for the thumbnails. Both are drawn in the browser (``HeatmapGrid``), for the
width they get and at the screen's pixel ratio: the thumbnails wrap, two side by side on a phone,
more on a wide screen, each with its own token labels; each map has a description for screen
readers.
"""

from __future__ import annotations

import contextlib
import html
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import ipywidgets as widgets
import numpy as np

from ..models import MODEL_MAX_TOKENS, Model, model_folders, patterns
from ..models import load as load_model
from .controls import Cache, GuardedDropdown, GuardedIntSlider, GuardedText, Panel, check_cache
from .glossary import term
from .heatmap_widget import HeatmapGrid
from .score_grid import ScoreGrid
from .write_panel import WritePanel

EXAMPLE = "The animal didn't cross the street because it was too tired."
# Longer sentences make maps too dense to read and a SmolLM2 forward pass slow (~N^2 memory
# per head, ~1 s at 40 tokens); the issue caps the panel at 128 tokens.

# Forward passes kept per panel: at most this many, and at most this many bytes of attention
# beyond the newest one. SmolLM2 at 128 tokens is 30 x 9 x 128 x 128 float32 = 18 MB; a sentence
# of 15 tokens is 0.24 MB. Twenty dashboard sessions must not each hold ~100 MB of old maps.
FORWARD_CACHE = 4
FORWARD_CACHE_BYTES = 20 * 2**20
# Induction demo: this many random tokens, then the same again (Olsson et al. 2022 use a few
# dozen); drawn from ids in this range, which are ordinary word pieces in both vocabularies.
INDUCTION_PERIOD = 20
INDUCTION_IDS = (1_000, 20_000)
INDUCTION_SEED = 0
# Both drawn in the browser (HeatmapGrid: hover, click, keyboard). The chosen head: BIG_TILE px,
# growing to BIG_MAX_TILE px so that each of the induction demo's 41 tokens gets its label (and on
# a 1500-1899 px window as wide as its column allows, up to BIG_MAX_TILE: the page's --mha-fill). The
# thumbnails: THUMB_TILE px each, growing to THUMB_MAX_TILE px so that each of up to 20 tokens gets
# its label where the screen has room, shrunk so that at least THUMB_COLUMNS fit side by side.
BIG_TILE, BIG_MAX_TILE = 260, 520
THUMB_TILE, THUMB_MAX_TILE, THUMB_COLUMNS = 150, 240, 2
# The patterns the panel finds heads for, by their score (mha_core.models.patterns), and what
# the score is. "'it' -> animal" needs both words in the sentence (the example has them).
PATTERNS = {
    "previous token": "the mean share of attention it puts on the token just before",
    "first token": "the mean share of attention it puts on the first token",
    "itself": "the mean share of attention it puts on the token itself",
    "'it' → animal": 'the share of the attention of "it" that goes to "animal"',
}
INDUCTION = "induction"
INDUCTION_MEANING = "the mean share of attention it puts on the token after the earlier copy of the current token"
# A head "does" a pattern when its score reaches this; below it the panel says it has no single one.
CLEAR_SCORE = 0.4
IT_TOKENS, ANIMAL_TOKENS = ("it", "Ġit", " it"), ("animal", "Ġanimal", " animal")


# The picker's entries (before a model is loaded); the caption uses the loaded model's own facts.
# The two shipped models, then the model folders under $MHA_MODELS (keyed by their paths, which
# ``load`` takes as it takes a name; docs/models.md, "Bring your own model").
SHIPPED = {
    "minilm": "all-MiniLM-L6-v2 (reads a whole sentence)",
    "smollm2": "SmolLM2-135M-Instruct (writes text)",
}
MODELS = {**SHIPPED, **model_folders()}
DEMO_MODEL = "smollm2"  # the induction demo's decoder when the chosen model is an encoder


def quantised_words(model) -> str:
    """How the caption names quantised weights: SmolLM2's are 4-bit; a GGUF of the reader's own
    says its types in its label."""
    return "4-bit quantised" if model.name in SHIPPED else "quantised"


def weights_note(model) -> str:
    """What the caption says about the weights: real (or the reader's own), and quantised or not."""
    whose = "real pretrained parameters" if model.name in SHIPPED else "the parameters of your own checkpoint"
    return f"{whose}, {quantised_words(model) if model.quantised else 'not quantised (float32)'}"


def _wrapping(model) -> tuple[list[int], list[int]]:
    """The special ids ``model.encode`` puts before and after a text (e.g. [CLS] ... [SEP]).

    Found from ``encode("the")``, a single token in both vocabularies: whatever surrounds it.
    """
    ids = [int(i) for i in model.encode("the")]
    toks = [t.strip().removeprefix("Ġ").lower() for t in model.tokens(ids)]
    if "the" not in toks:
        return [], []
    at = toks.index("the")
    return ids[:at], ids[at + 1:]


@dataclass(frozen=True)
class _View:
    """What the pictures of one forward pass are drawn from."""

    model: object
    labels: list[str]
    weights: np.ndarray  # (layers, h, N, N)
    what: str  # the input, in words
    of_head: Callable[[int, int], str]  # what to add about one head (its induction score)

    @property
    def short(self) -> str:
        return f"{self.model.label.split(' (')[0]}, {quantised_words(self.model) if self.model.quantised else 'fp32'}"


class ModelUnavailableError(RuntimeError):
    """The model's cache is missing or broken; the message names the command that fetches it."""


class RealHeadsPanel(Panel):
    """Model, sentence, layer, head -> thumbnails of the layer's heads and the chosen head enlarged."""

    name = "real"

    def __init__(self, model: str = "minilm", sentence: str = EXAMPLE, *, load: Callable | None = None,
                 start: str | None = "'it' → animal", cache: Cache | None = None):
        self._results_cache = check_cache(cache)
        if model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
        if not isinstance(sentence, str):
            raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
        if start is not None and start not in PATTERNS:
            raise ValueError(f"start must be None or one of {', '.join(PATTERNS)}, got {start!r}")
        super().__init__()
        self._load = load or load_model
        self._models: dict[str, object] = {}
        self._forwards: OrderedDict[tuple, tuple[list[str], np.ndarray]] = OrderedDict()
        self.mode = "sentence"  # or "induction": the demo's random tokens instead of the sentence
        self._induction: dict[tuple, tuple[np.ndarray, int]] = {}  # demo key -> (scores (layers, h), start)
        self._scores: OrderedDict[tuple, dict[str, np.ndarray]] = OrderedDict()  # forward key -> pattern scores
        self.pattern = "previous token"  # what the overview shows
        self._view: tuple | None = None  # (forward key, labels, weights) on show
        self._typed = sentence  # the sentence to come back to after the induction demo

        self.model = self._control(GuardedDropdown, "model", value=model, description="model",
                                   options=[(title, k) for k, title in MODELS.items()])
        self.sentence = GuardedText(value=sentence, description="sentence", placeholder="type a sentence",
                                    continuous_update=False, layout=widgets.Layout(width="min(40em, 100%)"),
                                    on_invalid=self._invalid)
        self.sentence.add_class("mha-real-sentence")
        self.sentence.observe(self._sentence_changed, names="value")
        self.run = widgets.Button(description="show heads", tooltip="run the model on the sentence")
        self.run.add_class("mha-real-run")
        self.run.on_click(lambda _b: self._to_sentence())
        self.example = widgets.Button(description="example sentence", tooltip=EXAMPLE)
        self.example.add_class("mha-real-example")
        self.example.on_click(lambda _b: self._set_sentence(EXAMPLE))
        self.layer = self._control(GuardedIntSlider, "layer", value=0, min=0, max=0, description="layer",
                                   continuous_update=False)
        self.head = self._control(GuardedIntSlider, "head", value=0, min=0, max=0, description="head",
                                  continuous_update=False)
        self.induction = widgets.Button(description="induction demo", icon="repeat",
                                        tooltip=f"{INDUCTION_PERIOD} random tokens, then the same again, "
                                                "on the chosen model if it writes text, else on SmolLM2; "
                                                "jump to its strongest induction head")
        self.induction.add_class("mha-real-induction")
        self.induction.on_click(lambda _b: self.induction_demo())
        # in the demo: what it changed, and a way back to the model and sentence from before it
        self.demo_note = widgets.HTML()
        self.demo_note.add_class("mha-real-demo-note")
        self.back = widgets.Button(description="back to your sentence", icon="undo",
                                   layout=widgets.Layout(display="none"))
        self.back.add_class("mha-real-back")
        self.back.on_click(lambda _b: self.leave_demo())
        self._before_demo: tuple[str, int, int, str] | None = None  # (model, layer, head, pattern) before the demo
        self.presets = {}
        for name in PATTERNS:
            button = widgets.Button(description=name, tooltip=f"open the head with the highest {name} score")
            button.add_class("mha-real-preset")
            button.on_click(partial(lambda name, _b: self.show_pattern(name), name))
            self.presets[name] = button
        self.busy = widgets.HTML()
        self.busy.add_class("mha-real-busy")
        self.about = widgets.HTML()
        self.about.add_class("mha-real-about")
        self.reading = widgets.HTML()  # what the maps read (the sentence, or the demo's input)
        self.reading.add_class("mha-real-reading-line")
        self.big_map = HeatmapGrid(tile=BIG_TILE, max_tile=BIG_MAX_TILE)  # drawn in the browser: hover, click
        self.big_map.add_class("mha-real-big")
        self.overview = ScoreGrid()
        self.overview.add_class("mha-real-overview")
        self.overview.observe(self._picked, names="picked")
        self.label = widgets.HTML()
        self.label.add_class("mha-real-label")
        self.tokens_html = widgets.HTML()
        self.tokens_html.add_class("mha-real-tokens")
        self.thumbs = HeatmapGrid(tile=THUMB_TILE, max_tile=THUMB_MAX_TILE, columns=THUMB_COLUMNS,
                                  pick_head=True)
        self.thumbs.add_class("mha-real-thumbs")
        self.thumbs.observe(self._thumb_picked, names="picked")
        find = widgets.HTML("<span class='mha-real-find'>find a head that looks at:</span>")
        # why a button is disabled, in words on the page (a tooltip never shows on touch)
        self.find_note = widgets.HTML()
        self.find_note.add_class("mha-real-find-note")
        side = widgets.Layout(flex="0 1 auto", max_width="min(100%, 36em)", margin="0 24px 0 0")  # map | overview
        wrap = widgets.Layout(flex_flow="row wrap")
        # the controls stay in view while the maps they drive scroll past (not the write mode below)
        maps = widgets.HBox([widgets.VBox([self.big_map, self.reading, self.about], layout=side), self.overview],
                            layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start"))
        maps.add_class("mha-real-maps")  # a phone shows the caption and the maps before the controls
        heads = widgets.VBox([
            self._controls(widgets.HBox([self.model, self.sentence, self.run, self.example], layout=wrap),
                           widgets.HBox([self.layer, self.head, self.induction, self.back], layout=wrap),
                           widgets.HBox([find, *self.presets.values()], layout=wrap), self.find_note),
            self.status, self.busy, self.demo_note, self.label, maps, self.tokens_html, self.thumbs,
        ])
        heads.add_class("mha-real-heads")
        self.writer = WritePanel(load=self._load)  # the "write" mode: SmolLM2 adds tokens one at a time
        self.widget = widgets.VBox([heads, self.writer.widget])
        self._finish(self.widget)  # mha-real-panel, mha-panel: the page's small-screen layout
        self._thumbs_show: tuple | None = None  # (forward key, layer) the thumbnails show
        # open on a head worth seeing: the one with the highest `start` score (found, not written here)
        if self.refresh() and start is not None and start in self.pattern_scores(*self._view):
            self.show_pattern(start)

    def refresh(self, **overrides) -> bool:
        """As ``Panel.refresh``; a missing model shows only the message that names ``make models``."""
        try:
            self.get_model(overrides.get("model", self.model.value))
        except (ModelUnavailableError, ValueError) as err:
            self.show_error(str(err))
            return False
        return super().refresh(**overrides)

    # -- inputs --------------------------------------------------------------------------------
    def values(self) -> dict:
        return {"model": self.model.value, "sentence": self.sentence.value, "layer": self.layer.value,
                "head": self.head.value}

    def _changed(self, change) -> None:
        """A new model: clamp layer and head to its range first (a SmolLM2 layer 18 becomes MiniLM's
        last layer, 5) so the check in ``_render`` sees values that exist; then redraw."""
        if not self._syncing and change["owner"] is self.model:
            with contextlib.suppress(ModelUnavailableError, ValueError):  # refresh() shows the message
                m = self.get_model(self.model.value)
                self._set_limits(m.n_layers, m.n_heads)
        super()._changed(change)

    def _sentence_changed(self, _change) -> None:
        self._to_sentence()

    def _set_sentence(self, text: str) -> None:
        with self._quiet():
            self.sentence.value = text
        self._to_sentence()

    def _to_sentence(self) -> None:
        if not self._syncing:
            self._leave_demo()
            self.refresh()

    def _leave_demo(self) -> None:
        """Back from the induction demo's input to the reader's sentence (the box still holds it)."""
        if self.mode == "induction":
            self.mode = "sentence"
            with self._quiet():
                self.sentence.placeholder = "type a sentence"
                if not self.sentence.value.strip():
                    self.sentence.value = self._typed

    def leave_demo(self) -> None:
        """"back to your sentence": the model, the sentence, the head and the overview's pattern shown
        before the induction demo (a cold visit came back to the demo's layer and head, cut down to
        the other model's size: a head with no pattern)."""
        if self.mode != "induction":
            return
        self._leave_demo()
        if self._before_demo is not None:
            model, layer, head, self.pattern = self._before_demo
            with self._quiet():
                if model != self.model.value:
                    self.model.value = model
                    m = self.get_model(model)
                    self._set_limits(m.n_layers, m.n_heads)
                self.layer.value, self.head.value = layer, head
        self.refresh()

    @contextlib.contextmanager
    def _working(self, what: str):
        """A busy sign (and the old maps dimmed) while a model loads or runs: the page shows it at once."""
        self.busy.value = f"<span class='mha-busy' role='status'>{html.escape(what)}</span>"
        self.widget.add_class("mha-real-working")
        try:
            yield
        finally:
            self.busy.value = ""
            self.widget.remove_class("mha-real-working")

    def get_model(self, name: str):
        """The loaded model ``name`` (loaded once per panel); a readable error if its cache is missing."""
        if name not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got {name!r}")
        if name not in self._models:
            try:
                with self._working(f"loading {MODELS[name]}..."):
                    self._models[name] = self._load(name)
            except Exception as err:  # a missing or corrupt cache: say which command fixes it
                if name not in SHIPPED:  # a folder of the reader's own: its own message says what is wrong
                    raise ModelUnavailableError(f"the model {MODELS[name]} could not be loaded from {name}: "
                                                f"{err}") from err
                raise ModelUnavailableError(f"the model {MODELS[name]} is not available here ({err}). "
                                   f"Run `make models` in the project folder to fetch it, "
                                   f"then reload this page.") from err
        return self._models[name]

    def forward(self, model_name: str, sentence: str) -> tuple[list[str], np.ndarray]:
        """Tokens and attention ``(layers, h, N, N)`` of ``sentence``, computed once per (model, sentence)."""
        key = (model_name, "sentence", sentence)
        if key not in self._forwards:
            model = self.get_model(model_name)
            ids = model.encode(sentence)  # refuses empty text and text over the model's cap
            if len(ids) > MODEL_MAX_TOKENS:
                raise ValueError(f"the sentence is {len(ids):,} tokens long; the panel shows at most "
                                 f"{MODEL_MAX_TOKENS} tokens: shorten it")
            def compute():
                return model.tokens(ids), model.attention(ids)  # labels, (layers, h, N, N)

            # a real model's forward goes through the panel's cache: with a cache shared by every
            # kernel (the served dashboard's), computed by the first kernel to see this sentence
            with self._working(f"running {MODELS[model_name].split(' (')[0]} on {len(ids)} tokens..."):
                if isinstance(model, Model):
                    result = self._results_cache("real_forward", (model_name, model.config, sentence), compute)
                else:  # a stand-in (the tests' fake models): computed here
                    result = compute()
                self._remember(key, result)
        self._forwards.move_to_end(key)
        return self._forwards[key]

    def _thumbs(self, v: _View, fkey: tuple, layer: int, head: int) -> None:
        """Every head of ``layer``, small, the open one named so; the weights go to the page only
        when the layer or the input changed (a new head changes only the captions)."""
        h = v.weights.shape[1]
        captions = [f"head {i}" + (" (open)" if i == head else "") for i in range(h)]
        if self._thumbs_show == (fkey, layer):
            self.thumbs.captions = captions
            return
        self.thumbs.show(v.weights[layer], v.labels, captions=captions,  # (h, N, N)
                         title=f"{v.short}: layer {layer}, all {h} heads (click one to open it)")
        self._thumbs_show = (fkey, layer)

    def _thumb_picked(self, change) -> None:
        """A click (or Enter) on a thumbnail: open that head of the layer."""
        head = change["new"]
        if head < 0:
            return
        with self._quiet():
            self.thumbs.picked = -1  # handled: the same thumbnail can be clicked again later
        self._open(self.layer.value, head)

    def _open(self, layer: int, head: int) -> None:
        """Show ``head`` of ``layer`` (a click on a thumbnail or on the overview); nothing if it is open."""
        if (layer, head) == (self.layer.value, self.head.value):
            return
        with self._quiet():
            self.layer.value, self.head.value = layer, head
        self.refresh()

    def _big(self, v: _View, layer: int, head: int) -> None:
        """The chosen head, drawn in the browser: hover reads a weight, a click or Enter picks a query."""
        n = len(v.labels)
        q = self.big_map.query if self.big_map.n == n and 0 <= self.big_map.query < n else None
        lines, stripe = [], []
        if self.mode == "induction":  # mark where the repeat starts, and the cells an induction head lights
            start = self._induction[(v.model.name, "induction", INDUCTION_PERIOD)][1]
            lines = [start, start + INDUCTION_PERIOD]
            stripe = [(i, i - INDUCTION_PERIOD + 1) for i in range(start + INDUCTION_PERIOD, start + 2 * INDUCTION_PERIOD)]
        self.big_map.show(v.weights[layer, head][None], v.labels,  # (1, N, N)
                          title=f"{v.short}: layer {layer}, head {head}", query=q, lines=lines, stripe=stripe,
                          captions=[f"layer {layer}, head {head}"],
                          alt=_alt(f"{v.model.label}, {weights_note(v.model)}, layer {layer}, head {head}, "
                                   f"{v.what}{v.of_head(layer, head)}", v.labels, v.weights[layer, head]))

    def _remember(self, key, value: tuple[list[str], np.ndarray]) -> None:
        """Keep a forward pass; drop the least recently shown ones beyond the count or byte limits."""
        self._forwards[key] = value
        while len(self._forwards) > 1 and (
                len(self._forwards) > FORWARD_CACHE
                or sum(w.nbytes for _, w in self._forwards.values()) > FORWARD_CACHE_BYTES + value[1].nbytes):
            self._forwards.popitem(last=False)

    # -- the induction demo ----------------------------------------------------------------------
    def induction_demo(self, model_name: str | None = None) -> tuple[int, int, float] | None:
        """Random tokens repeated twice on ``model_name`` (default: the chosen model if it is a
        decoder, else SmolLM2); select its strongest induction head.

        Returns ``(layer, head, score)``, or None if the demo could not run (the message is in the status).
        """
        try:
            if model_name is None:
                chosen = self.model.value
                model_name = chosen if self.get_model(chosen).causal else DEMO_MODEL
            key = (model_name, "induction", INDUCTION_PERIOD)
            model = self.get_model(model_name)
            if key not in self._forwards:
                before, after = _wrapping(model)
                hi = min(INDUCTION_IDS[1], model.vocab_size)  # a small vocabulary: its upper three quarters
                lo = min(INDUCTION_IDS[0], hi // 4)
                ids = patterns.repeated_tokens(np.random.default_rng(INDUCTION_SEED), np.arange(lo, hi),
                                               INDUCTION_PERIOD, prefix=before)
                ids = np.concatenate([ids, np.asarray(after, dtype=np.int64)])
                with self._working(f"running {MODELS[model_name].split(' (')[0]} on the demo's {len(ids)} tokens..."):
                    weights = model.attention(ids)  # (layers, h, N, N)
                scores = patterns.induction_score(weights, INDUCTION_PERIOD, start=len(before))  # (layers, h)
                self._remember(key, (model.tokens(ids), weights))
                self._induction[key] = (scores, len(before))
            scores, _ = self._induction[key]
            best = patterns.top_heads(scores, 1)[0]
        except Exception as err:  # never a traceback in the page
            self.show_error(str(err))
            return None
        with self._quiet():
            if self.mode != "induction":  # what "back to your sentence" returns to
                self._typed = self.sentence.value
                self._before_demo = (self.model.value, self.layer.value, self.head.value, self.pattern)
            self.model.value = model_name
            self._set_limits(*scores.shape)
            self.layer.value, self.head.value = best[0], best[1]
        self.mode = "induction"
        self.pattern = INDUCTION
        self.refresh()
        return best

    # -- finding heads by their pattern -------------------------------------------------------------
    def pattern_scores(self, fkey: tuple, labels: list[str], weights: np.ndarray) -> dict[str, np.ndarray]:
        """Each pattern's score for every head, (layers, h) each, computed once per forward pass.

        ``'it' → animal`` is there only when the input holds both words; the induction demo's
        input adds ``induction``."""
        if fkey not in self._scores:
            found = {"previous token": patterns.previous_token_score(weights) if len(labels) > 1 else None,
                     "first token": patterns.key_score(weights, [0]),
                     "itself": patterns.self_token_score(weights)}
            it, animal = patterns.token_positions(labels, IT_TOKENS), patterns.token_positions(labels, ANIMAL_TOKENS)
            if it and animal:
                found["'it' → animal"] = patterns.key_score(weights, animal, queries=it)
            if fkey[1] == "induction":
                found[INDUCTION] = self._induction[(fkey[0], "induction", INDUCTION_PERIOD)][0]
            if len(self._scores) >= FORWARD_CACHE:
                self._scores.popitem(last=False)
            self._scores[fkey] = {k: v for k, v in found.items() if v is not None}
        return self._scores[fkey]

    def show_pattern(self, name: str) -> tuple[int, int, float] | None:
        """Open the head with the highest ``name`` score on the current input (and show that score
        in the overview). Returns ``(layer, head, score)``, or None with a message in the status."""
        if name not in PATTERNS and name != INDUCTION:
            self.show_error(f"pattern must be one of {', '.join(PATTERNS)}, got {name!r}")
            return None
        if self._view is None:
            return None
        found = self.pattern_scores(*self._view)
        if name not in found:
            self.show_error(f"{name}: {_unmeasured(name, self.mode == 'induction')}")
            return None
        if name in PATTERNS and (why := _unclear(name, found[name])):
            self.show_error(f"{name}: {why}")
            return None
        best = patterns.top_heads(found[name], 1)[0]
        self.pattern = name
        with self._quiet():
            self.layer.value, self.head.value = best[0], best[1]
        self.refresh()
        return best

    def _picked(self, change) -> None:
        """A click (or Enter) on a square of the overview: open that head."""
        layer, head = change["new"]
        if layer < 0:
            return
        with self._quiet():
            self.overview.picked = [-1, -1]  # handled: the same square can be clicked again later
        self._open(layer, head)

    # -- drawing ---------------------------------------------------------------------------------
    def _set_limits(self, n_layers: int, h: int) -> None:
        """Layer and head sliders to the model's size, keeping the values where they still exist."""
        with self._quiet():
            for slider, top in ((self.layer, n_layers - 1), (self.head, h - 1)):
                if slider.max != top:
                    slider.value = min(slider.value, top)
                    slider.max = top

    def _render(self, model, sentence, layer, head) -> None:
        if model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
        if self.mode == "induction":
            key = (model, "induction", INDUCTION_PERIOD)
            if key not in self._forwards:  # the model changed since the demo: back to the sentence
                self._leave_demo()
                sentence = self.sentence.value
                if self.pattern == INDUCTION:
                    self.pattern = "previous token"
        if self.mode == "induction":
            labels, weights = self._forwards[key]
            self._forwards.move_to_end(key)
            scores, _ = self._induction[key]
            what = f"induction demo: {INDUCTION_PERIOD} random tokens, then the same {INDUCTION_PERIOD} again"

            def of_head(ly: int, hd: int) -> str:
                return (f"; this head's induction score {scores[ly, hd]:.2f} "
                        f"(mean share of attention on the token after the earlier occurrence)")
        else:
            labels, weights = self.forward(model, sentence)
            what = f"{'the example' if sentence == EXAMPLE else 'your'} sentence, {len(labels)} tokens"

            def of_head(ly: int, hd: int) -> str:
                return ""
        n_layers, h, n, _ = weights.shape
        self._set_limits(n_layers, h)
        for name, value, top in (("layer", layer, n_layers - 1), ("head", head, h - 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= top:
                raise ValueError(f"{name} must be an int in [0, {top}] for this model, got {value!r}")
        m = self.get_model(model)
        if m.causal:  # the write mode writes with the decoder on show (SmolLM2 while an encoder is)
            self.writer.use(model)
        n_kv = m.n_kv_heads
        kv = f" (reads key/value head {head // (h // n_kv)} of {n_kv}: GQA)" if n_kv < h else ""
        view = _View(m, labels, weights, what, of_head)
        fkey = (model, self.mode, sentence if self.mode == "sentence" else INDUCTION_PERIOD)
        self._view = (fkey, labels, weights)
        self._thumbs(view, fkey, layer, head)
        self._big(view, layer, head)
        found = self.pattern_scores(fkey, labels, weights)
        # one source of truth: the overview is coloured by `self.pattern` (a score this input has), and a
        # button is lit only while the open head is the one it finds
        self.pattern = next(p for p in (self.pattern, "previous token", "first token") if p in found)
        top = tuple(int(i) for i in patterns.top_heads(found[self.pattern], 1)[0][:2])
        # a button is off when its pattern cannot be measured here, or when no head shows it clearly
        # (the best score under CLEAR_SCORE, where the caption says "none ... clearly"): said in text
        why = {name: (_unmeasured(name, self.mode == "induction") if name not in found else _unclear(name, found[name]))
               for name in self.presets}
        why = {name: text for name, text in why.items() if text}
        at_top = top == (layer, head) and self.pattern not in why
        self._show_overview(fkey, found, view.short, layer, head)
        self.about.value = _about(found, layer, head, self.mode == "induction", self.pattern, at_top)
        for name, button in self.presets.items():
            button.disabled = name in why
            lit = at_top and name == self.pattern and not button.disabled
            (button.add_class if lit else button.remove_class)("mha-active")
            button.tooltip = why.get(name, f"open the head with the highest {name} score")
        lit = at_top and self.mode == "induction" and self.pattern == INDUCTION
        (self.induction.add_class if lit else self.induction.remove_class)("mha-active")
        self.find_note.value = _not_offered(why)
        demo = self.mode == "induction"
        self.back.layout.display = None if demo else "none"
        before = self._before_demo[0] if self._before_demo else model
        self.demo_note.value = "" if not demo else _demo_note(m, MODELS.get(before, model), switched=before != model)
        weights_said = weights_note(m)
        short = (f"<b>{html.escape(view.short.split(',')[0])}</b>, "
                 f"{'real' if model in SHIPPED else 'your own'} parameters, "
                 f"{quantised_words(m) if m.quantised else 'not quantised'} &middot; <b>layer {layer}</b> of {n_layers}"
                 f" (0&ndash;{n_layers - 1}) &middot; <b>head {head}</b> of {h} (0&ndash;{h - 1})"
                 + (f" &middot; demo input, induction score {scores[layer, head]:.2f}" if self.mode == "induction" else ""))
        # what the maps read, in a line of its own under the map: the page's intro names no fixed sentence
        reading = (f"the induction demo's input, {INDUCTION_PERIOD} random tokens and then the same "
                   f"{INDUCTION_PERIOD} again" if demo else
                   f"{'the example sentence' if sentence == EXAMPLE else 'your sentence'} "
                   f"<q>{html.escape(sentence)}</q>")
        self.reading.value = f"<p class='mha-real-reading' role='status'>Reading {reading} ({n} tokens).</p>"
        self.label.value = (
            f"<div class='mha-real-caption'>{short}<details class='mha-spec'><summary>exact setting</summary>"
            f"<b>{html.escape(m.label)}</b>: {html.escape(weights_said)} &middot; layers and heads counted from 0"
            f"{kv} &middot; {term('causal') if m.causal else term('bidirectional')} &middot; "
            f"{html.escape(what + of_head(layer, head))}. Row = query token, column = key token; each row sums "
            "to 1.</details></div>")
        self.tokens_html.value = ("<div class='mha-real-token-list' style='overflow-wrap:anywhere'>tokens: "
                                  + " ".join(f"<code>{i}:{html.escape(t)}</code>" for i, t in enumerate(labels))
                                  + "</div>")

    def _show_overview(self, fkey: tuple, found: dict[str, np.ndarray], short: str, layer: int, head: int) -> None:
        """The layers x heads overview of the current pattern's score; only the outline moves with the head."""
        pattern = self.pattern  # _render made it a score of this input
        if (fkey, pattern) != getattr(self, "_overview_shows", None):
            self.overview.show(np.clip(found[pattern], 0, 1), current=(layer, head), what=f"{pattern} score",
                               title=f"Every layer and head of {short}, coloured by its {pattern} score "
                                     "(dark = 0, yellow = 1). The outlined square is the head "
                                     "open above; tap or click another to open it.")
            self._overview_shows = (fkey, pattern)
        else:
            self.overview.current = [layer, head]


def _about(found: dict[str, np.ndarray], layer: int, head: int, demo: bool, chosen: str = "",
           top: bool = False) -> str:
    """One sentence under the map: the chosen head's pattern, with its score (or that it has none);
    the score of the pattern the overview is coloured by (``chosen``), when that is another; and,
    when ``top``, that this head has the highest ``chosen`` score of all."""
    scores = {name: float(found[name][layer, head]) for name in found}
    best = f" It has the highest {chosen} score of every layer and head." if top and chosen in scores else ""
    if demo:
        s = scores[INDUCTION]
        return (f"<p class='mha-real-about-text'>Layer {layer}, head {head}: induction score {s:.2f}, "
                f"{INDUCTION_MEANING}. Dashed lines: where the repeat starts; orange squares: the stripe an "
                f"induction head lights up (each token of the repeat looking at the token after its first copy).{best}</p>")
    name = max(scores, key=scores.get)
    does = {"previous token": "mostly looks at the previous token", "first token": "mostly looks at the first token",
            "itself": "mostly looks at each token itself",
            "'it' → animal": 'sends most of the attention of "it" to "animal"'}[name]
    also = (f" Its {chosen} score is {scores[chosen]:.2f} ({PATTERNS[chosen]})."
            if chosen in PATTERNS and chosen in scores and chosen != name else "")
    if scores[name] >= CLEAR_SCORE:
        return (f"<p class='mha-real-about-text'>Layer {layer}, head {head} {does}: "
                f"{name} score {scores[name]:.2f} ({PATTERNS[name]}).{also}{best}</p>")
    listed = ", ".join(f"{k} {v:.2f}" for k, v in scores.items())
    return (f"<p class='mha-real-about-text'>Layer {layer}, head {head} shows none of the measured patterns clearly "
            f"(scores: {listed}); its attention is spread or follows something else.{best}</p>")


def _unmeasured(name: str, demo: bool) -> str:
    """Why the ``name`` button is off when its pattern cannot be measured on the input shown: the
    induction demo's input (``demo``) is random tokens, never the reader's sentence."""
    if name != "'it' → animal":
        return "needs at least two tokens"  # "previous token", on a one-token sentence
    if demo:
        return (f'the induction demo\'s input is {INDUCTION_PERIOD} random tokens, repeated, with no "it" or '
                '"animal" in it; back to your sentence to measure it, the example sentence has both')
    return 'needs the words "it" and "animal" in the sentence; the example sentence has both'


def _unclear(name: str, scores: np.ndarray) -> str:
    """Why the ``name`` button is off when no head shows the pattern clearly: the best of its
    ``scores`` (layers, h) is under CLEAR_SCORE, the caption's own threshold; "" when one does."""
    best = float(scores.max())
    if best >= CLEAR_SCORE:
        return ""
    return f"best score {best:.2f}; a head shows a pattern clearly from {CLEAR_SCORE:.2f}"


def _not_offered(why: dict[str, str]) -> str:
    """One line under the buttons naming every disabled button with its reason (``why``: button
    name -> reason), e.g. "Not offered on this input: itself (best score 0.18; ...)". It is
    rewritten, never added to, on every change of input, and reads as what it is: why buttons are
    off, not a status of the head on show; "" when every button is on."""
    if not why:
        return ""
    listed = "; ".join(f"<b>{html.escape(name)}</b> ({html.escape(text, quote=False)})" for name, text in why.items())
    return f"<p class='mha-real-find-why'>Not offered on this input: {listed}.</p>"


def _demo_note(m, before: str, *, switched: bool) -> str:
    """What the induction demo changed, said on the page: the model ``m`` it runs on (when it
    ``switched`` to it from ``before``), its input, and the way back."""
    name = html.escape(m.label.split(" (")[0])
    model = (f"the model is now <b>{name}</b>, one that writes (an induction head reads left to right), and its "
             if switched else f"<b>{name}</b>'s ")
    back = html.escape(before.split(" (")[0]) + " and " if switched else ""
    return (f"<p class='mha-real-demo-text' role='status'><b>Induction demo:</b> {model}input is {INDUCTION_PERIOD} "
            f"random tokens followed by the same {INDUCTION_PERIOD} again, in place of your sentence. "
            f"<b>back to your sentence</b> returns to {back}your sentence.</p>")


def _alt(what: str, labels: list[str], w: np.ndarray) -> str:
    """Alt text of one head's map ``w`` (N, N): what it is, and the key that receives the most weight."""
    received = w.mean(axis=0)  # (N,): mean weight each key receives
    k = int(received.argmax())
    prev = float(np.diagonal(w, -1).mean()) if len(labels) > 1 else 0.0
    return (f"Attention map of {what}. The key with the most weight on average is token {k} '{labels[k]}' "
            f"({received[k]:.2f} of each row); the weight on the previous token averages {prev:.2f}.")


def real_heads_panel(**kwargs) -> RealHeadsPanel:
    """The real-model panel (see ``RealHeadsPanel``); display the returned object."""
    return RealHeadsPanel(**kwargs)
