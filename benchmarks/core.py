"""The core against PyTorch, against the per-head loop and against the machine's GEMM rate.

For each size, five things are timed in one interleaved run (see ``timing.interleaved``):

    numpy            multi_head_attention(x, params, h)                      the fused forward (the formula)
    numpy+weights    the same with return_weights=True
    per_head         multi_head_attention_per_head(x, params, h)             the readable loop
    torch            nn.MultiheadAttention, need_weights=False
    torch+weights    nn.MultiheadAttention, need_weights=True, average_attn_weights=False
                     (per-head weights, like numpy+weights)
    gemm             a square (GEMM_N x GEMM_N) @ (GEMM_N x GEMM_N) matmul in numpy, same dtype

torch gets exactly the layer's weights (``in_proj_weight`` is ``[W_Q | W_K | W_V]^T``,
``out_proj.weight`` is ``W_O^T``, no biases), and the outputs are compared before timing.
The GEMM in the same rotation gives the machine's attainable rate *at that moment*, so the
roofline fraction ``(2 * count_macs / time) / gemm_rate`` is not fooled by load drifting
between sizes.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from mha_core import (
    MHAConfig,
    count_macs,
    init_params,
    merge_heads,
    multi_head_attention,
    multi_head_attention_per_head,
    scaled_dot_product_attention,
    softmax,
    split_heads,
    tiled_attention,
)

from .timing import interleaved, numpy_threads, set_numpy_threads

D_MODEL = 512
# The grid of the issue: one head, the worked example's 8 heads, and 64 heads of d_k = 8.
HEADS = (1, 8, 64)
LENGTHS = (100, 512, 2048)
BATCHES = (1, 8)
DTYPES = ("float32", "float64")
# Square GEMM used as the machine's reference rate: big enough to reach BLAS's steady state
# (about 2 GFLOP, tens of ms), small enough to sit in every rotation without slowing the run.
GEMM_N = 1024
# GEMMs per repetition: one GEMM is short next to a large forward, so a burst of load can hit
# it alone; three in a row average over more of the repetition.
GEMM_CALLS = 3
# Sizes whose score tensor (B, h, N, N) would exceed this are not run: they would take
# minutes (and numpy, per-head and torch+weights each hold one such tensor) for no new insight.
MAX_SCORE_BYTES = 2**30
# Largest |numpy - torch| accepted before timing; float32 sums of 512 products drift ~1e-6.
TOLERANCE = {"float32": 1e-4, "float64": 1e-10}


# The grid stops starting new sizes after this long (the rest are reported as skipped), so
# `make bench` stays near ten minutes even when other work slows the machine down.
GRID_TIME_LIMIT_S = 3 * 60


def grid(quick: bool) -> list[tuple[int, int, int, str]]:
    """``(h, N, B, dtype)`` to run, most important first (B=1 and h=8 lead, both dtypes).

    ``quick`` keeps B=1, float32 and N <= 512.
    """
    if quick:
        return [(h, n, 1, "float32") for h, n in itertools.product((8, 1, 64), (100, 512))]
    return [
        (h, n, b, dt)
        for b, h, dt, n in itertools.product(BATCHES, (8, 1, 64), DTYPES, LENGTHS)
    ]


def torch_layer(params: dict[str, np.ndarray], d_model: int, h: int, dtype: str):
    """``torch.nn.MultiheadAttention`` holding exactly ``params`` (no biases), in eval mode."""
    import torch

    layer = torch.nn.MultiheadAttention(
        d_model, h, bias=False, batch_first=True, dtype=getattr(torch, dtype)
    )
    with torch.no_grad():
        w_in = np.concatenate([params["W_Q"].T, params["W_K"].T, params["W_V"].T])  # (3*d_model, d_model)
        layer.in_proj_weight.copy_(torch.from_numpy(w_in))
        layer.out_proj.weight.copy_(torch.from_numpy(np.ascontiguousarray(params["W_O"].T)))
    return layer.eval()


def run_size(h: int, n: int, b: int, dtype: str, *, budget_s: float, min_reps: int, max_reps: int) -> dict:
    """Time one size; return its timings, ratios, GFLOP/s and roofline fractions."""
    import torch

    score_bytes = b * h * n * n * np.dtype(dtype).itemsize
    row: dict[str, object] = {"h": h, "N": n, "B": b, "dtype": dtype, "d_k": D_MODEL // h,
                              "score_bytes": score_bytes}
    if score_bytes > MAX_SCORE_BYTES:
        row["skipped"] = f"score tensor {score_bytes / 2**30:.1f} GiB > {MAX_SCORE_BYTES / 2**30:.0f} GiB cap"
        return row

    config = MHAConfig(D_MODEL, h)
    rng = np.random.default_rng(0)
    params = init_params(config, rng, dtype=np.dtype(dtype))
    x = rng.standard_normal((b, n, D_MODEL)).astype(dtype)  # (B, N, d_model)
    layer = torch_layer(params, D_MODEL, h, dtype)
    xt = torch.from_numpy(x)
    a = rng.standard_normal((GEMM_N, GEMM_N)).astype(dtype)
    c = rng.standard_normal((GEMM_N, GEMM_N)).astype(dtype)

    with torch.inference_mode():
        ref = layer(xt, xt, xt, need_weights=False)[0].numpy()
    ours = multi_head_attention(x, params, h)
    diff = float(np.max(np.abs(ours - ref)))
    if not diff <= TOLERANCE[dtype]:
        raise AssertionError(f"numpy and torch disagree at h={h} N={n} B={b} {dtype}: max |diff| = {diff:.2e}")
    row["max_abs_diff_vs_torch"] = diff

    def torch_call(need_weights: bool):
        def call():
            with torch.inference_mode():
                return layer(xt, xt, xt, need_weights=need_weights, average_attn_weights=False)
        return call

    fns = {
        "numpy": lambda: multi_head_attention(x, params, h),
        "numpy+weights": lambda: multi_head_attention(x, params, h, return_weights=True),
        "per_head": lambda: multi_head_attention_per_head(x, params, h),
        "torch": torch_call(False),
        "torch+weights": torch_call(True),
        "gemm": lambda: [a @ c for _ in range(GEMM_CALLS)],  # (GEMM_N, GEMM_N) @ (GEMM_N, GEMM_N)
    }
    t = interleaved(fns, budget_s=budget_s, min_reps=min_reps, max_reps=max_reps, seed=h * n * b)
    macs = count_macs(config, n, batch=b)
    gemm_gflops = GEMM_CALLS * 2 * GEMM_N**3 / t["gemm"]["median"] / 1e9
    row["times"] = t
    row["macs_total"] = macs["total"]
    row["projection_share"] = macs["projections"] / macs["total"]
    row["gemm_gflops"] = gemm_gflops
    row["gflops"] = {k: 2 * macs["total"] / v["median"] / 1e9 for k, v in t.items() if k != "gemm"}
    row["gemm_fraction"] = {k: v / gemm_gflops for k, v in row["gflops"].items()}
    # speed relative to torch: > 1 means numpy is faster (torch time / numpy time)
    row["speedup_vs_torch"] = {
        "numpy": t["torch"]["median"] / t["numpy"]["median"],
        "numpy+weights": t["torch+weights"]["median"] / t["numpy+weights"]["median"],
        "per_head": t["torch"]["median"] / t["per_head"]["median"],
    }
    return row


def run(quick: bool, log=print) -> list[dict]:
    """Run the whole grid (or the quick one) and return one row per size."""
    import torch

    torch.set_num_threads(numpy_threads())
    # 1.5 s per size over 36 sizes, leaving most of `make bench`'s run time to the long-context
    # section (N up to 8192, causal and not, two thread settings)
    budget, min_reps, max_reps = (1.0, 3, 15) if quick else (1.5, 3, 20)
    # One untimed size first: thread pools, BLAS buffers and torch's kernels start up here.
    run_size(8, 100, 1, "float32", budget_s=0.5, min_reps=2, max_reps=10)
    rows = []
    start = time.perf_counter()
    for h, n, b, dtype in grid(quick):
        if time.perf_counter() - start > GRID_TIME_LIMIT_S:
            row = {"h": h, "N": n, "B": b, "dtype": dtype, "d_k": D_MODEL // h,
                   "skipped": f"time limit of {GRID_TIME_LIMIT_S // 60} min for the grid reached (busy machine)"}
        else:
            row = run_size(h, n, b, dtype, budget_s=budget, min_reps=min_reps, max_reps=max_reps)
        rows.append(row)
        if "skipped" in row:
            log(f"  h={h:<2} N={n:<4} B={b} {dtype}: skipped ({row['skipped']})")
        else:
            s = row["speedup_vs_torch"]
            log(
                f"  h={h:<2} N={n:<4} B={b} {dtype}: numpy {row['times']['numpy']['median'] * 1e3:8.2f} ms, "
                f"torch {row['times']['torch']['median'] * 1e3:8.2f} ms, speed vs torch {s['numpy']:.2f}x "
                f"(with weights {s['numpy+weights']:.2f}x, per-head {s['per_head']:.2f}x), "
                f"{row['gemm_fraction']['numpy']:.0%} of GEMM rate"
            )
    order = {dt: i for i, dt in enumerate(DTYPES)}
    return sorted(rows, key=lambda r: (order[r["dtype"]], r["B"], r["h"], r["N"]))


def single_thread(quick: bool, log=print) -> list[dict]:
    """The headline sizes again with numpy's BLAS and torch both on ONE thread.

    numpy's element-wise functions (the softmax) always run on one core while torch's use all
    of them, and a 2-thread BLAS suffers most when other processes take a core. One thread
    each removes both effects: this is the like-for-like comparison of the code itself.
    """
    import torch

    before_np, before_torch = numpy_threads(), torch.get_num_threads()
    if not set_numpy_threads(1):
        log("  cannot set numpy's BLAS threads: skipped")
        return []
    torch.set_num_threads(1)
    try:
        rows = []
        for n in (100, 512) if quick else (100, 512, 2048):
            row = run_size(8, n, 1, "float32", budget_s=1.0 if quick else 3.0, min_reps=3, max_reps=30)
            row["threads"] = 1
            rows.append(row)
            log(f"  1 thread, h=8 N={n:<4} B=1 float32: speed vs torch {row['speedup_vs_torch']['numpy']:.2f}x, "
                f"{row['gemm_fraction']['numpy']:.0%} of the 1-thread GEMM rate ({row['gemm_gflops']:.0f} GFLOP/s)")
        return rows
    finally:
        set_numpy_threads(before_np)
        torch.set_num_threads(before_torch)


def breakdown(quick: bool, log=print) -> list[dict]:
    """Where the forward's time goes at h=8, B=1, float32: each step timed on its own.

    The steps are those of ``multi_head_attention`` (the formula) run by hand, each over the whole
    (h, N, N) score tensor, and beside them the tiled attention (``tiled_attention``) on the same
    heads, the step that ``tiled=True`` runs instead of the formula's three.
    """
    h, out = 8, []
    for n in (512,) if quick else (512, 2048):
        steps = _breakdown_steps(n, h)
        t = interleaved(steps, budget_s=1.0 if quick else 3.0, min_reps=3, max_reps=30)
        med = {k: v["median"] for k, v in t.items()}
        full = med["full forward (formula)"]
        for name, sec in med.items():
            out.append({"N": n, "h": h, "step": name, "ms": sec * 1e3, "share": sec / full})
        log(f"  N={n}: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in med.items()))
    return out


def _breakdown_steps(n: int, h: int) -> dict:
    """The forward's steps at size N=n as separate callables (see ``breakdown``)."""
    config = MHAConfig(D_MODEL, h)
    rng = np.random.default_rng(0)
    p = init_params(config, rng)
    x = rng.standard_normal((1, n, D_MODEL)).astype(np.float32)  # (B, N, d_model)
    x2 = x.reshape(n, D_MODEL)  # (B*N, d_model)
    Qh, Kh, Vh = (split_heads((x2 @ p[w]).reshape(1, n, D_MODEL), h) for w in ("W_Q", "W_K", "W_V"))  # (B, h, N, d_k)
    qs = Qh * np.float32(1.0 / np.sqrt(D_MODEL // h))  # (B, h, N, d_k)
    scores = qs @ np.swapaxes(Kh, -1, -2)  # (B, h, N, N)
    weights = softmax.unchecked(scores)  # (B, h, N, N)
    heads = weights @ Vh  # (B, h, N, d_v)
    return {
        "full forward (formula)": lambda: multi_head_attention(x, p, h),
        "Q, K, V projections": lambda: (x2 @ p["W_Q"], x2 @ p["W_K"], x2 @ p["W_V"]),
        "attention: formula (scaled_dot_product_attention)": lambda: scaled_dot_product_attention.unchecked(Qh, Kh, Vh),
        "formula: Q K^T": lambda: qs @ np.swapaxes(Kh, -1, -2),
        "formula: softmax": lambda: softmax.unchecked(scores),
        "formula: weights V": lambda: weights @ Vh,
        "attention: tiled (tiled_attention)": lambda: tiled_attention.unchecked(Qh, Kh, Vh),
        "merge heads + W_O": lambda: merge_heads.unchecked(heads).reshape(n, D_MODEL) @ p["W_O"],
    }
