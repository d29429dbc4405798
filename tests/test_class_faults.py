"""Faults in a lesson, against a real server on loopback (slow: ``make test-slow``).

Each test does to one student what goes wrong in a class, and checks that nothing is lost for
the others: a second student (tests/class_probe.py, the protocol a page speaks) gets its page
and every widget's state meanwhile, and the server's own memory stays bounded.

``test_legacy_protocol_refused``: the client of issue 33 (jupyter_server's legacy JSON protocol,
no subprotocol) is refused with HTTP 400 naming the protocol; before mha_serve.websocket it left
the server looping in Voila's header parser, growing by ~25 MB a second and serving nobody.
``test_malformed_and_oversized_frames``: frames a page never sends are dropped and logged, the
socket and the kernel go on.
``test_client_that_does_not_read``: its socket is closed once 16 MB wait for it.
``test_stop_while_busy``: ``make dashboard`` and ``make classroom`` stopped by TERM or Ctrl-C while
a kernel is busy: they exit in bounded time and leave no kernel behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from class_probe import KernelClient, get_page, kernel_id, pack, sliders, student
from dashboard_server import (
    REPO,
    Peaks,
    descendants,
    free_port,
    http,
    kernel_pids,
    voila_server,
)
from tornado.httpclient import HTTPClientError
from tornado.websocket import websocket_connect

pytestmark = pytest.mark.slow

MB = 2**20
# What the server process itself (not its kernels) may grow by while one client misbehaves: a
# page's widget state is ~0.5 MB; the legacy blow-up grew it by ~370 MB in 15 s.
SERVER_GROWTH_BOUND = 100 * MB
# A page comes from a kernel that executes the dashboard (~6 s on a quiet 2-core machine); this
# bounds "served meanwhile" loosely enough for a busy CI box. The blow-up held pages for minutes.
SERVED_WITHIN_S = 90



async def _legacy_attempts(url: str, seconds: float) -> list[str]:
    """A legacy client (no subprotocol) trying again and again for ``seconds``: the refusals."""
    refusals = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        status, html = await get_page(url)
        assert status == 200, status
        try:
            ws = await websocket_connect(f"ws{url[4:]}api/kernels/{kernel_id(html)}/channels?session_id=legacy")
        except HTTPClientError as err:
            refusals.append(f"{err.code} {err.message}")
        else:
            ws.close()
            refusals.append("accepted")
    return refusals


def test_legacy_protocol_refused():
    with voila_server() as srv:
        with Peaks(srv.proc.pid, every=0.2) as rss:
            async def both():
                legacy = asyncio.create_task(_legacy_attempts(srv.url, 20))
                await asyncio.sleep(1)
                other = await student(1, srv.url, moves=1)
                return await legacy, other

            refusals, other = asyncio.run(both())
        log = srv.log()
    print(f"\nlegacy client: {len(refusals)} attempts, {refusals[0]!r}; meanwhile another student's "
          f"page in {other.get('html_s', float('nan')):.1f} s, states in {other.get('states_s', float('nan')):.1f} s; "
          f"server grew by {rss.growth / MB:.0f} MB")
    assert refusals and all(r.startswith("400 ") and "v1.kernel.websocket.jupyter.org" in r for r in refusals), refusals
    assert "Refused a kernel websocket" in log
    assert other["ok"], other
    assert other["html_s"] < SERVED_WITHIN_S and other["states_s"] < SERVED_WITHIN_S, other
    assert rss.growth < SERVER_GROWTH_BOUND, f"the server grew by {rss.growth / MB:.0f} MB"


def _bad_frames(session: str) -> dict[str, bytes | str]:
    """Frames a page never sends, by what is wrong with them."""
    _, good = pack("comm_info_request", {}, session)
    count = int.from_bytes(good[:8], "little")
    return {
        "legacy JSON text": '{"header": {"msg_type": "comm_info_request"}, "channel": "shell"}',
        "offset count of 2**60": (2**60).to_bytes(8, "little") + good[8:],
        "offsets past the end": good[:8 * count] + (len(good) + 99).to_bytes(8, "little") + good[8 * (count + 1):],
        "header not JSON": good.replace(b'"msg_type"', b'"msg_type', 1),
        "iopub channel": good.replace(b"shell", b"iopub", 1),
        "2 MiB": pack("comm_msg", {"comm_id": "x", "data": {"blob": "x" * (2 * MB)}}, session)[1],
        "7 bytes": b"\x06\0\0\0\0\0\0",
    }


def test_malformed_and_oversized_frames():
    with voila_server() as srv:
        with Peaks(srv.proc.pid, every=0.2) as rss:
            async def run():
                status, html = await get_page(srv.url)
                assert status == 200
                client = await KernelClient.open(srv.url, kernel_id(html))
                frames = _bad_frames(client.session)
                for frame in frames.values():
                    await client.send_raw(frame)
                # a message outside the allowlist (code to run): ignored by jupyter_server
                await client.send("execute_request", {"code": "import os; os._exit(1)", "silent": False})
                states = await client.request_states(timeout=SERVED_WITHIN_S)  # the same socket goes on
                moved = await client.move(sliders(states)[0][0], sliders(states)[0][1]["value"] - 1)
                client.close()
                other = await student(2, srv.url, moves=1)
                return frames, states, moved, other

            frames, states, moved, other = asyncio.run(run())
        log = srv.log()
    dropped = [line for line in log.splitlines() if "Dropped a websocket frame" in line]
    print(f"\nbad frames: {len(frames)} sent, {len(dropped)} dropped and logged, e.g. {dropped[:2]}; then "
          f"{len(states)} widget states and a move in {moved * 1000:.0f} ms on the same socket; server grew by "
          f"{rss.growth / MB:.0f} MB")
    assert len(dropped) == len(frames), dropped
    assert "execute_request" in log and "not allowed" in log
    assert len(states) > 100 and other["ok"], other
    assert rss.growth < SERVER_GROWTH_BOUND


def test_client_that_does_not_read():
    """A client asks for every widget's state 80 times (~37 MB of answers) and reads none of them:
    the server closes its socket once ``max_queued_bytes`` (16 MB) wait for it, instead of holding
    them all, and another student is served meanwhile."""
    with voila_server() as srv:
        with Peaks(srv.proc.pid, every=0.2) as rss:
            async def run():
                status, html = await get_page(srv.url)
                client = await KernelClient.open(srv.url, kernel_id(html))
                comm = "control"
                await client.send("comm_open", {"comm_id": comm, "target_name": "jupyter.widget.control",
                                                "data": {}}, {"version": "1.0.0"})
                for _ in range(80):  # tornado's client stops reading the socket while nobody reads it
                    await client.send("comm_msg", {"comm_id": comm, "data": {"method": "request_states"}})
                deadline = time.monotonic() + SERVED_WITHIN_S * 2
                while "is not reading" not in srv.log() and time.monotonic() < deadline:
                    await asyncio.sleep(1)
                other = await student(3, srv.url, moves=1)
                client.close()
                return other

            other = asyncio.run(run())
        log = srv.log()
    print(f"\nclient not reading: {'closed' if 'is not reading' in log else 'NOT closed'}; another student "
          f"ok={other['ok']}; server grew by {rss.growth / MB:.0f} MB")
    assert "its client is not reading (more than 16 MB waiting)" in log
    assert other["ok"], other
    assert rss.growth < SERVER_GROWTH_BOUND


# -- stopping -------------------------------------------------------------------------------------

STOP_WITHIN_S = 30  # Voila shuts each kernel down (a few seconds each at most) before it exits


def _alive_pids(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (zombies, which hold nothing, count as gone)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(pid)
        except FileNotFoundError:
            pass
    return alive


def _make(target: str, port: int) -> subprocess.Popen:
    """``make TARGET PORT=port`` from the repository root, in a process group of its own (a
    terminal's), once its server answers."""
    extra = ["SEATS=4"] if target == "classroom" else []
    proc = subprocess.Popen(["make", "--no-print-directory", target, f"PORT={port}", *extra], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 180
    while http(f"http://127.0.0.1:{port}/voila/static/voila.js", timeout=2) != 200:
        assert proc.poll() is None and time.monotonic() < deadline, f"make {target} did not start"
        time.sleep(0.3)
    return proc


async def _keep_busy(url: str) -> None:
    """A student whose kernel is left busy: a burst of slider moves, every value of a slider."""
    status, html = await get_page(url)
    assert status == 200, status
    client = await KernelClient.open(url, kernel_id(html))
    comm, state = sliders(await client.request_states())[0]
    for value in range(state["min"], state["max"] + 1):
        await client.send("comm_msg", {"comm_id": comm, "data": {
            "method": "update", "state": {"value": value}, "buffer_paths": []}}, {"version": "2.1.0"})
    await asyncio.sleep(0.5)


@pytest.mark.parametrize("how", ["TERM to make", "Ctrl-C"])
@pytest.mark.parametrize("target", ["dashboard", "classroom"])
def test_stop_while_busy(target, how):
    """``make dashboard`` or ``make classroom SEATS=4`` stopped while a student's kernel is busy
    (and, in classroom mode, the pool still warming): by TERM to make (a process manager, ``kill``)
    or by Ctrl-C (SIGINT to the terminal's process group). It exits within STOP_WITHIN_S and every
    kernel process it started is gone."""
    port = free_port()
    proc = _make(target, port)
    kernels: list[int] = []
    try:
        asyncio.run(_keep_busy(f"http://127.0.0.1:{port}/"))
        kernels = [pid for pid in descendants(proc.pid) if "ipykernel" in Path(f"/proc/{pid}/cmdline").read_text()]
        assert kernels, "no kernel started"
        t0 = time.monotonic()
        if how == "Ctrl-C":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"make {target}: still running {STOP_WITHIN_S} s after {how}")
        stopped = time.monotonic() - t0
        time.sleep(1)
        orphans = _alive_pids(kernels)
        print(f"\nmake {target}, {how} with {len(kernels)} kernels, one busy: make exited in {stopped:.1f} s, "
              f"{len(orphans)} kernels left behind")
        assert orphans == [], f"{len(orphans)} of {len(kernels)} kernel processes outlived the server"
        assert http(f"http://127.0.0.1:{port}/voila/static/voila.js", timeout=2) == 0, "the server still answers"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in _alive_pids(kernels):
            os.kill(pid, signal.SIGKILL)


# -- a student's kernel, connection or server lost -------------------------------------------------

NOTICE = "#mha-connection:not([hidden])"  # the page template's "lost its connection" notice
FIGURE = ".mha-heads-figure.mha-heatmap[data-drawn] canvas"
BROWSER_TIMEOUT_MS = 180_000


async def _seated(url: str) -> tuple[KernelClient, str, dict]:
    """A student with its page's states: (its socket, its kernel id, its first slider (id, state))."""
    status, html = await get_page(url)
    assert status == 200, status
    client = await KernelClient.open(url, kernel_id(html))
    return client, kernel_id(html), sliders(await client.request_states())[0]


async def _still_works(client: KernelClient, slider: tuple[str, dict]) -> float:
    """A move on an already seated student's page answers: its latency in seconds."""
    comm, state = slider
    state["value"] = state["value"] - 1 if state["value"] > state["min"] else state["value"] + 1
    return await client.move(comm, state["value"], timeout=SERVED_WITHIN_S)


class LoopThread:
    """An asyncio loop in a thread of its own, for protocol clients beside Playwright's sync API
    (which runs a loop of its own in the test's thread)."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


def _browser_page(playwright, url: str):
    from dashboard_server import launch_chromium

    browser = launch_chromium(playwright)
    page = browser.new_page()
    page.goto(url, timeout=BROWSER_TIMEOUT_MS)
    page.wait_for_selector(FIGURE, timeout=BROWSER_TIMEOUT_MS)
    return browser, page


def _page_kernel(page) -> str:
    return kernel_id(page.content())


@pytest.mark.browser
def test_kernel_killed_mid_class():
    """A student's kernel is killed (out of memory, a crash): Voila does not restart it blank
    (``restart_limit`` 0), its page says to reload, the reload gets a new kernel, and another
    student goes on meanwhile."""
    from playwright.sync_api import sync_playwright

    with voila_server() as srv, sync_playwright() as p:
        loop = LoopThread()
        other, _, slider = loop.run(_seated(srv.url))
        browser, page = _browser_page(p, srv.url)
        try:
            victim = _page_kernel(page)
            os.kill(kernel_pids(srv.proc.pid)[victim], signal.SIGKILL)
            t0 = time.monotonic()
            page.wait_for_selector(NOTICE, timeout=BROWSER_TIMEOUT_MS)
            noticed = time.monotonic() - t0
            text = page.inner_text("#mha-connection")
            moved = loop.run(_still_works(other, slider))
            page.reload(timeout=BROWSER_TIMEOUT_MS)
            page.wait_for_selector(FIGURE, timeout=BROWSER_TIMEOUT_MS)
            new = _page_kernel(page)
            notice_after_reload = page.locator(NOTICE).count()
        finally:
            browser.close()
            loop.loop.call_soon_threadsafe(other.close)
            loop.close()
        log = srv.log()
    print(f"\nkernel killed: the page said so after {noticed:.1f} s ({text!r}); the other student's move "
          f"{moved * 1000:.0f} ms; the reload drew its heatmaps from a new kernel")
    assert "Reload the page" in text
    assert f"Kernel {victim} died" in log and "restarting kernel" not in log
    assert new and new != victim and notice_after_reload == 0


def _drop(client: KernelClient) -> None:
    """The connection vanishes without a goodbye, as when a laptop's lid closes."""
    client.ws.stream.close()


def test_laptop_sleeps_and_wakes():
    """A student's connection drops without a close, as a sleeping laptop's does, and comes back
    (the page reconnects with its session id). Within the grace the page has its kernel back;
    after it (``disconnect_grace``, 120 s in voila.json, 10 s here so the test does not wait 5
    minutes; a real sleep also waits out the server's 30 s websocket ping first), the reconnect is
    refused and a reload gets a new seat. Another student goes on meanwhile."""
    grace = 10
    with voila_server(f"--BoundedKernelManager.disconnect_grace={grace}", "--BoundedKernelManager.check_interval=1") as srv:
        async def run():
            other, _, other_slider = await _seated(srv.url)
            sleeper, kernel, slider = await _seated(srv.url)
            _drop(sleeper)
            await asyncio.sleep(grace / 3)  # a nap
            back = await KernelClient.open(srv.url, kernel)  # a page reconnects with the same session
            nap_states = await back.request_states()
            await _still_works(back, slider)
            _drop(back)
            await asyncio.sleep(grace * 2)  # a long sleep
            try:
                await KernelClient.open(srv.url, kernel)
                refused = None
            except HTTPClientError as err:
                refused = err.code
            moved = await _still_works(other, other_slider)
            _, new_kernel, _ = await _seated(srv.url)  # the reload
            other.close()
            return len(nap_states), refused, moved, new_kernel, kernel

        n_states, refused, moved, new_kernel, kernel = asyncio.run(run())
        log = srv.log()
    print(f"\nlaptop: after a {grace / 3:.0f} s nap {n_states} widget states on the same kernel; after "
          f"{grace * 2} s (grace {grace} s) the reconnect got HTTP {refused} and a reload a new kernel; the "
          f"other student's move {moved * 1000:.0f} ms")
    assert n_states > 100
    assert refused == 404 and new_kernel != kernel
    assert "its page went away" in log


def test_page_flood_beyond_the_cap():
    """Twice the cap's worth of page loads at once while two students are seated: the extra
    loads get the 503 "busy" page, the server lives, the seated students' moves answer during
    the flood, and once the unconnected kernels are shut down a new student gets a page."""
    cap = 5
    with voila_server(f"--BoundedKernelManager.max_kernels={cap}", "--BoundedKernelManager.connect_grace=10",
                      "--BoundedKernelManager.check_interval=1") as srv:
        async def run():
            seated = [await _seated(srv.url) for _ in range(2)]
            flood = [asyncio.create_task(get_page(srv.url)) for _ in range(2 * cap)]
            moves = [await _still_works(c, s) for c, _, s in seated for _ in range(3)]
            answers = await asyncio.gather(*flood)
            await asyncio.sleep(15)  # the flood's kernels: no page connected, shut down after 10 s
            late = await student(9, srv.url, moves=1)
            for c, _, _ in seated:
                c.close()
            return moves, answers, late

        moves, answers, late = asyncio.run(run())
        alive = srv.proc.poll() is None
        log = srv.log()
    codes = sorted(code for code, _ in answers)
    print(f"\nflood of {len(answers)} against a cap of {cap} with 2 seated: statuses {codes}; seated moves "
          f"max {max(moves) * 1000:.0f} ms; a late student afterwards ok={late['ok']}")
    assert alive and set(codes) == {200, 503} and codes.count(200) == cap - 2
    assert all("The dashboard is busy" in body for code, body in answers if code == 503)
    assert len(moves) == 6 and late["ok"], late
    assert "Kernel cap reached" in log


@pytest.mark.browser
def test_server_restarted():
    """The server stops and starts again on the same port mid-class: an open page says it lost
    its connection, and a reload gets a page from the new server."""
    from playwright.sync_api import sync_playwright

    port = free_port()
    with sync_playwright() as p:
        with voila_server(port=port) as srv:
            browser, page = _browser_page(p, srv.url)
            first = _page_kernel(page)
        try:  # the server has stopped (voila_server's exit: TERM, then its kernels are shut down)
            page.wait_for_selector(NOTICE, timeout=BROWSER_TIMEOUT_MS)
            text = page.inner_text("#mha-connection")
            with voila_server(port=port) as srv:
                page.reload(timeout=BROWSER_TIMEOUT_MS)
                page.wait_for_selector(FIGURE, timeout=BROWSER_TIMEOUT_MS)
                second = _page_kernel(page)
                notice_after_reload = page.locator(NOTICE).count()
        finally:
            browser.close()
    print(f"\nserver restarted: the open page said {text!r}; the reload drew its heatmaps from the new server")
    assert "Reload the page" in text
    assert second and second != first and notice_after_reload == 0
