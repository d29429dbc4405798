"""Independent references the tests compare mha_core with.

Written from the texts' formulas, in float64, and never calling the code they check: the
causal triangle is built by its definition (no ``mha_core.causal_mask``), the heads are sliced
by hand with their own widths (``d_k`` for queries and keys, ``d_v`` for values), and the
softmax skips disallowed keys explicitly.
"""

from __future__ import annotations

import math

import numpy as np


def reference_causal(n_q: int, n_k: int) -> np.ndarray:
    """Causal mask built by the definition: query i (the (N_k - N_q + i)-th position) sees keys j <= it."""
    offset = n_k - n_q
    return np.array([[j <= i + offset for j in range(n_k)] for i in range(n_q)], dtype=bool).reshape(n_q, n_k)


def allowed_keys(case) -> np.ndarray:
    """The full (B?, h, N_q, N_k) bool "may attend" array a ``strategies.Case`` asks for."""
    allowed = np.ones((*case.lead, case.config.n_heads, case.n_q, case.n_k), bool)
    if case.mask is not None:
        allowed &= case.mask
    if case.causal:
        allowed &= reference_causal(case.n_q, case.n_k)
    return allowed


def attention_by_loops(q, k, v, mask=None, scale=None):
    """One query row at a time: s_j = scale * sum_c q_c k_jc, w_j = exp(s_j - max) / sum, out = sum_j w_j v_j.

    q (N_q, d_k), k (N_k, d_k), v (N_k, d_v), mask (N_q, N_k) or None; Python floats throughout.
    A row with no allowed key gives zero weights and a zero output (the documented contract).
    """
    n_q, d_k = len(q), len(q[0])
    n_k, d_v = len(k), len(v[0])
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    out = [[0.0] * d_v for _ in range(n_q)]
    weights = [[0.0] * n_k for _ in range(n_q)]
    for i in range(n_q):
        allowed = [j for j in range(n_k) if mask is None or mask[i][j]]
        if not allowed:
            continue
        s = {j: scale * sum(float(q[i][c]) * float(k[j][c]) for c in range(d_k)) for j in allowed}
        top = max(s.values())
        e = {j: math.exp(s[j] - top) for j in allowed}
        total = sum(e.values())
        for j in allowed:
            weights[i][j] = e[j] / total
            for c in range(d_v):
                out[i][c] += weights[i][j] * float(v[j][c])
    return np.array(out).reshape(n_q, d_v), np.array(weights).reshape(n_q, n_k)


def reference_mha(x, params, h, x_kv=None, mask=None, n_kv=None):
    """Multi-head attention written from the texts' formulas in float64, independent of mha_core.

    x (N_q, d_model); mask (h, N_q, N_k) bool or None (True = may attend). Head i reads kv
    head j = i // (h // n_kv): columns j*d_k:(j+1)*d_k of K and j*d_v:(j+1)*d_v of V.
    """
    p = {k: v.astype(np.float64) for k, v in params.items()}
    x = x.astype(np.float64)
    x_kv = x if x_kv is None else x_kv.astype(np.float64)
    n_kv = h if n_kv is None else n_kv
    d_k = p["W_Q"].shape[1] // h
    d_v = p["W_V"].shape[1] // n_kv
    Q = x @ p["W_Q"] + p.get("b_Q", 0.0)  # (N_q, h*d_k)
    K = x_kv @ p["W_K"] + p.get("b_K", 0.0)  # (N_k, n_kv*d_k)
    V = x_kv @ p["W_V"] + p.get("b_V", 0.0)  # (N_k, n_kv*d_v)
    heads = []
    for i in range(h):
        j = i // (h // n_kv)
        q, k, v = Q[:, i * d_k:(i + 1) * d_k], K[:, j * d_k:(j + 1) * d_k], V[:, j * d_v:(j + 1) * d_v]
        s = q @ k.T / np.sqrt(d_k)  # (N_q, N_k)
        allowed = np.ones(s.shape, bool) if mask is None else mask[i]
        e = np.where(allowed, np.exp(s - np.where(allowed, s, -np.inf).max(axis=1, keepdims=True)), 0.0)
        total = e.sum(axis=1, keepdims=True)
        w = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
        heads.append(w @ v)  # (N_q, d_v)
    return np.concatenate(heads, axis=1) @ p["W_O"] + p.get("b_O", 0.0)  # (N_q, d_model)


def reference_mha_case(case) -> np.ndarray:
    """``reference_mha`` for a ``strategies.Case``, batch item by batch item: shape of ``case.x``."""
    allowed = allowed_keys(case)
    xs = case.x if case.lead else case.x[None]
    kvs = None if case.x_kv is None else (case.x_kv if case.lead else case.x_kv[None])
    masks = allowed if case.lead else allowed[None]
    h, n_kv = case.config.n_heads, case.config.n_kv
    ref = np.stack([
        reference_mha(xs[b], case.params, h, None if kvs is None else kvs[b], masks[b], n_kv)
        for b in range(len(xs))
    ])
    return ref if case.lead else ref[0]
