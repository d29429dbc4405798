"""Retrain every shipped model and rewrite mha_core/training/weights/ (``make weights``).

Runs ``mha_core.training.toy_models.run_experiment``: h in AVAILABLE_HEADS x SEEDS at the same d_model
and budget, plus the single head with LONG_FACTOR x the budget and the vocab-8 control. Prints a compact log and the
accuracy table, then saves ``heads_<h>.npz`` and ``record.json``.
"""

from __future__ import annotations

import argparse
import platform

import numpy as np

from mha_core.training import toy_models
from mha_core.training.trainer import text_progress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(toy_models.WEIGHTS_DIR), help="output directory")
    args = parser.parse_args()
    steps_per_run = toy_models.TRAIN.steps
    record, models = toy_models.run_experiment(progress=text_progress(every=20 * steps_per_run))
    record["machine"] = f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}, numpy {np.__version__}"
    for path in toy_models.save(record, models, args.out):
        print(f"wrote {path}")
    table = toy_models.accuracy_table(record)
    print("accuracy (rows h, columns seeds " + ", ".join(map(str, record["seeds"])) + ")")
    for h, row in zip(record["heads"], table, strict=True):
        print(f"h={h}: " + "  ".join(f"{a:.3f}" for a in row) + f"   mean {row.mean():.3f}")
    long = record["long_budget"]
    print(f"h=1 with {long['steps']:,} steps: " + "  ".join(f"{a:.3f}" for a in long["accuracy"].values()))
    ctrl = record["control"]
    print(f"control, h=1 on vocab {ctrl['task']['vocab']}: " + ", ".join(
        f"{a:.3f} after {n:,} steps" for n, a in zip(ctrl["steps"], ctrl["accuracy"], strict=True)))
    print(f"total training time {record['total_seconds']:.1f} s")


if __name__ == "__main__":
    main()
