"""tests/lesson_claims.py: a claim is checked right after its cell, and a false one fails."""

from __future__ import annotations

import nbformat
from lesson_claims import Claim, problems, run_claims


def test_claims_see_the_state_after_their_cell_and_report_failures(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## A\nThe answer is 42."),
        nbformat.v4.new_code_cell("x = 42"),
        nbformat.v4.new_code_cell("x = 0  # a later cell reuses the name"),
    ])
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    right = Claim("The answer is 42.", "x = 42", "x == 42")
    wrong = Claim("The answer is 42.", "x = 42", "x == 41")
    broken = Claim("The answer is 42.", "x = 0", "undefined_name > 1")
    results = run_claims(str(path), [right, wrong, broken])
    assert results[right] == "ok"  # evaluated after its own cell, before "x = 0"
    assert results[wrong] == "False"
    assert "NameError" in results[broken]


def test_a_quote_no_longer_in_the_lesson_is_reported(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("Old words."),
                                         nbformat.v4.new_code_cell("y = 1")])
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    found = problems(str(path), [Claim("New words.", "y = 1", "y == 1"), Claim("Old words.", "z = 2", "True")])
    assert found == [f"prose no longer in {path}: 'New words.'",
                     f"after='z = 2' matches 0 code cells of {path}, expected 1"]
