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
    A kernel whose page has never opened its websocket, and which has been idle (not running
    the notebook) for this many seconds, is shut down. 30 s by default: a page connects within
    a second or two of its HTML, even on a busy machine.
``disconnect_grace``
    A kernel whose page connected and then went away (tab closed, reloaded: a reload gets a
    new kernel in Voila) is shut down after this many idle seconds without a connection.
    120 s by default, so a phone that sleeps and reconnects keeps its kernel. 0 turns it off
    (the setting for JupyterLab, where a closed notebook tab keeps its kernel on purpose).

A kernel waiting in Voila's preheated pool counts towards the cap but is never shut down by the
graces; its clock starts when the pool hands it to a visitor. A pool refill refused at the cap is
retried once there is room.
"""

from __future__ import annotations

import time

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from tornado.ioloop import PeriodicCallback
from tornado.web import HTTPError
from traitlets import Float, Integer, validate

# ~125 MB per dashboard kernel (RSS after rendering, measured by tests/test_dashboard_load.py);
# 80 of them is ~10 GB, under half of a 24 GiB machine.
DEFAULT_MAX_KERNELS = 80


class KernelCapReached(HTTPError):
    """HTTP 503: the server already runs ``max_kernels`` kernels."""

    def __init__(self, cap: int):
        super().__init__(503, "kernel cap of %d reached", cap,
                         reason="The dashboard is busy: try again in a minute")


class BoundedKernelManager(AsyncMappingKernelManager):
    """``AsyncMappingKernelManager`` with a kernel cap and shutdown of unconnected kernels."""

    max_kernels = Integer(DEFAULT_MAX_KERNELS, config=True,
                          help="Most kernels alive or starting; one more start answers HTTP 503.")
    connect_grace = Float(30.0, config=True,
                          help="Seconds an idle kernel may wait for its page's first websocket (0: forever).")
    disconnect_grace = Float(120.0, config=True,
                             help="Seconds an idle kernel may live after its last websocket closed (0: forever).")
    check_interval = Float(5.0, config=True, help="Seconds between two checks of the graces.")

    @validate("max_kernels")
    def _positive_cap(self, proposal):
        if proposal["value"] < 1:
            raise ValueError(f"max_kernels must be at least 1, got {proposal['value']}")
        return proposal["value"]

    @validate("connect_grace", "disconnect_grace")
    def _non_negative(self, proposal):
        if proposal["value"] < 0:
            raise ValueError(f"{proposal['trait'].name} must be >= 0 seconds, got {proposal['value']}")
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
        self.reaped = 0  # kernels shut down by a grace

    def live_kernels(self) -> int:
        """Kernels alive or starting: what the cap counts."""
        return len(self._kernels) + self._starting

    async def start_kernel(self, *args, **kwargs) -> str:
        if self.live_kernels() >= self.max_kernels:
            self.refused += 1
            self.log.warning("Kernel cap reached: %d kernels alive or starting (max_kernels=%d); "
                             "answering 503", self.live_kernels(), self.max_kernels)
            raise KernelCapReached(self.max_kernels)
        self._start_sweeper()
        self._starting += 1
        try:
            kernel_id = await super().start_kernel(*args, **kwargs)
        finally:
            self._starting -= 1
        self._clock[kernel_id] = time.monotonic()
        return kernel_id

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
        ids = set()
        for pool in getattr(self, "_pools", {}).values():
            for task in pool:
                if task.done() and not task.cancelled() and task.exception() is None:
                    ids.add(task.result()["kernel_id"])
        return ids

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

    async def reap_unconnected(self) -> list[str]:
        """Shut down the kernels whose grace has run out; return their ids."""
        self._refill_pools()
        now = time.monotonic()
        pooled = self._pooled()
        reaped = []
        for kernel_id, kernel in list(self._kernels.items()):
            if kernel_id in pooled or kernel_id not in self._clock:
                self._clock[kernel_id] = now  # the clock starts when the pool hands it out
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


def _seconds_since(stamp) -> float:
    """Seconds since a timezone-aware datetime (jupyter_server's ``last_activity``); inf if None."""
    if stamp is None:
        return float("inf")
    from datetime import datetime, timezone

    return (datetime.now(timezone.utc) - stamp).total_seconds()


# -- installing the templates and settings into the environment's Jupyter paths ------------------

# (source under the repository root, destination under sys.prefix): the same pairs as
# [tool.setuptools.data-files] in pyproject.toml.
JUPYTER_FILES = (("share/jupyter/voila/templates", "share/jupyter/voila/templates"),
                 ("etc/jupyter", "etc/jupyter"))


def install_jupyter_files(prefix: str | None = None, root=None) -> list[str]:
    """Copy the offline templates and the server settings into ``prefix`` (default ``sys.prefix``).

    A wheel (``pip install .``) installs them as data files. An editable install
    (``pip install -e .``) does not: setuptools' editable wheels carry no data files (checked
    with setuptools 80 and pip 23), so ``make venv`` and Binder's ``postBuild`` call this.

    Parameters
    ----------
    prefix : str, optional
        The environment's prefix; Jupyter looks in ``{prefix}/share/jupyter`` and ``{prefix}/etc/jupyter``.
    root : path, optional
        The repository root holding ``share/`` and ``etc/`` (default: the one above this package).

    Returns
    -------
    list of str: the files written.
    """
    import shutil
    import sys
    from pathlib import Path

    prefix = Path(sys.prefix if prefix is None else prefix)
    root = Path(__file__).resolve().parents[2] if root is None else Path(root)
    if not (root / "etc" / "jupyter" / "voila.json").is_file():
        raise FileNotFoundError(f"root={str(root)!r} holds no etc/jupyter/voila.json: pass the repository root")
    written = []
    for src, dst in JUPYTER_FILES:
        for path in sorted((root / src).rglob("*")):
            if path.is_file():
                target = prefix / dst / path.relative_to(root / src)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                written.append(str(target))
    return written


if __name__ == "__main__":
    files = install_jupyter_files()
    print(f"installed {len(files)} Voila template and configuration files under {files[0].split('/share/')[0]}")
