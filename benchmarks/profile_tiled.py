"""Where the tiled path's time goes, stage by stage: ``make profile-tiled``.

    python -m benchmarks.profile_tiled            # N = 512, 2048, 4096, causal and not, default and 1 thread
    python -m benchmarks.profile_tiled --quick    # N = 512 only (a smoke run)

For each length, causal or not, at numpy's default BLAS threads and at one thread:

- the loop of ``tiled.query_block`` is run by ``profiled_query_block`` (below): the same steps in
  the same order, with a clock around each stage (Q K^T tile matmul, mask, max, subtract, exp,
  sums, P V), in the same worker threads (``tiled.share``) as ``tiled_attention``. A stage's time
  is summed over the workers (thread-seconds), so with two workers the stages add up to about
  twice the wall time;
- each matmul stage's achieved rate (its FLOP over its time) is set against the rate the same
  matmul shape reaches alone, in a loop, with one BLAS thread (what every worker uses), in numpy
  and in ``torch.matmul``; and the whole attention against torch's kernel alone
  (``F.scaled_dot_product_attention`` on the same heads, at the same threads);
- every measurement starts after ``timing.PAUSE_S``, so no library's idle threads still spin;
- the per-call overheads are timed on their own: ``tiled.blas_threads()`` (threadpoolctl reading
  the BLAS), ``tiled.share`` with no work (the one-thread BLAS limit, starting and joining the
  worker pool), and the Python and numpy call overhead of the tile loop (the same loop on 1 x 1
  tiles, so no arithmetic);
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
import threading
import time
from collections import defaultdict

import numpy as np
from threadpoolctl import threadpool_limits

from mha_core import multi_head_attention, split_heads, tiled_attention
from mha_core.core import tiled

from .core import D_MODEL
from .long_context import H, layer_inputs
from .suites import BENCH_DIR
from .timing import PAUSE_S, interleaved, numpy_threads, set_numpy_threads, stats

LENGTHS = (512, 2048, 4096)
QUICK_LENGTHS = (512,)
REPS = 3  # medians of 3: each call is timed whole, so 3 keep a full run near a minute
PROFILE_BEGIN = "<!-- profile_tiled: begin (written by python -m benchmarks.profile_tiled) -->"
PROFILE_END = "<!-- profile_tiled: end -->"
RESULTS_MD = BENCH_DIR / "RESULTS_long_context.md"
RESULTS_JSON = BENCH_DIR / "results_profile_tiled.json"

# The stages of one tile, in the order tiled.query_block runs them, with the passes each makes over
# the whole (h, rows, cols) tile of scores (reads and writes of the tile itself, not of m, l or o).
TILE_STAGES = {
    "Q K^T (matmul)": 1,  # writes the tile
    "mask (tile_mask, where)": 1,  # masked or diagonal tiles only: reads the tile, writes a new one
    "row max, m_new": 1,  # reads the tile
    "shift, alpha = exp(m - shift)": 0,  # (h, rows, 1)
    "subtract (s - shift)": 1,  # reads the tile, writes a new one
    "exp": 1,  # reads and writes the tile
    "row sums, l": 1,  # reads the tile
    "P V (matmul)": 1,  # reads the tile
    "rescale and add to o": 0,  # (h, rows, d_v)
}
BLOCK_STAGES = ("scale Q block, init m, l, o", "normalise o / l")
MATMULS = {"Q K^T (matmul)": "qk_flop", "P V (matmul)": "pv_flop"}  # a matmul stage -> its FLOP counter
OVERHEADS = ("tiled.blas_threads()", "tiled.share with no work (BLAS limit, worker pool)",
             "tile loop on 1 x 1 tiles (Python + numpy call overhead)")


def _clock(clocks: dict, name: str, t0: float) -> float:
    """Add the time since ``t0`` to ``clocks[name]``; return now."""
    now = time.perf_counter()
    clocks[name] += now - t0
    return now


def profiled_query_block(q, k, v, mask, causal, r0, block_q, block_k, clocks, counts):  # -> (..., rows, d_v)
    """``tiled.query_block`` with a clock around every stage; the same result."""
    c = time.perf_counter()
    n_q, n_k = q.shape[-2], k.shape[-2]
    q_blk = q[..., r0:r0 + block_q, :] / np.sqrt(q.shape[-1])  # (..., rows, d_k), scaled once
    m = np.full((*q_blk.shape[:-1], 1), -np.inf, q.dtype)  # (..., rows, 1) running max
    l = np.zeros_like(m)  # noqa: E741  (..., rows, 1) running sum
    o = np.zeros((*q_blk.shape[:-1], v.shape[-1]), q.dtype)  # (..., rows, d_v) running weighted sum
    last_key = min(n_k, r0 + q_blk.shape[-2] + n_k - n_q) if causal else n_k
    c = _clock(clocks, BLOCK_STAGES[0], c)
    for c0 in range(0, last_key, block_k):
        tile = slice(c0, c0 + block_k)
        counts["tiles"] += 1
        s = q_blk @ np.swapaxes(k[..., tile, :], -1, -2)  # (..., rows, d_k) @ (..., d_k, cols) -> (..., rows, cols)
        counts["qk_flop"] += 2 * s.size * q.shape[-1]
        c = _clock(clocks, "Q K^T (matmul)", c)
        allowed = tiled.tile_mask(mask, causal, n_k - n_q, r0, s.shape[-2], c0, s.shape[-1])  # None: all allowed
        if allowed is not None:
            counts["masked tiles"] += 1
            s = np.where(allowed, s, -np.inf)  # (..., rows, cols)
        c = _clock(clocks, "mask (tile_mask, where)", c)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., rows, 1)
        c = _clock(clocks, "row max, m_new", c)
        shift = np.where(np.isfinite(m_new), m_new, 0)  # (..., rows, 1)
        alpha = np.exp(m - shift)  # (..., rows, 1)
        c = _clock(clocks, "shift, alpha = exp(m - shift)", c)
        d = s - shift  # (..., rows, cols); the loop's np.exp(s - shift) in two timed halves
        c = _clock(clocks, "subtract (s - shift)", c)
        p = np.exp(d, out=d)  # (..., rows, cols)
        c = _clock(clocks, "exp", c)
        l = alpha * l + p.sum(axis=-1, keepdims=True)  # noqa: E741  (..., rows, 1)
        c = _clock(clocks, "row sums, l", c)
        pv = p @ v[..., tile, :]  # (..., rows, cols) @ (..., cols, d_v) -> (..., rows, d_v)
        counts["pv_flop"] += 2 * p.size * v.shape[-1]
        c = _clock(clocks, "P V (matmul)", c)
        o = alpha * o + pv  # (..., rows, d_v)
        m = m_new
        c = _clock(clocks, "rescale and add to o", c)
    out = o / np.where(l > 0, l, 1)  # (..., rows, d_v)
    _clock(clocks, BLOCK_STAGES[1], c)
    return out


def profiled_tiled(q, k, v, mask=None, *, causal=False, threads=None, clocks, counts,
                   block_q=tiled.BLOCK_Q, block_k=tiled.BLOCK_K) -> np.ndarray:
    """``tiled_attention`` with every stage of every block timed into ``clocks`` (thread-seconds,
    summed over the workers) and the tiles counted into ``counts``; the same result."""
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = np.empty((*lead, q.shape[-2], v.shape[-1]), q.dtype)  # (..., N_q, d_v)
    per_worker: dict[int, tuple[defaultdict, defaultdict]] = {}
    lock = threading.Lock()

    def one_block(r0):
        with lock:  # one clock and one counter per worker thread: no two threads add to one number
            mine = per_worker.setdefault(threading.get_ident(), (defaultdict(float), defaultdict(int)))
        out[..., r0:r0 + block_q, :] = profiled_query_block(q, k, v, mask, causal, r0, block_q, block_k, *mine)

    tiled.share(one_block, range(0, q.shape[-2], block_q), threads)
    for w_clocks, w_counts in per_worker.values():
        for name, t in w_clocks.items():
            clocks[name] += t
        for name, n in w_counts.items():
            counts[name] += n
    counts["workers"] = len(per_worker)
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
    kernel alone, to set beside ``tiled_attention`` alone."""
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
    rows, cols = -(-n // tiled.BLOCK_Q), -(-n // tiled.BLOCK_K)  # query tiles, key tiles
    q, kv = np.ones((H, rows, 1), np.float32), np.ones((H, cols, 1), np.float32)  # one row per tile
    ms = _median_ms(lambda: tiled_attention.unchecked(q, kv, kv, block_q=1, block_k=1, threads=threads))
    return ms * tiles / (rows * cols)


def _overheads_ms(n: int, tiles: int, threads: int) -> dict[str, float]:
    """The per-call costs that are not arithmetic (``OVERHEADS``), each timed on its own."""
    blocks = range(0, n, tiled.BLOCK_Q)
    return {
        OVERHEADS[0]: _median_ms(tiled.blas_threads, reps=20),
        OVERHEADS[1]: _median_ms(lambda: tiled.share(lambda r0: None, blocks, threads), reps=20),
        OVERHEADS[2]: _loop_overhead_ms(n, tiles, threads),
    }


def exp_alone() -> dict:
    """One tile's exponentials, (h, block_q, block_k) float32 scores already shifted to <= 0, one
    thread each, interleaved: numpy's exp (in place), numpy's exp2 (for folding log2(e) into Q),
    and torch's exp (the kernel torch's attention uses), in ms."""
    import torch

    rng = np.random.default_rng(0)
    s = rng.standard_normal((H, tiled.BLOCK_Q, tiled.BLOCK_K)).astype(np.float32) * 3  # (h, rows, cols)
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
    x, p = layer_inputs(n)
    d_k = D_MODEL // H
    x2 = x.reshape(n, D_MODEL)  # (N, d_model)
    Qh, Kh, Vh = (split_heads((x2 @ p[w]).reshape(1, n, D_MODEL), H) for w in ("W_Q", "W_K", "W_V"))  # (B, h, N, d_k)
    whole = _median_ms(lambda: multi_head_attention(x, p, H, causal=causal, tiled=True))
    formula = _median_ms(lambda: multi_head_attention(x, p, H, causal=causal))
    attention = _median_ms(lambda: tiled_attention.unchecked(Qh, Kh, Vh, causal=causal))
    projections = _median_ms(lambda: [x2 @ p[w] for w in ("W_Q", "W_K", "W_V")])  # 3 x (N, d_model) @ (d_model, d_model)
    heads = np.ascontiguousarray(Qh)  # stands in for the attention output (B, h, N, d_v)
    w_o = _median_ms(lambda: heads.swapaxes(1, 2).reshape(n, D_MODEL) @ p["W_O"])  # merge, (N, h*d_v) @ (h*d_v, d_model)
    runs = []
    time.sleep(PAUSE_S)
    for _ in range(REPS):
        clocks, counts = defaultdict(float), defaultdict(int)
        t0 = time.perf_counter()
        got = profiled_tiled(Qh, Kh, Vh, causal=causal, clocks=clocks, counts=counts)
        clocks["(wall time of the profiled call)"] = time.perf_counter() - t0
        runs.append((clocks, counts))
    want = tiled_attention.unchecked(Qh, Kh, Vh, causal=causal)
    if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
        raise AssertionError("profiled_tiled no longer matches tiled_attention: update it to the new loop")
    names = list(runs[0][0])
    stage_ms = {name: float(np.median([r[0][name] for r in runs])) * 1e3 for name in names}
    counts = dict(runs[0][1])
    rows, cols = min(tiled.BLOCK_Q, n), min(tiled.BLOCK_K, n)
    qk = _rates_alone((1, H, rows, d_k), (1, H, d_k, cols))  # (numpy, torch), each shape once
    pv = _rates_alone((1, H, rows, cols), (1, H, cols, d_k))
    rates = {"Q K^T (matmul)": qk, "P V (matmul)": pv,
             "projection (N, d_model) @ (d_model, d_model)": _rates_alone((n, D_MODEL), (D_MODEL, D_MODEL), threads)}
    achieved = {name: counts[flop] / stage_ms[name] / 1e6 for name, flop in MATMULS.items() if counts.get(flop)}
    achieved["projection (N, d_model) @ (d_model, d_model)"] = 3 * 2 * n * D_MODEL**2 / projections / 1e6
    profiled_wall = stage_ms.pop("(wall time of the profiled call)")
    return {
        "N": n, "causal": causal, "threads": threads_label, "workers": counts["workers"],
        "tiles": counts["tiles"], "masked_tiles": counts.get("masked tiles", 0),
        "torch_sdpa_ms": _torch_sdpa_ms(Qh, Kh, Vh, causal, threads),
        "whole_layer_ms": whole, "formula_layer_ms": formula, "attention_ms": attention,
        "projections_ms": projections, "w_o_ms": w_o,
        "profiled_wall_ms": profiled_wall, "stages_ms": stage_ms, "overheads_ms": _overheads_ms(n, counts["tiles"], threads),
        "gflops_achieved": achieved, "gflops_alone": {name: r[0] for name, r in rates.items()},
        "gflops_torch_alone": {name: r[1] for name, r in rates.items()},
    }


def run(quick: bool = False, log=print) -> dict:
    default = numpy_threads()
    out = {"started_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "loadavg_start": os.getloadavg()[0], "block_q": tiled.BLOCK_Q, "block_k": tiled.BLOCK_K,
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
                    log(f"  {label} threads, N={n}, causal={causal}: tiled layer {r['whole_layer_ms']:.1f} ms "
                        f"(formula {r['formula_layer_ms']:.1f} ms), attention {r['attention_ms']:.1f} ms, "
                        f"exp {r['stages_ms'].get('exp', 0):.1f} thread-ms, torch SDPA {r['torch_sdpa_ms']:.1f} ms",
                        flush=True)
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
        f"tiles of {res['block_q']} query rows x {res['block_k']} keys (`tiled.query_block`). Each stage's "
        "time is summed over the worker threads (thread-milliseconds): with two workers the stages add to "
        "about twice the wall time. Medians of 3 calls.",
        "",
    ]
    for label in dict.fromkeys(r["threads"] for r in res["rows"]):
        rs = [r for r in res["rows"] if r["threads"] == label]
        threads = res["default_threads"] if label == "default" else 1
        lines += [f"### {label} threads ({threads} BLAS thread{'s' if threads > 1 else ''}; "
                  f"{rs[0]['workers']} worker{'s' if rs[0]['workers'] > 1 else ''} at N={rs[0]['N']:,})", "",
                  "| stage | passes over the tile | " + " | ".join(_cfg(r) for r in rs) + " |",
                  "|---|---|" + "---|" * len(rs)]
        lines.append("| tiles (of them masked) | | " + " | ".join(
            f"{r['tiles']} ({r['masked_tiles']})" for r in rs) + " |")
        for name in [BLOCK_STAGES[0], *TILE_STAGES, BLOCK_STAGES[1]]:
            passes = TILE_STAGES.get(name, "")
            lines.append(f"| {name} | {passes} | " + " | ".join(
                f"{r['stages_ms'].get(name, 0):,.1f} ms ({r['stages_ms'].get(name, 0) / sum(r['stages_ms'].values()):.0%})"
                for r in rs) + " |")
        lines.append("| **sum of the stages** (thread-ms) | " + f"{sum(TILE_STAGES.values())} | " + " | ".join(
            f"**{sum(r['stages_ms'].values()):,.1f} ms**" for r in rs) + " |")
        lines.append("| wall time of the profiled call | | "
                     + " | ".join(f"{r['profiled_wall_ms']:,.1f} ms" for r in rs) + " |")
        lines.append("| attention alone (`tiled_attention`, not profiled) | | "
                     + " | ".join(f"{r['attention_ms']:,.1f} ms" for r in rs) + " |")
        lines.append("| torch's attention alone (`F.scaled_dot_product_attention`, same heads and threads) | | "
                     + " | ".join(f"{r['torch_sdpa_ms']:,.1f} ms" for r in rs) + " |")
        for name in next(iter(rs))["overheads_ms"]:
            lines.append(f"| overhead: {name} | | " + " | ".join(f"{r['overheads_ms'][name]:,.2f} ms" for r in rs) + " |")
        lines.append("| Q, K, V projections (3 matmuls) | | " + " | ".join(f"{r['projections_ms']:,.1f} ms" for r in rs) + " |")
        lines.append("| merge heads + W_O | | " + " | ".join(f"{r['w_o_ms']:,.1f} ms" for r in rs) + " |")
        lines.append("| **whole layer, `tiled=True`** | | "
                     + " | ".join(f"**{r['whole_layer_ms']:,.1f} ms**" for r in rs) + " |")
        lines.append("| whole layer, the formula (for comparison) | | "
                     + " | ".join(f"{r['formula_layer_ms']:,.1f} ms" for r in rs) + " |")
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
