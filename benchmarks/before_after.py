"""Compare the layer of an older commit with the current one, in the same run.

    python -m benchmarks.before_after 1124612            # default threads
    python -m benchmarks.before_after 1124612 --threads 1
    python -m benchmarks.before_after 1124612 --cpu-time  # one thread, CPU time: for a busy machine
    make bench-before-after REV=1124612

The old ``mha_core`` is copied out of git (``git archive <rev> mha_core``) into a temporary
package, so both versions run in one process, interleaved (the median of each is reported, with
the load average, which should be below 1 for figures worth quoting). Three calls are compared at each size: the fused forward (``multi_head_attention``), the same with
``return_weights=True``, and the per-head loop (``multi_head_attention_per_head``).
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

import mha_core
from mha_core import MHAConfig, init_params

from .core import D_MODEL
from .suites import ROOT
from .timing import interleaved, numpy_threads, set_numpy_threads

SIZES = ((8, 100, 1), (8, 512, 1), (8, 2048, 1), (64, 512, 1), (1, 2048, 1), (8, 512, 8))


def load_old(rev: str, where: Path):
    """Import ``mha_core`` as it was at ``rev`` under the name ``mha_core_old`` (every subpackage:
    the package imports itself only relatively)."""
    archive = subprocess.run(["git", "archive", rev, "mha_core"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")
    (where / "mha_core").rename(where / "mha_core_old")
    sys.path.insert(0, str(where))
    return importlib.import_module("mha_core_old")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the older git revision, e.g. 1124612")
    parser.add_argument("--threads", type=int, default=None, help="threads for numpy's BLAS and torch")
    parser.add_argument("--budget", type=float, default=4.0, help="seconds of timing per size and call")
    parser.add_argument("--cpu-time", action="store_true",
                        help="one BLAS thread, timed in CPU time (time.process_time): waiting for a core on a "
                             "busy machine is not counted, so the ratio survives load; wall time is the default")
    parser.add_argument("--sizes", nargs="+", metavar="h,N,B", help="sizes to run (default: SIZES)")
    parser.add_argument("--causal", action="store_true", help="every call with causal=True")
    args = parser.parse_args(argv)
    sizes = [tuple(int(v) for v in size.split(",")) for size in args.sizes] if args.sizes else SIZES
    threads = 1 if args.cpu_time else args.threads or numpy_threads()
    clock = time.process_time if args.cpu_time else time.perf_counter
    set_numpy_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        old = load_old(args.rev, Path(tmp))
        print(f"{args.rev} vs working tree, {threads} thread(s), {'CPU' if args.cpu_time else 'wall'} time"
              f"{', causal' if args.causal else ''}; "
              f"load average {os.getloadavg()[0]:.1f}; after/before above 1 = slower now")
        for h, n, b in sizes:
            rng = np.random.default_rng(0)
            p = init_params(MHAConfig(D_MODEL, h), rng)
            x = rng.standard_normal((b, n, D_MODEL)).astype(np.float32)  # (B, N, d_model)
            for call, fn, kw in (("forward", "multi_head_attention", {"causal": args.causal}),
                                 ("+weights", "multi_head_attention", {"return_weights": True, "causal": args.causal}),
                                 ("per_head", "multi_head_attention_per_head", {"causal": args.causal})):
                before, after = getattr(old, fn), getattr(mha_core, fn)
                t = interleaved({
                    "before": lambda f=before, x=x, p=p, h=h, kw=kw: f(x, p, h, **kw),
                    "after": lambda f=after, x=x, p=p, h=h, kw=kw: f(x, p, h, **kw),
                }, budget_s=args.budget, min_reps=5, max_reps=40, clock=clock)
                med = {k: v["median"] for k, v in t.items()}
                print(f"  h={h:<2} N={n:<4} B={b} {call:<9}: before {med['before'] * 1e3:8.2f} ms, "
                      f"after {med['after'] * 1e3:8.2f} ms, after/before {med['after'] / med['before']:.3f}  "
                      f"(n={t['after']['n']})", flush=True)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
