"""scripts/lesson_share.py: the rule that tells code lines that teach from lines that check machinery."""

from __future__ import annotations

import importlib.util
import json

import pytest
from dashboard_server import REPO

spec = importlib.util.spec_from_file_location("lesson_share", REPO / "scripts" / "lesson_share.py")
lesson_share = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lesson_share)


@pytest.mark.parametrize(
    "source, tags, expected",
    [
        ("x = np.ones(3)  # (3,)\nassert x.sum() == 3\n", [], (2, 0)),  # a computation and its claim
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
