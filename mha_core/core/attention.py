"""Scaled dot-product attention: the whole computation of one head (or of many, batched).

    scores  = Q K^T / sqrt(d_k)          (..., N_q, N_k)
    weights = softmax(scores) over keys   (..., N_q, N_k)
    out     = weights V                   (..., N_q, d_v)

``_attend`` is these three lines. Each product goes through ``tracer.matmul(name, a, b)``, which
returns ``a @ b`` (and, with a real ``Tracer``, notes its shape and MACs for the shape ledger).
A long sequence needs the N_q x N_k scores in memory all at once; ``flash.py`` computes the same
numbers a block at a time, and ``mha.py`` chooses which one the layer runs (``attention_path``).
"""

from __future__ import annotations

import numpy as np

from .checks import check_float_array, check_mask, check_memory
from .softmax import softmax_
from .trace import NO_TRACER


def scaled_dot_product_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    scale: float | None = None,
    *,
    max_bytes: int | None = None,
    tracer=None,
) -> tuple[np.ndarray, np.ndarray]:
    """``softmax(q k^T * scale) v`` over the last two axes; leading axes broadcast.

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional
        True = may attend. A query row with no allowed key gets all-zero weights and therefore
        a zero output (not NaN, and not a uniform average).
    scale : float, optional
        Multiplies the logits. Default ``1 / sqrt(d_k)``, which keeps the logits' variance
        near 1 whatever ``d_k`` is.
    max_bytes : int, optional
        Refuse (``MemoryBudgetError``) before allocating scores larger than this;
        default 2 GiB.
    tracer : Tracer, optional
        Records shapes and MACs (see ``mha_core.core.trace``).

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
    weights : ndarray of shape (..., N_q, N_k); each allowed row sums to 1.
    """
    lead, scale = check_attention_args(q, k, v, mask, scale)
    scores_shape = (*lead, q.shape[-2], k.shape[-2])  # (..., N_q, N_k)
    check_memory(scores_shape, q.dtype, max_bytes, "the attention scores")
    return _attend(q, k, v, mask, scale, tracer or NO_TRACER)


def _attend(q, k, v, mask, scale: float, tracer=NO_TRACER) -> tuple[np.ndarray, np.ndarray]:
    """``scaled_dot_product_attention`` on arguments already checked: the formula, step by step.

    ``tracer`` records each step's shape and each matmul's MACs (see ``trace.py``).
    """
    q = q * q.dtype.type(scale)  # (..., N_q, d_k); scaling q costs N*d_k, scaling the scores N^2
    k_t = np.swapaxes(k, -1, -2)  # (..., d_k, N_k), a view
    scores = tracer.matmul("scores = Q K^T / sqrt(d_k)", q, k_t)  # (..., N_q, d_k) @ (..., d_k, N_k) -> (..., N_q, N_k)
    if mask is not None:
        np.copyto(scores, -np.inf, where=~mask)  # not allowed -> -inf -> weight exactly 0
    weights = tracer.record("weights = softmax(scores)", softmax_(scores, axis=-1))  # (..., N_q, N_k), in place
    out = tracer.matmul("head outputs = weights V", weights, v)  # (..., N_q, N_k) @ (..., N_k, d_v) -> (..., N_q, d_v)
    return out, weights


def check_attention_args(q, k, v, mask, scale) -> tuple[tuple[int, ...], float]:
    """Check the arguments shared by every attention function; return the broadcast leading
    shape of q, k and v and the scale (default ``1 / sqrt(d_k)``)."""
    q = check_float_array(q, "q")
    k = check_float_array(k, "k")
    v = check_float_array(v, "v")
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., N, d), got shape {a.shape}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same d_k, got q {q.shape} and k {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same N_k, got k {k.shape} and v {v.shape}")
    try:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the leading axes of q {q.shape}, k {k.shape} and v {v.shape} do not broadcast"
        ) from None
    scores_shape = (*lead, q.shape[-2], k.shape[-2])  # (..., N_q, N_k)
    if mask is not None:
        check_mask(mask, "mask", scores_shape)
    if scale is None:
        scale = 1.0 / np.sqrt(q.shape[-1])
    elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a float, got {type(scale).__name__} {scale!r}")
    elif not np.isfinite(scale):
        raise ValueError(f"scale must be finite, got scale={scale}")
    return lead, float(scale)
