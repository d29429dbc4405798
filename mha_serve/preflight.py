"""The pre-class check: is this machine ready to serve the class? Each failure comes with its fix.

``python -m mha_serve.preflight --seats 60 [--room] [--port 8866] [--host 0.0.0.0]`` (``make
preflight SEATS=60 [ROOM=1]``) checks, in a few seconds and without starting a server:

    python       the interpreter is 3.10 or newer
    environment  the project's packages are installed in this interpreter (``make venv``)
    settings     the server settings in the environment are the repository's (``make venv``)
    models       the two real models are in the cache (``make models``)
    port         the port is free on the address the server will listen on
    network      (room mode) this machine has an address on the room's network
    memory       the seats asked for fit in the memory available now (``classroom_plan``)

It runs on the project's interpreter, ``.venv/bin/python`` (``make preflight`` falls back to
``$(PY)`` when there is no environment yet, so that check can say so). It imports only the standard
library at the top, so it also runs where nothing is installed. Exit status 1 if any check fails.
"""

from __future__ import annotations

import errno
import importlib.util
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIN_PYTHON = (3, 10)
# what the dashboard's kernels and server import: missing one means the environment is not built
NEEDED_MODULES = ("numpy", "matplotlib", "ipywidgets", "ipykernel", "voila", "segno", "mha_core")
SETTINGS = ("voila.json", "jupyter_server_config.json")


@dataclass(frozen=True)
class Check:
    """One line of the report: a name, whether it passed, what was found, and the fix if not."""

    name: str
    ok: bool
    found: str
    fix: str = ""


def python_fix(platform: str = sys.platform) -> str:
    """How to get a Python 3.10 or newer on ``platform``."""
    if platform == "darwin":
        return ("macOS: install Python 3.12 from python.org, or `brew install python@3.12`; then "
                "`make ... PY=python3.12`")
    if platform.startswith("linux"):
        return ("Ubuntu/Debian: `sudo apt install python3.12 python3.12-venv` (or any 3.10+), then "
                "`make ... PY=python3.12`")
    return "install Python 3.10 or newer, then `make ... PY=<that python>`"


def check_python(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> Check:
    found = ".".join(map(str, version))
    if tuple(version[:2]) >= MIN_PYTHON:
        return Check("python", True, f"Python {found}")
    return Check("python", False, f"Python {found}, the course needs 3.10 or newer", python_fix())


def check_environment(find_spec: Callable = importlib.util.find_spec) -> Check:
    missing = [name for name in NEEDED_MODULES if find_spec(name) is None]
    fix = "`make venv` (creates .venv and installs the project; about 2 minutes, needs the package index once)"
    if missing:
        return Check("environment", False, f"missing in {sys.prefix}: {', '.join(missing)}", fix)
    try:  # found is not enough: mha_core is found from the repository even where nothing is installed
        import mha_core  # noqa: F401
    except Exception as err:  # whatever stops the import is the finding
        return Check("environment", False, f"mha_core does not import in {sys.prefix}: {err}", fix)
    return Check("environment", True, f"{len(NEEDED_MODULES)} packages found in {sys.prefix}")


def check_settings(prefix: str | Path = sys.prefix, root: Path = REPO) -> Check:
    stale = []
    for name in SETTINGS:
        installed = Path(prefix) / "etc" / "jupyter" / name
        if not installed.is_file() or installed.read_bytes() != (root / "etc" / "jupyter" / name).read_bytes():
            stale.append(name)
    if not stale:
        return Check("settings", True, f"{' and '.join(SETTINGS)} installed as in etc/jupyter")
    return Check("settings", False, f"{', '.join(stale)} under {prefix}/etc/jupyter missing or out of date "
                 "(the kernel cap, the message allowlist and the culling come from them)",
                 "`make venv` (it runs `python -m mha_serve`, which installs them)")


def check_models(models_dir: Path | None = None) -> Check:
    """``models_dir``: default the cache ``make models`` fills (needs the environment: checked before)."""
    if models_dir is None:
        from mha_core.models import cache_dir

        models_dir = cache_dir()
    missing = [name for name in ("minilm", "smollm2") if not (Path(models_dir) / name / "manifest.json").is_file()]
    if not missing:
        return Check("models", True, f"MiniLM and SmolLM2 in {models_dir}")
    return Check("models", False, f"not in {models_dir}: {', '.join(missing)} (the dashboard's real-heads panel needs them)",
                 "`make models` before class (two wheels of ~90 MB each, hash-checked; ~800 MB on disk)")


def port_problem(port: int, host: str = "127.0.0.1") -> tuple[str, str] | None:
    """None if ``port`` can be bound on ``host`` now, else (what is wrong, the fix)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Tornado binds
        try:
            probe.bind((host, port))
        except OSError as err:
            if err.errno == errno.EADDRINUSE:
                return (f"port {port} is already in use on {host} (another `make dashboard`, `make slides`, "
                        "`make lesson-slides`, `make classroom`, or another program)",
                        f"stop that server, or pick another port: PORT={port + 10}")
            if err.errno == errno.EADDRNOTAVAIL:
                return f"{host} is not an address of this machine", "check ROOM_HOST (`ip addr` lists the addresses)"
            return f"cannot listen on {host}:{port}: {err.strerror}", "pick another port: PORT=..."
    return None


def check_port(port: int, host: str) -> Check:
    problem = port_problem(port, host)
    if problem is None:
        return Check("port", True, f"{host}:{port} is free")
    return Check("port", False, *problem)


def check_network(address: str | None, port: int) -> Check:
    if address is None:
        return Check("network", False, "no network address but loopback",
                     "join the room's Wi-Fi (or plug in a cable) and run this again; or name the address with ROOM_HOST=...")
    return Check("network", True, f"students will open http://{address}:{port}/ (their devices must be on "
                 "the same network; guest and campus Wi-Fi often keep devices apart, so test with one phone)")


def check_memory(seats: int, plan=None, environment_ok: bool = True) -> Check:
    """``plan``: a ``classroom_plan`` (default: this machine's; the models' shared size counted
    when the environment can tell it)."""
    from .classroom import classroom_plan

    if plan is None:
        plan = classroom_plan(seats, shared=None if environment_ok else 0)
    found = (f"{plan.seats} seats need {plan.needed_mb / 1024:.1f} GB, {plan.available_mb / 1024:.1f} GB "
             f"available; {plan.most_seats} seats would fit")
    return Check("memory", plan.fits, found, "" if plan.fits else
                 f"SEATS={plan.most_seats}, close other programs, or serve the class from JupyterHub (docs/dashboard.md)")


def run_checks(seats: int, port: int, room: bool, host: str) -> list[Check]:
    """Every check, in order; the ones that need the environment are marked failed, not run,
    when it is missing."""
    checks = [check_python(), check_environment(), check_settings()]
    if checks[1].ok:
        checks.append(check_models())
    else:
        checks.append(Check("models", False, "not checked: the environment is missing", checks[1].fix))
    checks.append(check_port(port, host))
    if room:
        from .room import link_host

        checks.append(check_network(link_host(host), port))
    checks.append(check_memory(seats, environment_ok=checks[1].ok))
    return checks


def report(checks: list[Check]) -> str:
    lines = []
    for check in checks:
        lines.append(f"{'ok  ' if check.ok else 'FAIL'} {check.name:<12} {check.found}")
        if not check.ok:
            lines.append(f"     {'':<12} fix: {check.fix}")
    failed = [c.name for c in checks if not c.ok]
    lines.append("Ready for the class." if not failed else f"Not ready: {len(failed)} check(s) failed ({', '.join(failed)}).")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mha_serve.preflight",
                                     description="Check that this machine is ready to serve the class.")
    parser.add_argument("--seats", type=int, default=60, help="students expected")
    parser.add_argument("--port", type=int, default=8866, help="the port the server will use")
    parser.add_argument("--room", action="store_true", help="room mode: served on the room's network")
    parser.add_argument("--host", default=None, help="address to listen on (room mode default: all interfaces)")
    parser.add_argument("--only", choices=["port"],
                        help="this check alone, printed only if it fails (the Makefile's serving targets)")
    args = parser.parse_args(argv)
    if args.seats < 1:
        parser.error(f"--seats must be at least 1, got {args.seats}")
    host = args.host or ("0.0.0.0" if args.room else "127.0.0.1")
    if args.only == "port":
        check = check_port(args.port, host)
        if not check.ok:
            print(f"{check.found}.\nFix: {check.fix}", file=sys.stderr)
        return 0 if check.ok else 1
    checks = run_checks(args.seats, args.port, args.room, host)
    print(report(checks))
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
