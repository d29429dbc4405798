"""The real-model panel, driven with a fake model of the same interface (no model cache needed).

Checks: the label names model, layer, head and quantisation; tokens are escaped everywhere
(the XSS sentence stays text); bad input gives a message, never a traceback; a layer or head
switch reuses the cached forward pass; a missing model names ``make models``; the induction demo
finds the planted induction head.
"""

from __future__ import annotations

import asyncio
import re
from html.parser import HTMLParser

import pytest
from fake_models import fake_loader

from mha_core.ui import real_heads_panel as R

XSS = "<img src=x onerror=alert(1)>"


def _forge(widget, state: dict) -> None:
    """Deliver an update message to ``widget`` as the kernel's comm layer would."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}},
                        "buffers": []})


class Tags(HTMLParser):
    """Every start tag of an HTML string, with its attributes."""

    def __init__(self, text: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _page(p: R.RealHeadsPanel) -> str:
    return "".join(w.value for w in (p.status, p.label, p.tokens_html, p.thumbs_html, p.big_html))


@pytest.fixture
def load():
    return fake_loader()


@pytest.fixture
def panel(load):
    return R.RealHeadsPanel(load=load)


def test_first_view_names_model_layer_head_and_that_the_weights_are_real(panel, load):
    caption = panel.label.value
    assert panel.status.value == ""
    assert "fake minilm" in caption and "not quantised" in caption and "real pretrained weights" in caption
    assert "<b>layer 0</b> of 2" in caption and "<b>head 0</b> of 12" in caption
    assert "bidirectional" in caption
    imgs = [a for t, a in Tags(_page(panel)).tags if t == "img"]
    assert [a["class"] for a in imgs] == ["mha-real-thumbs-image", "mha-real-big-image"]
    for a in imgs:
        assert a["src"].startswith("data:image/png;base64,") and len(a["src"]) > 1000
        assert "layer 0" in a["alt"] and "fake minilm" in a["alt"]
    assert "head 0" in imgs[1]["alt"] and "all 12 heads" in imgs[0]["alt"]


def test_the_smollm2_label_says_4_bit_and_gqa(panel):
    panel.model.value = "smollm2"
    assert panel.head.max == 8
    caption = panel.label.value
    assert "4-bit quantised" in caption and "causal" in caption
    assert "4-bit quantised" in Tags(panel.big_html.value).tags[0][1]["alt"]


def test_the_xss_sentence_is_text_everywhere(panel):
    panel.sentence.value = XSS
    assert panel.status.value == ""
    page = _page(panel)
    tags = Tags(page).tags
    assert all(not any(k.startswith("on") for k in attrs) for _, attrs in tags)
    assert [a.get("class") for t, a in tags if t == "img"] == ["mha-real-thumbs-image", "mha-real-big-image"]
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
    before = panel.big_html.value
    panel.sentence.value = sentence
    assert words in panel.status.value and "mha-error" in panel.status.value
    assert panel.big_html.value == before
    panel.sentence.value = "back to a good one"
    assert panel.status.value == "" and "back" in panel.tokens_html.value


def test_layer_and_head_switches_reuse_the_forward_pass(panel, load):
    model = load.models["minilm"]
    forwards = model.forwards
    thumbs = panel.thumbs_html.value
    big = panel.big_html.value
    panel.head.value = 5
    assert panel.thumbs_html.value == thumbs  # the same layer: thumbnails untouched
    assert panel.big_html.value != big and "<b>head 5</b>" in panel.label.value
    panel.layer.value = 1
    assert panel.thumbs_html.value != thumbs and "<b>layer 1</b>" in panel.label.value
    assert model.forwards == forwards
    panel.sentence.value = "a new sentence"
    assert model.forwards == forwards + 1
    panel.sentence.value = R.EXAMPLE  # seen before: cached
    assert model.forwards == forwards + 1


def test_a_revisited_layer_or_head_is_not_drawn_again(panel, monkeypatch):
    drawn = []
    for grid in (panel.big, panel.thumbs):
        render = grid.render
        monkeypatch.setattr(grid, "render", lambda *a, _r=render, **k: drawn.append(1) or _r(*a, **k))
    panel.head.value = 1
    panel.layer.value = 1
    assert len(drawn) == 3  # big (0, 1); thumbs and big of layer 1
    first = panel.big_html.value
    panel.layer.value = 0
    panel.head.value = 0
    panel.head.value = 1
    panel.layer.value = 1
    assert len(drawn) == 3 and panel.big_html.value == first


def test_neighbours_are_drawn_while_idle_in_an_event_loop(panel):
    async def move_and_wait():
        panel.head.value = 3
        await asyncio.sleep(R.PREFETCH_DELAY_S + 2.0)

    assert not any(k[0] == "big" and k[2:] == (0, 4) for k in panel._pictures)  # no event loop: no prefetch
    asyncio.run(move_and_wait())
    drawn = {k[2:] for k in panel._pictures if k[0] == "big"}
    assert {(0, 2), (0, 3), (0, 4), (1, 3)} <= drawn
    assert any(k[0] == "thumbs" and k[2] == 1 for k in panel._pictures)
    assert not panel._prefetching and panel._todo == []
    before = len(panel._pictures)
    panel.head.value = 4  # prefetched: shown without drawing
    assert len(panel._pictures) == before and "<b>head 4</b>" in panel.label.value


def test_the_example_button_restores_the_example(panel):
    panel.sentence.value = "something else"
    panel.example.click()
    assert panel.sentence.value == R.EXAMPLE and "animal" in panel.tokens_html.value


def test_forged_slider_values_past_the_ends_are_clamped_and_shown(panel):
    _forge(panel.layer, {"value": 99})
    _forge(panel.head, {"value": -3})
    assert panel.status.value == ""
    assert (panel.layer.value, panel.head.value) == (1, 0)
    assert "<b>layer 1</b>" in panel.label.value and "<b>head 0</b>" in panel.label.value


@pytest.mark.parametrize(("control", "state"), [("head", {"value": "x"}), ("model", {"index": 7}),
                                                 ("sentence", {"value": 5})])
def test_forged_values_are_reported_not_raised(panel, control, state):
    _forge(getattr(panel, control), state)
    assert "ignored a value" in panel.status.value
    assert "layer 0" in panel.label.value


def test_a_forged_out_of_range_head_in_the_callback_is_refused(panel):
    assert not panel.refresh(head=40)
    assert "head must be an int in [0, 11]" in panel.status.value


def test_a_missing_model_names_make_models():
    p = R.RealHeadsPanel(load=fake_loader(available=("minilm",)))
    assert p.status.value == "" and p.big_html.value
    p.model.value = "smollm2"
    assert "make models" in p.status.value and "SmolLM2" in p.status.value
    assert p.induction_demo() is None and "make models" in p.status.value
    empty = R.RealHeadsPanel(load=fake_loader(available=()))
    assert "make models" in empty.status.value and empty.big_html.value == ""


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
    assert "fake smollm2" in Tags(panel.big_html.value).tags[0][1]["alt"]
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
