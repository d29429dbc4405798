"""The two test tiers: every test runs in exactly one of `make test` and `make test-slow`, and
`make test-fast` runs a part of `make test` that needs neither the models nor a reference library.

The tiers are pytest marker expressions in the Makefile (TEST_TIER, SLOW_TIER, FAST_TIER). A test's
tier follows from its markers alone, so checking every combination of the registered markers
(pyproject.toml; ``--strict-markers`` refuses any other) checks every test, without collecting any.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAKEFILE = (REPO / "Makefile").read_text()
PYPROJECT = (REPO / "pyproject.toml").read_text()
CI_RUN = (REPO / ".ci" / "run").read_text()


def _tier(name: str) -> str:
    m = re.search(rf"^{name} := (.+)$", MAKEFILE, re.M)
    assert m, f"{name} is not defined in the Makefile"
    return m.group(1).strip()


def _recipe(target: str) -> str:
    m = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n)+)", MAKEFILE, re.M)
    assert m, f"no recipe for {target}"
    return m.group(1)


MARKERS = re.findall(r'^\s+"([a-z_]+):', PYPROJECT.split("markers = [", 1)[1].split("]", 1)[0], re.M)
TIERS = {name: _tier(name) for name in ("TEST_TIER", "SLOW_TIER", "FAST_TIER")}


def _selects(expression: str, markers: set[str]) -> bool:
    """pytest's -m on a test with these markers (the same grammar: names, not, and, or, brackets)."""
    assert re.fullmatch(r"[a-z_ ()]+", expression), expression
    names = set(re.findall(r"[a-z_]+", expression)) - {"not", "and", "or"}
    assert names <= set(MARKERS), f"{expression!r} names an unregistered marker"
    return eval(expression, {"__builtins__": {}}, {m: m in markers for m in MARKERS})  # noqa: S307


def _every_combination():
    for k in range(len(MARKERS) + 1):
        yield from (set(c) for c in itertools.combinations(MARKERS, k))


def test_the_markers_are_registered():
    assert {"slow", "browser", "models", "torch", "transformers", "axe"} <= set(MARKERS)
    assert "--strict-markers" in PYPROJECT  # a misspelt marker is an error, not another tier


def test_every_test_is_in_exactly_one_tier():
    for markers in _every_combination():
        tiers = [t for t in ("TEST_TIER", "SLOW_TIER") if _selects(TIERS[t], markers)]
        assert len(tiers) == 1, (sorted(markers), tiers)


@pytest.mark.parametrize("marker", ["slow", "browser"])
def test_the_slow_tier_holds_the_browser_and_slow_tests(marker):
    assert _selects(TIERS["SLOW_TIER"], {marker}) and not _selects(TIERS["TEST_TIER"], {marker})


def test_the_fast_loop_is_numpy_only_and_inside_make_test():
    for markers in _every_combination():
        if _selects(TIERS["FAST_TIER"], markers):
            assert _selects(TIERS["TEST_TIER"], markers), sorted(markers)
            assert not markers & {"models", "torch", "transformers"}, sorted(markers)
    assert _selects(TIERS["FAST_TIER"], set())


def test_the_targets_run_the_tiers():
    test, slow, fast = _recipe("test"), _recipe("test-slow"), _recipe("test-fast")
    # make test and make test-slow run pytest's testpaths (tests and notebooks): no path narrows them
    assert '-m "$(TEST_TIER)" $(PYTEST_ARGS)' in test
    assert '-m "$(SLOW_TIER)" --run-slow $(PYTEST_ARGS)' in slow
    assert '-m "$(FAST_TIER)" tests $(PYTEST_ARGS)' in fast
    assert 'testpaths = ["tests", "notebooks"]' in PYPROJECT
    # the fast loop downloads nothing: no models, no npm packages
    fast_prereqs = re.search(r"^test-fast:([^#\n]*)", MAKEFILE, re.M).group(1)
    assert fast_prereqs.split() == ["$(STAMP)"]


def test_ci_runs_both_tiers_strictly():
    lines = [line.strip() for line in CI_RUN.splitlines()]
    strict = lines.index("export CI=true")
    runs = [i for i, line in enumerate(lines) if line.startswith(("make test ", "make test-slow "))]
    assert [lines[i].split()[1] for i in runs] == ["test", "test-slow"] and min(runs) > strict
