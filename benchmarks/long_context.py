"""Long context: the fused layer (tiled online-softmax attention above 4 MiB of scores) against
torch, at N = 512 to 8192, default threads and one thread each; peak memory; where the time goes.

Per N, in one interleaved run (``timing.interleaved``), all on the same weights (h=8,
d_model=512, float32, B=1, self-attention, no mask):

    ours             multi_head_attention(x, params, 8): the path it chooses (tiled above 4 MiB)
    ours one-shot    the same layer forced onto the one-shot path (blocks of query rows, N^2 work
                     buffer); full mode only, up to N=4096
    torch MHA        nn.MultiheadAttention, need_weights=False
    torch SDPA       the same projections with F.scaled_dot_product_attention in between
    gemm             GEMM_CALLS square GEMMs: the machine's rate at that moment

Peak memory is measured for each implementation in a fresh subprocess (Linux), as the peak
resident set during one call above the resident set just before it (``VmHWM`` after resetting
it through ``/proc/self/clear_refs``): the same yardstick for numpy and torch, whose
allocations tracemalloc cannot see.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from contextlib import contextmanager

import numpy as np

from mha_core import MHAConfig, check_layer_args, count_macs, init_params, multi_head_attention
from mha_core.core import mha
from mha_core.core.flash import BLOCK_K, BLOCK_Q, _flash
from mha_core.core.heads import merge_heads, split_heads

from .core import D_MODEL, GEMM_CALLS, GEMM_N, TOLERANCE, torch_layer
from .timing import interleaved, numpy_threads, set_numpy_threads

H = 8
LENGTHS = (512, 2048, 4096, 8192)
QUICK_LENGTHS = (512, 2048)
ONE_SHOT_MAX_N = 4096  # the one-shot path at 8192 holds 256 MiB blocks and adds a minute


def _inputs(n: int):
    rng = np.random.default_rng(0)
    params = init_params(MHAConfig(D_MODEL, H), rng)
    x = rng.standard_normal((1, n, D_MODEL)).astype(np.float32)  # (B, N, d_model)
    return x, params


def one_shot(x, params):
    """The fused layer forced onto the formula, the whole score tensor at once (``attention_path``)."""
    saved = mha.FORMULA_MAX_SCORE_BYTES
    mha.FORMULA_MAX_SCORE_BYTES = 2**62
    try:
        return multi_head_attention(x, params, H)
    finally:
        mha.FORMULA_MAX_SCORE_BYTES = saved


def torch_calls(x, params) -> dict:
    """``torch MHA`` and ``torch SDPA`` on the same weights, as zero-argument callables."""
    import torch
    import torch.nn.functional as F

    layer = torch_layer(params, D_MODEL, H, "float32")
    xt = torch.from_numpy(x)
    w = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in params.items()}
    n, d_k = x.shape[1], D_MODEL // H

    def mha_call():
        with torch.inference_mode():
            return layer(xt, xt, xt, need_weights=False)[0]

    def sdpa_call():
        with torch.inference_mode():
            q, k, v = (  # (B, h, N, d_k)
                (xt @ w[name]).view(1, n, H, d_k).transpose(1, 2) for name in ("W_Q", "W_K", "W_V")
            )
            heads = F.scaled_dot_product_attention(q, k, v)  # (B, h, N, d_k)
            return heads.transpose(1, 2).reshape(1, n, D_MODEL) @ w["W_O"]  # (B, N, d_model)

    return {"torch MHA": mha_call, "torch SDPA": sdpa_call}


def run_size(n: int, quick: bool, threads: str) -> dict:
    x, params = _inputs(n)
    fns = {"ours": lambda: multi_head_attention(x, params, H)}
    if not quick and n <= ONE_SHOT_MAX_N:
        fns["ours one-shot"] = lambda: one_shot(x, params)
    fns.update(torch_calls(x, params))
    ref = fns["torch MHA"]().numpy()
    for name in ("ours", "torch SDPA"):
        got = np.asarray(fns[name]())
        diff = float(np.max(np.abs(got - ref)))
        if not diff <= TOLERANCE["float32"]:
            raise AssertionError(f"{name} disagrees with torch MHA at N={n}: max |diff| = {diff:.2e}")
    rng = np.random.default_rng(1)
    a, c = (rng.standard_normal((GEMM_N, GEMM_N)).astype(np.float32) for _ in range(2))
    fns["gemm"] = lambda: [a @ c for _ in range(GEMM_CALLS)]  # (GEMM_N, GEMM_N) @ (GEMM_N, GEMM_N)
    reps = (2, 3) if quick else ((3, 7) if n <= 4096 else (2, 3))
    t = interleaved(fns, budget_s=2.0 if quick else 8.0, min_reps=reps[0], max_reps=reps[1], seed=n)
    macs = count_macs(MHAConfig(D_MODEL, H), n)["total"]
    gemm_gflops = GEMM_CALLS * 2 * GEMM_N**3 / t["gemm"]["median"] / 1e9
    ours = t["ours"]["median"]
    return {
        "N": n, "h": H, "threads": threads, "times": t,
        "path": mha.attention_path(check_layer_args(x=x, params=params, n_heads=H, scores=False),
                                   keep_weights=False, traced=False),
        "vs torch MHA": t["torch MHA"]["median"] / ours,
        "vs torch SDPA": t["torch SDPA"]["median"] / ours,
        "gemm_gflops": gemm_gflops,
        "gemm_fraction": {k: 2 * macs / v["median"] / 1e9 / gemm_gflops for k, v in t.items() if k != "gemm"},
    }


def run(quick: bool, log=print) -> dict:
    """Timings at default threads and one thread each, peak memory, and a per-stage breakdown."""
    import torch

    out: dict = {"block_q": BLOCK_Q, "block_k": BLOCK_K, "rows": [], "memory": [], "breakdown": []}
    default = numpy_threads()
    for label, n_threads in (("default", default), ("1", 1)):
        if n_threads == 1 and not set_numpy_threads(1):
            log("  cannot set numpy's BLAS threads: one-thread runs skipped")
            continue
        torch.set_num_threads(n_threads)
        try:
            for n in QUICK_LENGTHS if quick else LENGTHS:
                row = run_size(n, quick, label)
                out["rows"].append(row)
                log(f"  {label} threads, N={n}: ours ({row['path']}) {row['times']['ours']['median'] * 1e3:,.0f} ms, "
                    f"torch MHA {row['vs torch MHA']:.2f}x, torch SDPA {row['vs torch SDPA']:.2f}x "
                    f"(>1 = ours faster), {row['gemm_fraction']['ours']:.0%} of the GEMM rate")
        finally:
            set_numpy_threads(default)
            torch.set_num_threads(default)
    for n in (2048,) if quick else LENGTHS:
        for impl in ("ours", "ours one-shot", "torch MHA"):
            if impl == "ours one-shot" and n > ONE_SHOT_MAX_N:
                continue
            peak = peak_rss_growth(impl, n)
            out["memory"].append({"N": n, "impl": impl, "peak_bytes": peak, "score_bytes": H * n * n * 4})
            log(f"  memory N={n} {impl}: {peak / 2**20:,.0f} MiB (scores would be {H * n * n * 4 / 2**20:,.0f} MiB)")
    for n in () if quick else (4096,):
        out["breakdown"] = breakdown(n)
        log(f"  N={n} one thread, stages: " + ", ".join(f"{r['stage']} {r['ms']:.0f} ms" for r in out["breakdown"]))
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


# --- where the time goes ----------------------------------------------------------------------


def breakdown(n: int) -> list[dict]:
    """The tiled forward's stages timed separately, one thread, at length N=n.

    The tile loop of ``flash._rows`` is run by hand over every query block, with a clock around
    each stage; the sum of the stages is close to the whole call (also reported).
    """
    x, p = _inputs(n)
    x2 = x.reshape(n, D_MODEL)  # (B*N, d_model)
    clock = dict.fromkeys(["Q, K, V projections", "Q K^T tiles", "max", "subtract + exp", "row sums",
                           "P V tiles", "rescale + normalise", "merge + W_O"], 0.0)

    @contextmanager
    def stage(name):
        t0 = time.perf_counter()
        yield
        clock[name] += time.perf_counter() - t0

    before = numpy_threads()
    if not set_numpy_threads(1):
        return []
    try:
        t0 = time.perf_counter()
        with stage("Q, K, V projections"):
            Qh, Kh, Vh = (split_heads((x2 @ p[w]).reshape(1, n, D_MODEL), H) for w in ("W_Q", "W_K", "W_V"))  # (B, h, N, d_k)
        q = Qh * np.float32(1 / np.sqrt(D_MODEL // H))  # (B, h, N, d_k)
        heads = np.empty_like(Qh)  # (B, h, N, d_v)
        s = np.empty((1, H, BLOCK_Q, BLOCK_K), np.float32)  # (B, h, block_q, block_k)
        for r0 in range(0, n, BLOCK_Q):
            m = np.full((1, H, BLOCK_Q, 1), -np.inf, np.float32)  # (B, h, rows, 1)
            row_sum = np.zeros((1, H, BLOCK_Q, 1), np.float32)  # (B, h, rows, 1)
            o = np.zeros((1, H, BLOCK_Q, Vh.shape[-1]), np.float32)  # (B, h, rows, d_v)
            for c0 in range(0, n, BLOCK_K):
                with stage("Q K^T tiles"):
                    np.matmul(q[..., r0:r0 + BLOCK_Q, :], np.swapaxes(Kh[..., c0:c0 + BLOCK_K, :], -1, -2), out=s)
                with stage("max"):
                    m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (B, h, rows, 1)
                with stage("subtract + exp"):
                    np.exp(np.subtract(s, m_new, out=s), out=s)  # (B, h, rows, cols)
                with stage("row sums"):
                    tile_sum = s.sum(axis=-1, keepdims=True)  # (B, h, rows, 1)
                with stage("P V tiles"):
                    pv = s @ Vh[..., c0:c0 + BLOCK_K, :]  # (B, h, rows, cols) @ (B, h, cols, d_v)
                with stage("rescale + normalise"):
                    alpha = np.exp(m - m_new)  # (B, h, rows, 1)
                    row_sum = row_sum * alpha + tile_sum
                    o = o * alpha + pv
                m = m_new
            with stage("rescale + normalise"):
                heads[..., r0:r0 + BLOCK_Q, :] = o / row_sum  # (B, h, rows, d_v)
        with stage("merge + W_O"):
            merge_heads(heads).reshape(n, D_MODEL) @ p["W_O"]  # (N, d_model)
        total = time.perf_counter() - t0
        t1 = time.perf_counter()
        multi_head_attention(x, p, H)
        whole = time.perf_counter() - t1
        t1 = time.perf_counter()
        _flash(Qh, Kh, Vh, None, 1 / np.sqrt(D_MODEL // H), causal=False, threads=1)
        attention_only = time.perf_counter() - t1
    finally:
        set_numpy_threads(before)
    rows = [{"N": n, "stage": k, "ms": v * 1e3, "share": v / total} for k, v in clock.items()]
    rows.append({"N": n, "stage": "sum of the stages (timed by hand)", "ms": total * 1e3, "share": 1.0})
    rows.append({"N": n, "stage": "multi_head_attention, one call (1 thread)", "ms": whole * 1e3,
                 "share": whole / total})
    rows.append({"N": n, "stage": "flash attention alone, 1 worker", "ms": attention_only * 1e3,
                 "share": attention_only / total})
    return rows
