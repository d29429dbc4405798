"""Shared pytest setup.

Strict mode (``CI=true`` or ``MHA_STRICT=1``): a skipped test is a failure, so a missing
torch or chromium can never pass silently in CI. Notebook cells marked ``# NBVAL_SKIP``
are the one exception (they are deliberate and visible in the notebook).
Slow tests (the dashboard load test) only run with ``--run-slow``, which ``.ci/run`` passes.
"""

from __future__ import annotations

import os

import pytest

STRICT = os.environ.get("CI", "").lower() == "true" or os.environ.get("MHA_STRICT") == "1"


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


def _is_notebook(nodeid: str) -> bool:
    return ".ipynb" in nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if STRICT and report.skipped and not _is_notebook(report.nodeid) and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in strict mode (CI=true): {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if STRICT and report.skipped and not _is_notebook(report.nodeid):
        report.outcome = "failed"
        report.longrepr = f"module skipped in strict mode (CI=true): {report.longrepr}"
