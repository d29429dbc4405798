"""Peak memory of one forward pass at large N, against the score tensor's theoretical size.

numpy reports every array allocation to ``tracemalloc``, so the traced peak during the call
is the most memory the forward held at once (inputs and weights, allocated before the
measurement starts, are not counted). The score tensor ``(B, h, N, N)`` is the one
allocation that grows as N^2; a ratio near 1 means nothing else of that size was made. The tiled
path (``tiled=True``) never builds it: its peak is a few tiles and the output, far below 1.
"""

from __future__ import annotations

import tracemalloc
from functools import partial

import numpy as np

from mha_core import MHAConfig, init_params, multi_head_attention, multi_head_attention_per_head

from .core import D_MODEL

HEADS = 8
LENGTHS = (2048, 4096)
QUICK_LENGTHS = (1024,)


def peak_bytes(fn) -> int:
    """Peak traced allocation (bytes) while ``fn()`` runs, result included."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run(quick: bool, log=print) -> list[dict]:
    """One row per (N, implementation): peak bytes and its ratio to the score tensor."""
    rows = []
    for n in QUICK_LENGTHS if quick else LENGTHS:
        config = MHAConfig(D_MODEL, HEADS)
        rng = np.random.default_rng(0)
        params = init_params(config, rng)
        x = rng.standard_normal((1, n, D_MODEL)).astype(np.float32)  # (B=1, N, d_model)
        score_bytes = HEADS * n * n * x.itemsize  # (B, h, N, N) float32
        calls = {
            "numpy": partial(multi_head_attention, x, params, HEADS),
            "numpy+weights": partial(multi_head_attention, x, params, HEADS, return_weights=True),
            "numpy tiled": partial(multi_head_attention, x, params, HEADS, tiled=True),
            "per_head": partial(multi_head_attention_per_head, x, params, HEADS),
        }
        for name, fn in calls.items():
            peak = peak_bytes(fn)
            rows.append({"impl": name, "h": HEADS, "N": n, "B": 1, "dtype": "float32",
                         "peak_bytes": peak, "score_bytes": score_bytes, "ratio": peak / score_bytes})
            log(f"  N={n} {name}: peak {peak / 2**20:,.0f} MiB = {peak / score_bytes:.2f} x the score tensor "
                f"({score_bytes / 2**20:,.0f} MiB)")
    return rows
