"""Every cross-reference in the lessons points to a notebook that exists and, for the concepts of
``TAUGHT_IN``, to a notebook that teaches the concept.

A reference is ``notebook 06``, ``notebooks 00, 02 and 04``, ``notebooks 00-08``, ``06's``,
``11_real_heads`` or a bare two-digit number with a leading zero (``the mask of 03``): numbers
written that way are notebook numbers in this course. Where a concept of ``TAUGHT_IN`` is
named and a reference follows it closely (within ``WINDOW`` characters, in the same clause: "a
causal mask (notebooks 00, 02 and 04)", "the KV cache of 06"), the reference must include a
notebook that teaches it.
``TAUGHT_IN`` itself is checked against the notebooks' text: a notebook teaches a concept when
one of its section headings names it, and the table lists exactly those notebooks.
"""

from __future__ import annotations

import json
import re

import pytest
from lesson_claims import NOTEBOOKS, markdown_text

LESSONS = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
SOLUTIONS = sorted(f"solutions/{p.name}" for p in (NOTEBOOKS / "solutions").glob("*.ipynb"))
NUMBERS = {name[:2]: name.removesuffix(".ipynb") for name in LESSONS}  # "03" -> "03_worked_example"

# concept: (how a sentence names it, how a section heading that teaches it names it, the notebooks)
TAUGHT_IN = {
    "causal mask": (r"causal mask|\bthe mask\b", r"causal mask", ("00", "02", "04")),
    "KV cache": (r"KV cache|key/value cache", r"cache", ("06", "11", "12")),
    "GQA": (r"\bGQA\b|grouped-query", r"\bGQA\b|key/value heads", ("06", "11")),
    "induction heads": (r"induction head", r"induction", ("11",)),
    "RoPE": (r"\bRoPE\b", r"\bRoPE\b", ("09",)),
    "online softmax": (r"online softmax", r"online softmax", ("12",)),
}

_RANGE = r"\d\d(?:\s*(?:-|–|to)\s*\d\d)?"
_REFS = [
    re.compile(rf"\bnotebooks?\s+({_RANGE}(?:\s*(?:,|and|or)\s*{_RANGE})*)"),  # notebook 06, notebooks 00-08
    re.compile(r"(?<!layer )\b(\d\d)'s\b"),  # 06's formula (not "layer 17's")
    re.compile(r"\b(\d\d_[a-z][a-z_]*[a-z])"),  # 11_real_heads
    re.compile(r"(?<![\w.,$])(0\d)(?![\w%$]|[.,]\d)"),  # the mask of 03: a leading zero marks a notebook number
]
WINDOW = 30  # characters after a concept's name in which a reference is taken to be about it


def _numbers(text: str) -> set[str]:
    """The notebook numbers one reference names; ranges are expanded."""
    out: set[str] = set()
    for part in re.findall(r"\d\d(?:\s*(?:-|–|to)\s*\d\d)?", text):
        ends = re.findall(r"\d\d", part)
        lo, hi = int(ends[0]), int(ends[-1])
        out |= {f"{n:02d}" for n in range(lo, hi + 1)}
    return out


def references(text: str) -> tuple[set[str], set[str]]:
    """(notebook numbers, notebook stems such as ``11_real_heads``) that ``text`` refers to."""
    numbers: set[str] = set()
    stems = set(_REFS[2].findall(text))
    for pattern in (_REFS[0], _REFS[1], _REFS[3]):
        for match in pattern.findall(text):
            numbers |= _numbers(match)
    return numbers | {s[:2] for s in stems}, stems


def _after(text: str, named: str) -> list[str]:
    """For each place ``named`` matches, the text that follows it in the same clause, at most WINDOW characters."""
    return [re.split(r"[.;:!?]\s|\)", text[m.end():m.end() + WINDOW])[0] for m in re.finditer(named, text, re.I)]


def _headings(name: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / name).read_text())
    cells = ("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    return [line for cell in cells for line in cell.splitlines() if re.match(r"#{2,3} ", line)]


def test_the_reference_pattern_reads_every_form():
    assert references("with a causal mask (notebooks 00, 02 and 04)")[0] == {"00", "02", "04"}
    assert references("Assumes notebooks 00-08 and `09_the_block`") == (
        {f"{n:02d}" for n in range(10)}, {"09_the_block"})
    assert references("the mask of 03, and 06's formula")[0] == {"03", "06"}
    assert references("0.05 of 12 heads, 2,048 tokens, 05%")[0] == set()


@pytest.mark.parametrize("name", LESSONS + SOLUTIONS)
def test_every_reference_points_to_a_notebook_that_exists(name):
    numbers, stems = references(markdown_text(name))
    assert numbers <= set(NUMBERS), f"{name} refers to notebooks {sorted(numbers - set(NUMBERS))}, which do not exist"
    assert stems <= set(NUMBERS.values()), f"{name} refers to {sorted(stems - set(NUMBERS.values()))}"


@pytest.mark.parametrize("concept", TAUGHT_IN)
def test_the_table_lists_the_notebooks_that_teach_each_concept(concept):
    _, heading, listed = TAUGHT_IN[concept]
    teach = {n for n, stem in NUMBERS.items()
             if any(re.search(heading, h, re.I) for h in _headings(f"{stem}.ipynb"))}
    assert teach == set(listed), f"{concept}: headings name it in {sorted(teach)}, the table says {listed}"


@pytest.mark.parametrize("name", LESSONS + SOLUTIONS)
def test_a_concept_is_referred_to_a_notebook_that_teaches_it(name):
    text, wrong = markdown_text(name), []
    for concept, (named, _, teachers) in TAUGHT_IN.items():
        for after in _after(text, named):
            numbers, _ = references(after)
            if numbers and not numbers & set(teachers):
                wrong.append(f"{concept} -> notebooks {sorted(numbers)}, taught in {', '.join(teachers)}: ...{after}")
    assert not wrong, f"{name}:\n" + "\n".join(wrong)


def test_a_wrong_reference_is_caught():
    def caught(text):
        return [a for a in _after(text, TAUGHT_IN["causal mask"][0])
                if references(a)[0] and not references(a)[0] & set(TAUGHT_IN["causal mask"][2])]

    assert caught("with the mask of 03, a token knows") and caught("a causal mask (notebook 03)")
    assert not caught("a causal mask (notebooks 00, 02 and 04)") and not caught("the causal mask. See 03")
