"""Faults in a lesson, against a real server on loopback (slow: ``make test-slow``).

Each test does to one student what goes wrong in a class, and checks that nothing is lost for
the others: a second student (tests/class_probe.py, the protocol a page speaks) gets its page
and every widget's state meanwhile, and the server's own memory stays bounded.

``test_legacy_protocol_refused``: the client of issue 33 (jupyter_server's legacy JSON protocol,
no subprotocol) is refused with HTTP 400 naming the protocol; before mha_serve.websocket it left
the server looping in Voila's header parser, growing by ~25 MB a second and serving nobody.
``test_malformed_and_oversized_frames``: frames a page never sends are dropped and logged, the
socket and the kernel go on.
``test_term_while_busy``: TERM to ``make dashboard``'s and ``make classroom``'s server while
kernels are busy: it exits in bounded time and leaves no kernel behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

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


def _serve(cmd: list[str], port: int) -> subprocess.Popen:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while http(f"http://127.0.0.1:{port}/voila/static/voila.js", timeout=2) != 200:
        assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.3)
    return proc


@pytest.mark.parametrize("target", ["dashboard", "classroom"])
def test_term_while_busy(target):
    """TERM to the server ``make dashboard`` or ``make classroom SEATS=4`` runs, while a student's
    kernel is busy and (classroom) the pool is still warming: it exits within STOP_WITHIN_S and
    every kernel process it started is gone."""
    from mha_serve.classroom import classroom_command

    port = free_port()
    if target == "dashboard":  # the Makefile's recipe: voila with a pool of POOL=1
        cmd = [sys.executable, "-m", "voila", "notebooks/dashboard.ipynb", f"--port={port}",
               "--preheat_kernel=True", "--pool_size=1"]
    else:
        cmd = classroom_command(4, port)
    proc = _serve(cmd, port)
    kernels: list[int] = []
    try:
        async def busy():
            status, html = await get_page(f"http://127.0.0.1:{port}/")
            client = await KernelClient.open(f"http://127.0.0.1:{port}/", kernel_id(html))
            states = await client.request_states()
            comm, state = sliders(states)[0]
            for value in range(state["min"], state["max"] + 1):  # a burst of moves: the kernel stays busy
                await client.send("comm_msg", {"comm_id": comm, "data": {
                    "method": "update", "state": {"value": value}, "buffer_paths": []}}, {"version": "2.1.0"})
            await asyncio.sleep(0.5)
            return client

        asyncio.run(busy())
        kernels = descendants(proc.pid)
        assert kernels, "no kernel started"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{target}: still running {STOP_WITHIN_S} s after TERM")
        stopped = time.monotonic() - t0
        time.sleep(1)
        orphans = _alive_pids(kernels)
        print(f"\n{target}: TERM with {len(kernels)} kernel processes, one busy: exited in {stopped:.1f} s "
              f"(code {proc.returncode}), {len(orphans)} left behind")
        assert orphans == [], f"{len(orphans)} of {len(kernels)} kernel processes outlived the server"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in _alive_pids(kernels):
            os.kill(pid, signal.SIGKILL)
