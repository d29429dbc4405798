"""Long context: the fused layer against torch at N = 100 to 8192, causal and not, at default
threads and at one thread each; the three attention paths around the switch; peak memory.

Per N (and causal or not), in one interleaved run (``timing.interleaved``), all on the same
weights (h=8, d_model=512, float32, B=1, self-attention):

    ours             multi_head_attention(x, params, 8, causal=...): the path it chooses
    torch MHA        nn.MultiheadAttention, need_weights=False (causal: a boolean attn_mask with
                     is_causal=True)
    torch SDPA       the same projections with F.scaled_dot_product_attention(is_causal=...)
    gemm             GEMM_CALLS square GEMMs: the machine's rate at that moment

Each side's share of the GEMM rate is 2 x its useful MACs (``useful_macs``) over its time, over
the GEMM's rate in the same repetitions.

The crossover table times the layer forced onto each of its three attention paths (formula,
blocked, tiled; ``forced_path``) at the lengths around the switch, so a run shows whether
``mha.attention_path`` picked the fastest.

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

from mha_core import MHAConfig, check_layer_args, count_macs, init_params, multi_head_attention
from mha_core.core import mha
from mha_core.core.flash import BLOCK_K, BLOCK_Q

from .core import D_MODEL, GEMM_CALLS, GEMM_N, TOLERANCE, torch_layer
from .timing import interleaved, numpy_threads, set_numpy_threads

H = 8
LENGTHS = (100, 512, 2048, 4096, 8192)
QUICK_LENGTHS = (100, 512)
# Around the switches between the formula and the tiled path (h=8: causal at 3 MiB of scores,
# N=313; otherwise at 8 MiB, N=512), and the dashboard's two sliders (100, 512).
CROSSOVER_LENGTHS = (100, 256, 313, 384, 448, 512, 640, 1024)
MEMORY_LENGTHS = (512, 2048, 4096, 8192)
ONE_SHOT_MAX_N = 4096  # the one-shot path at 8192 holds 256 MiB blocks and adds a minute
# Seconds of interleaved timing per row (at least 3 repetitions, 2 at N=8192): 20 rows of ours +
# 2 torch + the GEMM, and 32 crossover rows at CROSSOVER_BUDGET_S, chosen to keep this section a
# part of `make bench`'s run time, not most of it (the run time is in each RESULTS file).
BUDGET_S = 2.0
CROSSOVER_BUDGET_S = 1.0


def _inputs(n: int):
    rng = np.random.default_rng(0)
    params = init_params(MHAConfig(D_MODEL, H), rng)
    x = rng.standard_normal((1, n, D_MODEL)).astype(np.float32)  # (B, N, d_model)
    return x, params


def one_shot(x, params):
    """The fused layer forced onto the formula, the whole score tensor at once (``attention_path``)."""
    return forced_path("formula", x, params, causal=False)()


def picked_path(x, params, causal: bool) -> str:
    """The attention path ``multi_head_attention`` picks for this input (no weights, no tracer)."""
    return mha.attention_path(check_layer_args(x=x, params=params, n_heads=H, causal=causal, scores=False),
                              keep_weights=False, traced=False)


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
    the work that ours (it skips tiles above the diagonal) and torch's causal kernels need."""
    macs = count_macs(MHAConfig(D_MODEL, H), n)
    return macs["projections"] + (macs["attention"] * (n + 1) // (2 * n) if causal else macs["attention"])


def run_size(n: int, quick: bool, threads: str, causal: bool = False) -> dict:
    """Ours against torch MHA and torch SDPA at length N, with the GEMM rate in the same rotation."""
    x, params = _inputs(n)
    fns = {"ours": lambda: multi_head_attention(x, params, H, causal=causal), **torch_calls(x, params, causal)}
    ref = fns["torch MHA"]().numpy()
    for name in ("ours", "torch SDPA"):
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
    ours = t["ours"]["median"]
    return {
        "N": n, "h": H, "threads": threads, "causal": causal, "times": t,
        "path": picked_path(x, params, causal),
        "vs torch MHA": t["torch MHA"]["median"] / ours,
        "vs torch SDPA": t["torch SDPA"]["median"] / ours,
        "gemm_gflops": gemm_gflops,
        "gemm_fraction": {k: 2 * macs / v["median"] / 1e9 / gemm_gflops for k, v in t.items() if k != "gemm"},
    }


def forced_path(path: str, x, params, causal: bool):
    """The layer made to run one attention path, as a zero-argument callable (``attention_path``):
    "formula" (``FORMULA_MAX_SCORE_BYTES`` raised past any size; the causal switch is a fraction of
    it), "tiled" (lowered to 0), "blocked" (lowered to 0, with the weights asked for)."""
    limit = 2**62 if path == "formula" else 0

    def call():
        saved = mha.FORMULA_MAX_SCORE_BYTES
        mha.FORMULA_MAX_SCORE_BYTES = limit
        try:
            return multi_head_attention(x, params, H, causal=causal, return_weights=path == "blocked")
        finally:
            mha.FORMULA_MAX_SCORE_BYTES = saved

    return call


def crossover(quick: bool, threads: str, log=print) -> list[dict]:
    """The layer on each of its three attention paths at the lengths around the switch, interleaved:
    whether ``attention_path`` picks the fastest, measured."""
    rows = []
    for n in (100, 512) if quick else CROSSOVER_LENGTHS:
        x, params = _inputs(n)
        for causal in (False, True):
            chosen = picked_path(x, params, causal)
            fns = {p: forced_path(p, x, params, causal) for p in ("formula", "blocked", "tiled")}
            t = interleaved(fns, budget_s=0.5 if quick else CROSSOVER_BUDGET_S, min_reps=3, max_reps=40, seed=n)
            med = {p: v["median"] for p, v in t.items()}
            fastest = min(med, key=med.get)
            rows.append({"N": n, "causal": causal, "threads": threads, "chosen": chosen, "fastest": fastest,
                         "times": t, "chosen_over_fastest": med[chosen] / med[fastest]})
            log(f"  {threads} threads, N={n}{' causal' if causal else ''}: "
                + ", ".join(f"{p} {v * 1e3:.2f} ms" for p, v in med.items()) + f"; rule picks {chosen}")
    return rows


def run(quick: bool, log=print) -> dict:
    """Timings against torch at default threads and one thread, causal and not; the three paths
    around the switch; peak memory."""
    import torch

    out: dict = {"block_q": BLOCK_Q, "block_k": BLOCK_K, "formula_max_score_bytes": mha.FORMULA_MAX_SCORE_BYTES,
                 "causal_switch_fraction": mha.CAUSAL_SWITCH_FRACTION,
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
                    log(f"  {label} threads, N={n}{' causal' if causal else ''}: ours ({row['path']}) "
                        f"{row['times']['ours']['median'] * 1e3:,.1f} ms, torch MHA {row['vs torch MHA']:.2f}x, "
                        f"torch SDPA {row['vs torch SDPA']:.2f}x (>1 = ours faster), "
                        f"{row['gemm_fraction']['ours']:.0%} of the GEMM rate", flush=True)
            out["crossover"] += crossover(quick, label, log)
        finally:
            set_numpy_threads(default)
            torch.set_num_threads(default)
    for n in (2048,) if quick else MEMORY_LENGTHS:
        for impl in ("ours", "ours one-shot", "torch MHA"):
            if impl == "ours one-shot" and n > ONE_SHOT_MAX_N:
                continue
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
    return lc.multi_head_attention(x, params, lc.H) if impl == "ours" else lc.one_shot(x, params)
def status_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))
call(*lc._inputs(256))  # warm at a small N: imports, thread pools and BLAS buffers are not the call's
x, params = lc._inputs(n)
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
