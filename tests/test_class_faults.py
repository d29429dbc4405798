"""Faults in a lesson, against a real server on loopback (slow: ``make test-slow``).

Each test does to one student what goes wrong in a class, and checks that nothing is lost for
the others: a second student (tests/class_probe.py, the protocol a page speaks) gets its page
and every widget's state meanwhile, and the server's own memory stays bounded.

``test_legacy_protocol_refused``: the client of issue 33 (jupyter_server's legacy JSON protocol,
no subprotocol) is refused with HTTP 400 naming the protocol; before mha_serve.websocket it left
the server looping in Voila's header parser, growing by ~25 MB a second and serving nobody.
``test_malformed_and_oversized_frames``: frames a page never sends are dropped and logged, the
socket and the kernel go on.
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
from dashboard_server import REPO, descendants, free_port, http, rss_bytes, voila_server
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


class PeakRSS:
    """The peak resident memory of one process, sampled every 0.2 s."""

    def __init__(self, pid: int):
        self.pid, self.baseline = pid, rss_bytes(pid)
        self.peak = self.baseline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except FileNotFoundError:
                return

    @property
    def growth(self) -> int:
        return self.peak - self.baseline

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


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
        with PeakRSS(srv.proc.pid) as rss:
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
        with PeakRSS(srv.proc.pid) as rss:
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
