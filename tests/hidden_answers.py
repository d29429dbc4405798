"""What students must not be given: the solutions' code and the text of the guide's answers.

The students' site (tests/test_site.py) and the students' release (tests/test_coursework.py) are
searched for both; the teachers' site must contain both, which shows that the search finds them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
GUIDE = REPO / "docs" / "teachers_guide.md"


def flat(text: str) -> str:
    """Whitespace collapsed, so that a line of code or a sentence is found however it wraps."""
    return " ".join(text.split())


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _shown(cell: dict) -> str:
    """A cell's source and its printed outputs."""
    outputs = cell.get("outputs", [])
    return "".join(cell["source"]) + " ".join("".join(o.get("text", "")) for o in outputs)


def solution_code_lines() -> list[str]:
    """Each line of the solutions' code (20 characters or more, not a comment) that the students
    are not shown anyway: in no lesson (code or output) and not in the package they import. Those
    are the lines that give an answer away; ``import numpy as np`` or ``if mask is not None:`` is
    not one."""
    package = " ".join(p.read_text(encoding="utf-8") for p in (REPO / "mha_core").rglob("*.py"))
    lessons = flat(" ".join(_shown(c) for p in sorted(NOTEBOOKS.glob("*.ipynb")) for c in _cells(p))
                   + package)
    lines = []
    for path in sorted((NOTEBOOKS / "solutions").glob("*.ipynb")):
        for cell in (c for c in _cells(path) if c["cell_type"] == "code"):
            for line in "".join(cell["source"]).splitlines():
                line = flat(line)
                if len(line) >= 20 and not line.startswith("#") and line not in lessons:
                    lines.append(line)
    return lines


def guide_answer_phrases() -> list[str]:
    """From each answer of the guide (the folded <details> blocks), its longest run of plain words
    (no maths, no code), when that run is 30 characters or more: text a page would show as is."""
    phrases = []
    for block in re.findall(r"<details><summary>Answers</summary>(.*?)</details>", GUIDE.read_text(), re.S):
        for answer in re.split(r"\n- ", block):
            runs = re.split(r"\$[^$]*\$|`[^`]*`|\*\*|[*_]|\(|\)|\"", answer)
            longest = max((flat(r).strip(" ,.;:") for r in runs), key=len)
            if len(longest) >= 30:
                phrases.append(longest)
    return phrases
