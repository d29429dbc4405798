"""The real-model panel's "write" mode: SmolLM2 adds tokens one at a time, and for each new
token the page shows where the chosen head looked while choosing it.

    WritePanel(load)   prompt box, "write" button, length, layer and head -> the new tokens,
                       each with the chosen head's attention over every token before it

The model writes greedily with its KV cache (``SmolLM2.write``: prefill, then one decode step
per token); each token is shown as soon as it exists, so the reader watches the text grow. The
attention row of a new token is that of the query that chose it (the token just before it) over
all the tokens before the new one: bertviz shows the attention of a fixed text, this shows the
attention of the text being written.

Everything is HTML, no picture: each earlier token is a ``<span>`` shaded by its weight, with
the exact weight in its ``title`` (hover) and a one-line summary per row for screen readers.
Every token is HTML-escaped, so a prompt such as ``<img src=x onerror=alert(1)>`` shows as text.
The length is capped (``MAX_NEW_TOKENS``), and the caption says that the weights are 4-bit
quantised.
"""

from __future__ import annotations

import html
from collections.abc import Callable

import ipywidgets as widgets
import numpy as np

from ..models import load as load_model
from .controls import GuardedIntSlider, GuardedText, Panel

MODEL = "smollm2"  # the decoder it writes with until ``use`` names another (an encoder does not write)
MAX_NEW_TOKENS = 24  # a class watching tokens appear; longer waits too long on a laptop
DEFAULT_NEW_TOKENS = 12
EXAMPLE_PROMPT = "The capital of France is"
# The shading of a key: weight / (largest weight of the row), as the alpha of one colour, so the
# strongest key of every row is fully coloured. Dark blue on white text is readable at any alpha
# above MIN_ALPHA; below it the token keeps the page's own colours.
SHADE_RGB = (33, 102, 172)
MIN_ALPHA = 0.08


def _escape(token: str) -> str:
    """A token as safe HTML on one line: escaped, with newlines and tabs shown as ``\\n`` and ``\\t``."""
    return html.escape(token.replace("\n", "\\n").replace("\t", "\\t"), quote=True)


def row_html(tokens: list[str], weights: np.ndarray, new: str, step: int, digits: int = 3) -> str:
    """One written token and the chosen head's attention over the tokens before it, as HTML.

    Parameters
    ----------
    tokens : list of t str, the tokens before the new one
    weights : ndarray of shape (t,), the attention row (sums to 1)
    new : str, the new token
    step : int, its number among the new tokens (from 1)
    digits : int, default 3, the decimals of each key's weight in its title (the static site,
        which stores weights to the nearest 1/255, shows 2)
    """
    if isinstance(digits, bool) or not isinstance(digits, int) or not 0 <= digits <= 6:
        raise ValueError(f"digits must be an int from 0 to 6, got {digits!r}")
    if len(tokens) != weights.shape[-1]:
        raise ValueError(f"weights has {weights.shape[-1]} entries for {len(tokens)} tokens")
    top = float(weights.max()) or 1.0
    k = int(weights.argmax())
    spans = []
    for i, (tok, w) in enumerate(zip(tokens, weights, strict=True)):
        alpha = float(w) / top
        style = (f"background:rgba({SHADE_RGB[0]},{SHADE_RGB[1]},{SHADE_RGB[2]},{alpha:.2f});"
                 f"color:{'#fff' if alpha > 0.5 else 'inherit'}") if alpha >= MIN_ALPHA else ""
        spans.append(f"<span class='mha-write-key' title='{i}: {_escape(tok)} ({float(w):.{digits}f})' "
                     f"style='{style};white-space:pre-wrap'>{_escape(tok)}</span>")
    summary = (f"new token {step}, {_escape(new)}: most weight on token {k}, {_escape(tokens[k])} "
               f"({float(weights[k]):.2f})")
    return (f"<div class='mha-write-row' role='listitem' aria-label='{summary}' style='overflow-wrap:anywhere'>"
            f"<b class='mha-write-new'>{step}. <code>{_escape(new)}</code></b> &larr; "
            f"<span class='mha-write-keys' aria-hidden='true'>{''.join(spans)}</span></div>")


class WritePanel:
    """Prompt, length, layer, head -> SmolLM2 writes, one token at a time, with each token's attention."""

    def __init__(self, *, load: Callable | None = None, prompt: str = EXAMPLE_PROMPT):
        if not isinstance(prompt, str):
            raise TypeError(f"prompt must be a str, got {type(prompt).__name__}")
        self._load = load or load_model
        self.model_name = MODEL  # the real-model panel's chosen decoder (``use``)
        self.steps: list = []  # the Steps of the last run (id, weights (layers, h, t), cache bytes)
        self.prompt_ids: np.ndarray | None = None
        self.status = widgets.HTML()
        self.status.add_class("mha-write-status")
        self.prompt = GuardedText(value=prompt, description="prompt", placeholder="type the start of a text",
                                  continuous_update=False, layout=widgets.Layout(width="min(40em, 100%)"),
                                  on_invalid=self._refused)
        self.prompt.add_class("mha-write-prompt")
        self.length = GuardedIntSlider(value=DEFAULT_NEW_TOKENS, min=1, max=MAX_NEW_TOKENS, description="new tokens",
                                       continuous_update=False, on_invalid=self._refused)
        # named apart from the maps' layer and head above: these choose the rows' head only
        self.layer = GuardedIntSlider(value=0, min=0, max=0, description="rows' layer", continuous_update=False,
                                      on_invalid=self._refused)
        self.head = GuardedIntSlider(value=0, min=0, max=0, description="rows' head", continuous_update=False,
                                     on_invalid=self._refused)
        for slider, css in ((self.length, "mha-write-length"), (self.layer, "mha-write-layer"),
                            (self.head, "mha-write-head")):
            slider.add_class(css)
        for slider in (self.layer, self.head):
            slider.observe(lambda _c: self.redraw(), names="value")
        self.button = widgets.Button(description="write", icon="pencil",
                                     tooltip=f"SmolLM2 writes up to {MAX_NEW_TOKENS} tokens after the prompt")
        self.button.add_class("mha-write-run")
        self.button.on_click(lambda _b: self.write())
        self.caption = widgets.HTML()
        self.caption.add_class("mha-write-caption")
        self.text = widgets.HTML()
        self.text.add_class("mha-write-text")
        self.rows = widgets.HTML()
        self.rows.add_class("mha-write-rows")
        self.heading = widgets.HTML(_heading("SmolLM2"))
        self.widget = widgets.VBox([
            self.heading,
            Panel._controls(widgets.HBox([self.prompt, self.length, self.button], layout=widgets.Layout(flex_flow="row wrap")),
                            widgets.HBox([self.layer, self.head], layout=widgets.Layout(flex_flow="row wrap"))),
            self.status, self.caption, self.text, self.rows,
        ])
        self.widget.add_class("mha-write-panel")
        try:
            self.model()  # the sliders' ranges; a missing cache shows its message, nothing raises
        except RuntimeError as err:
            self._invalid(str(err))

    def _refused(self, widget, _sync_data, err) -> None:
        self._invalid(f"{widget.description}: refused value ({err})")

    def _invalid(self, message: str) -> None:
        self.status.value = f"<span class='mha-write-error' role='alert'>{html.escape(message)}</span>"

    def use(self, name: str) -> None:
        """Write with the decoder ``name`` (a name or a model folder ``load`` takes) from now on."""
        if name == self.model_name:
            return
        self.model_name, self.prompt_ids, self.steps = name, None, []
        self.text.value = self.rows.value = self.caption.value = self.status.value = ""
        try:
            m = self.model()
        except RuntimeError as err:
            self._invalid(str(err))
            return
        self.heading.value = _heading(m.label.split(" (")[0])

    def model(self):
        """The decoder (SmolLM2 unless ``use`` chose another), loaded once; a readable error
        naming ``make models`` if SmolLM2's cache is missing."""
        try:
            m = self._load(self.model_name)
        except Exception as err:  # a missing or corrupt cache: say which command fixes it
            if self.model_name != MODEL:
                raise RuntimeError(f"{self.model_name} could not be loaded ({err})") from err
            raise RuntimeError(f"SmolLM2 is not available here ({err}). Run `make models` in the project "
                               f"folder to fetch it, then reload this page.") from err
        for slider, top in ((self.layer, m.n_layers - 1), (self.head, m.n_heads - 1)):
            if slider.max != top:
                slider.max = top
        return m

    def write(self) -> bool:
        """Run the model on the prompt, showing each new token as it is chosen. False on bad input."""
        try:
            m = self.model()
            text = self.prompt.value
            n_new = self.length.value
            if not isinstance(text, str):
                raise TypeError(f"the prompt must be text, got {type(text).__name__}")
            if isinstance(n_new, bool) or not isinstance(n_new, int) or not 1 <= n_new <= MAX_NEW_TOKENS:
                raise ValueError(f"new tokens must be an int from 1 to {MAX_NEW_TOKENS}, got {n_new!r}")
            ids = m.encode(text)  # refuses empty text and text over the model's cap
            if ids.size + n_new > m.max_tokens:
                raise ValueError(f"the prompt is {ids.size} tokens; with {n_new} new ones that is over the cap "
                                 f"of {m.max_tokens}: shorten it")
        except Exception as err:  # never a traceback in the page
            self._invalid(str(err))
            return False
        self.status.value = ""
        self.prompt_ids, self.steps = ids, []
        self.button.disabled = True
        try:
            for step in m.write(ids, n_new):
                self.steps.append(step)
                self.redraw()  # each token appears as soon as it is chosen
        except Exception as err:
            self._invalid(str(err))
            return False
        finally:
            self.button.disabled = False
        return True

    def redraw(self) -> None:
        """The caption, the text so far and one row per new token, for the chosen layer and head."""
        if self.prompt_ids is None:
            return
        m = self._load(self.model_name)
        layer, head = self.layer.value, self.head.value
        ids = [int(i) for i in self.prompt_ids] + [s.id for s in self.steps]
        tokens = m.tokens(np.asarray(ids, dtype=np.int64))
        n_prompt = len(self.prompt_ids)
        self.caption.value = (
            f"<div class='mha-write-caption-text'><b>{html.escape(m.label.split(' (')[0])}</b>: real pretrained "
            f"parameters, {_stored(m, self.model_name == MODEL)}; {_heads_share(m)}. It picks the likeliest next "
            f"token each time and keeps the keys and values it has computed (the KV cache), at most {MAX_NEW_TOKENS} "
            "new tokens. "
            f"Each row: a new token, and where <b>layer {layer}, head {head}</b> looked while choosing it "
            f"(a deeper blue = more weight, whereas on the maps brighter is more; with a mouse, point at a "
            "token for its exact weight).</div>")
        written = "".join(f"<mark class='mha-write-token'>{html.escape(t)}</mark>" for t in tokens[n_prompt:])
        self.text.value = (f"<div class='mha-write-output' style='white-space:pre-wrap'>"  # as written: a newline
                           f"{html.escape(''.join(tokens[:n_prompt]))}{written}</div>")  # breaks the line (not _escape)
        self.rows.value = ("<div role='list' class='mha-write-list'>"
                           + "".join(row_html(tokens[:n_prompt + k], s.weights[layer, head], tokens[n_prompt + k], k + 1)
                                     for k, s in enumerate(self.steps))
                           + "</div>")


def _heading(name: str) -> str:
    """The write mode's title and one line on what it does, for the decoder ``name``."""
    name = html.escape(name)
    return (f"<h3>Write: watch {name} add tokens</h3><p class='mha-write-intro'>{name}, the model that "
            "writes, continues the prompt one token at a time. Press <b>write</b>: the text appears below, "
            "and under it one row per new token, showing where one head looked while choosing it. That head "
            "is chosen by this part's own <b>rows' layer</b> and <b>rows' head</b>, apart from the maps' layer "
            "and head above.</p>")


def _stored(m, four_bit: bool) -> str:
    """How the parameters of ``m`` are stored, in plain words (not the file format's names)."""
    if not m.quantised:
        return "<b>float32</b> (stored as they were trained)"
    bits = "4-bit quantised</b> (each stored in 4 bits" if four_bit else "quantised</b> (stored in fewer bits"
    return f"<b>{bits}, rounded coarsely to make the file small)"


def _heads_share(m) -> str:
    """How the heads of ``m`` share keys and values, in plain words."""
    if m.n_kv_heads < m.n_heads:
        return f"its {m.n_heads} query heads share {m.n_kv_heads} sets of keys and values"
    return f"each of its {m.n_heads} heads has its own keys and values"
