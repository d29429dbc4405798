"""The share of notebook code lines that teach, per notebook: ``python scripts/lesson_share.py [--rev REV]``.

The rule (issue 10: "a lesson, not a test file")
------------------------------------------------
A *code line* is a non-blank line of a code cell that is not a plain comment. A ``# NBVAL_...``
marker comment counts as a code line too, because it is test-harness text in the student's cell.

A code line *checks machinery* (instead of teaching) when

1. it is a ``# NBVAL_...`` marker (nbval cell tags replace them);
2. it is an ``assert`` (issue 16: a lesson cell computes and prints; the claims of the lesson are
   checked in ``tests/test_lesson_claims_NN.py``, the checkers in ``tests/test_exercises.py``);
3. it is a comment addressed to the test runner or the machine, not to the student
   (``# NBVAL_...``, "another BLAS may flip", "the check above is the claim");
4. it validates arguments (``isinstance(``, ``raise ...Error`` but not an exercise stub's
   ``raise NotImplementedError``, a message saying what "must be"):
   validation belongs in ``mha_core`` and its tests, not in the lesson;
5. its cell probes the machinery: the cell drives a widget from code (``.value = ...`` on a
   widget, ``.refresh(``, ``.status.value``), scrapes HTML (``html.unescape``, ``re.sub(``),
   times our own renderer (``frames_built``), catches a validator's error (``except ...Error``,
   ``pytest.raises``) or is tagged ``raises-exception``. Every code line of such a cell counts.

Every other code line teaches: imports, the computation, the print of its result, the figure.
``--asserts`` also prints, per notebook, how many code cells contain an ``assert`` (issue 16:
at most one code cell in ten). Solutions notebooks,
``dashboard.ipynb`` are not lessons and are not counted.

``--rev`` reads the notebooks of a git revision instead of the working tree (for the "before").
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LESSON = re.compile(r"^notebooks/\d\d_[^/]+\.ipynb$")

NBVAL_MARKER = re.compile(r"^\s*#\s*NBVAL_")
ASSERT = re.compile(r"^\s*assert\b")
RUNNER_COMMENT = re.compile(r"#.*\b(BLAS|nbval|NBVAL|test runner|the check above)\b")
VALIDATION = re.compile(r"isinstance\(|raise (?!NotImplementedError)\w*Error|must be")
PROBE_CELL = re.compile(
    r"html\.unescape|re\.sub\(|\.refresh\(|\.status\.value|frames_built|pytest\.raises"
    r"|except\s+\(?\w*Error|_slider\.value\s*=|\bprobe\.\w+(\.value)?\s*="
)


def classify(source: str, tags: list[str]) -> tuple[int, int]:
    """(teaching lines, machinery lines) of one code cell."""
    lines = [ln for ln in source.splitlines() if ln.strip()]
    code = [ln for ln in lines if not ln.lstrip().startswith("#") or NBVAL_MARKER.match(ln)]
    if "raises-exception" in tags or PROBE_CELL.search(source):
        return 0, len(code)
    machinery = sum(
        1 for ln in code if NBVAL_MARKER.match(ln) or ASSERT.match(ln)
        or RUNNER_COMMENT.search(ln) or VALIDATION.search(ln)
    )
    return len(code) - machinery, machinery


def _source(cell: dict) -> str:
    """A cell's source as one string (nbformat stores it as a string or a list of lines)."""
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def notebook_share(nb: dict) -> tuple[int, int]:
    """(teaching lines, machinery lines) of a notebook (nbformat 4 JSON)."""
    teach = machinery = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        t, m = classify(_source(cell), cell.get("metadata", {}).get("tags", []))
        teach, machinery = teach + t, machinery + m
    return teach, machinery


def assert_cells(nb: dict) -> tuple[int, int]:
    """(code cells containing an ``assert``, code cells) of a notebook."""
    sources = [_source(c) for c in nb["cells"] if c["cell_type"] == "code"]
    return sum(any(ASSERT.match(ln) for ln in s.splitlines()) for s in sources), len(sources)


def lesson_notebooks(rev: str | None) -> dict[str, dict]:
    """path -> notebook JSON of the lesson notebooks (``notebooks/NN_*.ipynb``)."""
    if rev is None:
        paths = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "notebooks").glob("*.ipynb"))
        return {p: json.loads((ROOT / p).read_text()) for p in paths if LESSON.match(p)}
    listing = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "notebooks/"], cwd=ROOT, check=True,
        capture_output=True, text=True,
    ).stdout.split()
    return {
        p: json.loads(subprocess.run(["git", "show", f"{rev}:{p}"], cwd=ROOT, check=True,
                                     capture_output=True, text=True).stdout)
        for p in sorted(listing) if LESSON.match(p)
    }


def main(argv: list[str] | None = None) -> dict[str, tuple[int, int]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="git revision to read (default: the working tree)")
    parser.add_argument("--asserts", action="store_true", help="also count the code cells with an assert")
    args = parser.parse_args(argv)
    notebooks = lesson_notebooks(args.rev)
    if args.asserts:
        counts = {Path(p).stem: assert_cells(nb) for p, nb in notebooks.items()}
        for name, (a, n) in counts.items():
            print(f"{name:<24} {a:>3} of {n:>3} code cells assert")
        a, n = (sum(v[i] for v in counts.values()) for i in (0, 1))
        print(f"{'all':<24} {a:>3} of {n:>3} code cells assert ({a / max(n, 1):.0%})")
    rows = {Path(p).stem: notebook_share(nb) for p, nb in notebooks.items()}
    total_t = sum(t for t, _ in rows.values())
    total_m = sum(m for _, m in rows.values())
    print(f"{'notebook':<24} {'teach':>6} {'check':>6} {'share':>7}")
    for name, (t, m) in rows.items():
        print(f"{name:<24} {t:>6,} {m:>6,} {t / max(t + m, 1):>7.1%}")
    print(f"{'all':<24} {total_t:>6,} {total_m:>6,} {total_t / max(total_t + total_m, 1):>7.1%}")
    return rows


if __name__ == "__main__":
    main()
