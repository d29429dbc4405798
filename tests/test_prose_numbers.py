"""The rule for numbers in the lessons' prose (notebooks/README.md, "Numbers in the prose").

Every number written in a lesson's prose is either

1. written exactly as a cell of the same section has it: set in its code or printed in its output
   (the Recap may use any cell of the notebook), or
2. quoted in a claim that a test checks (``Claim.prose`` in ``tests/test_lesson_claims_NN.py``).

Not counted as numbers: integers up to 12 (counts, section and step numbers, exponents), years
(citations), notebook numbers (``notebook 06``, ``01 to 03``) and digits inside names
(``11_real_heads``, ``W_O``, ``d_k``). Numbers are compared with their thousands separators
removed (``1,048,576``, ``1{,}048{,}576`` and ``1_048_576`` are one number).
"""

from __future__ import annotations

import html
import importlib
import json
import re
from pathlib import Path

import pytest
from lesson_claims import output_text

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSONS = sorted(p for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb") if p.name not in ("09_the_block.ipynb", "10_a_real_layer.ipynb", "11_real_heads.ipynb"))

NUMBER = re.compile(r"(?<![\w.{])\d+(?:(?:,|\{,\}|_)\d{3})*(?:\.\d+)?(?![\w}])")
NOT_PROSE = [
    re.compile(r"\]\([^)]*\)"),  # link targets
    re.compile(r"arXiv:\s*\d+\.\d+"),  # paper identifiers
    re.compile(r"`[^`]*`"),  # code spans: names, calls
    re.compile(r"\b(?:notebooks?|§)\s*\d\d?\b(?:\s*(?:,|and|to|-|–)\s*\d\d?\b)*"),  # notebook/section numbers
    re.compile(r"\b\d\d(?:\s*(?:,|and|to|-|–)\s*\d\d)*\s+(?=\()"),  # "00 (the on-ramp)"
    re.compile(r"\b\d\d\s*(?:-|–|to)\s*\d\d\b"),  # ranges of notebooks: 01-04
    re.compile(r"\b(?:section|sections|step)\s+\d+"),
    re.compile(r"^##? \d\d · ", re.M),  # a notebook's number in its title, or in a guide's heading
]


def _norm(number: str) -> str:
    return number.replace("{,}", "").replace(",", "").replace("_", "")


def _numbers(text: str) -> set[str]:
    for pattern in NOT_PROSE:
        text = pattern.sub(" ", text)
    found = set()
    for n in NUMBER.findall(text):
        value = _norm(n)
        if "." not in value and (int(value) <= 12 or 1900 <= int(value) <= 2030):
            continue
        found.add(value)
    return found


def _evidence(cell: dict) -> str:
    """A code cell's source, its stored text output and its images' alt texts."""
    alts = [html.unescape(a) for out in cell.get("outputs", [])
            for a in re.findall(r'alt="([^"]*)"', "".join(out.get("data", {}).get("text/html", "")))]
    return "\n".join(["".join(cell["source"]), output_text(cell, "\n"), *alts])


def _sections(nb: dict) -> list[tuple[str, list[dict]]]:
    """(heading, cells) per ``## `` section; a markdown cell holding a heading is split there."""
    sections: list[tuple[str, list[dict]]] = [("", [])]
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            sections[-1][1].append(cell)
            continue
        for part in re.split(r"(?m)^(?=## )", "".join(cell["source"])):
            if part.startswith("## "):
                sections.append((part.splitlines()[0], []))
            sections[-1][1].append({"cell_type": "markdown", "source": [part]})
    return sections


def _checked_quotes(path: Path) -> str:
    try:
        module = importlib.import_module(f"test_lesson_claims_{path.name[:2]}")
    except ModuleNotFoundError:
        return ""
    return " ".join(c.prose for c in module.CLAIMS) + " " + " ".join(getattr(module, "CHECKED_PROSE", ()))


def unbacked_numbers(path: Path) -> list[str]:
    """The prose numbers of notebook ``path`` that break the rule, as 'section: number'."""
    nb = json.loads(path.read_text())
    everything = "\n".join(_evidence(c) for c in nb["cells"] if c["cell_type"] == "code")
    checked = _numbers(_checked_quotes(path))
    found = []
    for title, cells in _sections(nb):
        evidence = everything if "Recap" in title else "\n".join(
            _evidence(c) for c in cells if c["cell_type"] == "code")
        backed = {_norm(n) for n in NUMBER.findall(evidence)}
        for cell in cells:
            if cell["cell_type"] != "markdown":
                continue
            for n in sorted(_numbers("".join(cell["source"])) - backed - checked):
                found.append(f"{title or 'introduction'}: {n}")
    return found


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_every_prose_number_is_printed_or_checked(path):
    assert unbacked_numbers(path) == []


def test_the_rule_catches_a_typed_number(tmp_path):
    nb = {"cells": [
        {"cell_type": "markdown", "source": ["## 1 · A section\n", "The layer has 1,048,576 weights "
                                             "and 3 heads; notebook 06 and 2017 do not count.\n"]},
        {"cell_type": "code", "source": ["print(4 * 512**2)\n"], "outputs": [
            {"output_type": "stream", "text": ["1048576\n"]}]},
        {"cell_type": "markdown", "source": ["## 2 · Another\n", "It takes 0.53 ms.\n"]},
    ]}
    probe = tmp_path / "prose_numbers_probe.ipynb"
    probe.write_text(json.dumps(nb))
    assert unbacked_numbers(probe) == ["## 2 · Another: 0.53"]


GUIDE = NOTEBOOKS.parent / "docs" / "teachers_guide.md"


def unbacked_guide_numbers(text: str, checked: str = "") -> list[str]:
    """The guide's numbers that break the rule: a section about notebook NN may use any number of
    that notebook (code, outputs, checked quotes); every other number is quoted in ``checked``."""
    found = []
    backed_everywhere = _numbers(checked)
    for part in re.split(r"(?m)^(?=## )", text):
        title = part.splitlines()[0] if part.startswith("## ") else "introduction"
        match = re.match(r"## (\d\d) ", title)
        paths = list(NOTEBOOKS.glob(f"{match.group(1)}_*.ipynb")) if match else []
        backed = set(backed_everywhere)
        for path in paths:
            nb = json.loads(path.read_text())
            backed |= {_norm(n) for c in nb["cells"] if c["cell_type"] == "code"
                       for n in NUMBER.findall(_evidence(c))}
            backed |= _numbers(_checked_quotes(path))
        found += [f"{title}: {n}" for n in sorted(_numbers(part) - backed)]
    return found
