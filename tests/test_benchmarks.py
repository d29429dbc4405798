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
        _row(8, 2048, 1, numpy_s=1.0, torch_s=0.5, share=0.3),  # attention-dominated: no GEMM goal
        {"h": 64, "N": 2048, "B": 8, "dtype": "float32", "d_k": 8, "skipped": "too big"},
    ]}
    verdicts = {g["goal"]: g["met"] for g in report.goals(results)}
    assert verdicts == {
        "fused >= torch, h=8 float32 N=100 B=1": True,
        "fused >= torch, h=8 float32 N=512 B=1": False,
        "fused >= torch, h=8 float32 N=2048 B=1": False,
        ">= 70% of GEMM rate, projection-dominated h=8 N=100 B=1 float32": True,
        ">= 70% of GEMM rate, projection-dominated h=8 N=512 B=1 float32": False,
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


# Names of the code before issue 27 that no generated report may print any more.
OLD_NAMES = ("softmax_", "blocked_attention", "FORMULA_MAX_SCORE_BYTES", "CAUSAL_SWITCH_FRACTION",
             "SCORE_BLOCK_BYTES", "attention_path", "check_layer_args", "stale max", "flash", "_blocked")


def _t(ms):
    return {"median": ms / 1e3, "iqr": 0.0, "q1": ms / 1e3, "q3": ms / 1e3, "min": ms / 1e3, "n": 3}


def _lc_row(n, causal, threads, formula_ms, tiled_ms, torch_ms=10.0):
    times = {"tiled": _t(tiled_ms), "torch MHA": _t(torch_ms), "torch SDPA": _t(torch_ms / 2), "gemm": _t(5.0)}
    if formula_ms is not None:
        times["formula"] = _t(formula_ms)
    mine = [k for k in ("formula", "tiled") if k in times]
    return {"N": n, "h": 8, "threads": threads, "causal": causal, "times": times,
            "tiled_over_formula": None if formula_ms is None else tiled_ms / formula_ms,
            "vs torch MHA": {k: torch_ms / times[k]["median"] / 1e3 for k in mine},
            "vs torch SDPA": {k: torch_ms / 2 / times[k]["median"] / 1e3 for k in mine},
            "gemm_gflops": 100.0, "gemm_fraction": {k: 0.5 for k in times if k != "gemm"}}


def _long_context_results():
    """long_context.run's output at three row lengths and one crossover length (no real run)."""
    rows, crossover = [], []
    for threads in ("default", "1"):
        for causal in (False, True):
            rows += [_lc_row(100, causal, threads, 1.0, 2.0), _lc_row(512, causal, threads, 10.0, 9.0),
                     _lc_row(8192, causal, threads, None, 900.0)]
            crossover.append({"N": 256, "causal": causal, "threads": threads,
                              "times": {"formula": _t(4.0), "tiled": _t(4.4 if causal else 5.0)},
                              "tiled_over_formula": (4.4 if causal else 5.0) / 4.0})
    memory = [{"N": 2048, "impl": impl, "peak_bytes": b, "score_bytes": 8 * 2048**2 * 4}
              for impl, b in (("formula", 3 * 2**27), ("tiled", 2**22), ("torch MHA", 2**23))]
    lc = {"block_q": 128, "block_k": 256, "formula_max_n": 4096, "rows": rows, "crossover": crossover,
          "memory": memory}
    machine = {"cpu": "x", "logical_cpus": 2, "cpus_available": 2, "python": "3", "numpy": "2",
               "numpy_blas": "b", "numpy_blas_threads": 2}
    return {"machine": machine, "mode": "quick", "started_utc": "now", "load": {}, "only": ["long_context"],
            "long_context": lc, "wall_s": 1.0}


def test_formula_vs_tiled_merges_the_rows_and_the_crossover_runs():
    from benchmarks import long_context

    table = long_context.formula_vs_tiled(_long_context_results()["long_context"])
    one = [r for r in table if r["threads"] == "1" and not r["causal"]]
    assert [r["N"] for r in one] == [100, 256, 512, 8192]  # sorted by N, both sources
    assert [r["faster"] for r in one] == ["formula", "formula", "tiled", None]
    assert one[-1]["formula"] is None and one[1]["tiled_over_formula"] == 1.25
    assert report.tiled_pays_from(one) == 512
    assert report.tiled_pays_from([{"N": 100, "faster": "tiled"}, {"N": 200, "faster": "formula"}]) is None
    assert long_context.impls_at(4096) == ("formula", "tiled") and long_context.impls_at(8192) == ("tiled",)
    assert long_context.useful_macs(8, True) < long_context.useful_macs(8, False)


def test_long_context_section_renders_every_row_and_the_only_report():
    results = _long_context_results()
    lc = results["long_context"]
    full = report.markdown({**results, "only": None})
    only = report.markdown(results)
    for md in (full, only):
        for r in lc["rows"]:
            assert f"| {r['threads']} | {r['N']:,} | {'yes' if r['causal'] else 'no'} |" in md
            assert f"**{r['vs torch MHA']['tiled']:.2f}x** | " in md
        assert "| default | 8,192 | no | not run | 900.00 ms ±0.00 |" in md  # the formula is not run at 8192
        assert "| 1 | 256 | yes | 4.00 ms ±0.00 | 4.40 ms ±0.00 | **1.10** | formula |" in md
        assert "| 1 | 512 | no | 10.00 ms ±0.00 | 9.00 ms ±0.00 | **0.90** | tiled |" in md
        assert "- 1 thread, not causal: `tiled=True` faster from N = 512 on, at every longer N measured." in md
        for r in lc["memory"]:
            assert f"| {r['N']:,} | {r['impl']} | {r['peak_bytes'] / 2**20:,.0f} MiB" in md
        assert "block_q = 128" in md and "Formula or tiled" in md
        assert "[benchmarks/README.md](README.md#long-context" in md
        for name in OLD_NAMES:  # no prose about the code before issue 27
            assert name not in md, name
    assert only.startswith("# Benchmark results: long context") and "## Goals" not in only


def test_report_prose_names_no_old_code():
    for text in (report.NOTES, report.LONG_CONTEXT_NOTES, report.LONG_CONTEXT_INTRO):
        for name in OLD_NAMES:
            assert name not in text, name
        assert "UTC" not in text and "this VM" not in text  # no dated narratives, no notes on one machine


def test_every_benchmark_module_imports():
    import importlib

    for path in sorted((Path(report.__file__).parent).glob("*.py")):
        importlib.import_module(f"benchmarks.{path.stem}")


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
    (tmp_path / "results.json").write_text("full run")  # a --only run must leave the full run's files alone
    fake = _long_context_results()["long_context"]

    class FakeSection:
        @staticmethod
        def run(quick):
            return fake

    monkeypatch.setattr(run, "long_context", FakeSection)
    monkeypatch.setattr(run, "machine_info", lambda: _long_context_results()["machine"])  # no torch import
    assert run.main(["--only", "long_context", "--quick", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "results.json").read_text() == "full run" and not (tmp_path / "RESULTS.md").exists()
    written = md.read_text()
    assert written.startswith("# Benchmark results: long context") and "second" in written
    assert json.loads((tmp_path / "results_long_context.json").read_text())["long_context"]["rows"] == fake["rows"]


def test_profiled_tiled_runs_the_loop_of_tiled_attention():
    import numpy as np

    from benchmarks import profile_tiled
    from mha_core import tiled_attention

    rng = np.random.default_rng(4)
    mask = rng.random((37, 37)) > 0.2  # (N_q, N_k), broadcast over B and h
    for shape, causal, m in (((2, 3, 37, 8), True, None), ((1, 4, 50, 8), False, None), ((2, 3, 37, 8), False, mask)):
        q, k, v = (rng.standard_normal(shape).astype(np.float32) for _ in range(3))  # (B, h, N, d_k)
        clocks, counts = defaultdict(float), defaultdict(int)
        got = profile_tiled.profiled_tiled(q, k, v, m, causal=causal, threads=2, clocks=clocks, counts=counts,
                                           block_q=16, block_k=8)
        want = tiled_attention(q, k, v, m, causal=causal, block_q=16, block_k=8)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        # 37 rows: 3 query blocks of 16, 16, 5; 37 keys: 5 tiles of 8; causal skips those after the block's rows
        n = shape[2]
        want_tiles = sum(-(-min(r0 + 16, n) // 8) if causal else -(-n // 8) for r0 in range(0, n, 16))
        assert counts["tiles"] == want_tiles and 1 <= counts["workers"] <= 2
        diagonal = sum(c0 + 7 > r0 for r0 in range(0, n, 16) for c0 in range(0, min(r0 + 16, n), 8))  # some key > query
        assert counts["masked tiles"] == (want_tiles if m is not None else (diagonal if causal else 0))
        assert set(profile_tiled.TILE_STAGES) | set(profile_tiled.BLOCK_STAGES) == set(clocks)
        assert all(t >= 0 for t in clocks.values())
        assert counts["qk_flop"] == counts["pv_flop"] > 0  # d_k = d_v: the two matmuls do the same FLOP


def test_profile_one_reports_every_stage(monkeypatch):
    pytest.importorskip("torch")
    from benchmarks import profile_tiled

    monkeypatch.setattr(timing.time, "sleep", lambda s: None)  # no pauses: this checks the plumbing only
    row = profile_tiled.profile_one(64, True, "1", 1)
    assert set(profile_tiled.TILE_STAGES) <= set(row["stages_ms"]) and row["tiles"] == 1
    assert set(row["overheads_ms"]) == set(profile_tiled.OVERHEADS)
    assert set(row["gflops_achieved"]) == set(row["gflops_alone"])
    md = profile_tiled.markdown({"started_utc": "now", "wall_s": 1.0, "loadavg_start": 0.5, "loadavg_end": 0.6,
                                 "block_q": 128, "block_k": 256, "default_threads": 2, "rows": [row],
                                 "exp_alone_ms": {"np.exp (in place)": 0.5}})
    assert "| exp | 1 |" in md and "whole layer, `tiled=True`" in md


def test_ours_runs_the_path_it_names(monkeypatch):
    import numpy as np

    from benchmarks import long_context
    from mha_core.core import mha

    ran = []
    for name, path in (("scaled_dot_product_attention", "formula"), ("tiled_attention", "tiled")):
        fn = getattr(mha, name)
        real = fn.unchecked
        monkeypatch.setattr(fn, "unchecked", lambda *a, path=path, real=real, **kw: ran.append(path) or real(*a, **kw))
    x, params = long_context.layer_inputs(20)
    outs = {}
    for path in long_context.IMPLS:
        ran.clear()
        outs[path] = long_context.ours(path, x, params, causal=True)()
        assert ran == [path]
    np.testing.assert_allclose(outs["tiled"], outs["formula"], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="impl must be one of"):
        long_context.ours("blocked", x, params)


def test_long_context_run_size_times_both_paths_and_torch(monkeypatch):
    pytest.importorskip("torch")
    from benchmarks import long_context

    monkeypatch.setattr(timing.time, "sleep", lambda s: None)
    row = long_context.run_size(32, True, "default", causal=True)
    assert set(row["times"]) == {"formula", "tiled", "torch MHA", "torch SDPA", "gemm"}
    assert row["tiled_over_formula"] == row["times"]["tiled"]["median"] / row["times"]["formula"]["median"]
    assert set(row["vs torch MHA"]) == set(row["vs torch SDPA"]) == {"formula", "tiled"}
    assert long_context.formula_vs_tiled({"rows": [row]})[0]["faster"] in ("formula", "tiled")


def test_breakdown_steps_run_and_the_two_attentions_agree():
    import numpy as np

    from benchmarks import core

    steps = core._breakdown_steps(16, 2)
    assert "full forward (formula)" in steps and "attention: tiled (tiled_attention)" in steps
    outs = {name: fn() for name, fn in steps.items()}
    np.testing.assert_allclose(outs["attention: tiled (tiled_attention)"],
                               outs["attention: formula (scaled_dot_product_attention)"][0], rtol=1e-5, atol=1e-6)


def test_memory_traces_the_formula_and_the_tiled_layer(monkeypatch):
    from benchmarks import memory

    monkeypatch.setattr(memory, "QUICK_LENGTHS", (32,))
    rows = memory.run(True, log=lambda *a: None)
    assert [r["impl"] for r in rows] == ["numpy", "numpy+weights", "numpy tiled", "per_head"]
    assert all(r["peak_bytes"] > 0 for r in rows)


def _fake_old_layer():
    """An old mha_core that chose its own path (the layer before issue 27), as far as calls() asks."""
    import types

    import mha_core

    def attention_path(args, *, keep_weights, traced):
        return "formula" if args["n"] <= 512 else ("blocked" if keep_weights else "tiled")

    core = types.SimpleNamespace(mha=types.SimpleNamespace(attention_path=attention_path))
    return types.SimpleNamespace(
        core=core, check_layer_args=lambda *, x, **kw: {"n": x.shape[-2]},
        multi_head_attention=mha_core.multi_head_attention.unchecked,
        multi_head_attention_per_head=mha_core.multi_head_attention_per_head,
        flash_attention=lambda q, k, v, causal=False: mha_core.tiled_attention(q, k, v, causal=causal))


def test_before_after_calls_compare_like_with_like():
    from benchmarks import before_after

    old = _fake_old_layer()
    got = before_after.calls("layer", old, 2, 600, 1, False)
    assert [(c[0], c[1]) for c in got] == [("forward", "tiled"), ("+weights", "blocked"), ("per_head", "formula")]
    tiled = before_after.calls("tiled", old, 2, 600, 1, True)
    assert [(c[0], c[1]) for c in tiled] == [("forward", "tiled")]
    with pytest.raises(SystemExit, match="runs the formula path"):
        before_after.calls("tiled", old, 2, 64, 1, False)
    (call, path, before, after), = before_after.calls("attention", old, 2, 40, 3, True)
    assert before().shape == after().shape == (3, 2, 40, before_after.D_HEAD)
    for _, _, before, after in [*got, *tiled]:
        assert before_after.same_output(before, after) < 1e-4


def test_before_after_runs_an_old_commit_out_of_git(monkeypatch, capsys):
    from benchmarks import before_after

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(timing.time, "sleep", lambda s: None)
    try:
        assert before_after.main(["HEAD", "--mode", "tiled", "--quick", "--sizes", "2,40,1"]) == 0
        assert before_after.main(["HEAD", "--mode", "attention", "--quick", "--sizes", "2,40,1"]) == 0
    finally:
        for name in [m for m in sys.modules if m.split(".")[0] == "mha_core_old"]:
            del sys.modules[name]
    out = capsys.readouterr().out
    assert out.count("after/before") >= 4 and "max |diff|" in out


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
           "torch_sdpa_ms": 12.5, "whole_layer_ms": 30.0, "formula_layer_ms": 28.0, "attention_ms": 20.0,
           "projections_ms": 5.0, "w_o_ms": 2.0, "profiled_wall_ms": 14.0, "stages_ms": {**stages, "exp": 4.0},
           "overheads_ms": {profile_tiled.OVERHEADS[1]: 0.03},
           "gflops_achieved": {"Q K^T (matmul)": 45.0},
           "gflops_alone": {"Q K^T (matmul)": 90.0, "P V (matmul)": 80.0},
           "gflops_torch_alone": {"Q K^T (matmul)": 85.0, "P V (matmul)": 81.0}}
    res = {"started_utc": "now", "wall_s": 1.0, "loadavg_start": 0.5, "loadavg_end": 0.6, "block_q": 128,
           "block_k": 256, "default_threads": 2, "rows": [row], "exp_alone_ms": {"np.exp (in place)": 0.5}}
    md = profile_tiled.markdown(res)
    for name in stages:
        assert f"| {name} |" in md
    assert f"| exp | 1 | 4.0 ms ({4 / (len(stages) + 3):.0%}) |" in md  # 4 of the thread-ms
    assert "| tiles (of them masked) | | 6 (4) |" in md
    assert "| Q K^T (matmul) | 45 of 90 (50%), torch 85 |" in md
    assert "| P V (matmul) | not run |" in md  # no FLOP counted: no rate to show
    assert "12.5 ms" in md and "0.03 ms" in md and "**30.0 ms**" in md and "| 28.0 ms |" in md
    assert "| ms per tile | 0.500 |" in md
    for name in OLD_NAMES:
        assert name not in md, name
