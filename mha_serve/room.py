"""Room mode: the dashboard served on the room's network, behind a join code.

``python -m mha_serve.room notebooks/dashboard.ipynb [--host 0.0.0.0] [voila options]`` (``make
dashboard ROOM=1``, ``make classroom SEATS=n ROOM=1``) runs Voila with every setting of the local
route (``etc/jupyter/voila.json``: the message allowlist, no file access, one notebook, the kernel
cap) on the address ``--host`` instead of 127.0.0.1, and puts a join code in front of every route.

The join code is 6 characters from an alphabet without look-alikes (``new_code``), or ``$JOIN_CODE``.
A device gets in by opening the printed link (``http://<address>:<port>/?code=XXXXXX``, also shown
as a QR code) or by typing the code into the small page that every route answers without it. Once
it has given the code, a cookie (HttpOnly, SameSite=Strict, a random token of this server run, not
the code) lets it in. ``Gatekeeper`` compares codes and tokens in constant time and refuses a client
address that sent ``WRONG_LIMIT`` wrong codes within ``WRONG_WINDOW_S`` seconds (HTTP 429).

How it is enforced: ``RoomVoila`` is Voila's own application with ``init_handlers`` extended, so
every handler Voila registers (pages, ``/api/kernels``, the kernel and request-info websockets,
``/voila/static``, ``/voila/templates``, ``/voila/files``, ``/voila/labextensions``, themes,
login) is wrapped by ``RoomGate``, whose ``prepare`` runs before the handler's own and answers the
code page (403) unless the request carries the cookie or the right code. Nothing of Voila is
patched. jupyter_server's IdentityProvider would not do: four of Voila's handlers (the static
files, the allowlisted files, the request-info websocket) are plain Tornado handlers that never ask it.

``/room`` is the page the teacher projects (the QR code and the code, large); it answers only a
client on the server's own machine (``same_machine``).
"""

from __future__ import annotations

import hmac
import html
import io
import ipaddress
import os
import re
import secrets
import socket
import sys
import time
from collections import deque
from dataclasses import dataclass

# No 0/O, 1/I/L: a code read off a projector is typed without guessing.
ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 6
COOKIE = "mha_room"
WRONG_LIMIT = 10  # wrong codes one client address may send ...
WRONG_WINDOW_S = 60.0  # ... within this many seconds; then HTTP 429 until the oldest ages out
TRACKED_ADDRESSES = 4096  # a bound on the rate limiter's memory (oldest addresses dropped first)
ROOM_PATH = "/room"


def new_code(length: int = CODE_LENGTH) -> str:
    """A random join code of ``length`` characters from ``ALPHABET`` (``secrets``: unguessable)."""
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def normalise(code: str) -> str:
    """A code as typed (any case, spaces or dashes between groups) in the form it is compared in."""
    return re.sub(r"[\s-]", "", code).upper()


def validate_code(code: str) -> str:
    """``code`` normalised; a ValueError naming JOIN_CODE unless it is 4 to 32 letters or digits."""
    if not isinstance(code, str):
        raise TypeError(f"JOIN_CODE must be a str, got {type(code).__name__}")
    clean = normalise(code)
    if not re.fullmatch(r"[A-Z0-9]{4,32}", clean):
        raise ValueError(f"JOIN_CODE must be 4 to 32 letters or digits, got {code!r}")
    return clean


@dataclass(frozen=True)
class Verdict:
    """What the gate does with one request: let it in (and maybe set the cookie), or answer
    ``status`` with the code page saying ``why`` ("ask", "wrong", "wait")."""

    admitted: bool
    set_cookie: bool = False
    status: int = 200
    why: str = ""
    retry_after: int = 0


class Gatekeeper:
    """The join code of one server run, its cookie token, and the wrong guesses per address."""

    def __init__(self, code: str | None = None):
        self.code = validate_code(code) if code is not None else new_code()
        self.token = secrets.token_urlsafe(32)  # the cookie's value: not the code, new each run
        self._wrong: dict[str, deque[float]] = {}

    def judge(self, address: str, cookie: str | None, code: str | None,
              now: float | None = None) -> Verdict:
        """The verdict for a request from ``address`` with this ``cookie`` and ``?code=``."""
        if cookie and hmac.compare_digest(cookie.encode(), self.token.encode()):
            return Verdict(True)
        if code is None:
            return Verdict(False, status=403, why="ask")
        now = time.monotonic() if now is None else now
        recent = self._recent(address, now)
        if len(recent) >= WRONG_LIMIT:  # even the right code waits: no guessing past the limit
            return Verdict(False, status=429, why="wait",
                           retry_after=max(1, int(recent[0] + WRONG_WINDOW_S - now) + 1))
        if hmac.compare_digest(normalise(code).encode(), self.code.encode()):
            return Verdict(True, set_cookie=True)
        recent.append(now)
        return Verdict(False, status=403, why="wrong")

    def _recent(self, address: str, now: float) -> deque[float]:
        """The times of ``address``'s wrong codes within the window (older ones dropped)."""
        recent = self._wrong.pop(address, None) or deque()
        while recent and recent[0] <= now - WRONG_WINDOW_S:
            recent.popleft()
        if len(self._wrong) >= TRACKED_ADDRESSES:
            del self._wrong[next(iter(self._wrong))]
        self._wrong[address] = recent  # re-inserted: the dict is ordered by last use
        return recent


# -- addresses and the link ------------------------------------------------------------------------

def lan_address() -> str | None:
    """This machine's IPv4 address on its network (the source address of its default route), or
    None when it has none but loopback. No packet is sent: a UDP socket only picks a route."""
    candidates = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1 (RFC 5737): any routed address will do
            candidates.append(probe.getsockname()[0])
        except OSError:
            pass
    try:
        candidates += [info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    except OSError:
        pass
    for address in candidates:
        if not ipaddress.ip_address(address).is_loopback:
            return address
    return None


def link_host(host: str) -> str | None:
    """The address students type for a server bound to ``host`` (all interfaces: the LAN address)."""
    return lan_address() if host in ("", "0.0.0.0", "::") else host


def join_url(host: str, port: int, code: str) -> str:
    """The link a student opens: the dashboard with the code."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/?code={code}"


def qr_terminal(url: str) -> str:
    """``url`` as a QR code drawn with block characters, for the terminal."""
    import segno

    out = io.StringIO()
    segno.make(url, error="m").terminal(out=out, compact=True)
    return out.getvalue()


def qr_svg(url: str) -> str:
    """``url`` as an inline SVG QR code (black on white, a 4-module quiet zone)."""
    import segno

    return segno.make(url, error="m").svg_inline(scale=10, dark="#000", light="#fff")


def same_machine(remote_ip: str, local_ip: str | None, host_header: str = "127.0.0.1") -> bool:
    """True for a client on the server's own machine: a loopback address, or the very address it
    connected to (the teacher's browser opening the LAN address of its own laptop); and asking
    for an address or ``localhost`` by name (``host_header``), so that a web page of another
    site whose name was made to point at 127.0.0.1 (DNS rebinding) cannot read the code."""
    name = re.sub(r":\d+$", "", host_header).strip("[]")
    if name != "localhost":
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
    try:
        remote = ipaddress.ip_address(remote_ip)
    except ValueError:
        return False
    return remote.is_loopback or (local_ip is not None and remote_ip == local_ip)


# -- the pages -----------------------------------------------------------------------------------

_STYLE = ("body{font:1.25rem/1.5 system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem;"
          "color:#111;background:#fff}input,button{font:inherit;padding:.4rem .6rem}"
          "input{width:9ch;letter-spacing:.15em;text-transform:uppercase}")
_MESSAGES = {
    "ask": "Type the join code shown on the projector.",
    "wrong": "That code is not right. Check the projector and try again.",
    "wait": "Too many wrong codes from this device. Wait {retry_after} s, then try again.",
}


def code_page(why: str, retry_after: int = 0) -> str:
    """The small page every route answers without the code: one field, no script, nothing loaded."""
    message = html.escape(_MESSAGES[why].format(retry_after=retry_after))
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width,initial-scale=1'>"
            f"<title>Join the class</title><style>{_STYLE}</style></head><body><main>"
            f"<h1>Join the class</h1><p role='status'>{message}</p>"
            "<form method='get' action='/'><label for='code'>Join code</label> "
            "<input id='code' name='code' autocomplete='off' autocapitalize='characters' "
            "spellcheck='false' required maxlength='40'> <button type='submit'>Join</button>"
            "</form></main></body></html>")


def projector_page(url: str, code: str) -> str:
    """The page the teacher projects: the QR code of ``url``, the address and the code, large."""
    grouped = f"{code[:3]} {code[3:]}" if len(code) == CODE_LENGTH else code
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Join the class</title>"
            "<style>body{font-family:system-ui,sans-serif;text-align:center;margin:2vh;color:#000;"
            "background:#fff}svg{width:min(60vh,90vw);height:auto}.code{font-size:12vh;"
            "letter-spacing:.1em;font-weight:700;margin:0}.url{font-size:4vh;margin:1vh}</style>"
            f"</head><body><main><h1>Join the class</h1>{qr_svg(url)}"
            f"<p class='url'>{html.escape(url.split('?')[0])}</p>"
            f"<p>code</p><p class='code'>{html.escape(grouped)}</p></main></body></html>")


# -- the Tornado side ------------------------------------------------------------------------------

class RoomGate:
    """Mixed in front of every handler Voila registers: admit a request only with the room's
    cookie or the right ``?code=``; else answer the code page before the handler does anything."""

    async def prepare(self):
        keeper: Gatekeeper = self.settings["mha_room"]
        verdict = keeper.judge(self.request.remote_ip, self.get_cookie(COOKIE),
                               self.get_query_argument("code", None))
        if not verdict.admitted:
            self.clear()
            self.set_status(verdict.status)
            self.set_header("Content-Type", "text/html; charset=utf-8")
            self.set_header("Cache-Control", "no-store")
            if verdict.retry_after:
                self.set_header("Retry-After", str(verdict.retry_after))
            self.finish(code_page(verdict.why, verdict.retry_after))
            return
        if verdict.set_cookie:
            self.set_cookie(COOKIE, keeper.token, path="/", httponly=True, samesite="Strict")
        result = super().prepare()
        if result is not None:
            await result


_gated: dict[type, type] = {}


def gated(handler: type) -> type:
    """``handler`` with ``RoomGate`` in front (one subclass per handler class)."""
    if handler not in _gated:
        _gated[handler] = type(handler.__name__, (RoomGate, handler), {"__module__": __name__})
    return _gated[handler]


def _projector_handler():
    from tornado.web import RequestHandler

    class ProjectorHandler(RequestHandler):
        """``/room``: the QR code and the code, for the teacher's own machine only."""

        def initialize(self, url: str, code: str):
            self.url, self.code = url, code

        def get(self):
            try:
                local = self.request.connection.stream.socket.getsockname()[0]
            except (AttributeError, OSError):
                local = None
            self.set_header("Cache-Control", "no-store")
            if not same_machine(self.request.remote_ip, local, self.request.host):
                self.set_status(403)
                self.finish("The projector page is shown on the teacher's machine only.")
                return
            self.finish(projector_page(self.url, self.code))

    return ProjectorHandler


def room_app_class():
    """Voila's application with the gate on every route and ``/room`` added (imported late:
    ``mha_serve.room``'s code and QR helpers load no server)."""
    from jupyter_server.utils import url_path_join
    from voila.app import Voila

    class RoomVoila(Voila):
        """Voila, every handler behind ``RoomGate``; the Gatekeeper in the Tornado settings."""

        keeper: Gatekeeper
        url: str

        @property
        def display_url(self) -> str:  # Voila's "running at" line: the join link, not the host name
            return self.url

        def init_settings(self):
            return {**super().init_settings(), "mha_room": self.keeper}

        def init_handlers(self):
            rules = [(rule[0], gated(rule[1]), *rule[2:]) for rule in super().init_handlers()]
            room = (url_path_join(self.server_url, ROOM_PATH), _projector_handler(),
                    {"url": self.url, "code": self.keeper.code})
            return [room, *rules]

    return RoomVoila


def announce(url: str, port: int, code: str) -> str:
    """What the terminal shows in room mode: the link, the code, the projector page, the QR code."""
    grouped = f"{code[:3]} {code[3:]}" if len(code) == CODE_LENGTH else code
    return (f"\nRoom mode: the dashboard is on the room's network, behind a join code.\n"
            f"  Students open   {url}\n"
            f"  or type the code {grouped} on the page.\n"
            f"  Project         http://127.0.0.1:{port}{ROOM_PATH}  (this machine only: QR code and code, large)\n"
            f"  Plain HTTP: anyone on this network who captures the traffic sees the code (docs/dashboard.md).\n"
            f"{qr_terminal(url)}")


def main(argv: list[str] | None = None) -> None:
    """``python -m mha_serve.room NOTEBOOK [--host ADDR] [--port N] [voila options]``; the code
    from ``$JOIN_CODE`` or a new one."""
    import argparse

    from .preflight import port_problem

    parser = argparse.ArgumentParser(prog="python -m mha_serve.room",
                                     description="Serve the dashboard on the room's network behind a join code.")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all interfaces)")
    parser.add_argument("--port", type=int, default=8866)
    args, rest = parser.parse_known_args(argv)
    try:
        keeper = Gatekeeper(os.environ.get("JOIN_CODE") or None)
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    if problem := port_problem(args.port, args.host):
        raise SystemExit("{}: {}".format(*problem))
    host = link_host(args.host)
    if host is None:
        raise SystemExit("Room mode: this machine has no network address but loopback. Join the "
                         "room's Wi-Fi (or cable), or name the address with ROOM_HOST=...")
    app_class = room_app_class()
    app_class.keeper = keeper
    app_class.url = join_url(host, args.port, keeper.code)
    print(announce(app_class.url, args.port, keeper.code), flush=True)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    app_class.launch_instance([*rest, f"--port={args.port}", f"--Voila.ip={args.host}",
                               "--Voila.port_retries=0"])


if __name__ == "__main__":
    main(sys.argv[1:])
