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


def _pytest(paths: list[str], timeout: int, extra: tuple[str, ...] = ()) -> tuple[float, int | str, list[dict], str]:
    """Run pytest on ``paths``; return wall seconds, exit code, one dict per test case, stdout."""
    with tempfile.TemporaryDirectory() as tmp:
        junit = os.path.join(tmp, "junit.xml")
        cmd = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}", "-o", "junit_family=xunit1", *extra]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
            code: int | str = proc.returncode
            stdout = proc.stdout
        except subprocess.TimeoutExpired as err:
            code = f"timeout after {timeout} s"
            stdout = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
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
    return wall, code, cases, stdout


def notebooks(log=print) -> dict:
    """Run every notebooks/*.ipynb under nbval in one pytest process; time the total and each."""
    paths = sorted(os.path.relpath(p, ROOT) for p in glob.glob(str(ROOT / "notebooks" / "*.ipynb")))
    if not paths:
        log("  no notebooks in notebooks/")
        return {"status": "not measured", "reason": "no notebooks/*.ipynb yet", "notebooks": []}
    wall, code, cases, _ = _pytest(paths, NOTEBOOK_TIMEOUT_S)
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


def parse_printed_timings(stdout: str) -> dict[str, float]:
    """Read the block the browser tests print after "dashboard timings":

        dashboard timings (this machine, this run):
          N slider to pixels, h<=16, N<=64 (ms): median 180, p90 240, n=6
          page load, cold kernel (s): 5.12

    Returns ``{"<name> median": 180.0, "<name> p90": 240.0, "<name>": 5.12, ...}``.
    """
    found: dict[str, float] = {}
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("dashboard timings"):
            for entry in lines[i + 1:]:
                if not entry.startswith("  ") or ":" not in entry:
                    break
                name, _, values = entry.strip().rpartition(": ")
                parts = values.split(",")
                for j, part in enumerate(parts):
                    key, _, num = part.strip().rpartition(" ")
                    try:
                        value = float(num.split("=")[-1])
                    except ValueError:
                        continue
                    label = key or ("n" if num.startswith("n=") else "")
                    if not label and len(parts) > 1:
                        label = f"#{j + 1}"
                    found[f"{name} {label}" if label else name] = value
    return found


def dashboard(log=print) -> dict:
    """Run the dashboard's browser tests and collect the latencies they report.

    Nothing about the format was agreed, so two sources are read: any JSON file the tests
    leave in benchmarks/ (other than our own results.json), and the "dashboard timings" block
    they print. The screenshot the tests save (docs/dashboard.png) is restored afterwards, so
    ``make bench`` leaves the working tree as it found it.
    """
    if not (ROOT / DASHBOARD_TESTS).exists():
        log(f"  {DASHBOARD_TESTS} does not exist: not measured")
        return {"status": "not measured", "reason": f"{DASHBOARD_TESTS} does not exist yet"}
    keep = {p: p.read_bytes() for p in (ROOT / "docs").glob("*.png")} if (ROOT / "docs").is_dir() else {}
    start = time.time()
    try:
        wall, code, cases, stdout = _pytest([DASHBOARD_TESTS], DASHBOARD_TIMEOUT_S, extra=("-s",))
    finally:
        for path, data in keep.items():
            path.write_bytes(data)
    outcomes = {c["name"]: c["outcome"] for c in cases}
    found = {}
    for path in sorted(BENCH_DIR.glob("*.json")):
        if path.name in OWN_OUTPUTS or path.stat().st_mtime < start:
            continue
        try:
            found[path.name] = _flatten(json.loads(path.read_text()))
        except (OSError, ValueError) as err:
            found[path.name] = {"unreadable": str(err)}
    printed = parse_printed_timings(stdout)
    if printed:
        found["printed by the tests"] = printed
    passed = sum(o == "passed" for o in outcomes.values())
    result = {"wall_s": wall, "exit_code": code, "tests": outcomes, "files": found,
              "summary": f"{passed} of {len(outcomes)} browser tests passed"}
    if found:
        result["status"] = "measured"
        for name, values in found.items():
            log(f"  {name}: " + ", ".join(f"{k}={v}" for k, v in list(values.items())[:12]))
    else:
        result["status"] = "not measured"
        result["reason"] = (f"{DASHBOARD_TESTS} ran (exit code {code}, {result['summary']}) "
                            "but reported no timings")
        log(f"  not measured: {result['reason']}")
    return result
