"""mha_core.ui.glossary: the tips' markup, and that the dashboard's hand-written tips match the table."""

from __future__ import annotations

import html
import json
import re

import pytest
from dashboard_server import NOTEBOOK, REPO

from mha_core.ui.glossary import GLOSSARY, term

TIP = re.compile(r'<span class="mha-term" tabindex="0">(.*?)<span class="mha-term-tip"> \((.*?)\)</span></span>', re.S)


def test_term_is_a_focusable_word_that_carries_its_explanation():
    tip = term("MACs")
    assert tip.startswith('<span class="mha-term" tabindex="0">MACs<span class="mha-term-tip"> (')
    assert html.escape(GLOSSARY["MACs"]) in tip
    assert ">query token<" in term("query", "query token")
    assert "&lt;" in term("[CLS]", "<CLS>")  # escaped


@pytest.mark.parametrize(("args", "exc"), [(("FLOPS",), ValueError), (("MACs", 3), TypeError)])
def test_term_validates(args, exc):
    with pytest.raises(exc):
        term(*args)


def test_the_dashboards_tips_are_the_glossarys():
    """Every tip written into the dashboard's markdown explains its word with the glossary's text,
    and the page explains each jargon word the issue named (MACs, GQA, MQA, bidirectional, quantised)."""
    cells = json.loads((REPO / NOTEBOOK).read_text())["cells"]
    text = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    found = TIP.findall(text)
    assert len(found) >= 10 and text.count('class="mha-term"') == len(found)
    explained = {html.unescape(tip) for _, tip in found}
    assert explained <= set(GLOSSARY.values())
    words = {next(k for k, v in GLOSSARY.items() if v == html.unescape(tip)) for _, tip in found}
    assert {"MACs", "GQA", "MQA", "bidirectional", "quantised", "causal", "head"} <= words
