"""The dashboard's slider step -> redraw time, an older commit against the working tree, in one run.

    python -m benchmarks.dashboard_switch              # main against the working tree
    python -m benchmarks.dashboard_switch REV --rounds 40
    make bench-dashboard REV=main

Two Voila servers serve ``notebooks/dashboard.ipynb``: one from ``git archive REV`` (its package,
server code, notebook and template: ``JUPYTER_PATH`` points Voila at that tree's own
``share/jupyter`` first), one from the working tree. One headless Chromium opens a 1366 x 900 page
on each, and the rounds alternate between the two pages: in each round, one arrow key on the
real-model panel's head slider (right, then left, as a reader steps through the heads), then the
same on the layer slider; each press is timed from the key to the first frame painted after the
big map's redraw (``data-drawn`` moves). The p50 and p90 of each, and the load average, are printed;
figures are worth quoting only with the load average well under 1 (a quiet machine).

Needs the models (``make models``) and Chromium (``tests/dashboard_server.find_browser``).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from dashboard_server import free_port, http, launch_chromium  # noqa: E402

# What a tree needs to serve the dashboard: its package, server code, notebook, template, settings.
TREE = ("mha_core", "mha_serve", "notebooks/dashboard.ipynb", "share", "etc")
LOAD_TIMEOUT_MS = 240_000
STEP_TIMEOUT_MS = 30_000
BIG = ".mha-real-big.mha-heatmap[data-drawn] canvas"
PROBE = """() => { const box = document.querySelector('.mha-real-big'); window.__step = {painted: 0};
  new MutationObserver(() => requestAnimationFrame(() => { window.__step.painted = performance.now(); }))
    .observe(box, {attributes: true, attributeFilter: ['data-drawn']}); }"""


# An editable install's import hook (setuptools' finder on sys.meta_path) would import the working
# tree's mha_core whatever PYTHONPATH says; the exported tree's sitecustomize takes it out.
SITECUSTOMIZE = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
"""


def export(rev: str, where: Path) -> Path:
    """The files of ``TREE`` as they were at ``rev``, under ``where``, importable ahead of the working tree."""
    archive = subprocess.run(["git", "archive", rev, *TREE], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")
    (where / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return where


def serve(tree: Path, log: Path) -> tuple[subprocess.Popen, str]:
    """Voila on ``tree``'s dashboard, with ``tree``'s package and template; returns (process, url)."""
    port = free_port()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(tree),
           "JUPYTER_PATH": str(tree / "share" / "jupyter")}  # its package and its template first
    proc = subprocess.Popen([sys.executable, "-m", "voila", "notebooks/dashboard.ipynb", f"--port={port}",
                             "--Voila.ip=127.0.0.1", "--no-browser"], cwd=tree, env=env,
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 120
    while http(url + "voila/static/voila.js", timeout=2) != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"voila on {tree} did not start:\n{log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.3)
    return proc, url


def step(page, css: str, key: str) -> float:
    """Milliseconds from ``key`` on the slider ``css`` to the big map's next painted redraw."""
    page.locator(f"{css} .noUi-handle").focus()
    t0 = page.evaluate("performance.now()")
    page.keyboard.press(key)
    page.wait_for_function("t0 => window.__step.painted > t0", arg=t0, timeout=STEP_TIMEOUT_MS)
    return page.evaluate("window.__step.painted") - t0


def quantiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=10)
    return f"p50 {statistics.median(values):6.0f} ms, p90 {q[-1]:6.0f} ms (n={len(values)})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", nargs="?", default="main", help="the older commit (default: main)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds of four key presses on each page")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error(f"--rounds must be at least 2, got {args.rounds}")
    from playwright.sync_api import sync_playwright

    procs = []
    with tempfile.TemporaryDirectory(prefix="mha-dash-") as tmp, sync_playwright() as p:
        try:
            trees = {args.rev: export(args.rev, Path(tmp) / "old"), "working tree": ROOT}
            urls = {}
            for name, tree in trees.items():
                proc, urls[name] = serve(tree, Path(tmp) / f"{len(procs)}.log")
                procs.append(proc)
            browser = launch_chromium(p)
            pages = {}
            for name, url in urls.items():
                page = browser.new_page(viewport={"width": 1366, "height": 900})
                page.goto(url, timeout=LOAD_TIMEOUT_MS)
                page.wait_for_selector(BIG, timeout=LOAD_TIMEOUT_MS)
                page.evaluate(PROBE)
                pages[name] = page
            times: dict[str, list[float]] = {name: [] for name in pages}
            load_start = os.getloadavg()[0]
            for _ in range(args.rounds):
                for name, page in pages.items():  # interleaved: the machine's load falls on both alike
                    for css, key in ((".mha-real-head", "ArrowRight"), (".mha-real-head", "ArrowLeft"),
                                     (".mha-real-layer", "ArrowRight"), (".mha-real-layer", "ArrowLeft")):
                        page.wait_for_timeout(150)
                        times[name].append(step(page, css, key))
            print(f"slider step -> big map repainted, 1366 x 900, {args.rounds} rounds "
                  f"(load average {load_start:.2f} -> {os.getloadavg()[0]:.2f}):")
            for name, values in times.items():
                print(f"  {name:>14}: {quantiles(values)}")
            browser.close()
        finally:
            for proc in procs:
                os.killpg(proc.pid, 15)
                proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
