"""Classroom mode: Voila's preheated pool sized to a class, warmed before the bell, if it fits.

``python -m mha_serve classroom --seats 60`` (``make classroom``) starts ``voila`` on the
dashboard with one preheated kernel a seat, a kernel cap of the seats plus spares (reloads, late
arrivals) and at most one kernel warming per core (``BoundedKernelManager``'s traitlets, in
``mha_serve.kernels``). Before that, ``classroom_plan`` adds up the memory the class needs (one
dashboard kernel a seat and the spares, the models' shared weights once, the server) against the
memory available now, and refuses a class that does not fit, saying how many seats would.
"""

from __future__ import annotations

import bisect
import os
import sys
from dataclasses import dataclass

# A dashboard kernel's own memory with every panel open, the real-model panel used (unique set
# size; README "Memory", `python -m benchmarks.kernel_memory 20`: 121 MB each). The models'
# weights are memory-mapped and shared by all kernels: counted once (their size on disk).
KERNEL_MB = 125
SERVER_MB = 150  # the Voila server itself, measured at ~95-150 MB (tests/test_dashboard_load.py)
MEMORY_SHARE = 0.8  # of the memory available now: leave the rest to the system and the browser


def spare_kernels(seats: int) -> int:
    """Kernels beyond the class: reloads and late arrivals (10 %, at least 2)."""
    return max(2, seats // 10)


def kernel_cap(seats: int) -> int:
    """The most kernels alive at once for a class of ``seats``: one a seat, plus the spares."""
    return seats + spare_kernels(seats)


@dataclass(frozen=True)
class ClassroomPlan:
    """What ``seats`` students need: kernels, memory, and whether it fits this machine."""

    seats: int
    max_kernels: int  # the cap: one kernel a seat plus spares
    needed_mb: int
    available_mb: int  # MemAvailable now
    shared_mb: int  # memory-mapped model weights, shared by every kernel
    most_seats: int  # the largest class that fits

    @property
    def fits(self) -> bool:
        return self.seats <= self.most_seats

    def refusal(self) -> str:
        return (f"SEATS={self.seats} does not fit: {self.max_kernels} kernels x {KERNEL_MB} MB + "
                f"{self.shared_mb} MB of shared model weights + {SERVER_MB} MB for the server = "
                f"{self.needed_mb / 1024:.1f} GB, but this machine has {self.available_mb / 1024:.1f} GB "
                f"available (using at most {MEMORY_SHARE:.0%} of it). At most {self.most_seats} seats fit: "
                f"SEATS={self.most_seats}, or serve a bigger class from JupyterHub (docs/dashboard.md).")


def available_mb() -> int:
    """Memory available now, in MB: MemAvailable on Linux, else the physical memory."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20


def shared_weights_mb() -> int:
    """Size of the fetched models' memory-mapped arrays (0 when not fetched)."""
    from mha_core.models import cache_dir

    root = cache_dir()
    return sum(p.stat().st_size for p in root.rglob("*.npy")) // 2**20 if root.is_dir() else 0


def classroom_plan(seats: int, available: int | None = None, shared: int | None = None) -> ClassroomPlan:
    """The kernels and memory for a class of ``seats``; ``available``/``shared`` in MB (default:
    read from the machine it runs on). Raises ValueError for a seat count that is not a positive int."""
    if isinstance(seats, bool) or not isinstance(seats, int):
        raise TypeError(f"seats must be an int, got {type(seats).__name__}")
    if seats < 1:
        raise ValueError(f"seats must be at least 1, got {seats}")
    available = available_mb() if available is None else available
    shared = shared_weights_mb() if shared is None else shared

    def need(n: int) -> int:
        return kernel_cap(n) * KERNEL_MB + shared + SERVER_MB

    budget = int(available * MEMORY_SHARE)
    most = bisect.bisect_right(range(1, budget // KERNEL_MB + 1), budget, key=need)  # need grows with n: the count
    return ClassroomPlan(seats, kernel_cap(seats), need(seats), available, shared, most)  # of seats that fit is the most


def classroom_options(seats: int) -> list[str]:
    """Voila's options in classroom mode: a pool of ``seats`` warmed kernels, a cap with spares,
    at most one kernel warming per core."""
    return ["--preheat_kernel=True", f"--pool_size={seats}",
            f"--BoundedKernelManager.max_kernels={kernel_cap(seats)}",
            f"--BoundedKernelManager.warm_concurrency={os.cpu_count() or 1}",
            "--BoundedKernelManager.check_interval=1"]


def classroom_command(seats: int, port: int, notebook: str = "notebooks/dashboard.ipynb",
                      extra: tuple[str, ...] = (), room_host: str | None = None) -> list[str]:
    """The ``voila`` command line of classroom mode for ``seats`` students; with ``room_host``,
    room mode's (``mha_serve.room``: on that address, behind a join code)."""
    app = ["voila"] if room_host is None else ["mha_serve.room", f"--host={room_host}"]
    return [sys.executable, "-m", *app, notebook, f"--port={port}", *classroom_options(seats), *extra]


def classroom(argv: list[str] | None = None) -> None:
    """``python -m mha_serve classroom --seats 60 [--port 8866] [--room [--host ADDR]] [voila options]``: print the plan,
    refuse a class that does not fit, else replace this process by the ``voila`` of the class."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m mha_serve classroom",
                                     description="Serve the dashboard to a class, every seat warmed before the bell.")
    parser.add_argument("--seats", type=int, required=True, help="students expected (one warmed kernel each)")
    parser.add_argument("--port", type=int, default=8866)
    parser.add_argument("--notebook", default="notebooks/dashboard.ipynb")
    parser.add_argument("--room", action="store_true",
                        help="room mode: on the room's network behind a join code (mha_serve.room)")
    parser.add_argument("--host", default="0.0.0.0", help="with --room: the address to listen on")
    args, extra = parser.parse_known_args(argv)
    try:
        plan = classroom_plan(args.seats)
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    if not plan.fits:
        raise SystemExit(plan.refusal())
    print(f"Classroom: warming {plan.seats} seats ({plan.max_kernels} kernels at most, about "
          f"{plan.needed_mb / 1024:.1f} GB of the {plan.available_mb / 1024:.1f} GB available; "
          f"{plan.most_seats} seats would fit) on {os.cpu_count()} cores. Each kernel executes the "
          "dashboard once now; 'Classroom ready' follows when all are warm.", flush=True)
    cmd = classroom_command(plan.seats, args.port, args.notebook, tuple(extra), args.host if args.room else None)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.execv(cmd[0], cmd)
