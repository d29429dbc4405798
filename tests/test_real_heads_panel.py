"""The real-model panel, driven with a fake model of the same interface (no model cache needed).

Checks: the label names model, layer, head and quantisation; tokens are escaped everywhere
(the XSS sentence stays text); bad input gives a message, never a traceback; a layer or head
switch reuses the cached forward pass; a missing model names ``make models``; the induction demo
finds the planted induction head.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from fake_models import FakeModel, fake_loader
from widget_messages import forge

from mha_core.ui import real_heads_panel as R

XSS = "<img src=x onerror=alert(1)>"


class Tags(HTMLParser):
    """Every start tag of an HTML string, with its attributes."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _page(p: R.RealHeadsPanel) -> str:
    return "".join(w.value for w in (p.status, p.busy, p.label, p.tokens_html, p.about))


def _big(p: R.RealHeadsPanel) -> tuple:
    """What the enlarged head last sent the page: its weights, title and description."""
    return p.big_map.weights, p.big_map.title, p.big_map.alt


@pytest.fixture
def load():
    return fake_loader()


@pytest.fixture
def panel(load):
    return R.RealHeadsPanel(load=load, start=None)  # opens on layer 0, head 0


def test_the_panel_opens_on_the_head_with_the_most_weight_from_it_to_animal(load):
    p = R.RealHeadsPanel(load=load)
    found = p.pattern_scores(*p._view)
    layer, head, score = R.patterns.top_heads(found["'it' → animal"], 1)[0]
    assert (p.layer.value, p.head.value) == (layer, head) and p.pattern == "'it' → animal"
    assert 'sends most of the attention of "it" to "animal"' in p.about.value  # the fake's planted head 4
    with pytest.raises(ValueError, match="start"):
        R.RealHeadsPanel(load=load, start="vibes")


def test_first_view_names_model_layer_head_and_that_the_weights_are_real(panel, load):
    caption = panel.label.value
    assert panel.status.value == ""
    assert "fake minilm" in caption and "not quantised" in caption and "real pretrained parameters" in caption
    assert "<b>layer 0</b> of 2" in caption and "<b>head 0</b> of 12" in caption
    assert "bidirectional" in caption
    assert [t for t, _ in Tags(_page(panel)).tags if t == "img"] == []  # every map is drawn in the browser
    thumbs = panel.thumbs  # every head of the layer, small, drawn in the browser from its weights
    n = len(load.models["minilm"].tokens(load.models["minilm"].encode(R.EXAMPLE)))
    assert (thumbs.h, thumbs.n, len(thumbs.weights)) == (12, n, 12 * n * n * 4)
    assert thumbs.columns == R.THUMB_COLUMNS and thumbs.pick_head
    assert "layer 0" in thumbs.title and "fake minilm" in thumbs.title and "all 12 heads" in thumbs.title
    assert thumbs.captions[0] == "head 0 (open)" and thumbs.captions[1] == "head 1"
    assert "Head 11" in thumbs.alt and "fake minilm" in thumbs.alt
    big = panel.big_map  # the chosen head, drawn in the browser from its weights
    assert (big.h, big.n, len(big.weights)) == (1, n, n * n * 4)
    assert "layer 0, head 0" in big.title and "fake minilm" in big.alt and "head 0" in big.alt


def test_the_smollm2_label_says_4_bit_and_gqa(panel):
    panel.model.value = "smollm2"
    assert panel.head.max == 8
    caption = panel.label.value
    assert "4-bit quantised" in caption and "causal" in caption
    assert "4-bit quantised" in panel.big_map.alt


def test_the_xss_sentence_is_text_everywhere(panel):
    panel.sentence.value = XSS
    assert panel.status.value == ""
    page = _page(panel)
    tags = Tags(page).tags
    assert all(not any(k.startswith("on") for k in attrs) for _, attrs in tags)
    assert [t for t, _ in tags if t == "img"] == []
    assert XSS in panel.thumbs.labels or any("<" in t for t in panel.thumbs.labels)  # canvas text, not HTML
    assert XSS in panel.big_map.labels or any("<" in t for t in panel.big_map.labels)  # drawn as canvas text
    assert "&lt;img" in panel.tokens_html.value
    assert "onerror=alert(1)&gt;" in panel.tokens_html.value


def test_dollar_signs_and_unicode_render(panel):
    panel.sentence.value = "It costs $5 or $x^$ — café 東京 🙂"
    assert panel.status.value == ""
    assert "$x^$" in panel.tokens_html.value and "東京" in panel.tokens_html.value


@pytest.mark.parametrize(("sentence", "words"), [
    ("", "empty"),
    ("   \n", "empty"),
    ("word " * 200, "201 tokens, over the cap of 128"),
])
def test_bad_sentences_give_a_message_and_keep_the_last_maps(panel, sentence, words):
    before = _big(panel)
    panel.sentence.value = sentence
    assert words in panel.status.value and "mha-error" in panel.status.value
    assert _big(panel) == before
    panel.sentence.value = "back to a good one"
    assert panel.status.value == "" and "back" in panel.tokens_html.value


def test_layer_and_head_switches_reuse_the_forward_pass(panel, load):
    model = load.models["minilm"]
    forwards = model.forwards
    thumbs = panel.thumbs.weights
    big = _big(panel)
    sent = []
    panel.thumbs.observe(lambda c: sent.append(1), names="weights")
    panel.head.value = 5
    assert sent == [] and panel.thumbs.captions[5] == "head 5 (open)"  # the same layer: no weights resent
    assert _big(panel) != big and "<b>head 5</b>" in panel.label.value
    panel.layer.value = 1
    assert panel.thumbs.weights != thumbs and "<b>layer 1</b>" in panel.label.value and "layer 1" in panel.thumbs.title
    assert model.forwards == forwards
    panel.sentence.value = "a new sentence"
    assert model.forwards == forwards + 1
    panel.sentence.value = R.EXAMPLE  # seen before: cached
    assert model.forwards == forwards + 1


def test_clicking_a_thumbnail_opens_that_head(panel):
    panel.layer.value = 1
    panel.thumbs.picked = 7  # what a click (or Enter) on the eighth small map sends
    assert (panel.layer.value, panel.head.value) == (1, 7) and panel.thumbs.picked == -1
    assert "<b>head 7</b>" in panel.label.value and "layer 1, head 7" in panel.big_map.title
    assert panel.thumbs.captions[7] == "head 7 (open)"
    panel.head.value = 2
    panel.thumbs.picked = 7  # the same thumbnail again, after a move elsewhere
    assert panel.head.value == 7


def test_a_forged_thumbnail_pick_is_refused(panel):
    with pytest.raises(Exception, match="picked must be -1"):
        panel.thumbs.picked = 12
    assert panel.head.value == 0


def test_the_example_button_restores_the_example(panel):
    panel.sentence.value = "something else"
    panel.example.click()
    assert panel.sentence.value == R.EXAMPLE and "animal" in panel.tokens_html.value


def test_forged_slider_values_past_the_ends_are_clamped_and_shown(panel):
    forge(panel.layer, {"value": 99})
    forge(panel.head, {"value": -3})
    assert panel.status.value == ""
    assert (panel.layer.value, panel.head.value) == (1, 0)
    assert "<b>layer 1</b>" in panel.label.value and "<b>head 0</b>" in panel.label.value


@pytest.mark.parametrize(("control", "state"), [("head", {"value": "x"}), ("model", {"index": 7}),
                                                 ("sentence", {"value": 5})])
def test_forged_values_are_reported_not_raised(panel, control, state):
    forge(getattr(panel, control), state)
    assert "ignored a value" in panel.status.value
    assert "layer 0" in panel.label.value


def test_a_forged_out_of_range_head_in_the_callback_is_refused(panel):
    assert not panel.refresh(head=40)
    assert "head must be an int in [0, 11]" in panel.status.value


def test_a_missing_model_names_make_models():
    p = R.RealHeadsPanel(load=fake_loader(available=("minilm",)))
    assert p.status.value == "" and p.big_map.weights
    p.model.value = "smollm2"
    assert "make models" in p.status.value and "SmolLM2" in p.status.value
    assert p.induction_demo() is None and "make models" in p.status.value
    empty = R.RealHeadsPanel(load=fake_loader(available=()))
    assert "make models" in empty.status.value and empty.big_map.weights == b""


def test_the_induction_demo_finds_the_planted_head(panel, load):
    best = panel.induction_demo()
    fake = load.models["smollm2"]
    assert best == (fake.n_layers - 1, 2, pytest.approx(1.0))
    assert (panel.model.value, panel.layer.value, panel.head.value) == ("smollm2", fake.n_layers - 1, 2)
    caption = panel.label.value
    assert "induction demo" in caption and "induction score 1.00" in caption and "4-bit quantised" in caption
    tokens = re.findall(r"<code>\d+:([^<]*)</code>", panel.tokens_html.value)
    assert len(tokens) == 1 + 2 * R.INDUCTION_PERIOD
    assert tokens[1:1 + R.INDUCTION_PERIOD] == tokens[1 + R.INDUCTION_PERIOD:]
    panel.head.value = 0  # browsing the demo's heads keeps the demo's tokens
    assert "induction score" in panel.label.value
    panel.sentence.value = "now my own words"
    assert "induction" not in panel.label.value and "own" in panel.tokens_html.value


@pytest.mark.parametrize("demo_first", [True, False])
def test_a_model_switch_clamps_layer_and_head_to_the_new_model(panel, load, demo_first):
    """Issue 22's bug: a head (or layer) the new model lacks gave "head must be an int in [0, 8]"
    and left the old model's maps under the new name."""
    if demo_first:
        panel.induction_demo()  # on smollm2; then minilm's last head, which smollm2 lacks
        panel.model.value = "minilm"
        assert panel.status.value == "" and "fake minilm" in panel.label.value
    panel.head.value = 11
    panel.model.value = "smollm2"
    assert panel.status.value == ""
    assert (panel.head.max, panel.head.value) == (8, 8)
    assert "fake smollm2" in panel.label.value and "<b>head 8</b> of 9" in panel.label.value
    assert "fake smollm2" in panel.big_map.alt
    panel.model.value = "minilm"
    assert panel.status.value == "" and (panel.head.max, panel.head.value) == (11, 8)
    assert "fake minilm" in panel.label.value


def test_the_forward_cache_is_bounded(panel):
    for i in range(R.FORWARD_CACHE + 3):
        panel.sentence.value = f"sentence number {i}"
    assert len(panel._forwards) == R.FORWARD_CACHE
    assert "<code>3:6</code>" in panel.tokens_html.value  # the newest sentence is shown


def test_the_forward_cache_keeps_few_long_sentences(panel, monkeypatch):
    monkeypatch.setattr(R, "FORWARD_CACHE_BYTES", 3 * 12 * 101 * 101 * 4)  # minilm fake: 2 layers x 12 heads
    for i in range(3):
        panel.sentence.value = " ".join([f"w{i}"] * 100)  # 101 tokens: 2 x 12 x 101 x 101 float32 each
    sizes = [w.nbytes for _, w in panel._forwards.values()]
    assert len(sizes) == 2 and sum(sizes) - sizes[-1] <= R.FORWARD_CACHE_BYTES
    assert panel.status.value == "" and "w2" in panel.tokens_html.value


def test_constructor_arguments_are_checked(load):
    with pytest.raises(ValueError, match="model must be one of minilm, smollm2"):
        R.RealHeadsPanel(model="gpt", load=load)
    with pytest.raises(TypeError, match="sentence must be a str"):
        R.RealHeadsPanel(sentence=3, load=load)


# -- guidance: patterns found by score, the sentence under the map, the overview, the busy sign ---

def test_pattern_buttons_open_the_head_with_the_highest_score(panel):
    """The fake model plants a previous-token head (head 0) and a first-token sink (head 1) in every
    layer; the buttons find them by their score, not by a layer written anywhere."""
    assert panel.show_pattern("previous token")[1:] == (0, pytest.approx(1.0))
    assert panel.head.value == 0 and "mostly looks at the previous token" in panel.about.value
    assert "previous token score 1.00" in panel.about.value
    layer, head, score = panel.show_pattern("first token")
    assert head == 1 and score == pytest.approx(1.0) and (panel.layer.value, panel.head.value) == (layer, 1)
    assert "first token score 1.00" in panel.about.value and "first token score" in panel.overview.title
    assert [n for n, b in panel.presets.items() if "mha-active" in b._dom_classes] == ["first token"]
    found = panel.pattern_scores(*panel._view)
    best = R.patterns.top_heads(found["'it' → animal"], 1)[0]
    assert panel.show_pattern("'it' → animal") == best
    assert not panel.presets["'it' → animal"].disabled
    panel.sentence.value = "no such words here"
    assert panel.presets["'it' → animal"].disabled and "animal" in panel.presets["'it' → animal"].tooltip
    assert panel.show_pattern("'it' → animal") is None and "animal" in panel.status.value
    assert panel.show_pattern("vibes") is None and "pattern must be one of" in panel.status.value


def test_a_head_without_a_clear_pattern_says_so(panel):
    panel.layer.value, panel.head.value = 0, 5  # a random head of the fake model
    assert "none of the measured patterns clearly" in panel.about.value and "previous token 0." in panel.about.value


def test_a_click_on_the_overview_opens_that_head(panel):
    assert panel.overview.layers == 2 and panel.overview.heads == 12
    assert len(panel.overview.scores) == 2 * 12 * 4  # float32 (layers, h)
    panel.overview.picked = [1, 7]
    assert (panel.layer.value, panel.head.value) == (1, 7) and "<b>layer 1</b>" in panel.label.value
    assert panel.overview.current == [1, 7]
    with pytest.raises(Exception, match="picked"):
        panel.overview.picked = [5, 0]  # outside the model: refused by the widget


def test_the_induction_demo_marks_the_repeat_and_says_demo_input(panel):
    panel.induction_demo()
    start = 1  # the fake model's BOS before the random tokens
    assert panel.big_map.lines == [start, start + R.INDUCTION_PERIOD]
    assert panel.big_map.stripe[0] == [start + R.INDUCTION_PERIOD, start + 1]
    assert len(panel.big_map.stripe) == R.INDUCTION_PERIOD
    assert panel.sentence.value == R.EXAMPLE  # the box keeps the reader's sentence
    assert "demo input" in panel.label.value and "induction score" in panel.about.value
    assert "induction score" in panel.overview.title
    # the page says what the demo changed, and offers the way back
    note = panel.demo_note.value
    assert "fake smollm2" in note and f"{R.INDUCTION_PERIOD} random tokens" in note and "your sentence" in note
    assert panel.back.layout.display is None and "mha-active" in panel.induction._dom_classes
    panel.model.value = "minilm"  # no demo on this model: back to the reader's sentence
    assert panel.status.value == "" and panel.sentence.value == R.EXAMPLE and "animal" in panel.tokens_html.value
    assert panel.big_map.lines == [] and panel.big_map.stripe == []
    assert panel.demo_note.value == "" and panel.back.layout.display == "none"
    assert "mha-active" not in panel.induction._dom_classes


def test_back_to_your_sentence_restores_the_model_the_sentence_and_the_head(panel):
    """The fourth cold visit: back from the demo landed on the demo's layer and head cut down to
    MiniLM's size (a head with no pattern), with the lit "find a head" button gone."""
    panel.sentence.value = "my own words here"
    layer, head, _ = panel.show_pattern("first token")
    panel.induction_demo()
    assert panel.model.value == "smollm2" and panel.mode == "induction"
    assert (panel.layer.value, panel.head.value) != (layer, head)
    panel.back.click()
    assert (panel.model.value, panel.mode, panel.sentence.value) == ("minilm", "sentence", "my own words here")
    assert "fake minilm" in panel.label.value and "own" in panel.tokens_html.value and panel.status.value == ""
    assert (panel.layer.value, panel.head.value, panel.pattern) == (layer, head, "first token")
    assert _lit(panel) == ["first token"] and f"<b>layer {layer}</b>" in panel.label.value


def _lit(panel) -> list[str]:
    return [n for n, b in panel.presets.items() if "mha-active" in b._dom_classes]


def test_one_source_of_truth_for_the_head_shown(panel):
    """Issue 34: a lit button, the overview and the caption follow the open head, whatever moved it."""
    layer, head, _ = panel.show_pattern("first token")
    assert _lit(panel) == ["first token"] and "highest first token score" in panel.about.value
    panel.head.value = 5  # a slider moves away from the head the button found: the button goes out
    assert _lit(panel) == [] and "highest" not in panel.about.value
    assert panel.overview.current == [panel.layer.value, 5] and "first token score" in panel.overview.title
    panel.head.value = head  # back on it: lit again
    assert _lit(panel) == ["first token"]
    panel.overview.picked = [1, 7]  # a click on the overview
    assert _lit(panel) == [] and panel.overview.current == [1, 7]
    panel.model.value = "smollm2"  # a model switch: lit only if the clamped head is the new model's best
    found = panel.pattern_scores(*panel._view)
    best = tuple(R.patterns.top_heads(found["first token"], 1)[0][:2])
    assert (_lit(panel) == ["first token"]) == ((panel.layer.value, panel.head.value) == best)


def test_a_disabled_button_is_never_lit_and_says_why_in_text(panel):
    panel.show_pattern("'it' → animal")
    assert _lit(panel) == ["'it' → animal"] and panel.find_note.value == ""
    panel.sentence.value = "no such words here"  # the pattern cannot be measured on this sentence
    assert panel.presets["'it' → animal"].disabled and _lit(panel) == []
    assert 'needs the words \\"it\\" and \\"animal\\"' in panel.find_note.value.replace('"', '\\"')
    # the overview says which score it now shows, and that is the pattern the panel holds
    assert panel.pattern == "previous token" and "previous token score" in panel.overview.title


def test_in_the_induction_demo_the_it_animal_button_says_why_for_the_demo_input(panel):
    """Issue 34: the demo's input is random tokens, not a sentence: the off button's reason says
    so, and says how to measure it (not that "the sentence" lacks the words)."""
    panel.induction_demo()
    button = panel.presets["'it' → animal"]
    assert button.disabled and "mha-active" not in button._dom_classes
    note = panel.find_note.value.replace("&quot;", '"').replace("&#x27;", "'")
    assert f"the induction demo's input is {R.INDUCTION_PERIOD} random tokens" in note, note
    assert "in the sentence" not in note and "back to your sentence" in note
    assert button.tooltip.startswith("the induction demo's input is")
    assert panel.show_pattern("'it' → animal") is None and "random tokens" in panel.status.value
    panel.back.click()  # back on the example sentence: the button is on again, and no reason is left
    assert not button.disabled and panel.find_note.value == ""


def test_a_busy_sign_shows_while_a_model_runs(panel, load):
    seen = []
    panel.busy.observe(lambda c: seen.append(c["new"]), names="value")
    panel.sentence.value = "a sentence never run before"
    assert any("mha-busy" in v and f"running {R.MODELS['minilm'].split(' (')[0]}" in v for v in seen)
    assert panel.busy.value == "" and "mha-real-working" not in panel.widget._dom_classes


def test_a_pattern_no_head_shows_clearly_has_its_button_off_and_says_why():
    """Issue 34: with 4 heads the fake plants no "itself" head, so the best itself score is a random
    head's, under the caption's CLEAR_SCORE: the button is off, and the page says so in text."""
    small = FakeModel("minilm", causal=False, n_heads=4)
    panel = R.RealHeadsPanel(load=lambda name: small, start=None)
    best = float(panel.pattern_scores(*panel._view)["itself"].max())
    assert best < R.CLEAR_SCORE
    assert panel.presets["itself"].disabled and "mha-active" not in panel.presets["itself"]._dom_classes
    assert (f"Not offered on this input: <b>itself</b> (best score {best:.2f}; a head shows a pattern "
            f"clearly from {R.CLEAR_SCORE:.2f})") in panel.find_note.value
    assert "clearly" in panel.presets["itself"].tooltip
    assert panel.show_pattern("itself") is None and f"itself: best score {best:.2f}" in panel.status.value
    assert not panel.presets["previous token"].disabled  # its planted head 0 scores 1.00


def test_the_off_buttons_reasons_are_one_line_replaced_when_the_input_changes():
    """Issue 34, third visit: the reasons of every disabled button are one line that says what it
    is ("Not offered on this input: ..."), never a line that reads as the open head's status, and
    a new input replaces it (two off buttons: one line naming both; none off: no line)."""
    small = FakeModel("minilm", causal=False, n_heads=4)
    panel = R.RealHeadsPanel(load=lambda name: small, start=None)
    def off() -> list[str]:
        return [name for name, b in panel.presets.items() if b.disabled]

    def note() -> str:
        return panel.find_note.value.replace("&quot;", '"').replace("&#x27;", "'")

    first = off()
    assert "itself" in first and len(first) >= 1, first
    assert note().count("<p") == 1 and note().startswith("<p class='mha-real-find-why'>Not offered on this input: ")
    assert "no head shows" not in note() and all(f"<b>{name}</b> (" in note() for name in first), note()
    panel.sentence.value = "a sentence without those two words"  # "'it' -> animal" cannot be measured
    assert set(off()) == {"itself", "'it' → animal"}, off()
    assert note().count("<p") == 1 and note().count("Not offered on this input") == 1, note()
    assert '<b>\'it\' → animal</b> (needs the words "it" and "animal"' in note() and "<b>itself</b> (" in note()
    panel.sentence.value = R.EXAMPLE  # back: the reasons of the example, the other one gone
    assert off() == first and "needs the words" not in note() and note().count("<p") == 1


def test_the_panel_says_what_it_reads(panel):
    """Issue 34: the line above the maps names the input shown, whatever changed it."""
    assert "Reading the example sentence <q>The animal didn&#x27;t cross" in panel.reading.value
    panel.sentence.value = "my <own> words"
    assert "Reading your sentence <q>my &lt;own&gt; words</q> (4 tokens)" in panel.reading.value
    panel.induction_demo()
    assert f"Reading the induction demo's input, {R.INDUCTION_PERIOD} random tokens" in panel.reading.value
    panel.back.click()
    assert "Reading your sentence <q>my &lt;own&gt; words</q>" in panel.reading.value
