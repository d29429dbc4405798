"""The dashboard under a crowd, on loopback (slow: `make test-slow`, which passes --run-slow).

``test_get_flood_stays_bounded``: 300 plain GETs (no JavaScript, no websocket: a crawler, a
link preview, a script) in about a minute against a server with a small kernel cap. The
server must answer every one (200 or the 503 "busy" page), never hold more than the cap's
worth of kernels, shut the unconnected kernels down, and then serve a real browser session.

``test_sixty_browser_sessions``: a class of 60 arriving over about a minute: 60 pages of one
Chromium, each its own Voila session (its own kernel and websocket), each closed after its
check. Every session must render, answer a slider move, and close; afterwards every kernel must
be shut down.

Here the 60 browsers run on the server's own 2 cores (shared with other work), which a class's
own devices would not: with 60 cold browser contexts loading at once the load average passed 100
and no page had connected after 5 minutes, and with 60 pages of one context (shared caches, but
Chromium's six connections per host shared too) pages queued behind each other's HTML for
minutes. So the pages share one warmed context (as each student's browser is after a first visit)
and the harness loads at most ``LOADING`` pages at a time: a student arriving while they are all
loading waits for a slot (at 8 at once, 1 page in 60 hit anywidget's 2 s limit to load the
heatmap's JavaScript and never drew it; see docs/dashboard.md). Both times are reported: from arrival (queue included) and from the
page's own request. Pages get 240 s to connect (``connect_grace``; 30 s by default). Prints p50/p90 time to the
first figure, slider response, peak kernels and peak memory.

``test_classroom_mode``: the same class against ``make classroom SEATS=60``: the server warms a
pool of 60 kernels (each executes the dashboard) before the first student arrives, then 60
sessions arrive over 60 s with 8 loading at once. Every page must come from the warmed pool and
draw its heatmaps (anywidget's 2 s load limit is lifted by the page template). Prints the warming
time and memory, and from arrival the time to the first figure (p50, p90, max) and the slider
latency (p50, p90): the figures of the benchmark report (targets p90 <= 5 s and slider p90 <=
300 ms on a 2-core laptop; not asserted: timings belong to a quiet machine). On a quiet
machine: ``.venv/bin/python -m pytest tests/test_dashboard_load.py --run-slow -s -p no:cacheprovider``
(both class tests, so the pool's effect is seen against the cold start in the same run).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from dashboard_server import (
    descendants,
    is_local,
    launch_chromium,
    tree_rss,
    voila_server,
)
from playwright.async_api import async_playwright

pytestmark = [pytest.mark.slow, pytest.mark.browser]

MB = 2**20
RENDER_TIMEOUT_MS = 300_000
# One dashboard kernel is ~125 MB resident after rendering; bound it generously.
KERNEL_BYTES_BOUND = 250 * MB


class Sampler:
    """Peak kernel count and peak resident memory of the server's process tree, every 0.5 s."""

    def __init__(self, pid: int):
        self.pid, self.peak_kernels, self.peak_bytes = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kernels = max(self.peak_kernels, len(descendants(self.pid)))
            self.peak_bytes = max(self.peak_bytes, tree_rss(self.pid))
            self._stop.wait(0.5)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _wait_no_kernels(pid: int, seconds: float) -> float:
    t0 = time.monotonic()
    while descendants(pid):
        assert time.monotonic() - t0 < seconds, f"{len(descendants(pid))} kernels still alive after {seconds} s"
        time.sleep(0.5)
    return time.monotonic() - t0


async def _session(context, url: str, port: int, delay: float, slots: asyncio.Semaphore | None = None) -> dict:
    """One student: open the page, wait for the heatmaps, move the heads N slider, close."""
    await asyncio.sleep(delay)
    arrived = time.perf_counter()
    if slots is not None:
        await slots.acquire()
    try:
        queued = time.perf_counter() - arrived
        visit = await _visit(context, url, port)
        return {**visit, "first_from_arrival": queued + visit["first_figure"]}
    finally:
        if slots is not None:
            slots.release()


async def _visit(context, url: str, port: int) -> dict:
    page = await context.new_page()
    requests, errors = [], []
    page.on("request", lambda r: requests.append(r.url))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        t0 = time.perf_counter()
        response = await page.goto(url, timeout=RENDER_TIMEOUT_MS, wait_until="commit")
        await page.wait_for_selector(".mha-heads-figure.mha-heatmap[data-drawn] canvas", timeout=RENDER_TIMEOUT_MS)
        first_figure = time.perf_counter() - t0
        limit = await page.evaluate("window.mhaAnywidgetLimit || 0")  # the template lifted anywidget's 2 s
        caption = page.locator(".mha-heads-caption")
        before = await page.locator(".mha-heads-N .widget-readout").inner_text()
        await page.locator(".mha-heads-N .noUi-handle").focus()
        t1 = time.perf_counter()
        await page.keyboard.press("ArrowLeft")
        await caption.filter(has_text=f"N={int(before) - 1},").wait_for(timeout=RENDER_TIMEOUT_MS)
        slider = time.perf_counter() - t1
        status = response.status
    finally:
        await page.close()
    return {"first_figure": first_figure, "slider": slider, "errors": errors, "status": status, "limit": limit,
            "outside": sorted({u for u in requests if not is_local(u, port)})}


def _get(url: str) -> tuple[int, str]:
    """Status and body of a plain GET (0 and "" when nothing answered)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, ""


def _pct(values, p: int) -> float:
    return statistics.quantiles(values, n=10)[p // 10 - 1]


# -- 300 plain GETs --------------------------------------------------------------------------------

FLOOD_GETS = 300
FLOOD_SECONDS = 60
FLOOD_CAP = 6


def test_get_flood_stays_bounded():
    args = (f"--BoundedKernelManager.max_kernels={FLOOD_CAP}", "--BoundedKernelManager.connect_grace=10",
            "--BoundedKernelManager.check_interval=2")
    with voila_server(*args) as srv:
        pid = srv.proc.pid
        time.sleep(1)
        baseline = tree_rss(pid)
        statuses: list[int] = []
        with Sampler(pid) as sampler, ThreadPoolExecutor(max_workers=16) as pool:
            t0 = time.monotonic()
            futures = []
            for i in range(FLOOD_GETS):
                time.sleep(max(0.0, t0 + i * FLOOD_SECONDS / FLOOD_GETS - time.monotonic()))
                futures.append(pool.submit(_get, srv.url))
            answers = [f.result() for f in futures]
            statuses = [code for code, _ in answers]
            flood_seconds = time.monotonic() - t0
        drained = _wait_no_kernels(pid, 120)
        after = tree_rss(pid)
        # a real student afterwards
        result = asyncio.run(_one_browser(srv.url, srv.port))
        log = srv.log()
    counts = {code: statuses.count(code) for code in sorted(set(statuses))}
    print(f"\nGET flood: {FLOOD_GETS} GETs in {flood_seconds:.0f} s against max_kernels={FLOOD_CAP}: "
          f"status counts {counts}; peak {sampler.peak_kernels} kernels, peak memory "
          f"{sampler.peak_bytes / MB:,.0f} MB (baseline {baseline / MB:,.0f} MB, "
          f"+{(sampler.peak_bytes - baseline) / MB:,.0f} MB = {(sampler.peak_bytes - baseline) / MB / max(sampler.peak_kernels, 1):,.0f} MB "
          f"per kernel at the peak); all unconnected kernels shut down {drained:.0f} s after the flood; "
          f"{after / MB:,.0f} MB after; then a browser session rendered in {result['first_figure']:.1f} s "
          f"and answered a slider in {result['slider'] * 1000:.0f} ms")
    assert set(counts) <= {200, 503}, counts  # never a crash, never a hang (0 = no answer)
    assert counts.get(503, 0) > 0 and counts.get(200, 0) > 0
    busy = next(body for code, body in answers if code == 503)
    assert "The dashboard is busy" in busy and "try again in a minute" in busy  # the template's 503.html
    # The cap counts the manager's kernels; a kernel it has just shut down takes a moment to exit,
    # so the process sampler may see it beside its replacement.
    assert sampler.peak_kernels <= FLOOD_CAP + 1
    assert sampler.peak_bytes <= baseline + FLOOD_CAP * KERNEL_BYTES_BOUND
    assert "no page connected" in log and "Kernel cap reached" in log
    assert result["errors"] == [] and result["outside"] == [] and result["status"] == 200


async def _student(browser, url: str, port: int, delay: float) -> dict:
    """A browser context of its own (cache, cookies, connections), closed after its check."""
    await asyncio.sleep(delay)
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        return await _session(context, url, port, 0)
    finally:
        await context.close()


async def _one_browser(url: str, port: int) -> dict:
    async with async_playwright() as p:
        browser = await launch_chromium(p)
        try:
            return await _student(browser, url, port, 0)
        finally:
            await browser.close()


# -- a class of 60 ---------------------------------------------------------------------------------

SESSIONS = 60
ARRIVAL_SECONDS = 60
LOADING = 4  # pages the harness loads at once (the browser shares the server's 2 cores)


def _outcome(results: list) -> tuple[list[dict], list[str]]:
    """The sessions that ran to the end, and the errors of the others (at least one must have run)."""
    failures = [repr(r)[:300] for r in results if isinstance(r, BaseException)]
    ok = [r for r in results if not isinstance(r, BaseException)]
    assert ok, failures
    return ok, failures


def _assert_every_session_ok(ok: list[dict], failures: list[str]) -> None:
    """Every session ran, was served (200), logged no console error and requested nothing outside."""
    assert failures == [], f"{len(failures)} of {SESSIONS} sessions failed: {failures[:3]}"
    assert [r["status"] for r in ok] == [200] * SESSIONS
    assert [r["errors"] for r in ok] == [[]] * SESSIONS
    assert [r["outside"] for r in ok] == [[]] * SESSIONS


def test_sixty_browser_sessions():
    # A closed tab's kernel goes after 20 s here (make dashboard: 120 s), so the test ends soon.
    args = ("--BoundedKernelManager.disconnect_grace=20", "--BoundedKernelManager.connect_grace=240",
            "--BoundedKernelManager.check_interval=2")
    with voila_server(*args) as srv:
        pid = srv.proc.pid
        time.sleep(1)
        baseline = tree_rss(pid)
        assert descendants(pid) == []
        with Sampler(pid) as sampler:
            t0 = time.monotonic()
            results = asyncio.run(_classroom(srv.url, srv.port))
            all_done = time.monotonic() - t0
        culled = _wait_no_kernels(pid, 180)
        after = tree_rss(pid)
    results, failures = _outcome(results)
    firsts = sorted(r["first_figure"] for r in results)
    arrivals = sorted(r["first_from_arrival"] for r in results)
    sliders = sorted(r["slider"] for r in results)
    print(f"\nclassroom: {len(results)} of {SESSIONS} browser sessions ok, arriving over {ARRIVAL_SECONDS} s, all done in {all_done:.0f} s; "
          f"at most {LOADING} loading at once; time to the first figure from the page's request p50 "
          f"{statistics.median(firsts):.1f} s, p90 {_pct(firsts, 90):.1f} s, max {firsts[-1]:.1f} s; from arrival "
          f"(queue included) p50 {statistics.median(arrivals):.1f} s, p90 {_pct(arrivals, 90):.1f} s; slider to new caption p50 {statistics.median(sliders) * 1000:.0f} ms, "
          f"p90 {_pct(sliders, 90) * 1000:.0f} ms; peak {sampler.peak_kernels} kernels, peak memory "
          f"{sampler.peak_bytes / MB:,.0f} MB (baseline {baseline / MB:,.0f} MB); every kernel shut down "
          f"{culled:.0f} s after the last page closed; {after / MB:,.0f} MB after")
    _assert_every_session_ok(results, failures)


async def _classroom(url: str, port: int, loading: int = LOADING) -> list[dict]:
    async with async_playwright() as p:
        browser = await launch_chromium(p)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 900})
            await _session(context, url, port, 0)  # warm-up: fills the caches
            slots = asyncio.Semaphore(loading)
            return await asyncio.gather(*(_session(context, url, port, i * ARRIVAL_SECONDS / SESSIONS, slots)
                                          for i in range(SESSIONS)), return_exceptions=True)
        finally:
            await browser.close()


# -- classroom mode: 60 students against a warmed pool ---------------------------------------------

CLASS_LOADING = 8  # pages loading at once: where one page in 60 used to lose its heatmaps


def test_classroom_mode():
    """``make classroom SEATS=60``: the pool warmed before the class, then 60 sessions over 60 s,
    8 loading at once. Every page must be served from a warmed kernel, draw its heatmaps (no
    anywidget time-out) and answer a slider; prints the warming time, the time from arrival to the
    first figure (p50, p90, max), the slider latency (p50, p90) and the memory. The targets (p90
    to the first figure <= 5 s, slider p90 <= 300 ms) belong to the benchmark report, not here."""
    from mha_serve import classroom

    plan = classroom.classroom_plan(SESSIONS)
    assert plan.fits, plan.refusal()
    # As in the test above: closed tabs' kernels go after 20 s, and pages get 240 s to connect
    # (the harness's browsers share the server's 2 cores; a student's device connects in a second).
    args = (*classroom.classroom_options(SESSIONS), "--BoundedKernelManager.disconnect_grace=20",
            "--BoundedKernelManager.connect_grace=240")
    t_start = time.monotonic()
    with voila_server(*args) as srv:
        pid = srv.proc.pid
        while "Classroom ready" not in srv.log():
            assert time.monotonic() - t_start < 900, f"not warmed in 900 s:\n{srv.log()[-2000:]}"
            assert srv.proc.poll() is None, srv.log()[-3000:]
            time.sleep(1)
        warm_s = time.monotonic() - t_start
        ready = next(line for line in srv.log().splitlines() if line.startswith("Classroom ready"))
        kernels_ready = len(descendants(pid))
        warmed_bytes = tree_rss(pid)
        with Sampler(pid) as sampler:
            t0 = time.monotonic()
            results = asyncio.run(_classroom(srv.url, srv.port, CLASS_LOADING))
            all_done = time.monotonic() - t0
        log = srv.log()
    results, failures = _outcome(results)
    arrivals = sorted(r["first_from_arrival"] for r in results)
    firsts = sorted(r["first_figure"] for r in results)
    sliders = sorted(r["slider"] for r in results)
    pooled = log.count("Using pre-heated kernel")
    print(f"\nclassroom mode: {ready}; {warm_s:.0f} s from launch, {kernels_ready} kernels, "
          f"{warmed_bytes / MB:,.0f} MB resident in all (RSS, shared pages counted per process). "
          f"{len(results)} of {SESSIONS} sessions ok over {ARRIVAL_SECONDS} s, {CLASS_LOADING} loading at once, "
          f"{pooled} served from the pool, all done in {all_done:.0f} s; from arrival to the first figure p50 "
          f"{statistics.median(arrivals):.1f} s, p90 {_pct(arrivals, 90):.1f} s, max {arrivals[-1]:.1f} s; "
          f"slider to new caption p50 {statistics.median(sliders) * 1000:.0f} ms, p90 "
          f"{_pct(sliders, 90) * 1000:.0f} ms; from the page's own request (the harness's queue left out) p50 "
          f"{statistics.median(firsts):.1f} s, p90 {_pct(firsts, 90):.1f} s; peak {sampler.peak_kernels} kernels, "
          f"{sampler.peak_bytes / MB:,.0f} MB (targets for the report: p90 <= 5 s, slider p90 <= 300 ms)")
    _assert_every_session_ok(results, failures)  # no "[anywidget] Failed to initialize" either
    assert [r["limit"] for r in results] == [120_000] * SESSIONS  # the template's lift ran on every page
    assert pooled >= SESSIONS, f"only {pooled} of {SESSIONS + 1} pages came from the warmed pool"
