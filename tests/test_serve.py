"""mha_serve: the kernel cap, the graces' settings, classroom mode, and the installed Jupyter files.

The cap and the graces are exercised against real servers by tests/test_dashboard_load.py
(GET flood) and tests/test_dashboard_browser.py (every route); here, what needs no server.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mha_serve import classroom, install, kernels

REPO = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_cap_refuses_with_503_before_starting_anything():
    km = kernels.BoundedKernelManager(max_kernels=1)
    km._starting = 1  # one start in flight fills the cap
    with pytest.raises(kernels.KernelCapReached) as err:
        asyncio.run(km.start_kernel(kernel_name="python3"))
    assert err.value.status_code == 503
    assert "busy" in err.value.reason
    assert km.refused == 1 and km.live_kernels() == 1


def test_refusals_at_the_cap_are_logged_once_per_interval_and_counted(caplog, monkeypatch):
    """A full class holds the cap while the pool retries its refill every second: the log says so
    once per CAP_LOG_EVERY seconds, with the count, instead of once a second."""
    km = kernels.BoundedKernelManager(max_kernels=1)
    km._starting = 1
    clock = [1000.0]
    monkeypatch.setattr(kernels.time, "monotonic", lambda: clock[0])
    with caplog.at_level("WARNING"):
        for _ in range(5):  # five refusals within a second: one line
            with pytest.raises(kernels.KernelCapReached):
                km._check_cap()
            clock[0] += 0.2
        clock[0] += kernels.CAP_LOG_EVERY
        with pytest.raises(kernels.KernelCapReached):
            km._check_cap()
    lines = [r.getMessage() for r in caplog.records if "Kernel cap reached" in r.getMessage()]
    assert len(lines) == 2 and km.refused == 6
    assert "(6 refused so far)" in lines[-1]


def test_a_closed_websocket_is_not_buffered():
    """jupyter_server would keep every later message of a kernel whose socket closed, unbounded;
    the dashboard's manager closes the streams instead (the browser test saw the server reach 14 GB)."""
    km = kernels.BoundedKernelManager()
    assert km.buffer_offline_messages is False
    closed = []

    class Stream:
        def close(self):
            closed.append(True)

    km.start_buffering("kernel", "kernel:session", {"iopub": Stream(), "shell": Stream()})
    assert closed == [True, True]
    assert "kernel" not in km._kernel_buffers


@pytest.mark.parametrize(("trait", "value"), [("max_kernels", 0), ("connect_grace", -1.0),
                                              ("disconnect_grace", -5.0), ("check_interval", 0.0)])
def test_settings_are_validated(trait, value):
    with pytest.raises(ValueError, match=trait):
        kernels.BoundedKernelManager(**{trait: value})


def test_reaper_leaves_connected_and_unknown_kernels_alone():
    km = kernels.BoundedKernelManager(connect_grace=0.01)

    class Kernel:
        execution_state = "idle"
        last_activity = None

    km._kernels["a"] = Kernel()
    km._kernel_connections["a"] = 1  # a page is connected
    km._clock["a"] = 0.0
    km._kernels["b"] = Kernel()  # not started by this manager's start_kernel: its clock starts now
    assert asyncio.run(km.reap_unconnected()) == []
    assert "b" in km._clock


def test_a_kernel_voila_is_still_rendering_waits_for_its_page_and_its_grace_counts_from_the_end():
    """A class of 60 at ``make dashboard``: kernels idle for up to 56 s between two cells (Voila
    rendering 60 pages on 2 cores) were shut down as "no page connected" in the middle of their
    pages. The connect grace now counts from the end of the rendering."""
    km = kernels.BoundedKernelManager(connect_grace=30)

    class Kernel:
        execution_state = "idle"
        last_activity = None  # no message for ever
        rendering = True

    km._kernels["k"] = Kernel()
    km._clock["k"] = time.monotonic() - 3600  # started an hour ago, never connected
    assert asyncio.run(km.reap_unconnected()) == []
    Kernel.rendering = False  # the page's HTML is out: its 30 s start now
    assert asyncio.run(km.reap_unconnected()) == []
    km._clock["k"] -= 31
    shut = []

    async def shutdown(kernel_id, *args, **kwargs):
        shut.append(kernel_id)

    km.shutdown_kernel = shutdown
    assert asyncio.run(km.reap_unconnected()) == ["k"] and shut == ["k"]


def test_a_kernel_knows_while_a_client_runs_the_page_in_it():
    """Voila runs a page through a client of the kernel's own manager: ``rendering`` is True while
    that client's channels are open, on a real kernel started by the bounded manager."""
    async def run():
        km = kernels.BoundedKernelManager()
        kernel_id = await km.start_kernel(kernel_name="python3")
        try:
            kernel = km.get_kernel(kernel_id)
            assert isinstance(kernel, kernels.RenderedKernelManager) and not kernel.rendering
            kc = kernel.client()
            kc.start_channels()
            await kc.wait_for_ready(timeout=60)
            assert kernel.rendering
            kc.stop_channels()
            assert not kernel.rendering
        finally:
            await km.shutdown_kernel(kernel_id, now=True)

    asyncio.run(run())


def test_installed_files_match_the_wheel_data_files(tmp_path):
    """`python -m mha_serve` (editable installs) copies exactly what a wheel installs."""
    written = install.install_jupyter_files(prefix=tmp_path, root=REPO)
    installed = sorted(str(Path(p).relative_to(tmp_path)) for p in written)
    data_files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    from_wheel = sorted(f"{dst}/{path.name}" for dst, patterns in data_files.items()
                        for pattern in patterns for path in REPO.glob(pattern) if path.is_file())
    assert installed == from_wheel
    voila = json.loads((tmp_path / "etc" / "jupyter" / "voila.json").read_text())
    assert voila["VoilaConfiguration"]["template"] == "mha"
    assert voila["VoilaConfiguration"]["multi_kernel_manager_class"] == "mha_serve.kernels.BoundedKernelManager"
    assert voila["BoundedKernelManager"]["max_kernels"] == kernels.DEFAULT_MAX_KERNELS
    assert (tmp_path / "share/jupyter/voila/templates/mha/503.html").is_file()


def test_the_settings_name_the_kernel_manager_of_mha_serve():
    """voila.json and jupyter_server_config.json name a class that imports: the manager here."""
    from traitlets.utils.importstring import import_item

    for name, section, key in (("voila.json", "VoilaConfiguration", "multi_kernel_manager_class"),
                               ("jupyter_server_config.json", "ServerApp", "kernel_manager_class")):
        dotted = json.loads((REPO / "etc" / "jupyter" / name).read_text())[section][key]
        assert import_item(dotted) is kernels.BoundedKernelManager, f"{name}: {dotted}"


def test_python_m_mha_serve_classroom_is_classroom_mode(monkeypatch):
    from mha_serve.__main__ import main

    monkeypatch.setattr(classroom, "available_mb", lambda: 1_000)
    monkeypatch.setattr(classroom, "shared_weights_mb", lambda: 600)
    with pytest.raises(SystemExit) as err:
        main(["classroom", "--seats", "60"])
    assert "SEATS=60 does not fit" in str(err.value)


def test_the_shared_cache_loads_no_server():
    """A dashboard kernel imports mha_serve.shared_cache: that must not bring in Jupyter Server,
    Tornado or Voila (memory in each of a class's kernels)."""
    code = ("import sys, mha_serve.shared_cache\n"
            "print(sorted(m for m in ('jupyter_server', 'tornado', 'voila') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_install_needs_the_repository_root(tmp_path):
    with pytest.raises(FileNotFoundError, match="root="):
        install.install_jupyter_files(prefix=tmp_path, root=tmp_path)


def test_a_pool_start_refused_at_the_cap_is_retried_when_there_is_room():
    km = kernels.BoundedKernelManager(max_kernels=2)
    refills = []
    km.fill_if_needed = lambda delay, notebook_name: refills.append(notebook_name)  # voila's pool API

    async def scenario():
        refused = asyncio.get_running_loop().create_future()
        refused.set_exception(kernels.KernelCapReached(2))
        km._pools = {"nb.ipynb": [refused]}
        km._starting = 2  # at the cap: the refused entry goes, no refill yet
        await km.reap_unconnected()
        assert km._pools["nb.ipynb"] == [] and refills == []
        again = asyncio.get_running_loop().create_future()
        again.set_exception(kernels.KernelCapReached(2))
        km._pools["nb.ipynb"].append(again)
        km._starting = 0  # room again: refill
        await km.reap_unconnected()
        assert refills == ["nb.ipynb"]

    asyncio.run(scenario())


# -- classroom mode ---------------------------------------------------------------------------------

def test_classroom_plan_fits_and_refuses_naming_how_many_would():
    plan = classroom.classroom_plan(60, available=22_000, shared=600)
    assert plan.max_kernels == 66 and plan.fits
    assert plan.needed_mb == 66 * classroom.KERNEL_MB + 600 + classroom.SERVER_MB
    small = classroom.classroom_plan(60, available=4_000, shared=600)
    assert not small.fits
    # the largest class that fits does fit, and one more does not
    assert classroom.classroom_plan(small.most_seats, available=4_000, shared=600).fits
    assert not classroom.classroom_plan(small.most_seats + 1, available=4_000, shared=600).fits
    message = small.refusal()
    assert message.startswith("SEATS=60 does not fit") and f"At most {small.most_seats} seats fit" in message
    assert "3.9 GB available" in message


@pytest.mark.parametrize("available", [0, 500, 4_000, 22_000, 10**9])
def test_most_seats_is_the_largest_class_whose_memory_fits(available):
    plan = classroom.classroom_plan(1, available=available, shared=600)
    budget = int(available * classroom.MEMORY_SHARE)

    def need(n):
        return (n + classroom.spare_kernels(n)) * classroom.KERNEL_MB + 600 + classroom.SERVER_MB

    assert plan.most_seats == 0 or need(plan.most_seats) <= budget
    assert need(plan.most_seats + 1) > budget


@pytest.mark.parametrize(("seats", "error"), [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)])
def test_classroom_plan_validates_seats(seats, error):
    with pytest.raises(error, match="seats"):
        classroom.classroom_plan(seats, available=1000, shared=0)


def test_classroom_command_sizes_the_pool_to_the_class():
    cmd = classroom.classroom_command(60, 9999)
    assert "--pool_size=60" in cmd and "--preheat_kernel=True" in cmd and "--port=9999" in cmd
    assert "--BoundedKernelManager.max_kernels=66" in cmd
    assert any(a.startswith("--BoundedKernelManager.warm_concurrency=") for a in cmd)


def test_classroom_refuses_a_class_that_does_not_fit(monkeypatch, capsys):
    monkeypatch.setattr(classroom, "available_mb", lambda: 1_000)
    monkeypatch.setattr(classroom, "shared_weights_mb", lambda: 600)
    with pytest.raises(SystemExit) as err:
        classroom.classroom(["--seats", "60"])
    assert "SEATS=60 does not fit" in str(err.value) and "At most 0 seats fit" in str(err.value)


class _Done:
    """A finished asyncio task standing in for Voila's pool entries."""

    def __init__(self, result=None, done=True):
        self._result, self._done = result, done

    def done(self):
        return self._done

    def cancelled(self):
        return False

    def exception(self):
        return None

    def result(self):
        return self._result


def _pool_entry(rendered: bool):
    return _Done({"kernel_id": "k", "task": _Done(done=rendered)})


def test_warm_slots_hold_pooled_starts_until_one_finishes_warming():
    km = kernels.BoundedKernelManager(warm_concurrency=1)
    km._pools = {"dashboard.ipynb": [_pool_entry(rendered=False)]}
    assert km.warming() == 1 and km.warmed() == 0

    async def scenario():
        waiter = asyncio.ensure_future(km._wait_for_a_warm_slot())
        await asyncio.sleep(0.5)
        held = not waiter.done()
        km._pools["dashboard.ipynb"] = [_pool_entry(rendered=True)]  # the notebook has run
        await asyncio.wait_for(waiter, 2)
        return held

    assert asyncio.run(scenario()) is True
    assert km.warming() == 0 and km.warmed() == 1


class _Student:
    """A kernel with a page connected, as the manager sees it."""

    def __init__(self, state: str = "idle", seconds_ago: float = 60.0):
        from datetime import datetime, timedelta, timezone

        self.execution_state = state
        self.last_activity = datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)


def _with_student(km, student) -> None:
    km._kernels["student"] = student
    km._kernel_connections["student"] = 1


def test_a_refill_waits_while_the_class_is_active_and_starts_when_quiet():
    km = kernels.BoundedKernelManager(warm_concurrency=2, refill_quiet=0.6, refill_reserve=1)
    km._pools = {"dashboard.ipynb": [_pool_entry(rendered=True)] * 3}  # 3 warmed: above the reserve
    _with_student(km, _Student("busy"))

    async def scenario():
        waiter = asyncio.ensure_future(km._wait_for_a_warm_slot())
        await asyncio.sleep(0.5)
        held_busy = not waiter.done()
        km._kernels["student"] = _Student("idle", seconds_ago=0)  # idle, but just sent something
        await asyncio.sleep(0.3)
        held_recent = not waiter.done()
        t0 = asyncio.get_running_loop().time()
        await asyncio.wait_for(waiter, 3)  # quiet once refill_quiet has passed
        return held_busy, held_recent, asyncio.get_running_loop().time() - t0

    held_busy, held_recent, waited = asyncio.run(scenario())
    assert held_busy and held_recent and 0.1 < waited < 2
    _with_student(km, _Student("idle", seconds_ago=60))  # a quiet class: no wait
    assert asyncio.run(_timed(km._wait_for_a_warm_slot())) < 0.2


def test_a_refill_starts_at_once_when_the_pool_is_below_the_reserve():
    km = kernels.BoundedKernelManager(warm_concurrency=2, refill_quiet=60, refill_reserve=2)
    km._pools = {"dashboard.ipynb": [_pool_entry(rendered=True)]}  # 1 warmed, reserve 2
    _with_student(km, _Student("busy"))
    assert km._class_active()
    assert asyncio.run(_timed(km._wait_for_a_warm_slot())) < 0.2


def test_refills_waiting_count_towards_the_cap():
    """A refill that waits for a quiet class holds its place under the cap: one more refill is
    refused at once, not after the wait (when Voila might hand its failure to a visitor)."""
    km = kernels.BoundedKernelManager(max_kernels=2, warm_concurrency=1, refill_quiet=60)
    km._pools = {"dashboard.ipynb": [_pool_entry(rendered=True)] * 3}
    _with_student(km, _Student("busy"))  # 1 kernel alive, the class active: refills wait
    env = {"env": {"VOILA_PREHEAT": "True"}}

    async def scenario():
        first = asyncio.ensure_future(km.start_kernel(**env))
        await asyncio.sleep(0.3)
        with pytest.raises(kernels.KernelCapReached):
            await asyncio.wait_for(km.start_kernel(**env), 1)
        waiting = not first.done()
        first.cancel()
        return waiting

    assert asyncio.run(scenario()) is True
    assert km._deferred == 0 and km.refused == 1


async def _timed(aw) -> float:
    import time

    t0 = time.monotonic()
    await aw
    return time.monotonic() - t0


def test_ready_is_printed_once_when_every_seat_is_warm(capsys):
    km = kernels.BoundedKernelManager()
    km.kernel_pools_config = {"default": {"pool_size": 2}}
    km._pools = {"dashboard.ipynb": [_pool_entry(True), _pool_entry(False)]}
    km._report_ready()
    assert capsys.readouterr().out == "" and km.ready_after is None
    km._pools["dashboard.ipynb"][1] = _pool_entry(True)
    km._report_ready()
    km._report_ready()
    out = capsys.readouterr().out
    assert out.count("Classroom ready: 2 of 2 seats warmed in") == 1


@pytest.mark.parametrize(("trait", "value"), [("warm_concurrency", -1), ("refill_quiet", -0.5),
                                                   ("refill_reserve", -1)])
def test_classroom_settings_are_validated(trait, value):
    with pytest.raises(ValueError, match=trait):
        kernels.BoundedKernelManager(**{trait: value})


# -- the page's template: anywidget's load limit ----------------------------------------------------

def test_anywidget_still_sets_the_2s_limit_the_template_lifts():
    """share/.../mha_page.html.j2 gives anywidget's `AbortSignal.timeout(2000)` (its Runtime's limit
    on loading a widget's JavaScript) 120 s. If an anywidget upgrade changes how it sets the limit,
    this fails, and the template must follow."""
    import anywidget

    bundle = Path(anywidget.__file__).parent / "labextension" / "static"
    limits = [js for js in bundle.glob("*.js") if "Failed to initialize model" in js.read_text(errors="replace")]
    assert limits, f"no anywidget bundle under {bundle} sets the load limit"
    for js in limits:
        text = js.read_text(errors="replace")
        at = text.index("Failed to initialize model")
        assert "AbortSignal.timeout(2000)" in text[at - 300: at], js
    template = (REPO / "share/jupyter/voila/templates/mha/mha_page.html.j2").read_text()
    assert "ms === 2000 && /anywidget/.test(new Error().stack" in template


def test_a_kernel_handed_out_by_the_pool_is_not_culled_for_its_warm_up_age():
    """A pool warmed 15 minutes before the class: the kernel a student gets must count as fresh,
    or the 10-minute idle cull would shut it down under the student (seen in the classroom test)."""
    from datetime import datetime, timedelta, timezone

    km = kernels.BoundedKernelManager(cull_idle_timeout=600)

    class Kernel:
        execution_state = "idle"
        kernel_name = "python3"
        kernel_spec = type("Spec", (), {"metadata": {}})()
        last_activity = datetime.now(timezone.utc) - timedelta(minutes=15)  # the warm-up

    km._kernels["k"] = Kernel()
    km._pools = {"dashboard.ipynb": [_pool_entry(rendered=True)]}  # kernel "k" waits in the pool
    km._note_handouts()
    assert km._was_pooled == {"k"}
    km._pools["dashboard.ipynb"] = []  # Voila hands it to a student
    culled = []

    async def shutdown(kernel_id, *args, **kwargs):
        culled.append(kernel_id)

    km.shutdown_kernel = shutdown
    km._kernel_connections["k"] = 0
    asyncio.run(km.cull_kernel_if_idle("k"))
    assert culled == []
    assert kernels._seconds_since(km._kernels["k"].last_activity) < 5
