"""Room mode (mha_serve/room.py) without a network: the join code, the rate limit, the pages, and
the application: every route Voila registers is behind the gate, and every hardening of the local
route is still in force. The served room, from another network namespace, is tests/test_room_network.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mha_serve import room
from mha_serve.room import (
    ALPHABET,
    CODE_LENGTH,
    WRONG_LIMIT,
    WRONG_WINDOW_S,
    Gatekeeper,
    RoomGate,
    code_page,
    join_url,
    new_code,
    normalise,
    projector_page,
    same_machine,
    validate_code,
)

REPO = Path(__file__).resolve().parents[1]


def test_a_new_code_is_six_unambiguous_characters_and_differs_each_time():
    codes = {new_code() for _ in range(200)}
    assert len(codes) == 200  # 31^6 codes: two equal in 200 would be a broken generator
    assert all(len(c) == CODE_LENGTH and set(c) <= set(ALPHABET) for c in codes)
    assert not set("01OIL") & set(ALPHABET)


def test_a_typed_code_is_compared_without_case_spaces_or_dashes():
    keeper = Gatekeeper("K7Q-X3M")
    assert keeper.code == "K7QX3M" == normalise(" k7q x3m ")
    for typed in ("k7qx3m", "K7Q X3M", "k7q-x3m"):
        assert keeper.judge("10.0.0.9", None, typed).admitted


@pytest.mark.parametrize("code, error", [("abc", ValueError), ("ab!cde", ValueError), ("x" * 33, ValueError),
                                         (123456, TypeError)])
def test_a_join_code_of_the_teachers_own_is_validated(code, error):
    with pytest.raises(error, match="JOIN_CODE"):
        validate_code(code)


def test_the_gate_asks_admits_with_the_code_then_the_cookie_and_refuses_a_wrong_code():
    keeper = Gatekeeper()
    assert keeper.judge("10.0.0.9", None, None) == room.Verdict(False, status=403, why="ask")
    assert keeper.judge("10.0.0.9", "not-the-token", None).why == "ask"
    assert keeper.judge("10.0.0.9", keeper.code, None).why == "ask"  # the cookie holds the token, not the code
    wrong = "2" * CODE_LENGTH if keeper.code != "2" * CODE_LENGTH else "3" * CODE_LENGTH
    assert keeper.judge("10.0.0.9", None, wrong) == room.Verdict(False, status=403, why="wrong")
    first = keeper.judge("10.0.0.9", None, keeper.code)
    assert first.admitted and first.set_cookie
    again = keeper.judge("10.0.0.9", keeper.token, None)
    assert again.admitted and not again.set_cookie
    assert Gatekeeper().token != keeper.token  # each server run has its own token


def test_wrong_codes_are_limited_per_address_and_the_limit_ages_out():
    keeper = Gatekeeper("ABC234")
    for i in range(WRONG_LIMIT):
        assert keeper.judge("10.0.0.9", None, "WRONG9", now=100.0 + i).why == "wrong"
    limited = keeper.judge("10.0.0.9", None, "ABC234", now=110.0)  # even the right code waits
    assert (limited.status, limited.why, limited.admitted) == (429, "wait", False)
    assert 1 <= limited.retry_after <= WRONG_WINDOW_S
    assert keeper.judge("10.0.0.8", None, "ABC234", now=110.0).admitted  # another device is not blocked
    assert keeper.judge("10.0.0.9", None, "ABC234", now=100.0 + WRONG_WINDOW_S + 1).admitted  # aged out


def test_the_rate_limiter_tracks_a_bounded_number_of_addresses(monkeypatch):
    monkeypatch.setattr(room, "TRACKED_ADDRESSES", 50)
    keeper = Gatekeeper("ABC234")
    for i in range(500):
        keeper.judge(f"10.1.{i // 250}.{i % 250}", None, "WRONG9", now=1.0)
    assert len(keeper._wrong) <= 50


def test_the_code_page_asks_for_the_code_and_loads_nothing():
    page = code_page("ask")
    assert "name='code'" in page and "Type the join code" in page
    assert not re.search(r"<script|src=|href=|@import|url\(", page)  # nothing fetched, nothing run
    assert "Wait 42 s" in code_page("wait", 42) and "not right" in code_page("wrong")


def test_the_projector_page_shows_the_qr_code_the_address_and_the_code():
    url = join_url("192.0.2.7", 8866, "ABC234")
    assert url == "http://192.0.2.7:8866/?code=ABC234"
    assert join_url("fd00::7", 8866, "ABC234") == "http://[fd00::7]:8866/?code=ABC234"
    page = projector_page(url, "ABC234")
    assert "<svg" in page and "ABC 234" in page and "http://192.0.2.7:8866/" in page
    assert "<script" not in page


def test_the_terminal_qr_code_is_the_links_own_symbol():
    """Read the block characters back into modules (two rows a line; a light module is drawn): they
    are segno's symbol of the link, quiet zone included."""
    import segno

    url = join_url("192.0.2.7", 8866, "ABC234")
    symbol = [[bool(dark) for dark in row] for row in segno.make(url, error="m").matrix_iter(border=4)]
    halves = {"\u2588": (False, False), " ": (True, True), "\u2580": (False, True), "\u2584": (True, False)}
    rows = []
    for line in room.qr_terminal(url).splitlines():
        pairs = [halves[ch] for ch in line]
        rows += [[top for top, _ in pairs], [bottom for _, bottom in pairs]]
    assert rows[:len(symbol)] == symbol
    assert len(rows) - len(symbol) in (0, 1)  # an odd number of rows: the last line's lower half is padding


def test_only_the_servers_own_machine_counts_as_the_teacher():
    assert same_machine("127.0.0.1", "127.0.0.1") and same_machine("::1", "::1")
    assert same_machine("192.0.2.2", "192.0.2.2")  # the teacher opening its own LAN address
    assert not same_machine("192.0.2.9", "192.0.2.2")
    assert not same_machine("not an address", None)
    assert same_machine("127.0.0.1", None, "localhost:8866") and same_machine("::1", None, "[::1]:8866")
    assert not same_machine("127.0.0.1", None, "rebound.example:8866")  # DNS rebinding: a name, not this machine


# -- the application: Voila's own, every route behind the gate ----------------------------------

@pytest.fixture(scope="module")
def room_app():
    """``RoomVoila`` initialised on the dashboard as ``python -m mha_serve.room`` does (no server
    started), and a plain ``Voila`` the same way, for comparison."""
    import os

    from voila.app import Voila

    cwd = os.getcwd()
    os.chdir(REPO)  # Voila serves the notebook from the folder it starts in, as `make` does
    cls = room.room_app_class()
    cls.keeper, cls.url = Gatekeeper("ABC234"), "http://192.0.2.7:8866/?code=ABC234"
    apps = []
    for app_class, extra in ((cls, ["--Voila.ip=0.0.0.0"]), (Voila, [])):
        app = app_class()
        app.initialize(["notebooks/dashboard.ipynb", "--port=8866", "--preheat_kernel=True",
                        "--pool_size=0", *extra])  # the pool's route, no pool to fill
        app.tornado_settings_built = app.init_settings()
        apps.append(app)
    os.chdir(cwd)
    return apps


def test_every_route_voila_registers_is_behind_the_gate(room_app):
    app, plain = room_app
    rules = app.init_handlers()
    patterns = [rule[0] for rule in rules]
    assert patterns[0] == "/room" and not issubclass(rules[0][1], RoomGate)
    gated = rules[1:]
    assert all(issubclass(rule[1], RoomGate) for rule in gated)
    # the same routes as plain Voila, the same handlers underneath: nothing left out, nothing replaced
    assert [r[0] for r in gated] == [r[0] for r in plain.init_handlers()]
    assert [r[1].__mro__[2] for r in gated] == [r[1] for r in plain.init_handlers()]
    expected = ("/api/kernels/", "/channels", "/voila/static/", "/voila/templates/", "/voila/files/",
                "/voila/query/", "/voila/labextensions/", "/voila/api/shutdown/", "/(.*)")
    for part in expected:
        assert any(part in p for p in patterns[1:]), part
    assert app.tornado_settings_built["mha_room"] is app.keeper


def test_the_room_route_keeps_every_hardening_of_the_local_route(room_app):
    """The message allowlist, no file access, sources stripped, one notebook, the kernel cap and the
    graces, the culling: room mode reads the same installed settings and changes only the address."""
    app, plain = room_app
    assert app.ip == "0.0.0.0" and plain.ip == "127.0.0.1"
    for attr in ("template", "strip_sources", "show_tracebacks", "file_allowlist", "file_denylist",
                 "multi_kernel_manager_class"):
        assert getattr(app.voila_configuration, attr) == getattr(plain.voila_configuration, attr), attr
    assert app.voila_configuration.file_allowlist == [] and app.voila_configuration.strip_sources
    assert app.notebook_path == plain.notebook_path and app.notebook_path.endswith("dashboard.ipynb")
    km, plain_km = app.kernel_manager, plain.kernel_manager
    assert type(km).__mro__[1].__name__ == "BoundedKernelManager"
    for attr in ("allowed_message_types", "max_kernels", "connect_grace", "disconnect_grace",
                 "cull_idle_timeout", "cull_interval", "cull_connected", "buffer_offline_messages"):
        assert getattr(km, attr) == getattr(plain_km, attr), attr
    assert "execute_request" not in km.allowed_message_types and km.max_kernels == 80
    assert km.cull_connected is False  # an open page keeps its kernel (test_kernel_lifetime.py)


def _make_n(*args: str) -> str:
    """The commands `make -n ARGS` would run (nothing is run)."""
    import subprocess

    return subprocess.run(["make", "-n", "--no-print-directory", "-C", str(REPO), *args], capture_output=True,
                          text=True, timeout=60, check=True).stdout


def test_the_make_targets_serve_the_room_only_when_asked():
    local = _make_n("dashboard")
    assert "bin/voila --port=8866 --Voila.port_retries=0 notebooks/dashboard.ipynb" in local
    assert "mha_serve.room" not in local and "0.0.0.0" not in local
    assert "mha_serve.preflight --only=port --port=8866 --host=127.0.0.1" in local
    roomed = _make_n("dashboard", "ROOM=1")
    assert "-m mha_serve.room --host=0.0.0.0 --port=8866 notebooks/dashboard.ipynb" in roomed
    assert "--host=0.0.0.0" in _make_n("preflight", "ROOM=1")
    assert "-m mha_serve.room --host=192.0.2.7" in _make_n("dashboard", "ROOM=1", "ROOM_HOST=192.0.2.7")
    classroom = _make_n("classroom", "SEATS=3", "ROOM=1")
    assert "mha_serve classroom --seats=3 --port=8866 --room --host=0.0.0.0" in classroom
    assert "--room" not in _make_n("classroom", "SEATS=3")
    assert '"ip": "127.0.0.1"' in (REPO / "etc" / "jupyter" / "voila.json").read_text()


def test_classroom_room_mode_runs_the_room_app_with_the_seats_pool(monkeypatch):
    from mha_serve import classroom

    monkeypatch.setattr(classroom, "classroom_options", lambda seats: [f"--pool_size={seats}"])  # sized in test_serve
    cmd = classroom.classroom_command(30, 8866, room_host="0.0.0.0")
    assert cmd[1:] == ["-m", "mha_serve.room", "--host=0.0.0.0", "notebooks/dashboard.ipynb", "--port=8866",
                       "--pool_size=30"]
    assert classroom.classroom_command(30, 8866)[1:3] == ["-m", "voila"]
