"""The benchmark harness's own logic: statistics, interleaving, parsing and the goal verdicts.

No timing is asserted here (timings belong in benchmarks/RESULTS.md, not in unit tests).
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for `benchmarks`

from benchmarks import report, suites, timing  # noqa: E402
from benchmarks.timing import PAUSE_S, SETTLE_CALLS, interleaved, stats  # noqa: E402


def test_stats_matches_sorted_samples():
    samples = [5.0, 1.0, 4.0, 2.0, 3.0]
    s = stats(samples)
    assert s["median"] == 3.0 and s["min"] == 1.0 and s["n"] == 5
    assert s["q1"] == 2.0 and s["q3"] == 4.0 and s["iqr"] == 2.0


@pytest.mark.parametrize(("budget", "lo", "hi"), [(0.0, 3, 10), (1e9, 3, 7)])
def test_interleaved_runs_every_callable_equally_within_rep_bounds(budget, lo, hi, monkeypatch):
    calls = {"a": 0, "b": 0}
    pauses = []
    monkeypatch.setattr(timing.time, "sleep", pauses.append)  # record the pauses, do not wait

    def make(name):
        def fn():
            calls[name] += 1
        return fn

    t = interleaved({"a": make("a"), "b": make("b")}, budget_s=budget, min_reps=lo, max_reps=hi)
    expected = lo if budget == 0.0 else hi
    assert t["a"]["n"] == t["b"]["n"] == expected
    assert calls["a"] == calls["b"] == expected * (1 + SETTLE_CALLS) + 1  # settling calls + the warm-up call
    assert pauses == [PAUSE_S] * (2 * expected) and PAUSE_S > 0  # one pause before each timed call's settling


def test_parse_printed_timings_reads_the_browser_tests_block():
    out = (
        "..\n"
        "dashboard timings (this machine, this run):\n"
        "  page load, preheated kernel (s): 2.17\n"
        "  HTML served (s): 1.38, 0.52\n"
        "  N slider to pixels, h<=16, N<=64 (ms): median 57, p90 77, n=12\n"
        ".\n"
    )
    got = suites.parse_printed_timings(out)
    assert got == {
        "page load, preheated kernel (s)": 2.17,
        "HTML served (s) #1": 1.38,
        "HTML served (s) #2": 0.52,
        "N slider to pixels, h<=16, N<=64 (ms) median": 57.0,
        "N slider to pixels, h<=16, N<=64 (ms) p90": 77.0,
        "N slider to pixels, h<=16, N<=64 (ms) n": 12.0,
    }
    assert suites.parse_printed_timings("no block here") == {}


def test_flatten_keeps_every_number_with_its_path():
    assert suites._flatten({"a": {"b": [1, 2.5]}, "c": "text", "d": True}) == {"a.b[0]": 1, "a.b[1]": 2.5}


def _row(h, n, b, numpy_s, torch_s, share=0.9, frac=0.8):
    t = {k: {"median": v, "iqr": 0.0} for k, v in
         {"numpy": numpy_s, "numpy+weights": numpy_s, "per_head": numpy_s, "torch": torch_s,
          "torch+weights": torch_s, "gemm": 0.01}.items()}
    return {"h": h, "N": n, "B": b, "dtype": "float32", "d_k": 512 // h, "times": t,
            "speedup_vs_torch": {"numpy": torch_s / numpy_s, "numpy+weights": torch_s / numpy_s,
                                 "per_head": torch_s / numpy_s},
            "projection_share": share, "gemm_gflops": 100.0,
            "gflops": {"numpy": 100.0 * frac, "torch": 50.0},
            "gemm_fraction": {"numpy": frac, "torch": 0.5}}


def test_goals_judge_each_size_from_its_own_ratio():
    results = {"machine": {"numpy_blas_threads": 2}, "core": [
        _row(8, 100, 1, numpy_s=1.0, torch_s=1.2),  # faster than torch, 80% of GEMM
        _row(8, 512, 1, numpy_s=1.0, torch_s=0.8, frac=0.5),  # slower, 50% of GEMM
        _row(8, 2048, 1, numpy_s=1.0, torch_s=0.5, share=0.3),  # attention-bound: no GEMM goal
        {"h": 64, "N": 2048, "B": 8, "dtype": "float32", "d_k": 8, "skipped": "too big"},
    ]}
    verdicts = {g["goal"]: g["met"] for g in report.goals(results)}
    assert verdicts == {
        "fused >= torch, h=8 float32 N=100 B=1": True,
        "fused >= torch, h=8 float32 N=512 B=1": False,
        "fused >= torch, h=8 float32 N=2048 B=1": False,
        ">= 70% of GEMM rate, projection-bound h=8 N=100 B=1 float32": True,
        ">= 70% of GEMM rate, projection-bound h=8 N=512 B=1 float32": False,
    }


def test_the_results_point_to_the_notes_in_the_benchmarks_readme():
    """The narrative of particular runs lives in benchmarks/README.md, not in the report's source."""
    notes = (Path(report.__file__).parent / "README.md").read_text()
    assert "## Long context: why the tiled path is built as it is" in notes and "What would close the gap" in notes
    assert "## Why the goals are not all met" in notes and "README.md" in report.NOTES


def test_markdown_renders_skipped_sizes_and_missing_sections():
    results = {"machine": {"cpu": "x", "logical_cpus": 2, "cpus_available": 2, "python": "3",
                           "numpy": "2", "numpy_blas": "b", "numpy_blas_threads": 2},
               "mode": "quick", "started_utc": "now", "load": {},
               "core": [_row(8, 100, 1, 1.0, 1.2),
                        {"h": 64, "N": 2048, "B": 8, "dtype": "float32", "d_k": 8, "skipped": "too big"}],
               "notebooks": {"status": "not measured", "reason": "--skip-notebooks"},
               "dashboard": {"status": "not measured", "reason": "no browser"}}
    md = report.markdown(results)
    assert "skipped: too big" in md
    assert "Not measured: --skip-notebooks." in md
    assert "not measured (no browser)" in md
    assert "**1.20x**" in md


def test_long_context_section_renders_every_row_and_the_only_report():
    results = json.loads((Path(report.__file__).parent / "results_long_context.json").read_text())
    lc = results["long_context"]
    full = report.markdown({**results, "only": None})
    only = report.markdown(results)
    from benchmarks import long_context

    lengths = long_context.QUICK_LENGTHS if results["mode"] == "quick" else long_context.LENGTHS
    assert {(r["N"], r["causal"], r["threads"]) for r in lc["rows"]} == {
        (n, c, t) for n in lengths for c in (False, True) for t in ("default", "1")}
    assert {(r["N"], r["causal"], r["threads"]) for r in lc["crossover"]} >= {(100, False, "1"), (512, True, "default")}
    for md in (full, only):
        for r in lc["rows"]:
            assert f"**{r['vs torch MHA']:.2f}x** | **{r['vs torch SDPA']:.2f}x** | {r['gemm_fraction']['ours']:.0%}" in md
        for r in lc["crossover"]:
            assert f"| {r['chosen']} | {r['fastest']} | {r['chosen_over_fastest']:.2f} |" in md
        for r in lc["memory"]:
            assert f"| {r['N']:,} | {r['impl']} | {r['peak_bytes'] / 2**20:,.0f} MiB" in md
        assert f"block_q = {lc['block_q']}" in md and "[benchmarks/README.md](README.md#long-context" in md
    assert only.startswith("# Benchmark results: long context") and "## Goals" not in only


def test_only_runs_write_their_own_files_and_keep_the_profile_block(tmp_path, monkeypatch):
    from benchmarks import profile_tiled, run

    assert report.only_names(["long_context"]) == ("results_long_context.json", "RESULTS_long_context.md")
    md = tmp_path / "RESULTS_long_context.md"
    md.write_text("# old\n")
    profile_tiled.write_section("## Where the time goes\nfirst", md)
    profile_tiled.write_section("## Where the time goes\nsecond", md)  # replaced, not appended twice
    text = md.read_text()
    assert text.count(profile_tiled.PROFILE_BEGIN) == 1 and "second" in text and "first" not in text
    kept = report.keep_generated_blocks(text, "# new report\n")
    assert kept.startswith("# new report") and "second" in kept
    assert report.keep_generated_blocks("no markers", "# new\n") == "# new\n"
    results = json.loads((Path(report.__file__).parent / "results_long_context.json").read_text())
    (tmp_path / "results.json").write_text("full run")  # a --only run must leave the full run's files alone
    fake = dict(results["long_context"])

    class FakeSection:
        @staticmethod
        def run(quick):
            return fake

    monkeypatch.setattr(run, "long_context", FakeSection)
    assert run.main(["--only", "long_context", "--quick", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "results.json").read_text() == "full run" and not (tmp_path / "RESULTS.md").exists()
    written = md.read_text()
    assert written.startswith("# Benchmark results: long context") and "second" in written
    assert json.loads((tmp_path / "results_long_context.json").read_text())["long_context"]["rows"] == fake["rows"]


def test_profiled_flash_runs_the_tile_loop_of_flash():
    import numpy as np

    from benchmarks import profile_tiled
    from mha_core.core import flash

    rng = np.random.default_rng(4)
    for shape, causal in (((2, 3, 37, 8), True), ((1, 4, 50, 8), False)):  # B > 1, odd N, tile edges
        q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))  # (B, h, N, d_k)
        clocks, counts = defaultdict(float), defaultdict(int)
        got = profile_tiled.profiled_flash(q, k, v, 0.3, causal=causal, threads=2, clocks=clocks, counts=counts,
                                           block_q=16, block_k=8)
        np.testing.assert_allclose(got, flash._flash(q, k, v, None, 0.3, causal=causal, block_q=16, block_k=8),
                                   rtol=1e-6, atol=1e-7)
        # 37 rows: 3 query blocks of 16, 16, 5; 37 keys: 5 tiles of 8; causal skips those after the block's rows
        want = sum(-(-min(r0 + 16, shape[2]) // 8) if causal else -(-shape[2] // 8) for r0 in range(0, shape[2], 16))
        assert counts["tiles"] == want and counts["workers"] == 2
        ran = set(profile_tiled.TILE_STAGES) - {"redo: Q K^T, mask again"}
        assert ran <= set(clocks) and all(t >= 0 for t in clocks.values())
        # a row's first tile goes the full way, every later one is tried against the stale max and kept
        assert counts["full tiles"] == len(range(0, shape[2], 16)) and counts["redone tiles"] == 0
        assert counts["qk_flop"] == counts["pv_stale_flop"] + counts["pv_full_flop"] > 0
    k[..., 24:, :] *= 40  # keys 24-36 score far above the first tiles' max: their tiles are redone
    clocks, counts = defaultdict(float), defaultdict(int)
    got = profile_tiled.profiled_flash(q, k, v, 0.3, causal=False, threads=1, clocks=clocks, counts=counts,
                                       block_q=16, block_k=8)
    np.testing.assert_allclose(got, flash._flash(q, k, v, None, 0.3, causal=False, block_q=16, block_k=8),
                               rtol=1e-6, atol=1e-7)
    assert counts["redone tiles"] > 0 and "redo: Q K^T, mask again" in clocks


def test_forced_path_runs_the_path_it_names(monkeypatch):
    import numpy as np

    from benchmarks import long_context
    from mha_core.core import mha

    ran = []
    for path, name in (("formula", "_attend"), ("blocked", "_blocked"), ("tiled", "_flash")):
        real = getattr(mha, name)
        monkeypatch.setattr(mha, name, lambda *a, path=path, real=real, **kw: ran.append(path) or real(*a, **kw))
    x, params = long_context._inputs(20)
    outs = {}
    for path in ("formula", "blocked", "tiled"):
        ran.clear()
        out = long_context.forced_path(path, x, params, causal=True)()
        outs[path] = out[0] if path == "blocked" else out
        assert ran == [path]
    np.testing.assert_allclose(outs["tiled"], outs["formula"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(outs["blocked"], outs["formula"], rtol=1e-4, atol=1e-5)
    assert mha.FORMULA_MAX_SCORE_BYTES == 8 * 2**20  # restored after each forced call
    assert long_context.useful_macs(8, True) < long_context.useful_macs(8, False)


def test_smaps_reads_this_process():
    from benchmarks import models

    mem = models._smaps(os.getpid())
    assert 0 < mem["uss_mb"] <= mem["rss_mb"] and 0 < mem["pss_mb"] <= mem["rss_mb"]
    assert 0 < mem["anon_mb"] <= mem["rss_mb"]


def test_markdown_renders_the_real_models_and_their_verdicts():
    t = {"median": 0.1, "iqr": 0.01}
    speed = {"model": "minilm", "label": "MiniLM", "N": 32, "target_s": 0.3, "met_target": True,
             "max_abs_diff": 1e-6, "speedup_vs_transformers": 1.5,
             "time": {"one thread each": {"ours": t, "transformers": {"median": 0.15, "iqr": 0.0}},
                      "default threads": {"ours": {"median": 0.4, "iqr": 0.0}}}}
    kernel = {"models": ["minilm"], "processes": 1, "uss_mb": {"median": 50.0}, "anon_mb": {"median": 40.0},
              "total_uss_mb": 50.0, "total_pss_mb": 60.0}
    memory = {"weights_mb": {"minilm": 86.0}, "baseline": {**kernel, "models": []}, "minilm": kernel,
              "smollm2": {**kernel, "models": ["smollm2"]}, "many": {**kernel, "processes": 20},
              "private_copies_mb": 1720.0}
    results = {"machine": {"cpu": "x", "logical_cpus": 2, "cpus_available": 2, "python": "3", "numpy": "2",
                           "numpy_blas": "b", "numpy_blas_threads": 2},
               "mode": "quick", "started_utc": "now", "load": {},
               "models": {"status": "measured", "speed": [speed], "memory": memory}}
    md = report.markdown(results)
    assert "| MiniLM | 32 | one thread each | 100.00 ms ±5.00 | 150.00 ms ±0.00 | 1.50x | <= 0.3 s | yes |" in md
    assert "| MiniLM | 32 | default threads | 400.00 ms ±0.00 | not installed |" in md
    assert "20 private copies would hold 1,720 MB" in md
    assert "[met] minilm" in report.summary(results)
    assert "Not measured: not run." in report.markdown({**results, "models": {}})


def test_markdown_renders_cached_generation():
    from benchmarks import models

    assert (models.PROMPT_TOKENS, models.NEW_TOKENS) == (64, 32)
    gen = {"prompt_tokens": 64, "new_tokens": 32, "same_tokens": True,
           "time": {"with cache": {"median": 4.0, "iqr": 0.2}, "without cache": {"median": 16.0, "iqr": 1.0}},
           "tokens_per_s": {"with cache": 8.0, "without cache": 2.0}, "speedup": 4.0,
           "cache_bytes": 2_918_400, "formula_bytes": 2_918_400}
    mo = {"status": "measured", "speed": [], "generation": gen,
          "memory": {"weights_mb": {}, "many": {"processes": 1, "models": [], "uss_mb": {"median": 1.0},
                                                "anon_mb": {"median": 1.0}, "total_uss_mb": 1.0, "total_pss_mb": 1.0},
                     **{k: {"models": [], "uss_mb": {"median": 1.0}, "anon_mb": {"median": 1.0},
                            "total_uss_mb": 1.0, "total_pss_mb": 1.0} for k in ("baseline", "minilm", "smollm2")},
                     "private_copies_mb": 0.0}}
    lines = "\n".join(report._models({"models": mo}))
    assert "| with cache | 4,000.00 ms ±100.00 | 8.0 |" in lines
    assert "| without cache | 16,000.00 ms ±500.00 | 2.0 |" in lines
    assert "The cache is 4.0x faster; it holds 2,918,400 bytes, and notebook 06's formula gives 2,918,400." in lines
    machine = {"machine": {"cpu": "x", "logical_cpus": 2, "cpus_available": 2, "python": "3", "numpy": "2",
                           "numpy_blas": "b", "numpy_blas_threads": 2}}
    assert "8.0 tokens/s with the KV cache, 2.0 without (4.0x)" in report.summary({**machine, "models": mo})


def test_profile_markdown_shows_every_stage_rate_and_overhead():
    from benchmarks import profile_tiled

    stages = dict.fromkeys([*profile_tiled.BLOCK_STAGES, *profile_tiled.TILE_STAGES], 1.0)
    row = {"N": 512, "causal": True, "threads": "1", "workers": 1, "tiles": 6, "masked_tiles": 4,
           "full_tiles": 3, "redone_tiles": 1, "torch_sdpa_ms": 12.5,
           "whole_layer_ms": 30.0, "layer_path": "formula", "attention_ms": 20.0, "projections_ms": 5.0,
           "w_o_ms": 2.0, "profiled_wall_ms": 14.0, "stages_ms": {**stages, "full: exp": 4.0},
           "overheads_ms": {"threadpool_limits (enter + exit)": 0.03},
           "gflops_achieved": {"Q K^T (matmul)": 45.0},
           "gflops_alone": {"Q K^T (matmul)": 90.0, "full: P V (matmul)": 80.0},
           "gflops_torch_alone": {"Q K^T (matmul)": 85.0, "full: P V (matmul)": 81.0}}
    res = {"started_utc": "now", "wall_s": 1.0, "loadavg_start": 0.5, "loadavg_end": 0.6, "block_q": 128,
           "block_k": 256, "default_threads": 2, "rows": [row], "exp_alone_ms": {"np.exp (in place)": 0.5}}
    md = profile_tiled.markdown(res)
    for name in stages:
        assert f"| {name} |" in md
    assert f"| full: exp | 1 | 4.0 ms ({4 / (len(stages) + 3):.0%}) |" in md  # 4 of the thread-ms
    assert "| tiles (with a causal mask / the full way / redone) | | 6 (4 / 3 / 1) |" in md
    assert "| Q K^T (matmul) | 45 of 90 (50%), torch 85 |" in md
    assert "| full: P V (matmul) | not run |" in md  # no FLOP counted: no rate to show
    assert "12.5 ms" in md and "0.03 ms" in md and "**30.0 ms** (formula)" in md
    assert "| ms per tile | 0.500 |" in md
