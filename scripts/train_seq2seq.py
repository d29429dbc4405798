"""Retrain the shipped digit-reversal encoder-decoder (``make weights``): writes
mha_core/training/weights/reverse.npz and reverse.json (how it was made and what it measured).

The held-out figures are measured on HELD_OUT sequences from the held-out fifth (never trained
on), drawn with EVAL_SEED; tests/test_seq2seq.py recomputes them from the shipped weights.
"""

from __future__ import annotations

import argparse
import platform

import numpy as np

from mha_core.training import seq2seq
from mha_core.training.trainer import text_progress

HELD_OUT = 2000
EVAL_SEED = 2026


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default=str(seq2seq.WEIGHTS_FILE))
    parser.add_argument("--record", default=str(seq2seq.RECORD_FILE))
    args = parser.parse_args()
    task, config = seq2seq.ReverseTask(), seq2seq.Seq2SeqConfig()
    params, losses, seconds = seq2seq.train(task, config, text_progress(every=100))
    batch = task.sample(np.random.default_rng(EVAL_SEED), HELD_OUT, "held_out")
    held_out = seq2seq.evaluate(params, batch, config.n_heads)
    record = {**seq2seq.describe(task, config), "seconds": round(seconds, 1),
              "final_loss": float(losses[-20:].mean()),
              "held_out": {"sequences": HELD_OUT, "seed": EVAL_SEED, **held_out},
              "made_by": "scripts/train_seq2seq.py (make weights)",
              "machine": f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}, "
                         f"numpy {np.__version__}"}
    seq2seq.save_reverse(params, record, args.weights, args.record)
    print(f"trained {config.steps:,} steps in {seconds:.1f} s; held-out exact-match accuracy "
          f"{held_out['accuracy']:.4f}, mean cross-attention weight on the aligned position "
          f"{held_out['aligned_weight_mean']:.3f} (per head {', '.join(f'{w:.3f}' for w in held_out['aligned_weight'])})")
    print(f"wrote {args.weights} and {args.record}")


if __name__ == "__main__":
    main()
