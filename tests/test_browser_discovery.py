"""`make test-slow` on a machine without a browser or npm: the browser and axe tests skip, naming the fix.

``find_browser`` (tests/dashboard_server.py) looks where users have a browser; tests/conftest.py
skips every test marked ``browser`` when it finds none, and every test marked ``axe`` when
axe-core is missing. The skips are listed under NOT RUN and, with ``CI=true``, fail.
The subprocess runs below collect the real browser test modules with nothing reachable: no
browser on the PATH, no ``$CHROMIUM``, an empty Playwright browser folder and an empty home.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import dashboard_server
import pytest
from dashboard_server import AXE_WIDTHS, NO_BROWSER, REPO, find_browser

BROWSER_MODULES = ("tests/test_dashboard_browser.py", "tests/test_real_heads_browser.py",
                   "tests/test_dashboard_load.py", "tests/test_lesson_slides.py",
                   "tests/test_write_panel_browser.py", "tests/test_handout.py", "tests/test_site.py")


def _executable(path):
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


def _nothing_reachable(tmp_path, monkeypatch=None) -> dict:
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    env = {**os.environ, "PATH": str(empty), "HOME": str(empty), "PLAYWRIGHT_BROWSERS_PATH": str(empty)}
    for key in ("CHROMIUM", "CI", "MHA_STRICT"):
        env.pop(key, None)
    if monkeypatch is not None:
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        for key in ("CHROMIUM", "CI", "MHA_STRICT"):
            monkeypatch.delenv(key, raising=False)
    return env


def test_explicit_path_wins_and_a_wrong_one_is_named(tmp_path, monkeypatch):
    chrome = _executable(tmp_path / "my-chrome")
    assert find_browser(str(chrome)) == (str(chrome), f"--browser={chrome}")
    monkeypatch.setenv("CHROMIUM", str(chrome))
    assert find_browser() == (str(chrome), f"CHROMIUM={chrome}")
    monkeypatch.setenv("CHROMIUM", "/nonexistent/chrome")
    path, reason = find_browser()
    assert path is None and reason.startswith("CHROMIUM=/nonexistent/chrome is not an executable browser")
    assert "playwright install chromium" in reason


def test_chromium_or_chrome_on_the_path(tmp_path, monkeypatch):
    _nothing_reachable(tmp_path, monkeypatch)
    path, reason = find_browser()
    assert (path, reason) == (None, NO_BROWSER)
    chrome = _executable(tmp_path / "empty" / "google-chrome")
    assert find_browser() == (str(chrome), "google-chrome on the PATH")


def test_a_browser_outside_the_path(tmp_path, monkeypatch):
    """snap's /snap/bin and the macOS bundles are checked even when they are not on the PATH."""
    _nothing_reachable(tmp_path, monkeypatch)
    mac = tmp_path / "Applications" / "Google Chrome.app" / "Contents" / "MacOS"
    mac.mkdir(parents=True)
    chrome = _executable(mac / "Google Chrome")
    monkeypatch.setattr(dashboard_server, "BROWSER_PATHS", (str(chrome),))
    assert find_browser() == (str(chrome), str(chrome))


def _run(args, env, tmp_path, name) -> tuple[subprocess.CompletedProcess, dict]:
    junit = tmp_path / f"{name}.xml"
    proc = subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-q",
                           "--run-slow", f"--junitxml={junit}", "-o", "addopts="],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    suite = ET.parse(junit).getroot().find("testsuite")
    counts = {k: int(suite.get(k)) for k in ("tests", "errors", "failures", "skipped")}
    return proc, counts


def test_no_browser_means_skips_not_errors(tmp_path):
    proc, counts = _run(BROWSER_MODULES, _nothing_reachable(tmp_path), tmp_path, "nobrowser")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert counts["errors"] == 0 and counts["failures"] == 0, (counts, out[-3000:])
    assert counts["skipped"] >= 30, counts  # every browser test of the modules
    assert "no Chromium or Chrome found" in out and "playwright install chromium" in out
    assert "did NOT run" in out and f"NOT RUN: {counts['skipped']} tests skipped" in out


def test_no_browser_fails_in_ci(tmp_path):
    env = {**_nothing_reachable(tmp_path), "CI": "true"}
    proc, counts = _run(["tests/test_real_heads_browser.py"], env, tmp_path, "ci")
    assert proc.returncode != 0
    # a skip at setup turned into a failure is reported as a setup error: every test, none passed
    assert counts["failures"] + counts["errors"] == counts["tests"] > 0 and counts["skipped"] == 0, counts
    assert "skipped in strict mode (CI=true)" in proc.stdout and "no Chromium or Chrome found" in proc.stdout


@pytest.mark.browser  # a real browser, without axe-core: the slow tier (conftest skips it without one)
def test_no_axe_core_means_skips(tmp_path):
    """With a browser but without axe-core (no npm): every axe audit skips (one per width), naming npm."""
    env = {**_nothing_reachable(tmp_path), "CHROMIUM": dashboard_server.CHROMIUM,
           "MHA_AXE": str(tmp_path / "missing" / "axe.min.js")}
    proc, counts = _run(["tests/test_dashboard_browser.py", "-k", "axe"], env, tmp_path, "noaxe")
    assert proc.returncode == 0, proc.stdout[-3000:]
    audits = len(AXE_WIDTHS)
    assert counts == {"tests": audits, "errors": 0, "failures": 0, "skipped": audits}
    assert "axe-core is not installed" in proc.stdout and "npm" in proc.stdout
