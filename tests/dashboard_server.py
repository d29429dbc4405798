"""Helpers for the dashboard's browser and load tests: start Voila, drive a kernel socket.

``voila_server`` starts ``voila notebooks/dashboard.ipynb`` plainly, as a student would (the
settings and offline templates come from the environment, installed by ``make venv``) on a
free loopback port, and stops it and its kernels afterwards. ``KernelSocket`` talks to one
kernel over the same websocket the page uses (tests/class_probe.py's v1 frames), to forge the
messages a hostile page could send.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NOTEBOOK = "notebooks/dashboard.ipynb"

# -- finding a browser the way users have one ----------------------------------------------------

BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
# Where a browser lives when it is not on the PATH: snap's bin directory (missing from some
# PATHs, e.g. under sudo or cron) and the macOS application bundles.
BROWSER_PATHS = ("/snap/bin/chromium",
                 "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
                 "/Applications/Chromium.app/Contents/MacOS/Chromium",
                 "~/Applications/Google Chrome.app/Contents/MacOS/Google Chrome",
                 "~/Applications/Chromium.app/Contents/MacOS/Chromium")
NO_BROWSER = ("no Chromium or Chrome found: set CHROMIUM=/path/to/chrome or pass --browser=PATH, "
              "or install one (Debian/Ubuntu: apt-get install chromium, or snap install chromium; "
              "macOS: Google Chrome; anywhere: .venv/bin/python -m playwright install chromium)")


def _playwright_browser() -> str | None:
    """Playwright's own Chromium, where ``playwright install chromium`` has been run."""
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            path = p.chromium.executable_path
    except Exception:  # no driver, or no browser registry: not installed
        return None
    return path if path and os.path.isfile(path) else None


def find_browser(explicit: str | None = None) -> tuple[str | None, str]:
    """The Chromium or Chrome to drive, and why (or why none).

    In order: ``explicit`` (``--browser``), then ``$CHROMIUM``: a path given must exist (a wrong
    one is reported, not silently replaced); then Chromium/Chrome on the PATH (snap's
    ``/snap/bin`` included), the macOS application bundles, and Playwright's own browser.
    Returns ``(path, how it was found)`` or ``(None, the reason naming the fix)``.
    """
    import shutil

    for source, value in (("--browser", explicit), ("CHROMIUM", os.environ.get("CHROMIUM"))):
        if value:
            path = shutil.which(value) or (value if os.path.isfile(value) and os.access(value, os.X_OK) else None)
            if path:
                return path, f"{source}={value}"
            return None, f"{source}={value} is not an executable browser. {NO_BROWSER}"
    for name in BROWSER_NAMES:
        if path := shutil.which(name):
            return path, f"{name} on the PATH"
    for candidate in BROWSER_PATHS:
        path = os.path.expanduser(candidate)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path, path
    if path := _playwright_browser():
        return path, "Playwright's own Chromium"
    return None, NO_BROWSER


# tests/conftest.py sets $CHROMIUM from --browser before any test module imports this one.
CHROMIUM, CHROMIUM_FOUND = find_browser()

# axe-core, pinned in tests/a11y/package-lock.json ($MHA_AXE: another copy of axe.min.js)
AXE = Path(os.environ.get("MHA_AXE") or REPO / "tests" / "a11y" / "node_modules" / "axe-core" / "axe.min.js")
NO_AXE = (f"axe-core is not installed ({AXE} is missing): it needs npm (Node.js: apt-get install "
          "npm, or brew install node); then `make test-slow` runs `npm ci --prefix tests/a11y`")
# Flags from the project's tooling notes: without the background-networking ones Chromium
# keeps trying to reach outside hosts, which would break the "no outside request" check.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Voila printed its first page ~6 s after launch on a 2-core machine; leave room for a busy CI box.
STARTUP_TIMEOUT_S = 90


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def http(url: str, method: str = "GET", timeout: float = 10) -> int:
    """HTTP status of a request (an error status is returned, not raised)."""
    req = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0  # nothing listening (yet)


@contextlib.contextmanager
def voila_server(*extra_args: str, notebook: str = NOTEBOOK, app: str = "voila", port: int | None = None):
    """Run ``voila notebooks/dashboard.ipynb`` plainly from the repository root (plus ``extra_args``):
    the template and settings come from the environment's Jupyter paths, as on every route.
    ``app="jupyter_server"`` runs ``jupyter server`` with Voila as a server extension instead
    (the JupyterHub/Binder route; pages at ``/voila/render/<notebook>``). ``notebook`` (a path
    from the repository root) serves another notebook the same way, as ``make lesson-slides``
    does. ``port``: this one instead of a free one (a server restarted where its pages were). Yields a ``Server``."""
    port = port or free_port()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    env.pop("JUPYTER_PATH", None)
    env.pop("JUPYTER_CONFIG_PATH", None)
    if app == "voila":
        cmd = [sys.executable, "-m", "voila", notebook, f"--port={port}", *extra_args]
    else:
        cmd = [sys.executable, "-m", "jupyter_server", f"--port={port}", "--ServerApp.ip=127.0.0.1",
               "--IdentityProvider.token=", "--ServerApp.open_browser=False", "--allow-root", *extra_args]
    log = tempfile.NamedTemporaryFile("w+b", prefix="voila-", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)  # own process group: kernels included
    server = Server(proc, port, Path(log.name))
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        probe = "voila/static/voila.js" if app == "voila" else "api"  # neither starts a kernel
        while _alive(proc) and http(f"{server.url}{probe}", timeout=2) != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"voila did not start in {STARTUP_TIMEOUT_S} s:\n{server.log()[-3000:]}")
            time.sleep(0.3)
        if not _alive(proc):
            raise RuntimeError(f"voila exited with {proc.returncode}:\n{server.log()[-3000:]}")
        yield server
    finally:
        stop_group(proc)
        log.close()


def stop_group(proc: subprocess.Popen) -> None:
    """TERM the server's process group (the server and its kernels); KILL it after 15 s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def _alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def launch_chromium(playwright):
    """The browser ``find_browser`` found, driven by Playwright (tests marked ``browser`` are
    skipped by tests/conftest.py when there is none)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


def set_int(page, css: str, value: int, timeout_ms: float) -> None:
    """Type ``value`` into the readout of the IntSlider ``css`` and press Enter, as a person
    does; waits until the readout shows it."""
    from playwright.sync_api import expect

    readout = page.locator(f"{css} .widget-readout")
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(value))
    page.keyboard.press("Enter")
    expect(readout).to_have_text(str(value), timeout=timeout_ms)


def is_local(url: str, port: int) -> bool:
    """True for the server's own http/ws URLs and for in-page blob:/data: URLs."""
    if url.startswith(("data:", "blob:http://127.0.0.1:", "about:")):
        return True
    return url.startswith((f"http://127.0.0.1:{port}/", f"ws://127.0.0.1:{port}/"))


# The widths the dashboard's axe audit runs at (test_dashboard_browser.py), one test each.
AXE_WIDTHS = (1366, 390, 768, 1536, 1680, 1920)

# -- /proc: memory and processes (Linux) -------------------------------------------------------

def rss_bytes(pid: int) -> int:
    """Resident memory of one process, from /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def descendants(pid: int) -> list[int]:
    """All live descendant pids of ``pid`` (kernels are children of the voila process)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(FileNotFoundError):
                kids = [int(k) for k in (task / "children").read_text().split()]
                out += kids
                todo += kids
    return out


def kernel_pids(pid: int) -> dict[str, int]:
    """The kernels among ``pid``'s descendants: {kernel id: process id} (the id is in the name of
    the connection file on the kernel's command line, ``kernel-<id>.json``)."""
    import re

    found = {}
    for child in descendants(pid):
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            if m := re.search(r"kernel-([0-9a-f-]{36})\.json", Path(f"/proc/{child}/cmdline").read_text()):
                found[m.group(1)] = child
    return found


def tree_rss(pid: int) -> int:
    """Resident memory of ``pid`` and all its descendants."""
    total = 0
    for p in [pid, *descendants(pid)]:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += rss_bytes(p)
    return total



class Peaks:
    """While open: the peaks of one server process, sampled every ``every`` s: its kernel count,
    the resident memory of its process tree and of the process alone (``growth``: above its start)."""

    def __init__(self, pid: int, every: float = 0.5):
        self.pid, self.every = pid, every
        self.baseline = self.peak_server_bytes = rss_bytes(pid)
        self.peak_kernels, self.peak_bytes = 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak_server_bytes = max(self.peak_server_bytes, rss_bytes(self.pid))
            except FileNotFoundError:  # the server has exited
                return
            self.peak_kernels = max(self.peak_kernels, len(descendants(self.pid)))
            self.peak_bytes = max(self.peak_bytes, tree_rss(self.pid))
            self._stop.wait(self.every)

    @property
    def growth(self) -> int:
        return self.peak_server_bytes - self.baseline

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

# -- one kernel's websocket, as a hostile page could use it ---------------------------------------

class KernelSocket:
    """The Jupyter websocket protocol to one kernel of the server, in the v1 subprotocol a page
    speaks (the server refuses the legacy JSON one: mha_serve/websocket.py)."""

    def __init__(self, server: Server, kernel_id: str):
        import websocket  # websocket-client, a dependency of jupyter_server
        from class_probe import SUBPROTOCOL

        self.session = uuid.uuid4().hex
        self.ws = websocket.create_connection(
            f"{server.ws_url}api/kernels/{kernel_id}/channels?session_id={self.session}", timeout=10,
            subprotocols=[SUBPROTOCOL])
        self.ws.settimeout(None)  # one reader thread blocks on the socket; timeouts use the queue
        self.inbox: queue.Queue = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        from class_probe import unpack

        try:
            while True:
                self.inbox.put(unpack(self.ws.recv()))
        except Exception:  # socket closed: the reader ends
            return

    def send(self, msg_type: str, content: dict, channel: str = "shell") -> str:
        from class_probe import pack

        msg_id, frame = pack(msg_type, content, self.session, channel=channel)
        self.ws.send_binary(frame)
        return msg_id

    def messages(self, seconds: float, idle: float | None = None):
        """Yield the messages received during ``seconds``, or until ``idle`` seconds pass without one."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                yield self.inbox.get(timeout=max(min(left, idle or left), 0.01))
            except queue.Empty:
                return

    def comm_moved(self, move, key: str, value, seconds: float = 30) -> str:
        """The comm id of the widget that a real move in the page sets to ``key=value``.

        ``move()`` moves a control in the page; the kernel echoes the page's update on iopub
        (``echo_update``, ipywidgets 8), which carries the widget's comm id.
        """
        move()
        for msg in self.messages(seconds):
            data = msg.get("content", {}).get("data", {})
            if msg["msg_type"] == "comm_msg" and data.get("method") == "echo_update" \
                    and data.get("state", {}).get(key) == value:
                return msg["content"]["comm_id"]
        raise LookupError(f"no widget echoed {key}={value!r} within {seconds} s")

    def forge_update(self, comm_id: str, state: dict) -> None:
        """Send the widget update message a page sends when a control moves."""
        self.send("comm_msg", {"comm_id": comm_id, "data": {"method": "update", "state": state,
                                                             "buffer_paths": []}})

    def close(self) -> None:
        self.ws.close()
