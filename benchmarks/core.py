"""The core against PyTorch, against the per-head loop and against the machine's GEMM rate.

For each size, five things are timed in one interleaved run (see ``timing.interleaved``):

    numpy            multi_head_attention(x, params, h)                      the fused forward
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

import numpy as np

from mha_core import (
    MHAConfig,
    count_macs,
    init_params,
    multi_head_attention,
    multi_head_attention_per_head,
)

from .timing import interleaved

D_MODEL = 512
# The grid of the issue: one head, the worked example's 8 heads, and 64 heads of d_k = 8.
HEADS = (1, 8, 64)
LENGTHS = (100, 512, 2048)
BATCHES = (1, 8)
DTYPES = ("float32", "float64")
# Square GEMM used as the machine's reference rate: big enough to reach BLAS's steady state
# (about 2 GFLOP, tens of ms), small enough to sit in every rotation without slowing the run.
GEMM_N = 1024
# Sizes whose score tensor (B, h, N, N) would exceed this are not run: they would take
# minutes (and numpy, per-head and torch+weights each hold one such tensor) for no new insight.
MAX_SCORE_BYTES = 2**30
# Largest |numpy - torch| accepted before timing; float32 sums of 512 products drift ~1e-6.
TOLERANCE = {"float32": 1e-4, "float64": 1e-10}


def grid(quick: bool) -> list[tuple[int, int, int, str]]:
    """``(h, N, B, dtype)`` to run; ``quick`` keeps B=1, float32 and N <= 512."""
    if quick:
        return [(h, n, 1, "float32") for h, n in itertools.product(HEADS, (100, 512))]
    return [
        (h, n, b, dt)
        for dt, b, h, n in itertools.product(DTYPES, BATCHES, HEADS, LENGTHS)
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
        "gemm": lambda: a @ c,  # (GEMM_N, GEMM_N) @ (GEMM_N, GEMM_N)
    }
    t = interleaved(fns, budget_s=budget_s, min_reps=min_reps, max_reps=max_reps, seed=h * n * b)
    macs = count_macs(config, n, batch=b)
    gemm_gflops = 2 * GEMM_N**3 / t["gemm"]["median"] / 1e9
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

    from .timing import numpy_threads

    torch.set_num_threads(numpy_threads())
    budget, min_reps, max_reps = (1.0, 3, 15) if quick else (4.0, 3, 30)
    # One untimed size first: thread pools, BLAS buffers and torch's kernels start up here.
    run_size(8, 100, 1, "float32", budget_s=0.5, min_reps=2, max_reps=10)
    rows = []
    for h, n, b, dtype in grid(quick):
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
    return rows
