"""Helpers of tests/test_room_network.py: a student's device on another network, and a room server.

``student_network()`` makes a Linux network namespace joined to this one by a veth pair: the host
end is ``HOST``, the namespace has two addresses of its own (two devices). Whatever runs in it
(``python tests/room_network.py`` for HTTP and websocket probes, Chromium through
``chromium_wrapper``) reaches the server the way a phone on the room's Wi-Fi does: over a network
interface, from an address that is not this machine's. It needs root (``ip netns``), as CI has.

``room_server()`` runs ``python -m mha_serve.room`` on the dashboard, listening on all interfaces,
with a join code given in ``$JOIN_CODE``.

Run as a script (inside the namespace), it reads a list of requests as JSON on stdin and prints,
for each, the status, the ``Set-Cookie`` headers and the start of the body.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from class_probe import SUBPROTOCOL, pack, unpack
from dashboard_server import stop_group

REPO = Path(__file__).resolve().parents[1]


def netns_available() -> str | None:
    """None if this process can make network namespaces, else why not."""
    if os.geteuid() != 0:
        return "making a network namespace needs root (ip netns); CI runs as root"
    if not shutil.which("ip"):
        return "the `ip` command is missing (Debian/Ubuntu: apt-get install iproute2)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def student_network():
    """Yield ``(namespace, host_address, (device_1, device_2))``; removed afterwards."""
    tag = os.getpid() % 100_000
    ns, host_if, peer_if = f"mha-room-{tag}", f"mrh{tag}", f"mrp{tag}"
    subnet = f"10.231.{tag % 250}"
    host, devices = f"{subnet}.1", (f"{subnet}.2", f"{subnet}.3")
    _ip("netns", "add", ns)
    try:
        _ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
        _ip("link", "set", peer_if, "netns", ns)
        _ip("addr", "add", f"{host}/24", "dev", host_if)
        _ip("link", "set", host_if, "up")
        for device in devices:
            _ip("-n", ns, "addr", "add", f"{device}/24", "dev", peer_if)
        _ip("-n", ns, "link", "set", peer_if, "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        yield ns, host, devices
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)  # gone with the namespace, normally


def probe(ns: str, requests: list[dict], timeout: float = 60) -> list[dict]:
    """Run ``requests`` from inside ``ns`` (this file as a script); their results, in order.

    Each request: ``url``, optional ``method``, ``cookie``, ``source`` (a device address) and
    ``websocket`` (open a websocket instead: the status is 101 when it opened; with ``execute``,
    send that code in an ``execute_request`` and list the ``replies``)."""
    done = subprocess.run(["ip", "netns", "exec", ns, sys.executable, __file__], input=json.dumps(requests),
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"the probe failed in {ns}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def chromium_wrapper(ns: str, chromium: str, folder: Path) -> str:
    """A script that starts ``chromium`` inside ``ns``: Playwright drives it over a pipe, so the
    browser is a device on the other network while the test drives it from here."""
    script = folder / "chromium-in-netns"
    script.write_text(f"#!/bin/sh\nexec ip netns exec {ns} {chromium} \"$@\"\n")
    script.chmod(0o755)
    return str(script)


@contextlib.contextmanager
def room_server(code: str, port: int, *extra: str, startup_s: float = 90):
    """``python -m mha_serve.room notebooks/dashboard.ipynb`` on all interfaces with ``JOIN_CODE=code``;
    yields the log path. Ready when ``/room`` answers on loopback (it starts no kernel)."""
    import urllib.request

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "JOIN_CODE": code}
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    log = tempfile.NamedTemporaryFile("w+b", prefix="room-", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-m", "mha_serve.room", "notebooks/dashboard.ipynb",
                             "--host=0.0.0.0", f"--port={port}", *extra],
                            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    path = Path(log.name)
    try:
        deadline = time.monotonic() + startup_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"room server exited with {proc.returncode}:\n{path.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/room", timeout=2) as resp:
                    if resp.status == 200:
                        break
            if time.monotonic() > deadline:
                raise TimeoutError(f"room server did not start in {startup_s} s:\n{path.read_text()[-3000:]}")
            time.sleep(0.3)
        yield path
    finally:
        stop_group(proc)
        log.close()


def _one(request: dict) -> dict:
    import http.client
    import urllib.parse

    url = urllib.parse.urlsplit(request["url"])
    headers = {"Cookie": request["cookie"]} if request.get("cookie") else {}
    if request.get("websocket"):
        import websocket  # websocket-client, a dependency of jupyter_server

        try:
            ws = websocket.create_connection(request["url"], timeout=10,
                                             header=[f"{k}: {v}" for k, v in headers.items()],
                                             subprotocols=[SUBPROTOCOL] if "/channels" in url.path else None)
        except websocket.WebSocketBadStatusException as err:
            return {"status": err.status_code, "cookies": [], "body": ""}
        replies = _execute(ws, request["execute"]) if request.get("execute") else []
        ws.close()
        return {"status": 101, "cookies": [], "body": "", "replies": replies}
    source = (request["source"], 0) if request.get("source") else None
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60, source_address=source)
    path = url.path + (f"?{url.query}" if url.query else "")
    conn.request(request.get("method", "GET"), path, body=b"{}" if request.get("method") == "POST" else None,
                 headers=headers)
    resp = conn.getresponse()
    body = resp.read().decode(errors="replace")
    conn.close()
    return {"status": resp.status, "cookies": resp.headers.get_all("Set-Cookie") or [], "body": body[:200_000]}


def _execute(ws, code: str, seconds: float = 5) -> list[str]:
    """Send an ``execute_request`` of ``code`` as a hostile page would; the types of the messages
    that answer it within ``seconds``."""
    import uuid

    msg_id, frame = pack("execute_request", {"code": code, "silent": False, "store_history": False,
                                             "user_expressions": {}, "allow_stdin": False,
                                             "stop_on_error": True}, uuid.uuid4().hex)
    ws.send_binary(frame)  # the v1 frame a page sends
    replies, end = [], time.monotonic() + seconds
    ws.settimeout(0.5)
    while time.monotonic() < end:
        try:
            frame = ws.recv()
        except Exception:  # timeout: nothing this half second
            continue
        if isinstance(frame, bytes) and unpack(frame)["parent_header"].get("msg_id") == msg_id:
            replies.append(unpack(frame)["msg_type"])
    return replies


if __name__ == "__main__":
    print(json.dumps([_one(r) for r in json.load(sys.stdin)]))
