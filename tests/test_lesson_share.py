"""scripts/lesson_share.py: the rule that tells code lines that teach from lines that check machinery."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from dashboard_server import REPO

spec = importlib.util.spec_from_file_location("lesson_share", REPO / "scripts" / "lesson_share.py")
lesson_share = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lesson_share)


@pytest.mark.parametrize(
    "source, tags, expected",
    [
        ("x = np.ones(3)  # (3,)\nassert x.sum() == 3\n", [], (1, 1)),  # a claim is checked in tests/
        ("y = x @ w  # another BLAS may flip an exact tie\n", [], (0, 1)),  # a comment to the machine
        ("# a comment\n\nprint(x)\n", [], (1, 0)),  # comments and blank lines are not code lines
        ("# NBVAL_IGNORE_OUTPUT\nt = time.perf_counter()\n", [], (1, 1)),  # the marker is machinery
        ("v = check_split_heads(f)\nassert not v.ok and v.pitfall == 'x'\nv\n", [], (2, 1)),
        ('assert "does not divide" in message\n', [], (0, 1)),
        ("if not isinstance(n, int):\n    return 'n must be an int'\n", [], (0, 2)),
        ("probe = explorer()\nprobe.h.value = 5\nprint(probe)\n", [], (0, 3)),  # drives a widget
        ("msg = html.unescape(re.sub('<[^>]+>', '', s))\n", [], (0, 1)),
        ("split_heads(x, 3)\n", ["raises-exception"], (0, 1)),  # a validator demo
    ],
)
def test_classify(source, tags, expected):
    assert lesson_share.classify(source, tags) == expected


def test_notebook_share_counts_code_cells_only():
    nb = {"cells": [
        {"cell_type": "markdown", "source": "assert x.ok\n", "metadata": {}},
        {"cell_type": "code", "source": ["y = 1\n", "assert v.ok\n"], "metadata": {}},
    ]}
    assert lesson_share.notebook_share(nb) == (1, 1)


def test_main_reports_every_lesson_notebook(capsys):
    rows = lesson_share.main([])
    lessons = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(rows) == lessons and "00_on_ramp" in rows
    assert "solutions" not in rows and "dashboard" not in rows
    assert capsys.readouterr().out.splitlines()[-1].startswith("all")


def test_the_on_ramp_teaches():
    nb = json.loads((REPO / "notebooks" / "00_on_ramp.ipynb").read_text())
    teach, machinery = lesson_share.notebook_share(nb)
    assert teach / (teach + machinery) >= 0.9


def test_at_most_one_code_cell_in_ten_asserts(capsys):
    """Issue 16: "In the numbered lessons, at most one code cell in ten contains an assert"."""
    lesson_share.main(["--asserts"])
    last = [ln for ln in capsys.readouterr().out.splitlines() if "code cells assert" in ln][-1]
    a, n = (int(v) for v in re.findall(r"(\d+) of\s+(\d+)", last)[0])
    assert last.startswith("all") and a * 10 <= n


def test_assert_cells_counts_cells_not_lines():
    nb = {"cells": [{"cell_type": "code", "source": "assert a\nassert b\n"},
                    {"cell_type": "code", "source": "x = 1  # assert nothing\n"},
                    {"cell_type": "markdown", "source": "assert x"}]}
    assert lesson_share.assert_cells(nb) == (1, 2)
