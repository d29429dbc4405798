"""A kernel manager for serving the dashboard to a crowd: a cap on live kernels, and no orphans.

Voila starts one kernel per page GET, even a GET that never runs the page's JavaScript (a link
preview, a crawler, ``curl`` in a loop). With stock settings a few hundred GETs fill a 24 GiB
machine. ``BoundedKernelManager`` is jupyter_server's ``AsyncMappingKernelManager`` with three
additions, all traitlets set from the installed Jupyter configuration (``voila.json``,
``jupyter_server_config.json``):

``max_kernels``
    At most this many kernels alive or starting. One more start raises HTTP 503, which Voila
    turns into the template's ``503.html`` ("busy, try again in a minute"). The default, 80,
    is about 10 GB of dashboard kernels (~125 MB each, measured), under half of a 24 GiB machine:
    a class of 60 with room for reloads.
``connect_grace``
    A kernel whose page has never opened its websocket, and which has been idle for this many
    seconds since Voila finished running the notebook in it, is shut down. 30 s by default: a
    page connects within a second or two of its HTML, even on a busy machine. The grace counts
    from the end of the page's rendering (``RenderedKernelManager``), not from the kernel's last
    message: a class of 60 arriving at ``make dashboard`` on 2 cores rendered 60 pages at once,
    a kernel sat idle for up to 56 s between two cells while Voila waited for its turn, and a
    grace counted from the last message shut down 9 kernels in the middle of their pages.
``disconnect_grace``
    A kernel whose page connected and then went away (tab closed, reloaded: a reload gets a
    new kernel in Voila) is shut down after this many idle seconds without a connection.
    120 s by default, so a phone that sleeps and reconnects keeps its kernel. 0 turns it off
    (the setting for JupyterLab, where a closed notebook tab keeps its kernel on purpose).

A kernel waiting in Voila's preheated pool counts towards the cap but is never shut down by the
graces; its clock starts when the pool hands it to a visitor. A pool refill refused at the cap is
retried once there is room.

Classroom mode (``mha_serve.classroom``: ``python -m mha_serve classroom --seats 60``, ``make
classroom``) serves the dashboard with Voila's preheated pool sized to the class: every seat's
kernel is started and the dashboard executed in it before the students arrive, so a student's page
is served from a warm kernel. Two more traitlets shape the pool:

``warm_concurrency``
    At most this many pooled kernels warming (starting or executing the notebook) at once; the
    rest wait their turn. 0 (the default) leaves Voila's behaviour: all at once.
``refill_quiet`` and ``refill_reserve``
    While the class is active (a kernel with a page connected busy, or sending anything, in the
    last ``refill_quiet`` seconds: 5 by default), a pool refill waits, unless fewer than
    ``refill_reserve`` (2) warmed kernels are left for the next arrivals. Warming a kernel runs
    the whole dashboard (2-4 CPU-seconds); done while 60 students arrive and move sliders, the
    refills took the cores from them (a slider's p90 rose to 270 ms, issue 33). So the pool is
    topped up when the class is quiet, or when it is about to run dry.

When the pool is full the manager prints ``Classroom ready: N of N seats warmed in T s`` with the
measured memory of a warmed kernel. (``mha_serve.classroom.classroom_plan`` works out the memory
first and refuses a class that does not fit, saying how many seats would.)
"""

from __future__ import annotations

import asyncio
import time
import weakref

from jupyter_server.services.kernels.kernelmanager import (
    AsyncMappingKernelManager,
    ServerKernelManager,
)
from tornado.ioloop import PeriodicCallback
from tornado.web import HTTPError
from traitlets import Bool, Float, Integer, default, validate

# ~125 MB per dashboard kernel (RSS after rendering, measured by tests/test_dashboard_load.py);
# 80 of them is ~10 GB, under half of a 24 GiB machine.
DEFAULT_MAX_KERNELS = 80
CAP_LOG_EVERY = 10.0  # seconds between two "Kernel cap reached" lines in the log


class KernelCapReached(HTTPError):
    """HTTP 503: the server already runs ``max_kernels`` kernels."""

    def __init__(self, cap: int):
        super().__init__(503, "kernel cap of %d reached", cap,
                         reason="The dashboard is busy: try again in a minute")


class RenderedKernelManager(ServerKernelManager):
    """One kernel's manager that knows whether Voila is rendering a page in it. Voila runs the
    notebook through a kernel client it asks this manager for (``client()``: nothing else in the
    server does; a page's websocket connects through other means) and stops that client's channels
    when the page is rendered."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._clients = weakref.WeakSet()

    def client(self, **kwargs):
        kc = super().client(**kwargs)
        self._clients.add(kc)
        return kc

    @property
    def rendering(self) -> bool:
        """True while a client of this kernel (Voila running the page) has its channels open."""
        return any(kc.channels_running for kc in self._clients)


class BoundedKernelManager(AsyncMappingKernelManager):
    """``AsyncMappingKernelManager`` with a kernel cap and shutdown of unconnected kernels."""

    # jupyter_server keeps every message of a kernel whose websocket closed, in a list with no
    # bound, until the same session reconnects (its own TODO says so). A page that drops while
    # its kernel still sends figures, or any second socket that closes, then grows the server by
    # each image the kernel sends: the browser test saw 14 GB. A Voila page does not resume a
    # session, so nothing is lost by not buffering.
    buffer_offline_messages = Bool(False, config=True,
                                   help="Keep the messages of a closed websocket for its session (unbounded).")
    max_kernels = Integer(DEFAULT_MAX_KERNELS, config=True,
                          help="Most kernels alive or starting; one more start answers HTTP 503.")
    connect_grace = Float(30.0, config=True,
                          help="Seconds an idle kernel may wait for its page's first websocket (0: forever).")
    disconnect_grace = Float(120.0, config=True,
                             help="Seconds an idle kernel may live after its last websocket closed (0: forever).")
    check_interval = Float(5.0, config=True, help="Seconds between two checks of the graces.")
    warm_concurrency = Integer(0, config=True,
                               help="Most pooled kernels warming at once (0: no limit, Voila's default).")
    refill_quiet = Float(5.0, config=True,
                         help="Seconds without a student's kernel busy or sending before a pool refill starts.")
    refill_reserve = Integer(2, config=True,
                             help="A pool refill starts at once when fewer warmed kernels than this are left.")

    @default("kernel_manager_class")
    def _rendered_kernels(self):
        return "mha_serve.kernels.RenderedKernelManager"

    @validate("max_kernels")
    def _positive_cap(self, proposal):
        if proposal["value"] < 1:
            raise ValueError(f"max_kernels must be at least 1, got {proposal['value']}")
        return proposal["value"]

    @validate("connect_grace", "disconnect_grace", "warm_concurrency", "refill_quiet", "refill_reserve")
    def _non_negative(self, proposal):
        if proposal["value"] < 0:
            unit = " seconds" if isinstance(proposal["trait"], Float) else ""
            raise ValueError(f"{proposal['trait'].name} must be >= 0{unit} (0: off), got {proposal['value']}")
        return proposal["value"]

    @validate("check_interval")
    def _positive_interval(self, proposal):
        if proposal["value"] <= 0:
            raise ValueError(f"check_interval must be > 0 seconds, got {proposal['value']}")
        return proposal["value"]

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._starting = 0  # starts in flight (not yet in self._kernels)
        self._connected_once: set[str] = set()
        self._clock: dict[str, float] = {}  # kernel id -> monotonic time its grace counts from
        self._sweeper: PeriodicCallback | None = None
        self.refused = 0  # starts refused at the cap (logged; tests read the log)
        self._cap_logged = -CAP_LOG_EVERY  # monotonic time of the last "Kernel cap reached"
        self.reaped = 0  # kernels shut down by a grace
        self._warm_starting = 0  # pooled kernels starting (not yet executing the notebook)
        self._deferred = 0  # pool refills waiting for a warm slot (_wait_for_a_warm_slot)
        self._was_pooled: set[str] = set()  # pooled at the last look: see _note_handouts
        self._born = time.monotonic()
        self.ready_after: float | None = None  # seconds from start until the pool was first full

    def live_kernels(self) -> int:
        """Kernels alive or starting: what the cap counts."""
        return len(self._kernels) + self._starting

    async def start_kernel(self, *args, **kwargs) -> str:
        pooled = (kwargs.get("env") or {}).get("VOILA_PREHEAT") == "True"  # a start for Voila's pool
        if pooled:  # a refill may wait (below): the refills already waiting count towards the cap,
            # else every refill asked for during a class passes, and all but the cap's room fail
            # after it, in Voila's pool, where a visitor may be handed one (found by test_class)
            self._check_cap(self._deferred)
            self._deferred += 1
            try:
                await self._wait_for_a_warm_slot()
            finally:
                self._deferred -= 1
        self._check_cap()
        self._start_sweeper()
        if pooled:
            self._warm_starting += 1
        self._starting += 1
        try:
            kernel_id = await super().start_kernel(*args, **kwargs)
        finally:
            self._starting -= 1
            self._warm_starting -= pooled
        self._clock[kernel_id] = time.monotonic()
        return kernel_id

    def _check_cap(self, reserved: int = 0) -> None:
        """Raise KernelCapReached when the kernels alive or starting, plus ``reserved``, fill the cap."""
        if self.live_kernels() + reserved >= self.max_kernels:
            self.refused += 1
            now = time.monotonic()
            if now - self._cap_logged >= CAP_LOG_EVERY:  # not once a second: the pool retries its refills
                self.log.warning("Kernel cap reached: %d kernels alive or starting (max_kernels=%d); "
                                 "answering 503 (%d refused so far)", self.live_kernels(), self.max_kernels,
                                 self.refused)
                self._cap_logged = now
            raise KernelCapReached(self.max_kernels)

    def _pool_results(self):
        """The results of Voila's pool entries whose kernel has started (done, not cancelled, no
        exception): dicts with the ``kernel_id`` and the ``task`` executing the notebook."""
        for pool in getattr(self, "_pools", {}).values():
            for task in pool:
                if task.done() and not task.cancelled() and task.exception() is None:
                    yield task.result()

    def warming(self) -> int:
        """Pooled kernels starting (``_warm_starting``) or still executing the notebook."""
        return sum(not r["task"].done() for r in self._pool_results()) + self._warm_starting

    def warmed(self) -> int:
        """Pooled kernels that have executed the notebook: pages ready to be served at once."""
        return sum(r["task"].done() for r in self._pool_results())

    def _class_active(self) -> bool:
        """True while a kernel with a page connected is busy, or has sent anything (jupyter_server
        stamps ``last_activity`` on each of its messages) in the last ``refill_quiet`` seconds."""
        for kernel_id, kernel in self._kernels.items():
            if self._kernel_connections.get(kernel_id, 0):
                if (getattr(kernel, "execution_state", "") == "busy"
                        or _seconds_since(getattr(kernel, "last_activity", None)) < self.refill_quiet):
                    return True
        return False

    async def _wait_for_a_warm_slot(self) -> None:
        """Hold a pooled start until fewer than ``warm_concurrency`` kernels warm, and, while the
        class is active, until it is quiet or fewer than ``refill_reserve`` warmed kernels are left."""
        if not self.warm_concurrency:
            return
        while (self.warming() >= self.warm_concurrency
               or (self._class_active() and self.warmed() >= self.refill_reserve)):
            await asyncio.sleep(0.2)

    def notify_connect(self, kernel_id):
        super().notify_connect(kernel_id)
        self._connected_once.add(kernel_id)

    def notify_disconnect(self, kernel_id):
        super().notify_disconnect(kernel_id)
        self._clock[kernel_id] = time.monotonic()

    def remove_kernel(self, kernel_id):
        self._forget(kernel_id)
        return super().remove_kernel(kernel_id)

    async def _async_shutdown_kernel(self, kernel_id, *args, **kwargs):
        self._forget(kernel_id)
        return await super()._async_shutdown_kernel(kernel_id, *args, **kwargs)

    shutdown_kernel = _async_shutdown_kernel

    def _forget(self, kernel_id: str) -> None:
        self._connected_once.discard(kernel_id)
        self._clock.pop(kernel_id, None)

    def _start_sweeper(self) -> None:
        if self._sweeper is None and (self.connect_grace or self.disconnect_grace):
            self._sweeper = PeriodicCallback(self.reap_unconnected, 1000 * self.check_interval)
            self._sweeper.start()
            def seconds(grace: float) -> str:
                return f"{grace:g} s" if grace else "never"

            self.log.info("Kernel cap %d; kernels without a page shut down after %s idle (never "
                          "connected) or %s (page gone)", self.max_kernels,
                          seconds(self.connect_grace), seconds(self.disconnect_grace))

    def _pooled(self) -> set[str]:
        """Ids of kernels waiting in Voila's preheated pool (``voila_kernel_manager_factory``)."""
        return {r["kernel_id"] for r in self._pool_results()}

    def _refill_pools(self) -> None:
        """Drop pool entries whose start was refused at the cap; refill once there is room.

        (Voila's pool would otherwise hand the refused start to the next visitor as a 503, and
        never refill.)
        """
        for name, pool in getattr(self, "_pools", {}).items():
            failed = [t for t in pool if t.done() and (t.cancelled() or t.exception() is not None)]
            for task in failed:
                pool.remove(task)
            if failed and self.live_kernels() < self.max_kernels:
                self.fill_if_needed(delay=0, notebook_name=name)

    def _pool_target(self) -> int:
        config = getattr(self, "kernel_pools_config", {}) or {}
        return int(config.get("default", {}).get("pool_size", 0))

    def _report_ready(self) -> None:
        """Print once, when every seat of the pool has been warmed: how many, how long, how big."""
        target = self._pool_target()
        if self.ready_after is not None or not target or self.warmed() < target:
            return
        self.ready_after = time.monotonic() - self._born
        sizes = [uss for uss in map(_kernel_uss, self._kernels.values()) if uss]
        memory = f"; {sum(sizes) / len(sizes) / 2**20:.0f} MB of its own per kernel" if sizes else ""
        message = (f"Classroom ready: {target} of {target} seats warmed in {self.ready_after:.0f} s "
                   f"({len(self._kernels)} kernels{memory})")
        print(message, flush=True)

    def _note_handouts(self) -> None:
        """A kernel that has left Voila's pool was just handed to a visitor: its idle time starts
        now. (Its last activity is otherwise the warm-up, maybe longer ago than the idle cull's
        10 minutes: a class arriving 15 minutes after warming would see each kernel culled at
        once, its page left without a kernel. Found by the classroom test.)"""
        pooled = self._pooled()
        now = _utcnow()
        for kernel_id in self._was_pooled - pooled:
            kernel = self._kernels.get(kernel_id)
            if kernel is not None:
                kernel.last_activity = now
                self._clock[kernel_id] = time.monotonic()
        self._was_pooled = pooled

    async def cull_kernel_if_idle(self, kernel_id):
        self._note_handouts()  # before the idle cull looks at a kernel just handed out
        return await super().cull_kernel_if_idle(kernel_id)

    async def reap_unconnected(self) -> list[str]:
        """Shut down the kernels whose grace has run out; return their ids."""
        self._refill_pools()
        self._note_handouts()
        self._report_ready()
        now = time.monotonic()
        pooled = self._pooled()
        reaped = []
        for kernel_id, kernel in list(self._kernels.items()):
            if kernel_id in pooled or kernel_id not in self._clock:
                self._clock[kernel_id] = now  # the clock starts when the pool hands it out
                continue
            if getattr(kernel, "rendering", False):  # Voila is still running the page: no page yet
                self._clock[kernel_id] = now
                continue
            if self._kernel_connections.get(kernel_id, 0) or getattr(kernel, "execution_state", "") == "busy":
                continue
            connected = kernel_id in self._connected_once
            grace = self.disconnect_grace if connected else self.connect_grace
            if not grace:
                continue
            idle = min(now - self._clock[kernel_id], _seconds_since(getattr(kernel, "last_activity", None)))
            if idle > grace:
                self.log.warning("Shutting down kernel %s: %s for %.0f s", kernel_id,
                                 "its page went away" if connected else "no page connected", idle)
                self.reaped += 1
                reaped.append(kernel_id)
                try:
                    await self.shutdown_kernel(kernel_id)
                except Exception as err:  # already gone: nothing to free
                    self.log.debug("kernel %s already gone: %s", kernel_id, err)
        return reaped


def _kernel_uss(kernel) -> int:
    """A local kernel's own memory in bytes (unique set size: its private pages, from Linux's
    /proc/PID/smaps_rollup; the libraries and mapped weights it shares are not counted). 0 where unknown."""
    process = getattr(getattr(kernel, "provisioner", None), "process", None)
    private = 0
    try:
        with open(f"/proc/{process.pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    private += int(line.split()[1]) * 1024
    except (AttributeError, OSError, ValueError):
        return 0
    return private


def _utcnow():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def _seconds_since(stamp) -> float:
    """Seconds since a timezone-aware datetime (jupyter_server's ``last_activity``); inf if None."""
    if stamp is None:
        return float("inf")
    return (_utcnow() - stamp).total_seconds()
