"""The pre-class check (mha_serve/preflight.py) and the Makefile's Python guard.

Each check is run on a fake of the failure it exists to catch (an old Python, a missing package,
settings out of date, no models, a port taken, no network address, too little memory) and must
fail with its fix; and on the real thing here, where it must pass or say why. The guard is run as
`make venv` with PY pointing at fake interpreters: it must stop before creating anything.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

from mha_serve import preflight
from mha_serve.classroom import classroom_plan
from mha_serve.preflight import (
    Check,
    check_environment,
    check_memory,
    check_models,
    check_network,
    check_port,
    check_python,
    check_settings,
    port_problem,
    python_fix,
    report,
)

REPO = Path(__file__).resolve().parents[1]


def test_an_old_python_fails_with_what_to_install():
    assert check_python((3, 11, 7)).ok
    old = check_python((3, 9, 6))
    assert not old.ok and "3.9.6" in old.found and "3.10" in old.found
    assert "brew install python@3.12" in python_fix("darwin") and "python.org" in python_fix("darwin")
    assert "sudo apt install" in python_fix("linux") and "PY=python3.12" in python_fix("linux")


def test_a_missing_package_names_it_and_make_venv():
    missing = check_environment(find_spec=lambda name: None if name == "voila" else object())
    assert not missing.ok and "voila" in missing.found and "make venv" in missing.fix
    assert check_environment().ok  # this environment has them all


def test_settings_out_of_date_are_found(tmp_path):
    (tmp_path / "etc" / "jupyter").mkdir(parents=True)
    for name in preflight.SETTINGS:
        shutil.copyfile(REPO / "etc" / "jupyter" / name, tmp_path / "etc" / "jupyter" / name)
    assert check_settings(prefix=tmp_path).ok
    (tmp_path / "etc" / "jupyter" / "voila.json").write_text("{}")
    stale = check_settings(prefix=tmp_path)
    assert not stale.ok and "voila.json" in stale.found and "make venv" in stale.fix


def test_missing_models_are_named_with_make_models(tmp_path):
    missing = check_models(tmp_path)
    assert not missing.ok and "minilm" in missing.found and "smollm2" in missing.found
    assert "make models" in missing.fix
    for name in ("minilm", "smollm2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text("{}")
    assert check_models(tmp_path).ok


def test_a_port_in_use_is_named_with_another_to_pick():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        what, fix = port_problem(port, "127.0.0.1")
        assert f"port {port} is already in use" in what and f"PORT={port + 10}" in fix
        assert not check_port(port, "127.0.0.1").ok
        assert port_problem(port, "0.0.0.0") is not None  # all interfaces include loopback
    assert port_problem(port, "127.0.0.1") is None and check_port(port, "127.0.0.1").ok


def test_an_address_not_of_this_machine_is_named():
    what, fix = port_problem(8866, "192.0.2.254")  # TEST-NET-1: no machine here has it
    assert "not an address of this machine" in what and "ROOM_HOST" in fix


def test_no_network_address_fails_and_an_address_gives_the_link():
    assert not check_network(None, 8866).ok and "Wi-Fi" in check_network(None, 8866).fix
    ok = check_network("192.0.2.7", 8866)
    assert ok.ok and "http://192.0.2.7:8866/" in ok.found


def test_memory_for_too_many_seats_fails_saying_how_many_fit():
    small = classroom_plan(60, available=4000, shared=0)
    check = check_memory(60, plan=small)
    assert not check.ok and f"SEATS={small.most_seats}" in check.fix and small.most_seats < 60
    assert check_memory(10, plan=classroom_plan(10, available=64000, shared=0)).ok


def test_the_report_lists_every_failure_with_its_fix():
    text = report([Check("python", True, "Python 3.11.7"), Check("port", False, "port 8866 is in use", "PORT=8876")])
    assert "ok   python" in text and "FAIL port" in text and "fix: PORT=8876" in text
    assert text.splitlines()[-1] == "Not ready: 1 check(s) failed (port)."
    assert report([Check("python", True, "x")]).endswith("Ready for the class.")


def test_the_command_runs_every_check_and_exits_1_on_a_failure(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert preflight.main(["--seats=2", f"--port={port}", "--room"]) == 1
        out = capsys.readouterr().out
        for name in ("python", "environment", "settings", "models", "port", "network", "memory"):
            assert f" {name} " in out, name
        assert "FAIL port" in out
        assert preflight.main(["--only=port", f"--port={port}"]) == 1
        assert "PORT=" in capsys.readouterr().err


# -- the Makefile's guard, with fake interpreters ------------------------------------------------

def _fake_python(folder: Path, version: str, venv_ok: bool) -> tuple[Path, Path]:
    """An executable that answers the guard's two questions like a Python ``version`` would, and
    logs every call (so a `-m venv` would show)."""
    log = folder / "calls.log"
    fake = folder / "python3"
    fake.write_text("#!/bin/sh\n"
                    f'echo "$*" >> "{log}"\n'
                    'case "$*" in\n'
                    f"  *version_info*) echo {version} ;;\n"
                    f"  *ensurepip*) exit {0 if venv_ok else 1} ;;\n"
                    "esac\n")
    fake.chmod(0o755)
    return fake, log


def _make_venv(tmp_path: Path, py) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "venv", f"VENV={tmp_path / 'venv'}",
                           f"PY={py}"], capture_output=True, text=True, timeout=120)


def test_make_with_python_3_9_stops_at_once_saying_what_to_install(tmp_path):
    fake, log = _fake_python(tmp_path, "3.9", venv_ok=True)
    done = _make_venv(tmp_path, fake)
    assert done.returncode != 0
    assert "is Python 3.9; the course needs Python 3.10 or newer" in done.stderr
    assert ("brew install python@3.12" if sys.platform == "darwin" else "sudo apt install python3.12") in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert "-m venv" not in log.read_text() and not (tmp_path / "venv").exists()


def test_make_without_venv_stops_at_once_naming_python3_venv(tmp_path):
    fake, log = _fake_python(tmp_path, "3.12", venv_ok=False)
    done = _make_venv(tmp_path, fake)
    assert done.returncode != 0 and "cannot create a virtual environment" in done.stderr
    if sys.platform != "darwin":
        assert "sudo apt install python3-venv" in done.stderr
    assert "-m venv" not in log.read_text() and not (tmp_path / "venv").exists()


def test_make_with_a_missing_python_says_so(tmp_path):
    done = _make_venv(tmp_path, tmp_path / "no-such-python")
    assert done.returncode != 0 and "cannot run" in done.stderr and "Traceback" not in done.stderr


def test_the_guard_lets_a_good_python_through():
    done = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "python-check", f"PY={sys.executable}"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_serving_target_stops_at_once_when_its_port_is_taken():
    """Three targets share PORT=8866: the second one started says so and starts nothing (run for
    real with `make slides`; `-o` keeps make from rebuilding .venv)."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(["make", "--no-print-directory", "-C", str(REPO), "-o", ".venv/.installed", "slides",
                               f"PORT={port}"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert f"port {port} is already in use on 127.0.0.1" in done.stderr and f"PORT={port + 10}" in done.stderr
    assert "bin/voila" not in done.stdout  # stopped before Voila
    for target in ("dashboard", "lesson-slides", "classroom"):
        commands = subprocess.run(["make", "-n", "--no-print-directory", "-C", str(REPO), "-o", ".venv/.installed",
                                   target], capture_output=True, text=True, timeout=60, check=True).stdout
        check = commands.index("mha_serve.preflight --only=port --port=8866")
        assert check < commands.index("voila" if target != "classroom" else "mha_serve classroom"), target
