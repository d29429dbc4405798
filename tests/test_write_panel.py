"""The real-model panel's write mode (mha_core.ui.write_panel): tokens appear one at a time with
the chosen head's attention row, every token HTML-escaped, bad input refused with a message."""

from __future__ import annotations

import re

import numpy as np
import pytest
from fake_models import FakeModel, fake_loader
from widget_messages import plain_text

from mha_core.models.decoder import Step
from mha_core.ui import write_panel as W

XSS = "<img src=x onerror=alert(1)>"


class FakeWriter(FakeModel):
    """A fake decoder that writes: the new token repeats the prompt's tokens in turn; the weights
    are those of FakeModel's planted heads on the sequence so far."""

    def write(self, ids, max_new_tokens=8, use_cache=True):
        ids = list(ids)
        for k in range(max_new_tokens):
            w = self.attention(np.asarray(ids))[:, :, -1, :]  # (layers, h, t)
            nxt = ids[1 + k % (len(ids) - 1)]
            yield Step(nxt, w, 0)
            ids.append(nxt)


def _panel(prompt=W.EXAMPLE_PROMPT):
    models = {}

    def load(name):
        if name not in models:
            models[name] = FakeWriter(name, quantised=True, n_layers=3, n_heads=4)
        return models[name]

    return W.WritePanel(load=load, prompt=prompt)


def test_writing_shows_one_row_per_new_token_with_the_chosen_heads_row():
    p = _panel("one two three")
    p.length.value = 5
    assert p.write()
    assert len(p.steps) == 5 and p.rows.value.count("mha-write-row") == 5
    assert (p.layer.max, p.head.max) == (2, 3)
    assert "4-bit quantised" in p.caption.value and f"at most {W.MAX_NEW_TOKENS} new tokens" in p.caption.value
    # plain words, not the file format's jargon (issue 34): how the heads share keys and values
    assert "Q4_1" not in p.caption.value and "keys and values" in p.caption.value and "stored in 4 bits" in p.caption.value
    assert plain_text(p.text.value) == "<s>onetwothreeonetwothreeonetwo"
    # head 0 of the fake is a previous-token head: the query before each new token is the last
    # token, so the strongest key of row k is token t-2 (the one before the query)
    p.head.value = 0
    first = re.findall(r"aria-label='([^']*)'", p.rows.value)[0]
    assert first == "new token 1, one: most weight on token 2, two (1.00)"
    p.head.value = 1  # the sink head: everything on the first token
    assert all("most weight on token 0" in a for a in re.findall(r"aria-label='([^']*)'", p.rows.value))


def test_every_token_is_escaped():
    p = _panel(XSS + " and more")
    p.length.value = 3
    assert p.write()
    for part in (p.text.value, p.rows.value, p.caption.value):
        assert "<img" not in part
    assert "&lt;img" in p.text.value and "onerror=alert(1)&gt;" in p.text.value  # the fake splits on spaces
    assert "title='1: &lt;img" in p.rows.value


def test_the_written_text_keeps_its_line_breaks_and_the_rows_show_them():
    """The text box shows the text as written (a newline breaks the line, never a literal \\n, as a
    visitor saw); the rows' token labels keep \\n, so that each row stays on one line."""

    class Lines(FakeWriter):
        def tokens(self, ids):
            return [t.replace("NL", "\n\n") for t in super().tokens(ids)]

    model = Lines("lines", quantised=True, n_layers=3, n_heads=4)
    p = W.WritePanel(load=lambda name: model, prompt="one NL two")
    p.length.value = 3
    assert p.write()
    assert "\n\n" in p.text.value and "\\n" not in p.text.value
    assert "\\n\\n" in p.rows.value and "\n" not in p.rows.value


def test_row_html_shades_by_weight_and_checks_its_input():
    row = W.row_html(["a", "b", "c"], np.array([0.1, 0.7, 0.2]), "d", 4)
    assert "4. <code>d</code>" in row and "most weight on token 1, b (0.70)" in row
    assert "rgba(33,102,172,1.00)" in row and "title='0: a (0.100)'" in row
    with pytest.raises(ValueError, match="weights has 2 entries for 3 tokens"):
        W.row_html(["a", "b", "c"], np.array([0.5, 0.5]), "d", 1)
    # the static site stores weights to 1/255 and shows 2 decimals
    assert "title='0: a (0.10)'" in W.row_html(["a", "b", "c"], np.array([0.1, 0.7, 0.2]), "d", 4, digits=2)
    for bad in (-1, 7, 2.0, True):
        with pytest.raises(ValueError, match="digits must be an int"):
            W.row_html(["a"], np.array([1.0]), "d", 1, digits=bad)


@pytest.mark.parametrize("prompt, message", [("", "the sentence is empty"), ("w " * 120, "over the cap")])
def test_bad_prompts_give_a_message(prompt, message):
    p = _panel(prompt)
    assert not p.write()
    assert message in plain_text(p.status.value) and p.steps == []


def test_a_forged_length_or_prompt_is_refused():
    p = _panel()
    p.length.set_state({"value": 10_000})  # a forged value from the browser: clamped to the cap
    assert p.length.value == W.MAX_NEW_TOKENS
    p.length.set_state({"value": "ten"})
    assert "refused value" in plain_text(p.status.value) and p.length.value == W.MAX_NEW_TOKENS
    p.prompt.set_state({"value": 42})
    assert "refused value" in plain_text(p.status.value)


def test_a_missing_model_names_make_models():
    p = W.WritePanel(load=fake_loader(available=("minilm",)))
    assert "make models" in plain_text(p.status.value)
    assert not p.write()


def test_the_real_panel_holds_the_write_mode():
    from mha_core.ui.real_heads_panel import RealHeadsPanel

    panel = RealHeadsPanel(load=fake_loader())
    assert panel.writer.widget in panel.widget.children


def test_the_real_model_writes(smollm2):
    p = W.WritePanel(prompt="The capital of France is")
    p.length.value = 2
    assert p.write()
    assert plain_text(p.text.value).startswith("The capital of France is Paris")
    assert (p.layer.max, p.head.max) == (29, 8)
    assert p.steps[0].weights.shape == (30, 9, 5)
