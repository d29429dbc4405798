"""A kernel lives as long as its page: ``cull_connected: false`` (etc/jupyter/voila.json).

Voila's idle culler (jupyter_server's ``cull_idle_timeout``, 600 s in the settings) used to shut
down a kernel idle that long even with its page open (``cull_connected: true``): a student who read
for ten minutes came back to a dead page. Now a kernel with an open websocket is never culled for
idleness, and a kernel whose page has gone is culled as before. Here the cull time is shortened to
15 s: a page left open and idle for twice that keeps its kernel; once closed, the kernel is culled.
The control run with ``cull_connected=True`` shows the same idle page losing its kernel, so the
first result is the setting's doing. And a page whose device vanished without closing its socket
is culled too, once the server's pings go unanswered.

The page is the dashboard's own kernel socket (``KernelSocket``: the websocket the page opens,
which answers the server's pings as a browser does), with no message sent while it idles.
"""

from __future__ import annotations

import re
import time
import urllib.request

import pytest
from dashboard_server import KernelSocket, http, voila_server

pytestmark = pytest.mark.slow

CULL_S = 15
INTERVAL_S = 2
# the culler alone: the BoundedKernelManager's grace for a page gone is turned off here
SHORT_CULL = (f"--MappingKernelManager.cull_idle_timeout={CULL_S}",
              f"--MappingKernelManager.cull_interval={INTERVAL_S}",
              "--BoundedKernelManager.disconnect_grace=0")


def _open_page(server) -> str:
    """GET the dashboard (Voila starts its kernel and runs the notebook); the kernel's id."""
    with urllib.request.urlopen(server.url, timeout=120) as resp:
        page = resp.read().decode()
    return re.search(r'"kernelId":\s*"([0-9a-f-]{36})"', page).group(1)


def _alive(server, kernel_id: str) -> bool:
    status = http(f"{server.url}api/kernels/{kernel_id}")
    assert status in (200, 404), status
    return status == 200


def _wait_until_culled(server, kernel_id: str, seconds: float) -> float:
    t0 = time.monotonic()
    while _alive(server, kernel_id):
        assert time.monotonic() - t0 < seconds, f"kernel {kernel_id} not culled in {seconds} s:\n{server.log()[-2000:]}"
        time.sleep(1)
    return time.monotonic() - t0


def test_an_idle_open_page_keeps_its_kernel_past_the_cull_time_and_a_closed_one_is_culled():
    with voila_server(*SHORT_CULL) as server:
        kernel_id = _open_page(server)
        page = KernelSocket(server, kernel_id)
        try:
            time.sleep(2 * CULL_S + 2 * INTERVAL_S)  # idle, page open, for twice the cull time
            assert _alive(server, kernel_id), server.log()[-2000:]
            assert "Culling" not in server.log().split("Culling kernels with idle durations")[-1]
        finally:
            page.close()
        _wait_until_culled(server, kernel_id, CULL_S + 4 * INTERVAL_S + 10)
        # jupyter_server's culler, not a grace of BoundedKernelManager, and only once the page had gone
        assert re.search(rf"Culling '\w+' kernel '\w+' \({kernel_id}\) with 0 connections", server.log()), \
            server.log()[-2000:]


def test_control_with_cull_connected_the_same_idle_open_page_loses_its_kernel():
    with voila_server(*SHORT_CULL, "--MappingKernelManager.cull_connected=True") as server:
        kernel_id = _open_page(server)
        page = KernelSocket(server, kernel_id)
        try:
            _wait_until_culled(server, kernel_id, 2 * CULL_S + 4 * INTERVAL_S + 10)
            assert re.search(rf"Culling '\w+' kernel '\w+' \({kernel_id}\) with 1 connections", server.log())
        finally:
            page.close()


def test_a_page_whose_device_vanished_without_closing_is_culled():
    """A phone that leaves the Wi-Fi (or whose browser is suspended) closes nothing: its socket just
    stops answering. jupyter_server pings every page's websocket and closes one that no longer
    answers (``ws_ping_interval``, ``ws_ping_timeout``: 30 s and 90 s by default, 2 s and 6 s here);
    then the kernel has no connection and is culled like a closed page."""
    import websocket  # websocket-client: a socket that is never read answers no ping

    pings = "--Voila.tornado_settings={'ws_ping_interval': 2000, 'ws_ping_timeout': 6000}"
    with voila_server(*SHORT_CULL, pings) as server:
        kernel_id = _open_page(server)
        silent = websocket.create_connection(f"{server.ws_url}api/kernels/{kernel_id}/channels?session_id=gone",
                                             timeout=10, subprotocols=["v1.kernel.websocket.jupyter.org"])
        try:
            _wait_until_culled(server, kernel_id, 6 + CULL_S + 4 * INTERVAL_S + 20)
        finally:
            silent.close()
        assert "WebSocket ping timeout" in server.log()
        assert re.search(rf"Culling '\w+' kernel '\w+' \({kernel_id}\) with 0 connections", server.log())
