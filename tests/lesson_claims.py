"""The claims of a lesson notebook, checked outside the student's cells.

A lesson cell computes and prints; it does not assert. Each claim its prose makes is checked
here instead, as a :class:`Claim`: the sentence it defends (quoted, and required to be still in
the notebook), the code cell it belongs to, and a Python expression that must be true in the
notebook's namespace right after that cell ran.

:func:`run_claims` executes the notebook once in a fresh kernel (``nbclient``, as nbval does),
cell by cell, and evaluates each claim right after its cell, so a later cell that reuses a name
cannot change what a claim sees. Strict nbval separately proves that the stored outputs are what
a fresh run prints; a claim about a printed number may therefore read the stored output instead
(:func:`outputs`), which needs no kernel.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@dataclass(frozen=True)
class Claim:
    """One checked sentence: ``prose`` (quoted from the notebook), ``after`` (a snippet of the
    code cell it belongs to) and ``check`` (an expression true in the notebook after that cell)."""

    prose: str
    after: str
    check: str


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def markdown_text(name: str) -> str:
    """The notebook's markdown cells, whitespace collapsed (prose quotes are searched in it)."""
    nb = json.loads((NOTEBOOKS / name).read_text())
    return _flat(" ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"))


def code_sources(name: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / name).read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def output_text(cell: dict, sep: str = "") -> str:
    """A code cell's stored text output: each stream's text, else each output's text/plain, joined by ``sep``."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out["text"]))
        elif "text/plain" in out.get("data", {}):
            parts.append("".join(out["data"]["text/plain"]))
    return sep.join(parts)


def outputs(name: str, after: str) -> str:
    """The stored text output (streams and text/plain) of the one code cell containing ``after``."""
    nb = json.loads((NOTEBOOKS / name).read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and after in "".join(c["source"])]
    if len(cells) != 1:
        raise ValueError(f"after={after!r} matches {len(cells)} code cells of {name}, expected 1")
    return output_text(cells[0])


def problems(name: str, claims: list[Claim]) -> list[str]:
    """Claims whose quote is no longer in the notebook's prose, or whose cell is not found once."""
    prose, sources = markdown_text(name), code_sources(name)
    found = []
    for c in claims:
        if _flat(c.prose) not in prose:
            found.append(f"prose no longer in {name}: {c.prose!r}")
        hits = sum(c.after in s for s in sources)
        if hits != 1:
            found.append(f"after={c.after!r} matches {hits} code cells of {name}, expected 1")
    return found


def run_claims(name: str, claims: list[Claim], timeout: int = 900) -> dict[Claim, str]:
    """Execute notebook ``name`` and evaluate every claim after its cell.

    Returns claim -> "ok", or the failure ("False", or the error the expression raised).
    """
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    results: dict[Claim, str] = {}
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            client.execute_cell(cell, index)
            for claim in (c for c in claims if c.after in cell.source):
                probe = nbformat.v4.new_code_cell(f"print(repr(bool({claim.check})))")
                try:
                    client.execute_cell(probe, index)  # (nbclient stores it at that index; nb is not saved)
                    text = "".join(o.get("text", "") for o in probe.outputs).strip()
                except Exception as err:  # the expression raised: report it, keep checking
                    text = f"{type(err).__name__}: {str(err)[-300:]}"
                results[claim] = "ok" if text == "True" else text
    return results


def claim_tests(name: str, claims: list[Claim], *, marks=()):
    """The two tests of a claims module: every quote and cell is found; every claim holds.

    Use as ``test_quotes, test_claim = claim_tests(NB, CLAIMS)`` in a ``test_lesson_claims_*``
    module; the notebook runs once per module, only if a claim test is selected.
    """
    import pytest

    cache: dict[str, dict[Claim, str]] = {}

    def test_quotes():
        assert problems(name, claims) == []

    @pytest.mark.parametrize("claim", claims, ids=[f"{i:02d}" for i in range(len(claims))])
    def test_claim(claim):
        if name not in cache:
            cache[name] = run_claims(name, claims)
        assert cache[name].get(claim) == "ok", (
            f"{name}: {claim.prose!r}\n  check {claim.check!r} after the cell with {claim.after!r} "
            f"gave {cache[name].get(claim, 'no result: the cell was not found')}")

    for mark in marks:
        test_claim = mark(test_claim)
    return test_quotes, test_claim
