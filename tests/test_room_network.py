"""Room mode served for real: ``python -m mha_serve.room`` on all interfaces, and student devices
in another network namespace (tests/room_network.py), reaching it over a veth link from addresses
that are not this machine's, as phones on the room's Wi-Fi do.

Without the code a device gets the code page on every route (the page, the kernels API, the kernel
and request-info websockets, the static files, the templates, the labextensions, the files
handler, the shutdown API) and starts no kernel; wrong codes are limited per address; the projector
page answers the teacher's machine only; with the code a device still cannot execute code (the
message allowlist); and with the code, a real Chromium on the other network gets
the dashboard and moves a slider, and the kernel's answer comes back.
"""

from __future__ import annotations

import re
import time

import pytest
from dashboard_server import CHROMIUM, CHROMIUM_ARGS, free_port, set_int
from room_network import chromium_wrapper, netns_available, probe, room_server, student_network

import mha_core as m
from mha_serve.room import COOKIE, WRONG_LIMIT, new_code

pytestmark = pytest.mark.slow
LOAD_TIMEOUT_MS = 90_000
UPDATE_TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def room():
    """The network, the server (preheated pool of one, as `make dashboard ROOM=1`), its code."""
    if reason := netns_available():
        pytest.skip(reason)
    code = new_code()
    port = free_port()
    with student_network() as (ns, host, devices), \
            room_server(code, port, "--preheat_kernel=True", "--pool_size=1") as log:
        yield {"ns": ns, "host": host, "devices": devices, "code": code, "port": port, "log": log,
               "base": f"http://{host}:{port}"}


def _kernel_starts(room) -> int:
    return room["log"].read_text().count("Kernel started")


def _wait_pool_filled(room, fills: int) -> None:
    deadline = time.monotonic() + 90
    while room["log"].read_text().count("is filled with") < fills:
        assert time.monotonic() < deadline, room["log"].read_text()[-3000:]
        time.sleep(0.3)


def _wait_quiet(room, seconds: float = 3) -> None:
    """Until the server has logged nothing for ``seconds`` (a pool refill or a page still running)."""
    deadline = time.monotonic() + 90
    size = -1
    while size != (size := room["log"].stat().st_size):
        assert time.monotonic() < deadline, "the server never went quiet"
        time.sleep(seconds)


def _cookie(result: dict) -> str:
    (value,) = [c.split(";")[0] for c in result["cookies"] if c.startswith(f"{COOKIE}=")]
    return value


@pytest.fixture(scope="module")
def admitted(room):
    """Device 1 opens the printed link (``/?code=``): the dashboard page, the cookie, its kernel id."""
    _wait_pool_filled(room, 1)
    (page,) = probe(room["ns"], [{"url": f"{room['base']}/?code={room['code']}"}])
    _wait_pool_filled(room, 2)  # the pool has refilled: no kernel start is pending
    kernel_id = re.search(r'"kernelId":\s*"([0-9a-f-]{36})"', page["body"]).group(1)
    return {"page": page, "cookie": _cookie(page), "kernel_id": kernel_id}


def _routes(room, kernel_id: str) -> list[dict]:
    base, ws = room["base"], room["base"].replace("http://", "ws://")
    return [{"url": f"{base}/"}, {"url": f"{base}/notebooks/dashboard.ipynb"},
            {"url": f"{base}/api/kernels"}, {"url": f"{base}/api/kernels", "method": "POST"},
            {"url": f"{base}/api/kernels/{kernel_id}"},
            {"url": f"{base}/voila/static/voila.js"},
            {"url": f"{base}/voila/templates/mha/static/mha.css"},
            {"url": f"{base}/voila/labextensions/@jupyter-widgets/jupyterlab-manager/package.json"},
            {"url": f"{base}/voila/files/notebooks/dashboard.ipynb"},
            {"url": f"{base}/voila/api/themes/theme-light-extension/index.css"},
            {"url": f"{base}/voila/api/shutdown/{kernel_id}", "method": "POST"},
            {"url": f"{ws}/api/kernels/{kernel_id}/channels?session_id=probe", "websocket": True},
            {"url": f"{ws}/voila/query/{kernel_id}", "websocket": True}]


def test_the_page_and_the_cookie_from_the_printed_link(room, admitted):
    page = admitted["page"]
    assert page["status"] == 200 and "jupyter-config-data" in page["body"]
    (header,) = [c for c in page["cookies"] if c.startswith(f"{COOKIE}=")]
    assert "HttpOnly" in header and "SameSite=Strict" in header and "Path=/" in header
    assert room["code"] not in header  # the cookie is the server's token, not the code


def test_a_device_without_the_code_gets_only_the_code_page_on_every_route(room, admitted):
    routes = _routes(room, admitted["kernel_id"])
    _wait_quiet(room)
    before = _kernel_starts(room)
    refused = probe(room["ns"], routes)
    time.sleep(2)  # a start the refused requests had caused would be logged by now
    for route, result in zip(routes, refused, strict=True):
        assert result["status"] == 403, (route, result["status"])
        if not route.get("websocket"):
            assert "Join the class" in result["body"] and "jupyter-config-data" not in result["body"], route
            assert not any(c.startswith(f"{COOKIE}=") for c in result["cookies"])
    assert _kernel_starts(room) == before  # nothing started for a device without the code
    # the same routes with the cookie reach Voila's handlers: it is the gate that refused them
    cookie = admitted["cookie"]
    allowed = probe(room["ns"], [{**r, "cookie": cookie} for r in routes[2:]])
    by_url = {(r["url"].split("?")[0], r.get("method", "GET")): a["status"] for r, a in zip(routes[2:], allowed, strict=True)}
    base, ws = room["base"], room["base"].replace("http://", "ws://")
    assert by_url[(f"{base}/voila/static/voila.js", "GET")] == 200
    assert by_url[(f"{base}/api/kernels/{admitted['kernel_id']}", "GET")] == 200
    assert by_url[(f"{ws}/api/kernels/{admitted['kernel_id']}/channels", "GET")] == 101
    # and the local route's hardening is still there behind the gate
    assert by_url[(f"{base}/api/kernels", "POST")] in (403, 405)
    assert by_url[(f"{base}/voila/files/notebooks/dashboard.ipynb", "GET")] in (403, 404)


def test_a_device_with_the_code_still_cannot_execute_code_on_its_kernel(room, admitted, tmp_path):
    """The local route's message allowlist holds on the room's network: an ``execute_request`` sent
    over the page's own kernel websocket, with the cookie, is dropped by the server."""
    marker = tmp_path / "executed"
    ws = room["base"].replace("http://", "ws://")
    (result,) = probe(room["ns"], [{"url": f"{ws}/api/kernels/{admitted['kernel_id']}/channels?session_id=forger",
                                    "websocket": True, "cookie": admitted["cookie"],
                                    "execute": f"open({str(marker)!r}, 'w').write('x')"}])
    assert result["status"] == 101 and result["replies"] == []
    assert not marker.exists()
    assert "execute_request" in room["log"].read_text() and "not allowed" in room["log"].read_text()


def test_wrong_codes_are_refused_then_limited_for_that_device_only(room, admitted):
    guesser = room["devices"][1]
    wrong = "W" * 6 if room["code"] != "W" * 6 else "X" * 6
    guesses = probe(room["ns"], [{"url": f"{room['base']}/?code={wrong}", "source": guesser}] * WRONG_LIMIT
                    + [{"url": f"{room['base']}/?code={room['code']}", "source": guesser}])
    assert [g["status"] for g in guesses[:-1]] == [403] * WRONG_LIMIT
    assert all("not right" in g["body"] for g in guesses[:-1])
    assert guesses[-1]["status"] == 429 and "Too many wrong codes" in guesses[-1]["body"]
    (other,) = probe(room["ns"], [{"url": f"{room['base']}/voila/static/voila.js", "cookie": admitted["cookie"]}])
    assert other["status"] == 200  # device 1 is not blocked by device 2's guesses


def test_the_projector_page_answers_the_teachers_machine_only(room):
    (device,) = probe(room["ns"], [{"url": f"{room['base']}/room"}])
    assert device["status"] == 403 and room["code"] not in device["body"]
    import urllib.request

    for url in (f"http://127.0.0.1:{room['port']}/room", f"{room['base']}/room"):  # loopback, its own address
        with urllib.request.urlopen(url, timeout=10) as resp:
            page = resp.read().decode()
        assert f"{room['code'][:3]} {room['code'][3:]}" in page and "<svg" in page


@pytest.mark.browser
def test_a_device_with_the_code_gets_the_dashboard_and_a_working_slider(room, tmp_path):
    """Chromium on the other network: the code page, the code typed (lower case, with a dash), the
    dashboard, a slider moved and the kernel's number shown; a reload needs no code again."""
    from playwright.sync_api import expect, sync_playwright

    base = room["base"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_wrapper(room["ns"], CHROMIUM, tmp_path),
                                    headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{base}/")
            expect(page.locator("h1")).to_have_text("Join the class")
            typed = f"{room['code'][:3].lower()}-{room['code'][3:].lower()}"
            page.fill("#code", typed)
            page.click("button[type=submit]")
            page.wait_for_selector(".mha-shape-N .widget-readout", timeout=LOAD_TIMEOUT_MS)
            (cookie,) = [c for c in context.cookies() if c["name"] == COOKIE]
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            d_model = int(page.locator(".mha-shape-d_model .widget-readout").inner_text())
            h = int(page.locator(".mha-shape-h .widget-readout").inner_text())
            set_int(page, ".mha-shape-B", 3, UPDATE_TIMEOUT_MS)
            set_int(page, ".mha-shape-N", 100, UPDATE_TIMEOUT_MS)
            macs = m.count_macs(m.MHAConfig(d_model, h), 100, batch=3)["total"]
            expect(page.locator(".mha-shape-panel .mha-macs")).to_have_text(f"{macs:,}", timeout=UPDATE_TIMEOUT_MS)
            page.goto(f"{base}/")  # the cookie lets the device back in without the code
            page.wait_for_selector(".mha-shape-N .widget-readout", timeout=LOAD_TIMEOUT_MS)
            assert page.locator("h1", has_text="Join the class").count() == 0
        finally:
            browser.close()
