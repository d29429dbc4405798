"""``make bench``: run every benchmark and write benchmarks/results.json and benchmarks/RESULTS.md.

    python -m benchmarks.run            # the full grid, notebooks and dashboard (< ~10 min)
    python -m benchmarks.run --quick    # a CI-sized run: B=1, float32, N <= 512 (about a minute)

PyTorch is a benchmark reference only; ``make bench`` installs it (``torch==2.13.0``) first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time

from . import core, long_context, memory, models, report, suites
from .timing import LoadMeter, machine_info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small grid and few repetitions (CI-sized)")
    parser.add_argument("--skip-notebooks", action="store_true", help="do not time the notebook suite")
    parser.add_argument("--skip-dashboard", action="store_true", help="do not run the dashboard browser tests")
    parser.add_argument("--only", nargs="+", metavar="SECTION",
                        help="run only these sections (core, single_thread, breakdown, memory, long_context, "
                             "models, notebooks, dashboard); the run then writes results_<sections>.json and "
                             "RESULTS_<sections>.md (e.g. --only long_context: RESULTS_long_context.md)")
    parser.add_argument("--skip-models", action="store_true", help="do not time the real models")
    parser.add_argument("--out", default=str(suites.BENCH_DIR), help="folder for results.json and RESULTS.md")
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    results: dict = {
        "started_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "mode": "quick" if args.quick else "full",
        "machine": machine_info(),
        "load": {},
    }
    print(f"machine: {results['machine']['cpu']}, {results['machine']['cpus_available']} CPUs, "
          f"numpy {results['machine']['numpy']} ({results['machine']['numpy_blas_threads']} BLAS threads), "
          f"torch {results['machine'].get('torch')} ({results['machine'].get('torch_threads')} threads)")

    sections = [
        ("core", "core vs torch vs per-head, and the GEMM roofline", lambda: core.run(args.quick)),
        ("single_thread", "the headline sizes with one thread each", lambda: core.single_thread(args.quick)),
        ("breakdown", "where the fused forward's time goes", lambda: core.breakdown(args.quick)),
        ("memory", "peak memory of the forward", lambda: memory.run(args.quick)),
        ("long_context", "long context: formula and tiled=True against torch MHA and SDPA, N = 100 to 8192, causal and not",
         lambda: long_context.run(args.quick)),
    ]
    if not args.skip_models:
        sections.append(("models", "real models: sentence to attention maps vs transformers, memory per kernel",
                         lambda: models.run(args.quick)))
    if not args.skip_notebooks:
        sections.append(("notebooks", "notebook suite under nbval", suites.notebooks))
    if not args.skip_dashboard:
        sections.append(("dashboard", "dashboard slider-to-pixels latency", suites.dashboard))
    if args.only:
        sections = [s for s in sections if s[0] in args.only]
        results["only"] = [s[0] for s in sections]
    for key, title, fn in sections:
        print(f"{title}:")
        meter = LoadMeter()
        results[key] = fn()
        results["load"][key] = meter.stop()
        print(f"  ({results['load'][key]['wall_s']:.0f} s; other processes used "
              f"{results['load'][key]['other_cpus']:.2f} CPUs on average meanwhile)")
    if args.skip_models:
        results["models"] = {"status": "not measured", "reason": "--skip-models"}
    if args.skip_notebooks:
        results["notebooks"] = {"status": "not measured", "reason": "--skip-notebooks"}
    if args.skip_dashboard:
        results["dashboard"] = {"status": "not measured", "reason": "--skip-dashboard"}
    results["wall_s"] = time.perf_counter() - t0

    out = suites.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # a --only run writes files of its own, so it never overwrites the full run's
    json_name, md_name = report.only_names(results["only"]) if args.only else ("results.json", "RESULTS.md")
    md_path = out / md_name
    old = md_path.read_text() if md_path.exists() else ""
    (out / json_name).write_text(json.dumps(results, indent=1) + "\n")
    md_path.write_text(report.keep_generated_blocks(old, report.markdown(results)))
    print()
    print(report.summary(results))
    print(f"wrote {out / json_name} and {md_path} ({results['wall_s']:.0f} s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
