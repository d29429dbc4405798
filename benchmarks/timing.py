"""Interleaved timing, robust statistics and a description of the machine.

Every comparison in the benchmarks is timed by *interleaving*: one repetition runs each
implementation once, in a freshly shuffled order, and the next repetition does it again.
A burst of load from another process then hits every implementation alike instead of
whichever one happened to be running, so the ratios stay meaningful on a shared machine.
"""

from __future__ import annotations

import os
import platform
import resource
import time
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

# The number of warm-up calls per implementation before timing: the first call pays for
# page faults on freshly allocated arrays and for lazy initialisation in BLAS and torch.
WARMUP_CALLS = 1

# Untimed calls of a callable right before each of its timed calls: after a torch call, torch's
# idle OpenMP threads keep spinning on the cores for a while, and numpy's BLAS threads do the same
# after ours, so the next library's call runs slower. One settling call absorbs the other side's
# spin, so interleaving keeps its purpose (both sides see the same drift of the machine) without
# that cost. The measurements behind it: benchmarks/README.md, "Timing".
SETTLE_CALLS = 1

# A pause before those settling calls, in seconds. A library's idle threads spin for a while after
# its call returns (OpenBLAS's for a few tenths of a second). A settling call shorter than that
# absorbs only part of it, so short calls that follow the other library pay for its spin. After
# the pause every timed call starts as a call after idle time does, as a slider's call in the
# dashboard does. The measurements behind it: benchmarks/README.md, "Timing".
PAUSE_S = 0.25


def stats(samples: list[float]) -> dict[str, float]:
    """Median, quartiles, IQR, min and count of a list of timings (seconds)."""
    a = np.asarray(samples, dtype=np.float64)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {
        "median": float(med),
        "q1": float(q1),
        "q3": float(q3),
        "iqr": float(q3 - q1),
        "min": float(a.min()),
        "n": int(a.size),
    }


def interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    budget_s: float,
    min_reps: int,
    max_reps: int,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
    pause_s: float = PAUSE_S,
) -> dict[str, dict[str, float]]:
    """Time every callable in ``fns`` by interleaved repetitions; return ``stats`` per name.

    Each timed call follows a pause of ``pause_s`` seconds (``PAUSE_S``) and then ``SETTLE_CALLS``
    untimed calls of the same callable.

    The number of repetitions is chosen from the warm-up: as many as fit in ``budget_s``
    seconds, but at least ``min_reps`` and at most ``max_reps``. ``clock`` is wall time by
    default; ``time.process_time`` counts this process's CPU time instead, which waiting for a
    core on a busy machine does not inflate.
    """
    names = list(fns)
    warm = dict.fromkeys(names, 0.0)
    for _ in range(WARMUP_CALLS):
        for name in names:
            t0 = clock()
            fns[name]()
            warm[name] = clock() - t0
    per_rep = max(sum(warm.values()), 1e-9) * (1 + SETTLE_CALLS) + pause_s * len(names)
    reps = int(min(max_reps, max(min_reps, budget_s // per_rep)))
    samples: dict[str, list[float]] = {name: [] for name in names}
    order = list(names)
    rng = np.random.default_rng(seed)
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            time.sleep(pause_s)
            for _ in range(SETTLE_CALLS):
                fns[name]()
            t0 = clock()
            fns[name]()
            samples[name].append(clock() - t0)
    return {name: stats(s) for name, s in samples.items()}


def _numpy_blas() -> dict | None:
    """threadpoolctl's description of the BLAS numpy uses (num_threads, architecture, version)."""
    for pool in threadpool_info():
        if pool["user_api"] == "blas" and "numpy" in pool["filepath"]:
            return pool
    return None


def set_numpy_threads(n: int) -> bool:
    """Ask numpy's BLAS to use ``n`` threads; False when it cannot be asked.

    Only the benchmark does this (for its single-thread comparison); mha_core never does.
    """
    if _numpy_blas() is None:
        return False
    threadpool_limits(limits=n, user_api="blas")
    return True


def numpy_threads() -> int:
    """Threads numpy's BLAS uses; falls back to the CPUs this process may run on."""
    blas = _numpy_blas()
    return blas["num_threads"] if blas else len(os.sched_getaffinity(0))


def machine_info() -> dict[str, object]:
    """CPU model, core count, library versions and BLAS: what a reader needs to compare runs."""
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    info: dict[str, object] = {
        "cpu": cpu,
        "logical_cpus": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numpy_blas": f"{blas.get('name')} {blas.get('version')}",
        "numpy_blas_runtime": (_numpy_blas() or {}).get("architecture"),
        "numpy_blas_threads": numpy_threads(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        info["torch_blas"] = "MKL" if torch.backends.mkl.is_available() else "other"
    except ImportError:
        info["torch"] = None
    return info


def _cpu_busy_seconds() -> float:
    """Busy CPU-seconds of the whole machine since boot (user+nice+system+irq+softirq+steal)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:]
    ticks = [int(v) for v in fields]
    busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]
    return busy / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    """CPU-seconds used by this process and its finished children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class LoadMeter:
    """Measures how much CPU *other* processes used while a benchmark section ran.

    ``other_cpus`` is the average number of CPUs busy with someone else's work: 0 on a quiet
    machine, up to the core count when every core was taken.
    """

    def __init__(self) -> None:
        self.loadavg_start = os.getloadavg()
        self._wall = time.perf_counter()
        self._busy = _cpu_busy_seconds()
        self._own = _own_cpu_seconds()

    def stop(self) -> dict[str, float]:
        wall = time.perf_counter() - self._wall
        busy = _cpu_busy_seconds() - self._busy
        own = _own_cpu_seconds() - self._own
        return {
            "wall_s": wall,
            "other_cpus": max(0.0, (busy - own) / wall) if wall > 0 else 0.0,
            "loadavg_start": self.loadavg_start[0],
            "loadavg_end": os.getloadavg()[0],
        }
