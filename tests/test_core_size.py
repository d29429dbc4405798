"""The core is the lesson: the code a student opens is the code that runs, and it stays small.

- One default call of the layer runs at most ``PATH_LINES`` distinct lines of mha_core, in at most
  ``PATH_FILES`` files: the formula, the round trip and the checks at the door, nothing else.
- ``mha_core/core`` stays within its budget of code lines (tinygrad's ``sz.py`` in spirit).
- Nothing picks the long-context algorithm behind the caller's back.
- No module imports another's private name, and no source file keeps a dated measurement.
"""

from __future__ import annotations

import ast
import io
import os
import re
import sys
import tokenize
from pathlib import Path

import numpy as np
import pytest

import mha_core
from mha_core import MHAConfig, init_params, multi_head_attention
from mha_core.core import mha, tiled

PACKAGE = Path(mha_core.__file__).parent
CORE = PACKAGE / "core"
REPO = PACKAGE.parent

# A lesson's formula is a handful of lines (scores, softmax, weights @ V; project, split, attend,
# merge, project); the checks at the door that name every mistake are about as many again.
PATH_LINES, PATH_FILES = 60, 3
# The budget of code lines (docstrings, comments and blank lines not counted). The maths of every
# concept the course teaches (the layer, the KV cache, the backward pass, RoPE, the tiled loop,
# the counts, the ledger) fits in 620, a sitting's reading; the checks that name every bad
# argument, with their messages wrapped at 100 columns, get 320 more. Today: about 620 and 310.
# Raise a budget only with a reason in the commit.
MATHS_BUDGET, CHECKS_BUDGET = 630, 320


def executed_lines(fn) -> set[tuple[str, int]]:
    """The distinct (file, line) of mha_core that ``fn()`` executes, traced with sys.settrace."""
    root, seen = str(PACKAGE), set()

    def local(frame, event, arg):
        seen.add((frame.f_code.co_filename, frame.f_lineno))
        return local

    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local if frame.f_code.co_filename.startswith(root) else None)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return seen


def test_one_default_layer_call_runs_the_formula_and_the_checks_only():
    params = init_params(MHAConfig(512, 8), rng=0)
    x = np.zeros((100, 512), dtype=np.float32)  # the worked example: d_model=512, h=8, N=100
    multi_head_attention(x, params, 8)  # warm: imports and caches are not the call
    seen = executed_lines(lambda: multi_head_attention(x, params, 8))
    files = sorted({os.path.basename(f) for f, _ in seen})
    assert len(seen) <= PATH_LINES, f"{len(seen)} lines of mha_core ran in {files}"
    assert files == ["attention.py", "mha.py", "validate.py"]


def code_lines(path: Path) -> int:
    """Lines that hold code: not blank, not only a comment, not part of a docstring."""
    src = path.read_text()
    docs = set()
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docs.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    skip = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docs)


def test_the_core_fits_its_budget():
    sizes = {p.name: code_lines(p) for p in CORE.glob("*.py")}
    checks = sizes.pop("validate.py")
    assert sum(sizes.values()) <= MATHS_BUDGET, f"core maths: {sum(sizes.values())} code lines, {sizes}"
    assert checks <= CHECKS_BUDGET, f"core/validate.py: {checks} code lines"


def test_code_lines_counts_code_only(tmp_path):
    f = tmp_path / "m.py"
    f.write_text('"""doc\nstring"""\n\n# a comment\nx = [1,\n     2]  # trailing\n\ndef f():\n    """doc"""\n    return x\n')
    assert code_lines(f) == 4  # x = [1, / 2] / def f(): / return x


@pytest.mark.parametrize(("n", "causal"), [(100, False), (512, False), (513, False), (313, True), (314, True),
                                           (1024, True)])
def test_no_size_picks_the_tiled_path_only_the_caller_does(monkeypatch, n, causal):
    calls = []
    real = tiled.tiled_attention.unchecked
    monkeypatch.setattr(mha.tiled_attention, "unchecked", lambda *a, **k: calls.append(1) or real(*a, **k))
    params = init_params(MHAConfig(16, 8), rng=0)
    x = np.random.default_rng(0).standard_normal((n, 16)).astype(np.float32)
    formula = multi_head_attention(x, params, 8, causal=causal)
    assert calls == []  # every length, with or without a mask: the formula
    long = multi_head_attention(x, params, 8, causal=causal, tiled=True)
    assert calls == [1]
    np.testing.assert_allclose(long, formula, rtol=1e-4, atol=1e-5)


def _sources():
    for top in ("mha_core", "mha_serve"):
        yield from sorted((REPO / top).rglob("*.py"))


def test_no_module_imports_a_private_name_of_another():
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                found += [f"{path.relative_to(REPO)}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert found == []


DATED = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b|\b\d{1,2} (January|February|March|April|May|June|July|August|"
                   r"September|October|November|December) 20\d\d\b|\bUTC\b|load average \d|\bthis VM\b")


def test_no_source_file_keeps_a_dated_measurement():
    found = [f"{p.relative_to(REPO)}:{i}" for p in _sources()
             for i, line in enumerate(p.read_text().splitlines(), 1) if DATED.search(line)]
    assert found == []
    assert DATED.search("the run of 1 December 2026 (16:48 UTC, quiet)")  # the pattern sees one


def _printed(notebook: str, code: str) -> str:
    """The stored output of the one cell of ``notebook`` whose source contains ``code``."""
    import json

    nb = json.loads((REPO / "notebooks" / notebook).read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and code in "".join(c["source"])]
    assert len(cells) == 1, (notebook, code, len(cells))
    return "".join("".join(out.get("text", "")) for out in cells[0]["outputs"]).rstrip("\n")


def test_the_lessons_print_the_code_that_runs():
    from mha_core import multi_head_attention, scaled_dot_product_attention
    from mha_core.teaching.source import source

    loop = "\n\n".join(source(f) for f in (tiled.query_block, tiled.scores, tiled.add_with_frozen_max))
    assert _printed("12_long_context.ipynb", "print(source(tiled.query_block))") == loop
    assert _printed("02_shape_round_trip.ipynb", "print(source(multi_head_attention))") == source(
        multi_head_attention)
    assert _printed("02_shape_round_trip.ipynb", "print(source(scaled_dot_product_attention))") == source(
        scaled_dot_product_attention)
    assert "def multi_head_attention(" in source(multi_head_attention)
    assert '"""' not in source(multi_head_attention)  # the docstring is left out
