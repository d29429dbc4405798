"""Wall time of the notebook suite under nbval, and the dashboard's slider-to-pixels latency.

Both run pytest in a subprocess, exactly as ``make test`` would (the nbval options come from
pyproject.toml's ``addopts``), with a JUnit XML report to attribute time to each notebook.
Neither ever fails the benchmark: a failing notebook is reported as failing, with its time.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "benchmarks"
DASHBOARD_TESTS = "tests/test_dashboard_browser.py"
# Generous limits: a hung kernel or browser must not hang `make bench` forever.
NOTEBOOK_TIMEOUT_S = 1200
DASHBOARD_TIMEOUT_S = 600
OWN_OUTPUTS = {"results.json"}


def _pytest(paths: list[str], timeout: int) -> tuple[float, int | str, list[dict]]:
    """Run pytest on ``paths``; return wall seconds, exit code and one dict per test case."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = os.path.join(tmp, "junit.xml")
        cmd = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}", "-o", "junit_family=xunit1"]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
            code: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            code = f"timeout after {timeout} s"
        wall = time.perf_counter() - t0
        cases = []
        if os.path.exists(junit):
            for tc in ET.parse(junit).getroot().iter("testcase"):
                outcome = "passed"
                for tag in ("failure", "error", "skipped"):
                    if tc.find(tag) is not None:
                        outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                cases.append({
                    "file": tc.get("file") or tc.get("classname", "?"),
                    "name": tc.get("name", "?"),
                    "time": float(tc.get("time", 0.0)),
                    "outcome": outcome,
                })
    return wall, code, cases


def notebooks(log=print) -> dict:
    """Run every notebooks/*.ipynb under nbval in one pytest process; time the total and each."""
    paths = sorted(os.path.relpath(p, ROOT) for p in glob.glob(str(ROOT / "notebooks" / "*.ipynb")))
    if not paths:
        log("  no notebooks in notebooks/")
        return {"status": "not measured", "reason": "no notebooks/*.ipynb yet", "notebooks": []}
    wall, code, cases = _pytest(paths, NOTEBOOK_TIMEOUT_S)
    per = defaultdict(lambda: {"time_s": 0.0, "cells": 0, "failed": 0})
    for case in cases:
        nb = per[case["file"]]
        nb["time_s"] += case["time"]
        nb["cells"] += 1
        nb["failed"] += case["outcome"] in ("failed", "error")
    rows = [{"notebook": name, **v} for name, v in sorted(per.items())]
    for r in rows:
        log(f"  {r['notebook']}: {r['time_s']:.1f} s, {r['cells']} cells, {r['failed']} failing")
    log(f"  total wall time {wall:.1f} s (pytest exit code {code})")
    return {"status": "measured", "total_wall_s": wall, "exit_code": code, "notebooks": rows,
            "sum_of_notebooks_s": sum(r["time_s"] for r in rows)}


def _flatten(obj, prefix: str = "") -> dict[str, float]:
    """Every number in a JSON object, keyed by its dotted path."""
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.update(_flatten(v, f"{prefix}[{i}]"))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[prefix] = obj
    return out


def dashboard(log=print) -> dict:
    """Run the dashboard's browser tests and read any latency JSON they leave in benchmarks/.

    Nothing about that file is agreed beyond its folder: every JSON file in benchmarks/
    (other than our own results.json) written during the run is read and its numbers kept.
    """
    if not (ROOT / DASHBOARD_TESTS).exists():
        log(f"  {DASHBOARD_TESTS} does not exist: not measured")
        return {"status": "not measured", "reason": f"{DASHBOARD_TESTS} does not exist yet"}
    start = time.time()
    wall, code, cases = _pytest([DASHBOARD_TESTS], DASHBOARD_TIMEOUT_S)
    outcomes = {c["name"]: c["outcome"] for c in cases}
    found = {}
    for path in sorted(BENCH_DIR.glob("*.json")):
        if path.name in OWN_OUTPUTS or path.stat().st_mtime < start:
            continue
        try:
            found[path.name] = _flatten(json.loads(path.read_text()))
        except (OSError, ValueError) as err:
            found[path.name] = {"unreadable": str(err)}
    result = {"wall_s": wall, "exit_code": code, "tests": outcomes, "files": found}
    if found:
        result["status"] = "measured"
        for name, values in found.items():
            log(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in list(values.items())[:8]))
    else:
        result["status"] = "not measured"
        result["reason"] = (f"{DASHBOARD_TESTS} ran (exit code {code}, {len(cases)} tests) "
                            "but left no latency JSON in benchmarks/")
        log(f"  not measured: {result['reason']}")
    return result
