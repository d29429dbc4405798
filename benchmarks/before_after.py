"""Compare the layer of an older commit with the working tree, in the same run.

    python -m benchmarks.before_after REV                               # the formula layer, N=100 and 512
    python -m benchmarks.before_after REV --mode tiled                  # the tiled layer, N=2048 and 4096
    python -m benchmarks.before_after REV --mode attention              # the tiled attention alone
    python -m benchmarks.before_after REV --threads 1                   # one BLAS thread (the figure to quote)
    python -m benchmarks.before_after REV --cpu-time                    # one thread, CPU time: for a busy machine
    python -m benchmarks.before_after REV --sizes 8,512,1 64,512,1      # h,N,B of your choice
    make bench-before-after REV=... BENCH_ARGS="--mode tiled --threads 1"

The old ``mha_core`` is copied out of git (``git archive REV mha_core``) into a temporary package,
``mha_core_old``, so both versions run in one process, interleaved (``timing.interleaved``; the
median of each is reported, with the load average, which should be below 1 for figures worth
quoting). The outputs of the two are compared before anything is timed. Three modes:

    layer      (default) multi_head_attention(x, p, h), the same with return_weights=True, and
               multi_head_attention_per_head: the formula now, whatever the old layer ran
    tiled      old multi_head_attention(x, p, h) against new multi_head_attention(x, p, h, tiled=True)
    attention  old flash_attention(q, k, v) against new tiled_attention(q, k, v), q, k, v of
               shape (h, N, 64) (B > 1: (B, h, N, 64)), float32

An old layer that picked its attention path by itself (``attention_path``, before the formula and
``tiled=True`` became the caller's choice: the tiled path at more than 8 MiB of scores without a
mask or weights, so at h=8, B=1 from N=513 on, causal from N=314) is asked which path it ran, and each line says so:
``--mode layer`` compares formula with formula only where the old layer ran the formula, and
``--mode tiled`` refuses a size where it did not run its tiled path.
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

from .core import D_MODEL, TOLERANCE
from .suites import ROOT
from .timing import interleaved, numpy_threads, set_numpy_threads

MODES = ("layer", "tiled", "attention")
SIZES = {  # (h, N, B) per mode
    "layer": ((8, 100, 1), (8, 512, 1)),
    "tiled": ((8, 2048, 1), (8, 4096, 1)),
    "attention": ((8, 2048, 1), (8, 4096, 1)),
}
QUICK_SIZES = {"layer": ((8, 64, 1),), "tiled": ((8, 640, 1),), "attention": ((8, 256, 1),)}
D_HEAD = 64  # d_k = d_v of the attention mode's q, k, v


def load_old(rev: str, where: Path):
    """Import ``mha_core`` as it was at ``rev`` under the name ``mha_core_old`` (every subpackage:
    the package imports itself only relatively)."""
    archive = subprocess.run(["git", "archive", rev, "mha_core"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")
    (where / "mha_core").rename(where / "mha_core_old")
    for name in [m for m in sys.modules if m == "mha_core_old" or m.startswith("mha_core_old.")]:
        del sys.modules[name]  # an earlier load_old's copy (its folder may be gone)
    sys.path.insert(0, str(where))
    return importlib.import_module("mha_core_old")


def old_path(old, x, params, h: int, *, causal: bool = False, weights: bool = False) -> str:
    """The attention path the old layer runs for this call: "formula", "blocked" or "tiled" when it
    chose by itself (``core.mha.attention_path``), "formula" when it had no choice to make (no
    ``tiled`` keyword, no ``attention_path``), or "formula (tiled=False)" for a layer where the
    caller chooses."""
    mha = getattr(getattr(old, "core", None), "mha", None)
    if mha is not None and hasattr(mha, "attention_path") and hasattr(old, "check_layer_args"):
        args = old.check_layer_args(x=x, params=params, n_heads=h, causal=causal, scores=False)
        return mha.attention_path(args, keep_weights=weights, traced=False)
    return "formula (tiled=False)" if hasattr(old, "tiled_attention") else "formula"


def calls(mode: str, old, h: int, n: int, b: int, causal: bool) -> list[tuple[str, str, object, object]]:
    """``(call, old path, before, after)`` for one size: zero-argument callables of the old and the
    new code on the same inputs."""
    rng = np.random.default_rng(0)
    if mode == "attention":  # the old tiled attention: flash_attention, or tiled_attention after the rewrite
        old_fn = getattr(old, "flash_attention", None) or getattr(old, "tiled_attention", None)
        if old_fn is None:
            raise SystemExit("--mode attention: this revision has neither flash_attention nor tiled_attention")
        lead = (h,) if b == 1 else (b, h)
        q, k, v = (rng.standard_normal((*lead, n, D_HEAD)).astype(np.float32) for _ in range(3))  # (..., h, N, 64)
        return [("attention", f"tiled ({old_fn.__name__})",
                 lambda: old_fn(q, k, v, causal=causal),
                 lambda: mha_core.tiled_attention(q, k, v, causal=causal))]
    p = init_params(MHAConfig(D_MODEL, h), rng)
    x = rng.standard_normal((b, n, D_MODEL)).astype(np.float32)  # (B, N, d_model)
    if mode == "tiled" and hasattr(old, "tiled_attention"):  # an old layer where the caller chooses
        return [("forward", "tiled (tiled=True)", lambda: old.multi_head_attention(x, p, h, causal=causal, tiled=True),
                 lambda: mha_core.multi_head_attention(x, p, h, causal=causal, tiled=True))]
    if mode == "tiled":
        path = old_path(old, x, p, h, causal=causal)
        if path != "tiled":
            raise SystemExit(f"--mode tiled: the old layer runs the {path} path at h={h} N={n} B={b}, not its "
                             "tiled path (it picked tiled above 8 MiB of scores): choose a larger N")
        return [("forward", path, lambda: old.multi_head_attention(x, p, h, causal=causal),
                 lambda: mha_core.multi_head_attention(x, p, h, causal=causal, tiled=True))]
    out = []
    for call, fn, kw in (("forward", "multi_head_attention", {}),
                         ("+weights", "multi_head_attention", {"return_weights": True}),
                         ("per_head", "multi_head_attention_per_head", {})):
        before, after = getattr(old, fn), getattr(mha_core, fn)
        path = "formula" if call == "per_head" else old_path(old, x, p, h, causal=causal, weights=bool(kw))
        out.append((call, path,
                    lambda f=before, kw=kw: f(x, p, h, causal=causal, **kw),
                    lambda f=after, kw=kw: f(x, p, h, causal=causal, **kw)))
    return out


def same_output(before, after) -> float:
    """Largest |before - after| of two calls' outputs (the first array of a tuple)."""
    a, b = (r[0] if isinstance(r, tuple) else r for r in (before(), after()))
    diff = float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
    if not diff <= TOLERANCE["float32"]:
        raise AssertionError(f"before and after disagree: max |diff| = {diff:.2e}")
    return diff


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the older git revision, e.g. d5d4723^ (the last one with the automatic switch)")
    parser.add_argument("--mode", choices=MODES, default="layer",
                        help="layer: the formula layer (default); tiled: old layer on its tiled path vs "
                             "tiled=True; attention: old flash_attention vs tiled_attention")
    parser.add_argument("--threads", type=int, default=None, help="threads for numpy's BLAS")
    parser.add_argument("--budget", type=float, default=4.0, help="seconds of timing per size and call")
    parser.add_argument("--cpu-time", action="store_true",
                        help="one BLAS thread, timed in CPU time (time.process_time): waiting for a core on a "
                             "busy machine is not counted, so the ratio survives load; wall time is the default")
    parser.add_argument("--sizes", nargs="+", metavar="h,N,B", help="sizes to run (default: SIZES of the mode)")
    parser.add_argument("--causal", action="store_true", help="every call with causal=True")
    parser.add_argument("--quick", action="store_true", help="one small size, a short budget: a smoke run")
    args = parser.parse_args(argv)
    default_sizes = QUICK_SIZES if args.quick else SIZES
    sizes = [tuple(int(v) for v in size.split(",")) for size in args.sizes] if args.sizes else default_sizes[args.mode]
    budget, reps = (0.2, (2, 3)) if args.quick else (args.budget, (5, 40))
    threads = 1 if args.cpu_time else args.threads or numpy_threads()
    clock = time.process_time if args.cpu_time else time.perf_counter
    set_numpy_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        old = load_old(args.rev, Path(tmp))
        print(f"{args.rev} vs working tree, --mode {args.mode}, {threads} thread(s), "
              f"{'CPU' if args.cpu_time else 'wall'} time{', causal' if args.causal else ''}; "
              f"load average {os.getloadavg()[0]:.1f}; after/before above 1 = slower now")
        for h, n, b in sizes:
            for call, path, before, after in calls(args.mode, old, h, n, b, args.causal):
                diff = same_output(before, after)
                t = interleaved({"before": before, "after": after}, budget_s=budget, min_reps=reps[0],
                                max_reps=reps[1], clock=clock)
                med = {k: v["median"] for k, v in t.items()}
                new = "tiled" if args.mode != "layer" else "formula"
                note = "" if path.startswith(new) else f"  [old ran {path}, new runs {new}: not like for like]"
                print(f"  h={h:<2} N={n:<4} B={b} {call:<9} (old: {path}): before {med['before'] * 1e3:8.2f} ms, "
                      f"after {med['after'] * 1e3:8.2f} ms, after/before {med['after'] / med['before']:.3f}  "
                      f"(n={t['after']['n']}, max |diff| {diff:.1e}){note}", flush=True)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
