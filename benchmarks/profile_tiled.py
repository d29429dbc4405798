"""Where the tiled path's time goes, stage by stage: ``make profile-tiled``.

    python -m benchmarks.profile_tiled            # N = 512, 2048, 4096, causal and not, default and 1 thread
    python -m benchmarks.profile_tiled --quick    # N = 512 only (a smoke run)

For each length, causal or not, at numpy's default BLAS threads and at one thread:

- the tile loop of ``flash._rows`` is run by ``profiled_flash`` (below), the same steps in the same
  order with a clock around each stage, in the same worker threads as ``flash._flash``. A stage's
  time is summed over the workers (thread-seconds), so with two workers the stages add up to
  about twice the wall time;
- each matmul stage's achieved rate (its FLOP over its time) is set against the rate the same
  matmul shape reaches alone, in a loop, with one BLAS thread (what every worker uses), in numpy
  and in ``torch.matmul``; and the whole attention against torch's kernel alone
  (``F.scaled_dot_product_attention`` on the same heads, at the same threads);
- every measurement starts after ``timing.PAUSE_S``, so no library's idle threads still spin;
- the per-call overheads are timed on their own: ``blas_threads()`` (threadpoolctl reading the
  BLAS), the one-thread BLAS limit (``flash._blas_controller().limit``), starting and joining the worker pool, and the Python
  and numpy call overhead of the tile loop (the same loop on 1 x 1 tiles, so no arithmetic);
- "passes" counts how often a stage sweeps the whole (h, block_q, block_k) tile of scores.

The markdown goes between the ``PROFILE_BEGIN`` / ``PROFILE_END`` markers of
benchmarks/RESULTS_long_context.md (``report.py`` keeps that block when it rewrites the file), and
the raw numbers into benchmarks/results_profile_tiled.json.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from mha_core import multi_head_attention
from mha_core.core import flash
from mha_core.core.heads import merge_heads, split_heads

from .core import D_MODEL
from .long_context import H, _inputs, picked_path
from .suites import BENCH_DIR
from .timing import PAUSE_S, interleaved, numpy_threads, set_numpy_threads, stats

LENGTHS = (512, 2048, 4096)
QUICK_LENGTHS = (512,)
REPS = 3  # medians of 3: each call is timed whole, so 3 keep a full run near a minute
PROFILE_BEGIN = "<!-- profile_tiled: begin (written by python -m benchmarks.profile_tiled) -->"
PROFILE_END = "<!-- profile_tiled: end -->"
RESULTS_MD = BENCH_DIR / "RESULTS_long_context.md"
RESULTS_JSON = BENCH_DIR / "results_profile_tiled.json"

# The stages of one tile, in the order flash._rows runs them, with the passes each makes over the
# whole (h, rows, cols) tile of scores (reads and writes of the tile itself, not of m, l or o).
# A tile is first tried against the running max as it stands ("stale max"); a row's first tile,
# and a tile where some score outgrew the max (redone), go the full way.
TILE_STAGES = {
    "Q K^T (matmul)": 1,  # writes the tile
    "causal mask": 1,  # diagonal tiles only: builds the tile's triangle, writes -inf above it
    "stale max: subtract": 1,  # reads and writes the tile
    "stale max: exp": 1,  # reads and writes the tile
    "stale max: row sums, check": 1,  # reads the tile
    "stale max: P V (matmul)": 1,  # reads the tile
    "stale max: add to l, o": 0,  # (h, rows, 1) and (h, rows, d_v)
    "redo: Q K^T, mask again": 1,  # a tried tile that failed the check
    "full: row max": 1,  # reads the tile
    "full: shift (max, where)": 0,  # (h, rows, 1)
    "full: subtract": 1,  # reads and writes the tile
    "full: exp": 1,  # reads and writes the tile
    "full: alpha = exp(m - shift)": 0,  # (h, rows, 1)
    "full: row sums": 1,  # reads the tile
    "full: rescale o": 0,  # (h, rows, d_v)
    "full: P V (matmul)": 1,  # reads the tile
    "full: add to o": 0,  # (h, rows, d_v)
}
BLOCK_STAGES = ("scale Q block, init m, l, o", "normalise o / l")
MATMULS = {  # a matmul stage -> the counter of its FLOP
    "Q K^T (matmul)": "qk_flop",
    "stale max: P V (matmul)": "pv_stale_flop",
    "full: P V (matmul)": "pv_full_flop",
}


def _clock(clocks: dict, name: str, t0: float) -> float:
    """Add the time since ``t0`` to ``clocks[name]``; return now."""
    now = time.perf_counter()
    clocks[name] += now - t0
    return now


def profiled_rows(q, k, v, scale, causal, r0, r1, block_k, s_buf, clocks, counts) -> np.ndarray:
    """``flash._rows`` (no mask argument) with a clock around every stage; the same result."""
    c = time.perf_counter()
    n_q, n_k, rows = q.shape[-2], k.shape[-2], r1 - r0
    offset = n_k - n_q
    lead = s_buf.shape[:-2]
    q_blk = q[..., r0:r1, :] * q.dtype.type(scale)  # (..., rows, d_k)
    m = np.full((*lead, rows, 1), -np.inf, dtype=q.dtype)  # (..., rows, 1)
    row_sum = np.zeros((*lead, rows, 1), dtype=q.dtype)  # (..., rows, 1)
    o = np.zeros((*lead, rows, v.shape[-1]), dtype=q.dtype)  # (..., rows, d_v)
    every_row_has_max = False
    k_end = min(n_k, r1 + offset) if causal else n_k
    c = _clock(clocks, BLOCK_STAGES[0], c)
    for c0 in range(0, max(k_end, 0), block_k):
        c1 = min(c0 + block_k, n_k)
        counts["tiles"] += 1
        s = s_buf[..., :rows, : c1 - c0]  # (..., rows, cols)
        np.matmul(q_blk, np.swapaxes(k[..., c0:c1, :], -1, -2), out=s)  # (..., rows, d_k) @ (..., d_k, cols)
        counts["qk_flop"] += 2 * s.size * q.shape[-1]
        c = _clock(clocks, "Q K^T (matmul)", c)
        allowed = flash._tile_mask(None, causal, offset, r0, r1, c0, c1)  # (rows, cols) or None
        if allowed is not None:
            counts["masked tiles"] += 1
            np.copyto(s, -np.inf, where=~allowed)
        c = _clock(clocks, "causal mask", c)
        if every_row_has_max:
            with np.errstate(over="ignore", invalid="ignore"):
                s -= m  # (..., rows, cols)
                c = _clock(clocks, "stale max: subtract", c)
                p = np.exp(s, out=s)  # (..., rows, cols)
                c = _clock(clocks, "stale max: exp", c)
                tile_sum = p.sum(axis=-1, keepdims=True)  # (..., rows, 1)
            ok = (tile_sum <= flash.STALE_MAX_LIMIT).all()
            c = _clock(clocks, "stale max: row sums, check", c)
            if ok:
                pv = p @ v[..., c0:c1, :]  # (..., rows, cols) @ (..., cols, d_v)
                counts["pv_stale_flop"] += 2 * p.size * v.shape[-1]
                c = _clock(clocks, "stale max: P V (matmul)", c)
                row_sum += tile_sum
                o += pv
                c = _clock(clocks, "stale max: add to l, o", c)
                continue
            counts["redone tiles"] += 1
            s = flash._tile_scores(q_blk, k, None, causal, offset, r0, r1, c0, c1, s_buf)
            c = _clock(clocks, "redo: Q K^T, mask again", c)
        counts["full tiles"] += 1
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., rows, 1)
        c = _clock(clocks, "full: row max", c)
        shift = np.where(np.isneginf(m_new), 0, m_new)  # (..., rows, 1)
        c = _clock(clocks, "full: shift (max, where)", c)
        s -= shift  # (..., rows, cols)
        c = _clock(clocks, "full: subtract", c)
        p = np.exp(s, out=s)  # (..., rows, cols)
        c = _clock(clocks, "full: exp", c)
        alpha = np.exp(m - shift)  # (..., rows, 1)
        c = _clock(clocks, "full: alpha = exp(m - shift)", c)
        row_sum *= alpha
        row_sum += p.sum(axis=-1, keepdims=True)  # (..., rows, 1)
        c = _clock(clocks, "full: row sums", c)
        o *= alpha  # (..., rows, d_v)
        c = _clock(clocks, "full: rescale o", c)
        pv = p @ v[..., c0:c1, :]  # (..., rows, cols) @ (..., cols, d_v) -> (..., rows, d_v)
        counts["pv_full_flop"] += 2 * p.size * v.shape[-1]
        c = _clock(clocks, "full: P V (matmul)", c)
        o += pv
        m = m_new
        every_row_has_max = not np.isneginf(m).any()
        c = _clock(clocks, "full: add to o", c)
    out = o * np.divide(1, row_sum, out=np.zeros_like(row_sum), where=row_sum > 0)  # (..., rows, d_v)
    _clock(clocks, BLOCK_STAGES[1], c)
    return out


def profiled_flash(q, k, v, scale, *, causal, threads, clocks, counts,
                   block_q=flash.BLOCK_Q, block_k=flash.BLOCK_K) -> np.ndarray:
    """``flash._flash`` (no mask) with every stage timed into ``clocks`` (thread-seconds, summed
    over the workers) and the call's overheads timed as stages of their own."""
    c = time.perf_counter()
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n_q, d_v = q.shape[-2], v.shape[-1]
    out = np.empty((*lead, n_q, d_v), dtype=q.dtype)  # (..., N_q, d_v)
    starts = list(range(0, n_q, block_q))
    n_workers = min(flash.blas_threads() if threads is None else threads, len(starts))
    c = _clock(clocks, "blas_threads() + setup", c)
    per_worker = [defaultdict(float) for _ in range(n_workers)]

    def work(i: int) -> None:
        s_buf = np.empty((*lead, min(block_q, n_q), min(block_k, k.shape[-2])), dtype=q.dtype)
        for r0 in starts[i::n_workers]:
            r1 = min(r0 + block_q, n_q)
            out[..., r0:r1, :] = profiled_rows(q, k, v, scale, causal, r0, r1, block_k, s_buf,
                                               per_worker[i], counts)

    limit = flash._blas_controller().limit(limits=1, user_api="blas")  # as flash._flash does
    c = _clock(clocks, "threadpool_limits (enter + exit)", c)
    if n_workers == 1:
        work(0)
        c = time.perf_counter()
    else:
        pool = ThreadPoolExecutor(n_workers)
        c = _clock(clocks, "worker pool (start + join)", c)
        list(pool.map(work, range(n_workers)))
        c = time.perf_counter()
        pool.shutdown()
        c = _clock(clocks, "worker pool (start + join)", c)
    limit.restore_original_limits()
    _clock(clocks, "threadpool_limits (enter + exit)", c)
    for w in per_worker:
        for name, t in w.items():
            clocks[name] += t
    counts["workers"] = n_workers
    return out


def _median_ms(fn, reps: int = REPS) -> float:
    time.sleep(PAUSE_S)  # the last step's idle BLAS or torch threads stop spinning (timing.PAUSE_S)
    fn()  # warm: page faults, lazy BLAS buffers
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return stats(times)["median"] * 1e3


def _rates_alone(a_shape, b_shape, threads: int = 1) -> tuple[float, float]:
    """GFLOP/s of ``np.matmul`` and of ``torch.matmul`` on these float32 shapes alone, in a loop,
    ``threads`` threads each: whether numpy's BLAS is what holds a matmul stage back."""
    import torch

    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    out = np.matmul(a, b)
    at, bt, out_t = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)  # the same memory
    flop = 2 * a.size * b_shape[-1]
    calls = max(1, int(2e8 // flop))  # about 0.2 GFLOP per timing: long enough to be steady
    with threadpool_limits(threads, user_api="blas"):
        ms = _median_ms(lambda: [np.matmul(a, b, out=out) for _ in range(calls)], reps=5)
    with _torch_threads(threads):
        ms_torch = _median_ms(lambda: [torch.matmul(at, bt, out=out_t) for _ in range(calls)], reps=5)
    return calls * flop / ms / 1e6, calls * flop / ms_torch / 1e6


def _torch_sdpa_ms(Qh, Kh, Vh, causal: bool, threads: int) -> float:
    """``F.scaled_dot_product_attention`` on the same heads, ``threads`` threads: torch's attention
    kernel alone, to set beside ``flash._flash`` alone."""
    import torch
    import torch.nn.functional as F

    q, k, v = (torch.from_numpy(np.ascontiguousarray(a)) for a in (Qh, Kh, Vh))
    with _torch_threads(threads), torch.inference_mode():
        return _median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))


@contextlib.contextmanager
def _torch_threads(threads: int):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _loop_overhead_ms(n: int, tiles: int, threads: int) -> float:
    """The tile loop on 1 x 1 tiles (Python and numpy's per-call overhead, no arithmetic to speak
    of), scaled to ``tiles``, the real loop's count. Timed without a mask: a causal 1 x 1 loop
    would skip a different share of its tiles than the real one."""
    rows, cols = -(-n // flash.BLOCK_Q), -(-n // flash.BLOCK_K)  # query tiles, key tiles
    q, kv = np.ones((H, rows, 1), np.float32), np.ones((H, cols, 1), np.float32)  # one row per tile
    ms = _median_ms(lambda: flash._flash(q, kv, kv, None, 1.0, causal=False, block_q=1, block_k=1, threads=threads))
    return ms * tiles / (rows * cols)


def exp_alone() -> dict:
    """One tile's exponentials, (h, block_q, block_k) float32 scores already shifted to <= 0, one
    thread each, interleaved: numpy's exp (as the tiled path runs it, in place), numpy's exp2 (for
    folding log2(e) into Q), and torch's exp (the kernel torch's attention uses), in ms."""
    import torch

    rng = np.random.default_rng(0)
    s = rng.standard_normal((H, flash.BLOCK_Q, flash.BLOCK_K)).astype(np.float32) * 3  # (h, rows, cols)
    s -= s.max(axis=-1, keepdims=True)  # every entry <= 0, as after the subtract
    buf = np.empty_like(s)
    st, bt = torch.from_numpy(s), torch.from_numpy(buf)
    with _torch_threads(1), threadpool_limits(1, user_api="blas"):
        t = interleaved({"np.exp (in place)": lambda: np.exp(np.copyto(buf, s) or buf, out=buf),
                         "np.exp2 (in place)": lambda: np.exp2(np.copyto(buf, s) or buf, out=buf),
                         "torch.exp (in place)": lambda: torch.exp(bt.copy_(st), out=bt),
                         "copy alone": lambda: np.copyto(buf, s)}, budget_s=2.0, min_reps=20, max_reps=200)
    copy = t["copy alone"]["median"]
    return {name: (v["median"] - copy) * 1e3 for name, v in t.items() if name != "copy alone"}


def profile_one(n: int, causal: bool, threads_label: str, threads: int) -> dict:
    """Every stage of one (N, causal, threads) setting, with matmul rates and overheads."""
    x, p = _inputs(n)
    d_k = D_MODEL // H
    scale = 1 / np.sqrt(d_k)
    x2 = x.reshape(n, D_MODEL)  # (N, d_model)
    Qh, Kh, Vh = (split_heads((x2 @ p[w]).reshape(1, n, D_MODEL), H) for w in ("W_Q", "W_K", "W_V"))  # (B, h, N, d_k)
    whole = _median_ms(lambda: multi_head_attention(x, p, H, causal=causal))
    path = picked_path(x, p, causal)
    attention = _median_ms(lambda: flash._flash(Qh, Kh, Vh, None, scale, causal=causal))
    projections = _median_ms(lambda: [x2 @ p[w] for w in ("W_Q", "W_K", "W_V")])  # 3 x (N, d_model) @ (d_model, d_model)
    heads = np.ascontiguousarray(Qh)  # stands in for the attention output (B, h, N, d_v)
    w_o = _median_ms(lambda: merge_heads(heads).reshape(n, D_MODEL) @ p["W_O"])  # (N, h*d_v) @ (h*d_v, d_model)
    runs = []
    time.sleep(PAUSE_S)
    for _ in range(REPS):
        clocks, counts = defaultdict(float), defaultdict(int)
        t0 = time.perf_counter()
        got = profiled_flash(Qh, Kh, Vh, scale, causal=causal, threads=None, clocks=clocks, counts=counts)
        clocks["(wall time of the profiled call)"] = time.perf_counter() - t0
        runs.append((clocks, counts))
    want = flash._flash(Qh, Kh, Vh, None, scale, causal=causal)
    if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
        raise AssertionError("profiled_flash no longer matches flash._flash: update it to the new loop")
    names = list(runs[0][0])
    stage_ms = {name: float(np.median([r[0][name] for r in runs])) * 1e3 for name in names}
    counts = dict(runs[0][1])
    rows, cols = min(flash.BLOCK_Q, n), min(flash.BLOCK_K, n)
    qk_shapes, pv_shapes = ((1, H, rows, d_k), (1, H, d_k, cols)), ((1, H, rows, cols), (1, H, cols, d_k))
    qk, pv = _rates_alone(*qk_shapes), _rates_alone(*pv_shapes)  # (numpy, torch), each shape once
    rates = {"Q K^T (matmul)": qk, "stale max: P V (matmul)": pv, "full: P V (matmul)": pv,
             "projection (N, d_model) @ (d_model, d_model)": _rates_alone((n, D_MODEL), (D_MODEL, D_MODEL), threads)}
    alone = {name: r[0] for name, r in rates.items()}
    torch_alone = {name: r[1] for name, r in rates.items()}
    achieved = {name: counts[flop] / stage_ms[name] / 1e6 for name, flop in MATMULS.items() if counts.get(flop)}
    achieved["projection (N, d_model) @ (d_model, d_model)"] = 3 * 2 * n * D_MODEL**2 / projections / 1e6
    overheads = {
        "blas_threads() + setup": stage_ms.pop("blas_threads() + setup"),
        "threadpool_limits (enter + exit)": stage_ms.pop("threadpool_limits (enter + exit)"),
        "worker pool (start + join)": stage_ms.pop("worker pool (start + join)", 0.0),
        "tile loop on 1 x 1 tiles (Python + numpy call overhead)": _loop_overhead_ms(n, counts["tiles"], threads),
    }
    profiled_wall = stage_ms.pop("(wall time of the profiled call)")
    return {
        "N": n, "causal": causal, "threads": threads_label, "workers": counts["workers"],
        "tiles": counts["tiles"], "masked_tiles": counts.get("masked tiles", 0),
        "full_tiles": counts.get("full tiles", 0), "redone_tiles": counts.get("redone tiles", 0),
        "torch_sdpa_ms": _torch_sdpa_ms(Qh, Kh, Vh, causal, threads),
        "whole_layer_ms": whole, "layer_path": path, "attention_ms": attention, "projections_ms": projections, "w_o_ms": w_o,
        "profiled_wall_ms": profiled_wall, "stages_ms": stage_ms, "overheads_ms": overheads,
        "gflops_achieved": achieved, "gflops_alone": alone, "gflops_torch_alone": torch_alone,
    }


def run(quick: bool = False, log=print) -> dict:
    default = numpy_threads()
    out = {"started_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "loadavg_start": os.getloadavg()[0], "block_q": flash.BLOCK_Q, "block_k": flash.BLOCK_K,
           "default_threads": default, "rows": []}
    t0 = time.perf_counter()
    out["exp_alone_ms"] = exp_alone()
    log("  one tile's exp, one thread: " + ", ".join(f"{k} {v:.2f} ms" for k, v in out["exp_alone_ms"].items()))
    try:
        for label, threads in (("default", default), ("1", 1)):
            if not set_numpy_threads(threads) and threads == 1:
                log("  cannot set numpy's BLAS threads: one-thread rows skipped")
                continue
            for n in QUICK_LENGTHS if quick else LENGTHS:
                for causal in (False, True):
                    r = profile_one(n, causal, label, threads)
                    out["rows"].append(r)
                    log(f"  {label} threads, N={n}, causal={causal}: layer {r['whole_layer_ms']:.1f} ms, "
                        f"attention {r['attention_ms']:.1f} ms, exp {r['stages_ms'].get('stale max: exp', 0):.1f} ms, "
                        f"torch SDPA {r['torch_sdpa_ms']:.1f} ms, full / redone tiles {r['full_tiles']} / {r['redone_tiles']}", flush=True)
    finally:
        set_numpy_threads(default)
    out["loadavg_end"] = os.getloadavg()[0]
    out["wall_s"] = time.perf_counter() - t0
    return out


def _cfg(r: dict) -> str:
    return f"N={r['N']:,}{' causal' if r['causal'] else ''}"


def markdown(res: dict) -> str:
    """The breakdown section of RESULTS_long_context.md, from ``run``'s results."""
    lines = [
        "## Where the tiled path's time goes",
        "",
        f"Generated by `python -m benchmarks.profile_tiled` on {res['started_utc']} in {res['wall_s']:.0f} s "
        f"(load average {res['loadavg_start']:.1f} at the start, {res['loadavg_end']:.1f} at the end; "
        "figures worth quoting need a load average below 1). h=8, d_model=512, float32, B=1, "
        f"tiles of {res['block_q']} query rows x {res['block_k']} keys. Each stage's time is summed over the "
        "worker threads (thread-milliseconds): with two workers the stages add to about twice the wall "
        "time. Medians of 3 calls.",
        "",
    ]
    for label in dict.fromkeys(r["threads"] for r in res["rows"]):
        rs = [r for r in res["rows"] if r["threads"] == label]
        threads = res["default_threads"] if label == "default" else 1
        lines += [f"### {label} threads ({threads} BLAS thread{'s' if threads > 1 else ''}; "
                  f"{rs[0]['workers']} worker{'s' if rs[0]['workers'] > 1 else ''} at N={rs[0]['N']:,})", "",
                  "| stage | passes over the tile | " + " | ".join(_cfg(r) for r in rs) + " |",
                  "|---|---|" + "---|" * len(rs)]
        lines.append("| tiles (with a causal mask / the full way / redone) | | " + " | ".join(
            f"{r['tiles']} ({r['masked_tiles']} / {r['full_tiles']} / {r['redone_tiles']})" for r in rs) + " |")
        stage_names = [BLOCK_STAGES[0], *TILE_STAGES, BLOCK_STAGES[1]]
        for name in stage_names:
            passes = TILE_STAGES.get(name, "")
            lines.append(f"| {name} | {passes} | " + " | ".join(
                f"{r['stages_ms'].get(name, 0):,.1f} ms ({r['stages_ms'].get(name, 0) / sum(r['stages_ms'].values()):.0%})"
                for r in rs) + " |")
        lines.append("| **sum of the stages** (thread-ms) | " + f"{sum(TILE_STAGES.values())} | " + " | ".join(
            f"**{sum(r['stages_ms'].values()):,.1f} ms**" for r in rs) + " |")
        lines.append("| wall time of the profiled call | | "
                     + " | ".join(f"{r['profiled_wall_ms']:,.1f} ms" for r in rs) + " |")
        lines.append("| attention alone (`flash._flash`, not profiled) | | "
                     + " | ".join(f"{r['attention_ms']:,.1f} ms" for r in rs) + " |")
        lines.append("| torch's attention alone (`F.scaled_dot_product_attention`, same heads and threads) | | "
                     + " | ".join(f"{r['torch_sdpa_ms']:,.1f} ms" for r in rs) + " |")
        for name in next(iter(rs))["overheads_ms"]:
            lines.append(f"| overhead: {name} | | " + " | ".join(f"{r['overheads_ms'][name]:,.2f} ms" for r in rs) + " |")
        lines.append("| Q, K, V projections (3 matmuls) | | " + " | ".join(f"{r['projections_ms']:,.1f} ms" for r in rs) + " |")
        lines.append("| merge heads + W_O | | " + " | ".join(f"{r['w_o_ms']:,.1f} ms" for r in rs) + " |")
        lines.append("| **whole layer** (`multi_head_attention`, on the path it picks) | | "
                     + " | ".join(f"**{r['whole_layer_ms']:,.1f} ms** ({r['layer_path']})" for r in rs) + " |")
        lines += ["", "Achieved rate of each matmul against the same shape alone (GFLOP/s: achieved, of numpy's "
                  "rate alone (share), torch's rate alone; the tile matmuls alone with one thread, as each worker "
                  "runs them; the projections at this setting's threads):", "",
                  "| matmul | " + " | ".join(_cfg(r) for r in rs) + " |", "|---|" + "---|" * len(rs)]
        for name in rs[0]["gflops_alone"]:
            lines.append(f"| {name} | " + " | ".join(
                (f"{r['gflops_achieved'][name]:.0f} of {r['gflops_alone'][name]:.0f} "
                 f"({r['gflops_achieved'][name] / r['gflops_alone'][name]:.0%}), torch "
                 f"{r['gflops_torch_alone'][name]:.0f}") if name in r["gflops_achieved"] else "not run"
                for r in rs) + " |")
        lines.append("")
    lines += [f"One tile's exponentials alone, ({H}, {res['block_q']}, {res['block_k']}) float32 scores <= 0, one "
              "thread each, interleaved (the time of copying the tile in first subtracted):", "",
              "| | " + " | ".join(res["exp_alone_ms"]) + " |", "|---|" + "---|" * len(res["exp_alone_ms"]),
              "| ms per tile | " + " | ".join(f"{v:.3f}" for v in res["exp_alone_ms"].values()) + " |", ""]
    return "\n".join(lines)


def write_section(section: str, path=RESULTS_MD) -> None:
    """Put ``section`` between the profile markers of ``path`` (appended if the markers are missing)."""
    text = path.read_text() if path.exists() else ""
    block = f"{PROFILE_BEGIN}\n{section}\n{PROFILE_END}"
    if PROFILE_BEGIN in text and PROFILE_END in text:
        head, rest = text.split(PROFILE_BEGIN, 1)
        text = head + block + rest.split(PROFILE_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N=512 only")
    parser.add_argument("--no-write", action="store_true", help="print the markdown, do not write the files")
    args = parser.parse_args(argv)
    res = run(args.quick)
    section = markdown(res)
    print(section)
    if not args.no_write:
        RESULTS_JSON.write_text(json.dumps(res, indent=1) + "\n")
        write_section(section)
        print(f"wrote {RESULTS_JSON} and the profile section of {RESULTS_MD} ({res['wall_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
