"""Compare the fused forward of an older commit with the current one, in the same run.

    python -m benchmarks.before_after 1124612            # default threads
    python -m benchmarks.before_after 1124612 --threads 1

The old ``mha_core`` is copied out of git (``git show <rev>:mha_core/<file>``) into a temporary
package, so both versions run in one process, interleaved, against the same torch layer.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mha_core import MHAConfig, init_params, multi_head_attention

from .core import D_MODEL, torch_layer
from .suites import ROOT
from .timing import interleaved, numpy_threads, set_numpy_threads

SIZES = ((8, 100, 1), (8, 512, 1), (8, 2048, 1), (64, 512, 1), (1, 2048, 1), (8, 512, 8))


def load_old(rev: str, where: Path):
    """Import ``mha_core`` as it was at ``rev`` under the name ``mha_core_old``."""
    pkg = where / "mha_core_old"
    pkg.mkdir()
    names = subprocess.run(["git", "ls-tree", "--name-only", rev, "mha_core/"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for name in names:
        if name.endswith(".py"):
            text = subprocess.run(["git", "show", f"{rev}:{name}"], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout
            (pkg / Path(name).name).write_text(text)
    sys.path.insert(0, str(where))
    return importlib.import_module("mha_core_old")


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the older git revision, e.g. 1124612")
    parser.add_argument("--threads", type=int, default=None, help="threads for numpy's BLAS and torch")
    args = parser.parse_args(argv)
    threads = args.threads or numpy_threads()
    set_numpy_threads(threads)
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        old = load_old(args.rev, Path(tmp))
        print(f"{args.rev} vs working tree, {threads} thread(s); speed = torch time / numpy time")
        for h, n, b in SIZES:
            rng = np.random.default_rng(0)
            p = init_params(MHAConfig(D_MODEL, h), rng)
            x = rng.standard_normal((b, n, D_MODEL)).astype(np.float32)  # (B, N, d_model)
            layer, xt = torch_layer(p, D_MODEL, h, "float32"), torch.from_numpy(x)

            def call_torch(layer=layer, xt=xt):
                with torch.inference_mode():
                    return layer(xt, xt, xt, need_weights=False)

            t = interleaved({
                "before": lambda x=x, p=p, h=h: old.multi_head_attention(x, p, h),
                "after": lambda x=x, p=p, h=h: multi_head_attention(x, p, h),
                "torch": call_torch,
            }, budget_s=4.0, min_reps=5, max_reps=40)
            med = {k: v["median"] for k, v in t.items()}
            print(f"  h={h:<2} N={n:<4} B={b}: before {med['before'] * 1e3:8.2f} ms, after {med['after'] * 1e3:8.2f} ms "
                  f"({med['before'] / med['after']:.2f}x faster); vs torch {med['torch'] / med['before']:.2f}x -> "
                  f"{med['torch'] / med['after']:.2f}x  (n={t['after']['n']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
