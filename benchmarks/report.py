"""Render results.json as benchmarks/RESULTS.md and as the short summary ``make bench`` prints."""

from __future__ import annotations

from .core import D_MODEL, GEMM_N, MAX_SCORE_BYTES

# The goals for the fused forward.
HEADLINE_H, HEADLINE_DTYPE, HEADLINE_LENGTHS = 8, "float32", (100, 512, 2048)
GEMM_GOAL = 0.70  # fraction of the measured GEMM rate at projection-dominated sizes
# A size is projection-dominated when the four projections are most of the MACs:
# 4*N*d_model^2 > 2*N^2*d_model, i.e. N < 2*d_model.
PROJECTION_BOUND_SHARE = 0.5


def _ms(t: dict) -> str:
    return f"{t['median'] * 1e3:,.2f} ms ±{t['iqr'] * 1e3 / 2:,.2f}"


def _rows(results: dict) -> list[dict]:
    return [r for r in results.get("core", []) if "skipped" not in r]


def _find(results: dict, h: int, n: int, b: int, dtype: str) -> dict | None:
    for r in _rows(results):
        if (r["h"], r["N"], r["B"], r["dtype"]) == (h, n, b, dtype):
            return r
    return None


def _single(results: dict, n: int) -> dict | None:
    for r in results.get("single_thread", []):
        if r["N"] == n:
            return r
    return None


def goals(results: dict) -> list[dict]:
    """The issue's goals, each with what was measured (default threads, and one thread each
    where measured) and whether it was met at the default threads."""
    out = []
    threads = results["machine"].get("numpy_blas_threads")
    for b in (1, 8):
        for n in HEADLINE_LENGTHS:
            r = _find(results, HEADLINE_H, n, b, HEADLINE_DTYPE)
            if r is None:
                continue
            s = r["speedup_vs_torch"]["numpy"]
            one = _single(results, n) if b == 1 else None
            out.append({
                "goal": f"fused >= torch, h={HEADLINE_H} {HEADLINE_DTYPE} N={n} B={b}",
                "measured": f"{s:.2f}x torch's speed at {threads} threads "
                            f"(with weights: {r['speedup_vs_torch']['numpy+weights']:.2f}x)",
                "one_thread": "" if one is None else f"{one['speedup_vs_torch']['numpy']:.2f}x",
                "met": s >= 1.0,
            })
    for r in _rows(results):
        if r["projection_share"] > PROJECTION_BOUND_SHARE and r["h"] <= HEADLINE_H:
            f = r["gemm_fraction"]["numpy"]
            one = _single(results, r["N"]) if (r["h"], r["B"], r["dtype"]) == (HEADLINE_H, 1, HEADLINE_DTYPE) else None
            out.append({
                "goal": f">= {GEMM_GOAL:.0%} of GEMM rate, projection-dominated h={r['h']} N={r['N']} B={r['B']} {r['dtype']}",
                "measured": f"{f:.0%} ({r['gflops']['numpy']:.0f} of {r['gemm_gflops']:.0f} GFLOP/s; "
                            f"torch {r['gemm_fraction']['torch']:.0%})",
                "one_thread": "" if one is None else f"{one['gemm_fraction']['numpy']:.0%} of the 1-thread GEMM",
                "met": f >= GEMM_GOAL,
            })
    return out


def summary(results: dict) -> str:
    """A few lines for the terminal: the headline ratios and the goals."""
    lines = ["speed of the fused numpy forward relative to torch.nn.MultiheadAttention (>1 = numpy faster):"]
    for g in goals(results):
        one = f"; one thread each: {g['one_thread']}" if g["one_thread"] else ""
        lines.append(f"  [{'met' if g['met'] else 'NOT met'}] {g['goal']}: {g['measured']}{one}")
    nb = results.get("notebooks", {})
    if nb.get("status") == "measured":
        lines.append(f"notebooks under nbval: {nb['total_wall_s']:.1f} s for {len(nb['notebooks'])} notebooks")
    else:
        lines.append(f"notebooks: {nb.get('status', 'not measured')} ({nb.get('reason', '')})")
    mo = results.get("models", {})
    for r in mo.get("speed", []):
        t = r["time"]["one thread each"]
        vs = f", {r['speedup_vs_transformers']:.2f}x transformers' speed" if "speedup_vs_transformers" in r else ""
        lines.append(f"  [{'met' if r['met_target'] else 'NOT met'}] {r['model']}: sentence (N={r['N']}) to all "
                     f"attention maps in {t['ours']['median']:.3f} s at one thread (target {r['target_s']} s){vs}")
    if "generation" in mo:
        g = mo["generation"]
        lines.append(f"  smollm2 writing {g['new_tokens']} tokens after {g['prompt_tokens']}: "
                     f"{g['tokens_per_s']['with cache']:.1f} tokens/s with the KV cache, "
                     f"{g['tokens_per_s']['without cache']:.1f} without ({g['speedup']:.1f}x)")
    if mo.get("status") == "measured":
        many = mo["memory"]["many"]
        lines.append(f"  {many['processes']} kernels with both models: USS {many['uss_mb']['median']:.0f} MB each, "
                     f"PSS {many['total_pss_mb']:.0f} MB in all")
    db = results.get("dashboard", {})
    lines.append(f"dashboard latency: {db.get('status', 'not measured')}"
                 + (f" ({db['reason']})" if "reason" in db else ""))
    return "\n".join(lines)


def _machine(results: dict) -> list[str]:
    m = results["machine"]
    lines = [
        "| | |", "|---|---|",
        f"| CPU | {m['cpu']} ({m['logical_cpus']} logical CPUs, {m['cpus_available']} available) |",
        f"| Python | {m['python']} |",
        f"| numpy | {m['numpy']}, BLAS {m['numpy_blas']} ({m.get('numpy_blas_runtime') or '?'}), "
        f"{m['numpy_blas_threads']} BLAS threads |",
        f"| torch | {m.get('torch')}, {m.get('torch_threads')} threads (set to numpy's BLAS threads), "
        f"BLAS {m.get('torch_blas')} |",
    ]
    for key, load in results.get("load", {}).items():
        lines.append(f"| load during {key} | other processes used {load['other_cpus']:.2f} CPUs on average "
                     f"(load average {load['loadavg_start']:.1f} -> {load['loadavg_end']:.1f}); {load['wall_s']:.0f} s |")
    return lines


def _core_table(results: dict) -> list[str]:
    lines = [
        "| h | d_k | N | B | dtype | numpy | numpy+weights | per-head | torch | torch+weights "
        "| numpy vs torch | +weights vs torch | per-head vs torch | numpy GFLOP/s | % of GEMM | torch % of GEMM |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results.get("core", []):
        head = f"| {r['h']} | {r['d_k']} | {r['N']} | {r['B']} | {r['dtype']} "
        if "skipped" in r:
            lines.append(head + f"| skipped: {r['skipped']} |" + " |" * 10)
            continue
        t, s = r["times"], r["speedup_vs_torch"]
        lines.append(
            head + f"| {_ms(t['numpy'])} | {_ms(t['numpy+weights'])} | {_ms(t['per_head'])} | {_ms(t['torch'])} "
            f"| {_ms(t['torch+weights'])} | **{s['numpy']:.2f}x** | {s['numpy+weights']:.2f}x | {s['per_head']:.2f}x "
            f"| {r['gflops']['numpy']:.0f} | {r['gemm_fraction']['numpy']:.0%} | {r['gemm_fraction']['torch']:.0%} |"
        )
    return lines


def _gemm_lines(results: dict) -> list[str]:
    by_dtype: dict[str, list[float]] = {}
    for r in _rows(results):
        by_dtype.setdefault(r["dtype"], []).append(r["gemm_gflops"])
    lines = []
    for dtype, rates in sorted(by_dtype.items()):
        rates.sort()
        lines.append(f"- {dtype}: median {rates[len(rates) // 2]:.0f} GFLOP/s over {len(rates)} sizes "
                     f"(range {rates[0]:.0f} to {rates[-1]:.0f}, the spread is the machine's load)")
    return lines


def _heads_lines(results: dict) -> list[str]:
    lines = ["| N | B | dtype | time h=64 / time h=8 (numpy) | same for torch | numpy % of GEMM at h=8 -> h=64 |",
             "|---|---|---|---|---|---|"]
    for r64 in _rows(results):
        if r64["h"] != 64:
            continue
        r8 = _find(results, 8, r64["N"], r64["B"], r64["dtype"])
        if r8 is None:
            continue
        lines.append(
            f"| {r64['N']} | {r64['B']} | {r64['dtype']} "
            f"| {r64['times']['numpy']['median'] / r8['times']['numpy']['median']:.2f} "
            f"| {r64['times']['torch']['median'] / r8['times']['torch']['median']:.2f} "
            f"| {r8['gemm_fraction']['numpy']:.0%} -> {r64['gemm_fraction']['numpy']:.0%} |"
        )
    return lines


def _single_thread(results: dict) -> list[str]:
    rows = results.get("single_thread", [])
    if not rows:
        return ["Not measured."]
    lines = ["| h | N | B | dtype | numpy | torch | numpy vs torch | numpy % of 1-thread GEMM | 1-thread GEMM GFLOP/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["times"]
        lines.append(f"| {r['h']} | {r['N']} | {r['B']} | {r['dtype']} | {_ms(t['numpy'])} | {_ms(t['torch'])} "
                     f"| **{r['speedup_vs_torch']['numpy']:.2f}x** | {r['gemm_fraction']['numpy']:.0%} "
                     f"| {r['gemm_gflops']:.0f} |")
    return lines


def _breakdown(results: dict) -> list[str]:
    rows = results.get("breakdown", [])
    if not rows:
        return ["Not measured."]
    lengths = sorted({r["N"] for r in rows})
    steps = list(dict.fromkeys(r["step"] for r in rows))
    by = {(r["N"], r["step"]): r for r in rows}
    lines = ["| step | " + " | ".join(f"N={n}" for n in lengths) + " |", "|---|" + "---|" * len(lengths)]
    for step in steps:
        cells = []
        for n in lengths:
            r = by.get((n, step))
            cells.append("" if r is None else f"{r['ms']:.1f} ms ({r['share']:.0%})")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return lines


def _memory(results: dict) -> list[str]:
    lines = ["| N | implementation | peak traced memory | score tensor (h, N, N) | peak / scores |",
             "|---|---|---|---|---|"]
    for r in results.get("memory", []):
        lines.append(f"| {r['N']} | {r['impl']} | {r['peak_bytes'] / 2**20:,.0f} MiB "
                     f"| {r['score_bytes'] / 2**20:,.0f} MiB | {r['ratio']:.2f} |")
    return lines


def _ratio(x: float | None, bold: bool = False) -> str:
    if x is None:
        return "not run"
    return f"**{x:.2f}x**" if bold else f"{x:.2f}x"


def tiled_pays_from(rows: list[dict]) -> int | None:
    """The smallest N from which the tiled path was faster at every longer N measured (``rows`` of
    one thread setting and one causal flag, from ``long_context.formula_vs_tiled``; an N where the
    formula was not run counts for the tiled path); None if the formula was faster at the longest
    N where both ran."""
    start = None
    for r in sorted(rows, key=lambda r: r["N"]):
        if r["faster"] == "formula":
            start = None
        elif start is None:
            start = r["N"]
    return start


def _long_context(results: dict) -> list[str]:
    from .long_context import formula_vs_tiled

    lc = results.get("long_context")
    if not lc or not lc.get("rows"):
        return ["Not measured."]
    lines = [f"Tiles of the tiled path: block_q = {lc['block_q']} query rows, block_k = {lc['block_k']} keys. "
             f"The formula is not timed above N = {lc['formula_max_n']:,} (\"not run\").", "",
             "| threads | N | causal | formula | tiled | torch MHA | torch SDPA | formula vs torch MHA "
             "| tiled vs torch MHA | formula vs torch SDPA | tiled vs torch SDPA | formula % of GEMM "
             "| tiled % of GEMM | torch MHA % of GEMM | torch SDPA % of GEMM | GEMM GFLOP/s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in lc["rows"]:
        t, f = r["times"], r["gemm_fraction"]
        mha, sdpa = r["vs torch MHA"], r["vs torch SDPA"]
        cells = [r["threads"], f"{r['N']:,}", "yes" if r["causal"] else "no",
                 _ms(t["formula"]) if "formula" in t else "not run", _ms(t["tiled"]), _ms(t["torch MHA"]),
                 _ms(t["torch SDPA"]), _ratio(mha.get("formula"), True), _ratio(mha["tiled"], True),
                 _ratio(sdpa.get("formula"), True), _ratio(sdpa["tiled"], True),
                 *(f"{f[k]:.0%}" if k in f else "not run" for k in ("formula", "tiled", "torch MHA", "torch SDPA")),
                 f"{r['gemm_gflops']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    table = formula_vs_tiled(lc)
    lines += ["", "### Formula or tiled: the caller's choice", "",
              "`multi_head_attention(x, params, 8)` (the formula) against `multi_head_attention(x, params, 8, "
              "tiled=True)` at each N, interleaved in the same repetitions (the rows above, and between their "
              "lengths runs of these two alone). \"tiled / formula\" below 1: `tiled=True` is faster at that N.", "",
              "| threads | N | causal | formula | tiled | tiled / formula | faster |", "|---|---|---|---|---|---|---|"]
    for r in table:
        ratio = r["tiled_over_formula"]
        lines.append(f"| {r['threads']} | {r['N']:,} | {'yes' if r['causal'] else 'no'} "
                     f"| {_ms(r['formula']) if r['formula'] else 'not run'} | {_ms(r['tiled'])} "
                     f"| {'' if ratio is None else f'**{ratio:.2f}**'} | {r['faster'] or 'tiled (formula not run)'} |")
    lines.append("")
    for threads in dict.fromkeys(r["threads"] for r in table):
        for causal in (False, True):
            rows = [r for r in table if r["threads"] == threads and r["causal"] == causal]
            if not rows:
                continue
            n = tiled_pays_from(rows)
            where = (f"faster from N = {n:,} on, at every longer N measured" if n is not None
                     else "not faster at the longest N where both ran")
            label = "1 thread" if threads == "1" else f"{threads} threads"
            lines.append(f"- {label}, {'causal' if causal else 'not causal'}: `tiled=True` {where}.")
    lines += ["", "Peak memory of one call (peak resident set during the call above the resident set before it, "
              "each in a fresh process):", "",
              "| N | implementation | peak | score tensor (h, N, N) | peak / scores |", "|---|---|---|---|---|"]
    for r in lc["memory"]:
        lines.append(f"| {r['N']:,} | {r['impl']} | {r['peak_bytes'] / 2**20:,.0f} MiB "
                     f"| {r['score_bytes'] / 2**20:,.0f} MiB | {r['peak_bytes'] / r['score_bytes']:.3f} |")
    return lines


def _models(results: dict) -> list[str]:
    mo = results.get("models", {})
    if mo.get("status") != "measured":
        return [f"Not measured: {mo.get('reason', 'not run')}."]
    lines = ["| model | N | threads | ours | transformers | ours vs transformers | target | met | max abs diff of the maps |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in mo["speed"]:
        for label, t in r["time"].items():
            ref = _ms(t["transformers"]) if "transformers" in t else "not installed"
            ratio = f"{t['transformers']['median'] / t['ours']['median']:.2f}x" if "transformers" in t else ""
            met = ("yes" if r["met_target"] else "**no**") if label == "one thread each" else ""
            diff = f"{r['max_abs_diff']:.1e}" if "max_abs_diff" in r else ""
            lines.append(f"| {r['label']} | {r['N']} | {label} | {_ms(t['ours'])} | {ref} | {ratio} "
                         f"| <= {r['target_s']} s | {met} | {diff} |")
    if "generation" in mo:
        g = mo["generation"]
        lines += ["", f"SmolLM2 writing {g['new_tokens']} greedy tokens after a {g['prompt_tokens']}-token prompt "
                  f"(same tokens both ways: {g['same_tokens']}):", "",
                  "| | median time | tokens/s |", "|---|---|---|"]
        for k, v in g["time"].items():
            lines.append(f"| {k} | {_ms(v)} | {g['tokens_per_s'][k]:.1f} |")
        lines += ["", f"The cache is {g['speedup']:.1f}x faster; it holds {g['cache_bytes']:,} bytes, "
                  f"and notebook 06's formula gives {g['formula_bytes']:,}."]
    m = mo["memory"]
    many = m["many"]
    lines += ["", "| processes | models loaded | USS per process (median) | anonymous per process | "
              "sum of USS | sum of PSS |", "|---|---|---|---|---|---|"]
    for key in ("baseline", "minilm", "smollm2"):
        k = m[key]
        lines.append(f"| 1 | {', '.join(k['models']) or 'none (imports only)'} | {k['uss_mb']['median']:.0f} MB "
                     f"| {k['anon_mb']['median']:.0f} MB | {k['total_uss_mb']:.0f} MB | {k['total_pss_mb']:.0f} MB |")
    lines.append(f"| {many['processes']} | {', '.join(many['models'])} | {many['uss_mb']['median']:.0f} MB "
                 f"| {many['anon_mb']['median']:.0f} MB | {many['total_uss_mb']:.0f} MB | {many['total_pss_mb']:.0f} MB |")
    weights = ", ".join(f"{k} {v:.0f} MB" for k, v in m["weights_mb"].items())
    lines += ["", f"float32 weights: {weights}; {many['processes']} private copies would hold "
              f"{m['private_copies_mb']:,.0f} MB of weights alone."]
    return lines


def _notebooks(results: dict) -> list[str]:
    nb = results.get("notebooks", {})
    if nb.get("status") != "measured":
        return [f"Not measured: {nb.get('reason', 'not run')}."]
    lines = [f"`pytest --nbval` over {len(nb['notebooks'])} notebooks in one process: "
             f"**{nb['total_wall_s']:.1f} s** wall time (pytest exit code {nb['exit_code']}; "
             f"{nb['total_wall_s'] - nb['sum_of_notebooks_s']:.1f} s of it is pytest start-up and collection).", "",
             "| notebook | time (kernel start + cells) | cells | failing cells |", "|---|---|---|---|"]
    for r in nb["notebooks"]:
        lines.append(f"| {r['notebook']} | {r['time_s']:.1f} s | {r['cells']} | {r['failed']} |")
    return lines


def _dashboard(results: dict) -> list[str]:
    db = results.get("dashboard", {})
    if db.get("status") != "measured":
        return ["| measurement | value |", "|---|---|",
                f"| slider-to-pixels latency | not measured ({db.get('reason', 'not run')}) |"]
    lines = ["| file | measurement | value |", "|---|---|---|"]
    for name, values in db["files"].items():
        for k, v in values.items():
            lines.append(f"| {name} | {k} | {v:,.4g} |" if isinstance(v, (int, float)) else f"| {name} | {k} | {v} |")
    lines.append("")
    lines.append(f"Browser tests (`tests/test_dashboard_browser.py`): {db.get('summary', '')}, "
                 f"exit code {db['exit_code']}, {db['wall_s']:.0f} s.")
    return lines


def markdown(results: dict) -> str:
    """The whole of RESULTS.md (regenerated by every ``make bench``)."""
    if results.get("only"):
        return _partial_markdown(results)
    g = goals(results)
    parts = [
        "# Benchmark results",
        "",
        f"Generated by `make bench` ({results['mode']} mode) on {results['started_utc']}; "
        f"the raw numbers are in `results.json`. Times are medians of interleaved repetitions "
        f"with ± half the interquartile range. \"vs torch\" is torch's time divided by ours: "
        f"above 1 the NumPy core is faster. Layer: d_model={D_MODEL}, no biases, self-attention, "
        f"no mask. torch is `nn.MultiheadAttention` in eval mode under `inference_mode`, holding the "
        f"same weights (outputs agree to the tolerance in `core.py` before anything is timed).",
        "",
        "## Machine",
        "",
        *_machine(results),
        "",
        "Each comparison interleaves every implementation in the same repetitions, so a burst of "
        "load from other processes hits all of them alike and the *ratios* stay meaningful; absolute "
        "times still move with the load. The \"load\" rows above say how busy the machine was: "
        "figures worth quoting come from a run where other processes used close to 0 CPUs.",
        "",
        "## Goals",
        "",
        "| goal | measured (default threads) | one thread each | met (default threads) |",
        "|---|---|---|---|",
        *[f"| {x['goal']} | {x['measured']} | {x['one_thread']} | {'yes' if x['met'] else '**no**'} |" for x in g],
        "",
        "## The core against PyTorch and the per-head loop",
        "",
        f"GFLOP/s counts `2 * count_macs(...)['total']` (the matmuls only; the softmax's exponentials "
        f"are not counted). \"% of GEMM\" divides it by a {GEMM_N}x{GEMM_N} GEMM of the same dtype timed "
        f"in the same repetitions (three GEMMs per repetition). Under load the GEMM and the forward "
        f"catch different bursts, so single fractions can exceed 100%; the one-thread table below is "
        f"the steadier figure. Sizes whose score tensor would exceed {MAX_SCORE_BYTES / 2**30:.0f} GiB "
        f"are skipped to keep the run short, and a grid that runs past its time limit on a busy "
        f"machine skips its remaining sizes.",
        "",
        *_core_table(results),
        "",
        "### The machine's GEMM rate (numpy, same run)",
        "",
        *_gemm_lines(results),
        "",
        "### Many heads of tiny width",
        "",
        "Same N, B and dtype; only h changes (d_k = 512 / h). The MACs are identical (h cancels), so "
        "any ratio above 1 is efficiency lost, not work added.",
        "",
        *_heads_lines(results),
        "",
        "### One thread each",
        "",
        "numpy's BLAS and torch both limited to one thread (set in the benchmark only): the "
        "comparison of the code itself, without numpy's single-threaded element-wise functions "
        "against torch's multi-threaded ones and without a 2-thread BLAS waiting for a core that "
        "another process holds.",
        "",
        *_single_thread(results),
        "",
        "### Where the time goes (h=8, B=1, float32, default threads)",
        "",
        "Each step of the forward timed on its own, interleaved; the share is of the whole forward's "
        "median (`multi_head_attention`, the formula). The \"formula:\" rows are the formula's three "
        "steps, each over the whole (h, N, N) score tensor; \"attention: tiled\" is what `tiled=True` "
        "runs in their place, on the same heads.",
        "",
        *_breakdown(results),
        "",
        "## Memory",
        "",
        "Peak memory traced by `tracemalloc` during one forward pass (h=8, B=1, float32), against "
        "the size of one score tensor.",
        "",
        *_memory(results),
        "",
        "## Long context",
        "",
        LONG_CONTEXT_INTRO,
        "",
        *_long_context(results),
        "",
        LONG_CONTEXT_NOTES,
        "",
        "## Real models",
        "",
        "Time from a sentence of about 32 tokens (text in, tokenised in the timed call) to every "
        "layer's and head's attention weights as one array, ours against transformers (eager "
        "attention, `output_attentions=True`) on the same weights, interleaved in the same run, at "
        "one thread each (as the dashboard's kernels run) and at the default threads. The target "
        "is judged at one thread. "
        "Memory from `/proc/<pid>/smaps_rollup` of real processes that each import the dashboard's "
        "panels (`mha_core.ui.*_panel`: matplotlib, ipywidgets), load the model(s) and run one forward "
        "(`OPENBLAS_NUM_THREADS=1`, as the dashboard's kernels); a Jupyter kernel adds its own "
        "machinery on top. USS is what a process "
        "alone maps; PSS divides shared pages among the processes that share them, so the sum of PSS "
        "is what all of them cost together. A single process counts the weight pages it touched as "
        "USS although they are page cache a second process would share; the anonymous column is what "
        "no other process could ever share.",
        "",
        *_models(results),
        "",
        "## Notebook suite",
        "",
        *_notebooks(results),
        "",
        "## Dashboard",
        "",
        *_dashboard(results),
        "",
        NOTES,
    ]
    return "\n".join(parts) + "\n"


LONG_CONTEXT_INTRO = (
    "The layer at h=8, d_model=512, float32, B=1, on each of its two paths: the formula "
    "(`multi_head_attention(x, params, 8)`, the whole score tensor) and `tiled=True` (`tiled_attention`, "
    "an online softmax over tiles of keys), against `nn.MultiheadAttention` "
    "(need_weights=False; causal: a boolean `attn_mask` with `is_causal=True`) and against the same "
    "projections around `F.scaled_dot_product_attention` (`is_causal`), all on the same weights, "
    "interleaved in one run per row. \"vs torch\" is torch's time over ours (above 1, ours is faster). "
    "\"% of GEMM\" is 2 x the useful MACs "
    "(`count_macs`; causal: only the N(N+1)/2 allowed query-key pairs) over the time, divided by the rate "
    "of a 1024 x 1024 GEMM timed in the same repetitions."
)


def _partial_markdown(results: dict) -> str:
    """RESULTS.md of a ``--only`` run: the machine, its load, and the long-context section."""
    parts = [
        "# Benchmark results: long context",
        "",
        f"Generated by `python -m benchmarks.run --only {' '.join(results['only'])}` ({results['mode']} mode) "
        f"on {results['started_utc']} in {results.get('wall_s', 0):.0f} s; the raw numbers are in "
        f"`{only_names(results['only'])[0]}`. Times are medians of interleaved repetitions with ± half the "
        f"interquartile range.",
        "",
        "## Machine",
        "",
        *_machine(results),
        "",
        "## Long context",
        "",
        LONG_CONTEXT_INTRO,
        "",
        *_long_context(results),
        "",
        LONG_CONTEXT_NOTES,
    ]
    return "\n".join(parts) + "\n"


def only_names(only: list[str]) -> tuple[str, str]:
    """The json and markdown a ``--only`` run writes: results_<sections>.json, RESULTS_<sections>.md
    (``--only long_context``: results_long_context.json and RESULTS_long_context.md)."""
    tag = "_".join(only)
    return f"results_{tag}.json", f"RESULTS_{tag}.md"


def keep_generated_blocks(old: str, new: str) -> str:
    """``new`` with every block that another script writes between markers in ``old`` carried over
    (``profile_tiled.PROFILE_BEGIN``/``PROFILE_END``), so one generator does not erase another's figures."""
    from .profile_tiled import PROFILE_BEGIN, PROFILE_END

    if PROFILE_BEGIN in old and PROFILE_END in old and PROFILE_BEGIN not in new:
        block = PROFILE_BEGIN + old.split(PROFILE_BEGIN, 1)[1].split(PROFILE_END, 1)[0] + PROFILE_END
        new = new.rstrip("\n") + "\n\n" + block + "\n"
    return new


NOTES = """## Reading these results

- **Before and after a change to the core**: `python -m benchmarks.before_after REV` times the layer
  of commit REV against the working tree, interleaved in one process (`--mode tiled` for the tiled
  path, `--mode attention` for the attention functions alone; `--help` lists the options). Quote the
  one-thread figures (`--threads 1`, or `--cpu-time` on a busy machine).
- **One thread each is the comparison of the code itself** (table "One thread each"). At long N
  what separates the formula from torch is the softmax (table "Where the time goes"): numpy makes
  separate passes over the N^2 scores (max, subtract, exp, sum, divide), each on one core, while
  torch's CPU attention kernel (`need_weights=False`) fuses them into one pass per block and uses
  every core. The matmuls themselves run at BLAS speed. With `need_weights=True` torch must build
  the weights too, and numpy+weights is closer.
- **The default-thread ratios move with the load.** A forward makes a few dozen BLAS calls, and a
  multi-threaded BLAS hands part of each to its other threads; when another process holds a core,
  each hand-off waits for the scheduler. torch makes fewer, larger calls and suffers less. Compare
  the "load" rows with the ratios; for the dashboard and the notebooks, whose arrays are small,
  `OPENBLAS_NUM_THREADS=1` avoids this.
- **GEMM fraction.** The reference is a square 1024 x 1024 GEMM. At B=1 the projections are
  (N x 512) @ (512 x 512) products, too small for BLAS to reach that rate, and the softmax is time
  with no MACs. At B=8 the projections are large GEMMs and the fraction is higher.
- **Why h=64 is slower at the same MACs.** With d_k = 8 the two attention matmuls become h*B small
  products of shape (N, 8) @ (8, N) and (N, N) @ (N, 8). They do about d_k/2 = 4 FLOP per element
  of the N x N score tensor they write or read, so memory bandwidth limits them, not the FMA units,
  and BLAS cannot fill its register tiles along a summed axis only 8 long. The softmax also does
  h * N^2 exponentials, 64 times those of one head, which the MAC count ignores. torch's fused
  kernel suffers less because it never writes the N x N tensor when `need_weights=False`.
- **The history of these measurements** (what each change to the core bought, what was tried and
  dropped): [benchmarks/README.md](README.md).
"""


LONG_CONTEXT_NOTES = """### Long context: how to read it

- **Which path runs is the caller's choice.** `multi_head_attention` runs the formula unless it is
  given `tiled=True`; nothing switches by itself. The table "Formula or tiled" is the evidence for
  that choice on the measured machine: below the N where `tiled=True` starts to win, the formula
  (which can also return the weights) is the faster call; above it, and wherever the score tensor
  would not fit in memory, `tiled=True` is the one to pass.
- **The tiled path.** `tiled_attention` keeps a running max, sum and weighted sum per query row and
  walks the keys a tile at a time (lesson 11); causal tiles wholly above the diagonal are skipped,
  which is why its causal rows gain more than the formula's. Query blocks are shared by worker
  threads (`tiled.share`), each with its BLAS held to one thread, so the exponentials (one-threaded
  in numpy) run on every core; `OPENBLAS_NUM_THREADS=1` means one worker. Tiles are
  `tiled.BLOCK_Q` x `tiled.BLOCK_K` (128 x 256: 1 MiB of float32 scores for 8 heads), small enough
  that the passes over a tile re-read it from cache.
- **What the tiled path cannot do in NumPy.** Each tile is swept by separate numpy calls (Q K^T,
  the mask, the max, subtract, exp, the sum, P V), where torch's fused kernel does max, subtract,
  exp and sum in one pass while the tile is in registers. `python -m benchmarks.profile_tiled`
  times each stage of `tiled.query_block` and sets each matmul against the same shape alone.
- **Load.** On a busy machine the default-thread rows are decided by the load more than by the
  code: quote the one-thread rows, with the run's load row.
- **History**: [benchmarks/README.md](README.md#long-context-why-the-tiled-path-is-built-as-it-is-and-what-is-left).
"""
