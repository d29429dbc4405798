"""tests/lesson_claims.py: a claim runs right after its cell, in the notebook's kernel, and a false
claim, a quote no longer in the lesson and a cell no longer found are each reported."""

from __future__ import annotations

import math

import nbformat
import numpy as np
import pytest
from lesson_claims import Claims, claim_tests, problems, run_claims

LIMIT = 2**16  # a constant of the claims module, sent to the kernel


def _notebook(tmp_path, *cells: str) -> str:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("## A\nThe answer is 42."),
        *(nbformat.v4.new_code_cell(c) for c in cells),
    ])
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    return str(path)


def test_claims_see_the_state_after_their_cell_and_report_failures(tmp_path):
    name = _notebook(tmp_path, "import numpy as np\nx = 42\nview = np.arange(6)[::2]\ndef twice(n):\n    return 2 * n",
                     "x = 0  # a later cell reuses the name")
    claims = Claims(name)

    @claims("The answer is 42.", after="x = 42")
    def right(x, view, twice):
        assert x == 42  # run after its own cell, before "x = 0"
        assert view.base is not None  # the notebook's own object: a view stays a view
        assert twice(x) == 84  # a function defined in the notebook is callable
        assert np.isclose(math.log(LIMIT), 11.09, atol=0.01)  # module imports and constants

    @claims("The answer is 42.", after="x = 42")
    def wrong(x):
        assert x == 41

    @claims("The answer is 42.", after="x = 0")
    def missing_variable(undefined_name):
        assert undefined_name > 1

    @claims("The answer is 42.", after="x = 0")
    def raises(x):
        assert 1 / x > 0

    @claims("The answer is 42.", after="x = 0")
    def returns_instead_of_asserting(x):
        return x == 41

    results = run_claims(name, list(claims))
    assert results[claims_named(claims, "right")] == "ok"
    failure = results[claims_named(claims, "wrong")]
    assert "assert 42 == 41" in failure  # pytest's explanation of the assert
    assert f"test_lesson_claims_harness.py\", line {wrong.__code__.co_firstlineno + 2}" in failure
    assert "NameError: the notebook has no undefined_name" in results[claims_named(claims, "missing_variable")]
    assert "ZeroDivisionError" in results[claims_named(claims, "raises")]
    assert "returned False" in results[claims_named(claims, "returns_instead_of_asserting")]


def claims_named(claims: Claims, name: str):
    return next(c for c in claims if c.name == name)


def test_a_false_claim_fails_its_test(tmp_path):
    name = _notebook(tmp_path, "x = 42")
    claims = Claims(name)

    @claims("The answer is 42.", after="x = 42")
    def wrong(x):
        assert x == 41

    _, test_claim = claim_tests(name, list(claims))
    with pytest.raises(pytest.fail.Exception, match=r"(?s)claim wrong .*assert 42 == 41"):
        test_claim(claims_named(claims, "wrong"))


def test_a_quote_no_longer_in_the_lesson_or_a_lost_cell_is_reported(tmp_path):
    name = _notebook(tmp_path, "y = 1")
    claims = Claims(name)

    @claims("New words.", after="y = 1")
    def new_words(y):
        assert y == 1

    @claims("The answer is 42.", after="z = 2")
    def lost_cell():
        pass

    assert problems(name, list(claims)) == [f"prose no longer in {name}: 'New words.'",
                                            f"after='z = 2' matches 0 code cells of {name}, expected 1"]


def test_a_claim_that_cannot_run_in_the_kernel_is_refused():
    claims = Claims("probe.ipynb")

    def helper():
        return 1

    with pytest.raises(TypeError, match="defaults"):
        @claims("The answer is 42.", after="x = 42")
        def with_default(x=1):
            assert x

    @claims("The answer is 42.", after="x = 42")
    def uses_a_local_helper(x):
        assert x == helper()

    from lesson_claims import _imports

    with pytest.raises(TypeError, match="helper"):
        _imports(uses_a_local_helper)
    with pytest.raises(ValueError, match="two claims"):
        claims("The answer is 42.", after="x = 42")(uses_a_local_helper)
