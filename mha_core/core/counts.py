"""Counting: parameters, multiply-accumulates (MACs) and KV-cache bytes.

These are closed-form counts. ``tests/test_counts.py`` checks them against the sizes of the
arrays ``init_params`` makes and against the MACs of one real run (``ledger.trace_config``).
One MAC is one multiply plus one add, so FLOPs ~= 2 x MACs.
"""

from __future__ import annotations

import numpy as np

from .config import MHAConfig
from .validate import check_positive_int


def _check_config(config) -> MHAConfig:
    if not isinstance(config, MHAConfig):
        raise TypeError(f"config must be an MHAConfig, got {type(config).__name__}")
    return config


def count_params(config: MHAConfig) -> dict[str, int]:
    """Parameter count per weight, and ``total``.

    With ``n_kv = h`` this is ``4 * d_model^2`` (+ ``4 * d_model`` biases), whatever ``h`` is.
    """
    c = _check_config(config)
    d, hd, kvd = c.d_model, c.n_heads * c.d_k, c.n_kv * c.d_k
    hv, kvv = c.n_heads * c.d_v, c.n_kv * c.d_v
    counts = {"W_Q": d * hd, "W_K": d * kvd, "W_V": d * kvv, "W_O": hv * d}
    if c.bias:
        counts.update({"b_Q": hd, "b_K": kvd, "b_V": kvv, "b_O": d})
    counts["total"] = sum(counts.values())
    return counts


def count_macs(config: MHAConfig, n: int, *, batch: int = 1,
               n_k: int | None = None) -> dict[str, int]:
    """MACs of one forward pass over ``batch`` sequences of ``N_q = n`` queries and ``N_k`` keys.

    Returns
    -------
    dict with
      ``q_proj, k_proj, v_proj`` : the input projections (``N * d_model * width`` each)
      ``scores``                 : ``Q K^T``, ``h * N_q * N_k * d_k``
      ``weighted_sum``           : ``weights V``, ``h * N_q * N_k * d_v``
      ``out_proj``               : ``concat @ W_O``, ``N_q * h*d_v * d_model``
      ``projections``            : q + k + v + out (grows like N)
      ``attention``              : scores + weighted_sum (grows like N^2)
      ``total``                  : projections + attention
      ``softmax_exps``           : ``h * N_q * N_k`` exponentials, not MACs, not in ``total``
    All are multiplied by ``batch``.
    """
    c = _check_config(config)
    n_q = check_positive_int(n, "n")
    n_k = n_q if n_k is None else check_positive_int(n_k, "n_k")
    b = check_positive_int(batch, "batch")
    d, h, n_kv, d_k, d_v = c.d_model, c.n_heads, c.n_kv, c.d_k, c.d_v
    m = {
        "q_proj": b * n_q * d * h * d_k,
        "k_proj": b * n_k * d * n_kv * d_k,
        "v_proj": b * n_k * d * n_kv * d_v,
        "scores": b * h * n_q * n_k * d_k,
        "weighted_sum": b * h * n_q * n_k * d_v,
        "out_proj": b * n_q * h * d_v * d,
    }
    m["projections"] = m["q_proj"] + m["k_proj"] + m["v_proj"] + m["out_proj"]
    m["attention"] = m["scores"] + m["weighted_sum"]
    m["total"] = m["projections"] + m["attention"]
    m["softmax_exps"] = b * h * n_q * n_k
    return m


def kv_cache_bytes(config: MHAConfig, n_tokens: int, *, n_layers: int = 1, batch: int = 1,
                   dtype=np.float16) -> int:
    """Bytes to cache K and V for ``n_tokens`` positions,
    ``B * layers * N * n_kv * (d_k + d_v) * itemsize``.

    With ``n_kv = h`` that is ``2 * N * d_model * layers`` elements; GQA divides it by ``h / n_kv``.
    """
    c = _check_config(config)
    n = check_positive_int(n_tokens, "n_tokens")
    layers = check_positive_int(n_layers, "n_layers")
    b = check_positive_int(batch, "batch")
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:
        raise TypeError(f"dtype must be a numpy dtype such as np.float16, got {dtype!r}") from None
    return b * layers * n * c.n_kv * (c.d_k + c.d_v) * itemsize
