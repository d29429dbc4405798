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


# -- the lessons' glossary: the table in section 8 of 00_on_ramp is the one list of its terms ------

LESSONS = REPO / "notebooks"
GLOSSARY_HEADING = "## 8 · Glossary"


def _markdown_cells(name: str) -> list[str]:
    cells = json.loads((LESSONS / name).read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def _lesson_names() -> list[str]:
    return sorted(p.name for p in LESSONS.glob("[01][0-9]_*.ipynb"))


def lesson_glossary() -> dict[str, list[str]]:
    """The rows of 00's glossary table: term as written -> its forms (``scores, logits`` is two)."""
    cell = next(c for c in _markdown_cells("00_on_ramp.ipynb") if c.startswith(GLOSSARY_HEADING))
    rows = [line for line in cell.splitlines() if line.startswith("| ") and not line.startswith("| term |")]
    terms = {row.split(" | ")[0].lstrip("| ").strip(): row for row in rows}
    return {term: [form.strip().strip("$") for form in term.split(", ")] for term in terms}


def _plain(text: str) -> str:
    return text.replace("$", "")


def _used(form: str, text: str) -> bool:
    """``form`` as a whole word of ``text``, or with a plural -s or -es (case-insensitive)."""
    return re.search(r"(?<!\w)" + re.escape(form) + r"(?:e?s)?(?!\w)", text, re.I) is not None


def _prose_outside_the_glossary() -> str:
    parts = []
    for name in _lesson_names():
        parts += [c for c in _markdown_cells(name) if not c.startswith(GLOSSARY_HEADING)]
    return _plain("\n".join(parts))


def test_every_glossary_term_is_used_in_the_lessons():
    """No entry the student is asked to learn for nothing: each form of each term occurs in the
    prose of the lessons 00 to 12, outside the glossary itself."""
    prose = _prose_outside_the_glossary()
    unused = {term: [f for f in forms if not _used(f, prose)] for term, forms in lesson_glossary().items()}
    assert not {t: f for t, f in unused.items() if f}


def _bold(text: str) -> str:
    return _plain(" ".join(re.findall(r"\*\*(.+?)\*\*", text, re.S)))


def test_the_on_ramp_defines_each_glossary_word_it_uses_before_the_glossary():
    """Notebooks 01 to 13 come after the glossary; 00 itself uses some of its words earlier, in
    sections 1 to 7. Each of those is defined (written in bold) in the cell of its first use or
    an earlier one, so no word of 00 is used before it is explained."""
    cells = _markdown_cells("00_on_ramp.ipynb")
    end = next(i for i, c in enumerate(cells) if c.startswith(GLOSSARY_HEADING))
    forms = {f for fs in lesson_glossary().values() for f in fs if len(f) > 2 and f[0].isalpha() and "_" not in f}
    early = [f for f in sorted(forms) if any(_used(f, _plain(c)) for c in cells[1:end])]  # cell 0: the outline
    late = []
    for form in early:
        first = next(i for i in range(1, end) if _used(form, _plain(cells[i])))
        if not any(_used(form, _bold(c)) for c in cells[1:first + 1]):
            late.append((form, first))
    assert not late, f"glossary words 00 uses before defining them (form, markdown cell): {late}"


# The words two cold readers (a student, 00-06 and 07-12) found used before any definition, or
# never defined: each is now a term of the glossary, or defined in bold where it is first used.
READERS_MISSED = (
    "transformer", "parameters", "bias", "projection-dominated", "attention-dominated", "attention core", "pretrained",
    "caches", "gradient", "layer", "vocabulary", "GPT", "multi-head attention", "tokenizer",
    "position embeddings", "cross-entropy", "attention sink", "non-linearity", "CDF", "BERT-base", "GPT-2",
    "7B", "serving", "paged caches",
)


def test_the_words_the_cold_readers_missed_are_explained():
    forms = {f.lower() for fs in lesson_glossary().values() for f in fs}
    assert not [w for w in READERS_MISSED if w.lower() not in forms]


def test_the_glossary_promises_only_what_the_tests_check():
    """Neither 00 nor 01 promises "every word": the glossary holds the words the later notebooks
    take as known, which the tests above check."""
    for name in ("00_on_ramp.ipynb", "01_one_head.ipynb"):
        prose = " ".join(_markdown_cells(name))
        assert "every word" not in prose
        assert "Words used without a definition here" not in prose


def test_layer_has_one_meaning_and_the_glossary_says_which():
    rows = {term: row for term, row in zip(lesson_glossary(), _glossary_rows(), strict=True)}
    assert "one multi-head attention layer" in rows["layer"]
    assert "32 blocks, so 32 attention layers" in rows["layer"]


def _glossary_rows() -> list[str]:
    cell = next(c for c in _markdown_cells("00_on_ramp.ipynb") if c.startswith(GLOSSARY_HEADING))
    return [line for line in cell.splitlines() if line.startswith("| ") and not line.startswith("| term |")]


def test_llama_style_does_not_claim_gqa_for_every_llama():
    row = next(r for r in _glossary_rows() if r.startswith("| Llama-style |"))
    assert "Llama 1 and the 7B and 13B Llama 2 use plain multi-head attention" in row
