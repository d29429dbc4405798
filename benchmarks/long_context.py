"""Long context: the layer against torch at N = 100 to 8192, causal and not, at default threads
and at one thread each; the layer's two attention paths, the formula and ``tiled=True``, against
each other at every N; peak memory.

Per N (and causal or not), in one interleaved run (``timing.interleaved``), all on the same
weights (h=8, d_model=512, float32, B=1, self-attention):

    formula          multi_head_attention(x, params, 8, causal=...): the whole score tensor at once
    tiled            multi_head_attention(x, params, 8, causal=..., tiled=True): tiled_attention,
                     an online softmax over tiles of keys, memory O(N)
    torch MHA        nn.MultiheadAttention, need_weights=False (causal: a boolean attn_mask with
                     is_causal=True)
    torch SDPA       the same projections with F.scaled_dot_product_attention(is_causal=...)
    gemm             GEMM_CALLS square GEMMs: the machine's rate at that moment

The formula is not timed above ``FORMULA_MAX_N`` (N=8192: 2 GiB of scores and as much again for
each of the softmax's temporaries; a call takes many seconds). Each side's share of the GEMM rate
is 2 x its useful MACs (``useful_macs``) over its time, over the GEMM's rate in the same
repetitions.

The formula-or-tiled table (``formula_vs_tiled``) is the choice a caller of
``multi_head_attention`` makes: the two timed against each other, interleaved, at every N of the
rows above and at the lengths between them (``CROSSOVER_LENGTHS``, only the two timed there), so a
reader sees from which N ``tiled=True`` pays.

Peak memory is measured for each implementation in a fresh subprocess (Linux), as the peak
resident set during one call above the resident set just before it (``VmHWM`` after resetting
it through ``/proc/self/clear_refs``): the same yardstick for numpy and torch, whose
allocations tracemalloc cannot see.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from mha_core import MHAConfig, count_macs, init_params, multi_head_attention
from mha_core.core.tiled import BLOCK_K, BLOCK_Q

from .core import D_MODEL, GEMM_CALLS, GEMM_N, TOLERANCE, torch_layer
from .timing import interleaved, numpy_threads, set_numpy_threads

H = 8
LENGTHS = (100, 512, 2048, 4096, 8192)
QUICK_LENGTHS = (100, 512)
# Between the rows' lengths, where the formula and the tiled path trade places: only the two are
# timed there (the dashboard's sliders end at 100 and 512, which the rows have).
CROSSOVER_LENGTHS = (256, 384, 640, 768, 1024, 1536)
QUICK_CROSSOVER_LENGTHS = (256,)
FORMULA_MAX_N = 4096  # the formula at 8192 holds 2 GiB score tensors and adds minutes
MEMORY_LENGTHS = (512, 2048, 4096, 8192)
IMPLS = ("formula", "tiled")  # the layer's two paths, as the caller picks them
# Seconds of interleaved timing per row (at least 3 repetitions, 2 at N=8192) and per crossover
# row, chosen to keep this section a part of `make bench`'s run time, not most of it (the run time
# is in each RESULTS file).
BUDGET_S = 2.0
CROSSOVER_BUDGET_S = 1.0


def layer_inputs(n: int):
    rng = np.random.default_rng(0)
    params = init_params(MHAConfig(D_MODEL, H), rng)
    x = rng.standard_normal((1, n, D_MODEL)).astype(np.float32)  # (B, N, d_model)
    return x, params


def ours(impl: str, x, params, causal: bool = False):
    """The layer on the path the caller picks, as a zero-argument callable: "formula" (the default
    call) or "tiled" (``tiled=True``)."""
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    tiled = impl == "tiled"
    return lambda: multi_head_attention(x, params, H, causal=causal, tiled=tiled)


def torch_calls(x, params, causal: bool = False) -> dict:
    """``torch MHA`` and ``torch SDPA`` on the same weights, as zero-argument callables."""
    import torch
    import torch.nn.functional as F

    layer = torch_layer(params, D_MODEL, H, "float32")
    xt = torch.from_numpy(x)
    w = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in params.items()}
    n, d_k = x.shape[1], D_MODEL // H
    # nn.MultiheadAttention's mask marks the keys a query may NOT see (True = blocked)
    blocked = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None  # (N, N)

    def mha_call():
        with torch.inference_mode():
            return layer(xt, xt, xt, need_weights=False, attn_mask=blocked, is_causal=causal)[0]

    def sdpa_call():
        with torch.inference_mode():
            q, k, v = (  # (B, h, N, d_k)
                (xt @ w[name]).view(1, n, H, d_k).transpose(1, 2) for name in ("W_Q", "W_K", "W_V")
            )
            heads = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, h, N, d_k)
            return heads.transpose(1, 2).reshape(1, n, D_MODEL) @ w["W_O"]  # (B, N, d_model)

    return {"torch MHA": mha_call, "torch SDPA": sdpa_call}


def useful_macs(n: int, causal: bool) -> int:
    """MACs of the layer at length N; causal counts only the N(N+1)/2 allowed (query, key) pairs,
    the work that the tiled path (it skips tiles above the diagonal) and torch's causal kernels need."""
    macs = count_macs(MHAConfig(D_MODEL, H), n)
    return macs["projections"] + (macs["attention"] * (n + 1) // (2 * n) if causal else macs["attention"])


def impls_at(n: int) -> tuple[str, ...]:
    """The layer's paths timed at length N: the formula only up to ``FORMULA_MAX_N``."""
    return IMPLS if n <= FORMULA_MAX_N else ("tiled",)


def run_size(n: int, quick: bool, threads: str, causal: bool = False) -> dict:
    """The formula and the tiled layer against torch MHA and torch SDPA at length N, with the GEMM
    rate in the same rotation."""
    x, params = layer_inputs(n)
    fns = {impl: ours(impl, x, params, causal) for impl in impls_at(n)}
    fns.update(torch_calls(x, params, causal))
    ref = fns["torch MHA"]().numpy()
    for name in (*impls_at(n), "torch SDPA"):
        got = np.asarray(fns[name]())
        diff = float(np.max(np.abs(got - ref)))
        if not diff <= TOLERANCE["float32"]:
            raise AssertionError(f"{name} disagrees with torch MHA at N={n}, causal={causal}: max |diff| = {diff:.2e}")
    rng = np.random.default_rng(1)
    a, c = (rng.standard_normal((GEMM_N, GEMM_N)).astype(np.float32) for _ in range(2))
    fns["gemm"] = lambda: [a @ c for _ in range(GEMM_CALLS)]  # (GEMM_N, GEMM_N) @ (GEMM_N, GEMM_N)
    reps = (2, 3) if quick else ((3, 15) if n <= 4096 else (2, 3))
    t = interleaved(fns, budget_s=1.0 if quick else BUDGET_S, min_reps=reps[0], max_reps=reps[1], seed=n + causal)
    macs = useful_macs(n, causal)
    gemm_gflops = GEMM_CALLS * 2 * GEMM_N**3 / t["gemm"]["median"] / 1e9
    mine = impls_at(n)
    return {
        "N": n, "h": H, "threads": threads, "causal": causal, "times": t,
        "tiled_over_formula": t["tiled"]["median"] / t["formula"]["median"] if "formula" in t else None,
        "vs torch MHA": {impl: t["torch MHA"]["median"] / t[impl]["median"] for impl in mine},
        "vs torch SDPA": {impl: t["torch SDPA"]["median"] / t[impl]["median"] for impl in mine},
        "gemm_gflops": gemm_gflops,
        "gemm_fraction": {k: 2 * macs / v["median"] / 1e9 / gemm_gflops for k, v in t.items() if k != "gemm"},
    }


def crossover(quick: bool, threads: str, log=print) -> list[dict]:
    """The formula and the tiled layer alone, interleaved, at the lengths between the rows'."""
    rows = []
    for n in QUICK_CROSSOVER_LENGTHS if quick else CROSSOVER_LENGTHS:
        x, params = layer_inputs(n)
        for causal in (False, True):
            fns = {impl: ours(impl, x, params, causal) for impl in IMPLS}
            t = interleaved(fns, budget_s=0.5 if quick else CROSSOVER_BUDGET_S, min_reps=3, max_reps=40, seed=n)
            rows.append({"N": n, "causal": causal, "threads": threads, "times": t,
                         "tiled_over_formula": t["tiled"]["median"] / t["formula"]["median"]})
            log(f"  {threads} threads, N={n}{' causal' if causal else ''}: formula "
                f"{t['formula']['median'] * 1e3:.2f} ms, tiled {t['tiled']['median'] * 1e3:.2f} ms "
                f"(tiled / formula {rows[-1]['tiled_over_formula']:.2f})", flush=True)
    return rows


def formula_vs_tiled(lc: dict) -> list[dict]:
    """Every (threads, causal, N) at which both paths were timed, from the rows and the crossover
    runs, sorted by N: the formula's and the tiled path's times, their ratio and the faster.
    Lengths where only the tiled path ran (N > ``FORMULA_MAX_N``) are listed with ``formula`` None."""
    out = []
    for r in [*lc.get("rows", []), *lc.get("crossover", [])]:
        t = r["times"]
        ratio = r.get("tiled_over_formula")
        out.append({"threads": r["threads"], "causal": r["causal"], "N": r["N"],
                    "formula": t.get("formula"), "tiled": t["tiled"], "tiled_over_formula": ratio,
                    "faster": None if ratio is None else ("tiled" if ratio < 1 else "formula")})
    threads = list(dict.fromkeys(r["threads"] for r in out))
    return sorted(out, key=lambda r: (threads.index(r["threads"]), r["causal"], r["N"]))


def run(quick: bool, log=print) -> dict:
    """Timings against torch at default threads and one thread, causal and not; formula against
    tiled between the rows' lengths; peak memory."""
    import torch

    out: dict = {"block_q": BLOCK_Q, "block_k": BLOCK_K, "formula_max_n": FORMULA_MAX_N,
                 "rows": [], "crossover": [], "memory": []}
    default = numpy_threads()
    for label, n_threads in (("default", default), ("1", 1)):
        if n_threads == 1 and not set_numpy_threads(1):
            log("  cannot set numpy's BLAS threads: one-thread runs skipped")
            continue
        torch.set_num_threads(n_threads)
        try:
            for n in QUICK_LENGTHS if quick else LENGTHS:
                for causal in (False, True):
                    row = run_size(n, quick, label, causal)
                    out["rows"].append(row)
                    med = {k: v["median"] * 1e3 for k, v in row["times"].items()}
                    log(f"  {label} threads, N={n}{' causal' if causal else ''}: "
                        + ", ".join(f"{impl} {med[impl]:,.1f} ms (torch MHA {row['vs torch MHA'][impl]:.2f}x, "
                                    f"SDPA {row['vs torch SDPA'][impl]:.2f}x)" for impl in impls_at(n))
                        + " (>1 = ours faster)", flush=True)
            out["crossover"] += crossover(quick, label, log)
        finally:
            set_numpy_threads(default)
            torch.set_num_threads(default)
    for n in (2048,) if quick else MEMORY_LENGTHS:
        for impl in (*impls_at(n), "torch MHA"):
            peak = peak_rss_growth(impl, n)
            out["memory"].append({"N": n, "impl": impl, "peak_bytes": peak, "score_bytes": H * n * n * 4})
            log(f"  memory N={n} {impl}: {peak / 2**20:,.0f} MiB (scores would be {H * n * n * 4 / 2**20:,.0f} MiB)")
    return out


# --- peak memory, one fresh process per measurement -------------------------------------------

_MEMORY_SCRIPT = """
import json, sys
from benchmarks import long_context as lc
impl, n = sys.argv[1], int(sys.argv[2])
def call(x, params):
    if impl.startswith("torch"):
        return lc.torch_calls(x, params)[impl]()
    return lc.ours(impl, x, params)()
def status_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
call(*lc.layer_inputs(256))  # warm at a small N: imports, thread pools and BLAS buffers are not the call's
x, params = lc.layer_inputs(n)
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the peak (VmHWM) to the current resident set
before = status_kib("VmRSS")
call(x, params)
print(json.dumps((status_kib("VmHWM") - before) * 1024))
"""


def peak_rss_growth(impl: str, n: int) -> int:
    """Peak resident bytes one call added, in a fresh process (``_MEMORY_SCRIPT``)."""
    proc = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT, impl, str(n)], capture_output=True, text=True,
                          check=True, cwd=suites_root())
    return int(json.loads(proc.stdout.strip().splitlines()[-1]))


def suites_root() -> str:
    from .suites import ROOT

    return str(ROOT)
