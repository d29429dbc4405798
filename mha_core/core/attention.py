"""Scaled dot-product attention: the whole computation of one head (or of many, batched).

    scores  = Q K^T / sqrt(d_k)          (..., N_q, N_k)
    weights = softmax(scores) over keys   (..., N_q, N_k)
    out     = weights V                   (..., N_q, d_v)

These lines are the functions below, as the lessons write them. The score matrix is N_q x N_k,
built whole; ``tiled.py`` computes the same output a tile at a time, for long sequences.
"""

from __future__ import annotations

import numpy as np

from .validate import check_attention, check_softmax, checked


@checked(check_softmax)
def softmax(x, axis=-1, mask=None, *, out=None):  # (..., N_k) -> (..., N_k)
    """Softmax along ``axis``, stable for any finite input.

    Subtracting each row's maximum before ``exp`` keeps every exponent <= 0, so logits of any
    finite size (1e4, 1e30) give no overflow and no NaN.

    Parameters
    ----------
    x : float ndarray
    axis : int, default -1
    mask : bool ndarray broadcastable to ``x``, optional
        True = keep. A masked entry gets weight exactly 0; a row with no kept entry is all zeros
        (not NaN, and not uniform).
    out : ndarray of the shape and dtype of ``x``, optional
        Where to write the result, as numpy's ``out=``; ``out=x`` overwrites ``x`` (attention does
        this with the scores it has just made, so the N_q x N_k array is never copied).

    Returns
    -------
    ndarray of the shape and dtype of ``x``; each row sums to 1 (or 0 if fully masked).
    """
    if mask is not None:
        x = np.where(mask, x, -np.inf)  # masked -> -inf -> exp gives exactly 0
    row_max = np.max(x, axis=axis, keepdims=True)  # (..., 1); -inf for a fully masked row
    e = np.subtract(x, np.where(np.isfinite(row_max), row_max, 0), out=out)  # every exponent <= 0
    np.exp(e, out=e)  # in place: no second array of x's size
    # divide by each row's sum; a fully masked row (sum 0) is divided by 1, so it stays 0
    e /= np.where((total := np.sum(e, axis=axis, keepdims=True)) > 0, total, 1)
    return e


@checked(check_attention)
def scaled_dot_product_attention(q, k, v, mask=None, scale=None, *, max_bytes=None):
    """``softmax(q k^T * scale) v`` over the last two axes; leading axes broadcast.

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional
        True = may attend. A query with no allowed key gets all-zero weights, so a zero output.
    scale : float, optional
        Multiplies the logits. Default ``1 / sqrt(d_k)``, which keeps their variance near 1
        whatever ``d_k`` is.
    max_bytes : int, optional
        Refuse (``MemoryBudgetError``) scores larger than this before allocating; default 2 GiB.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
    weights : ndarray of shape (..., N_q, N_k); each allowed row sums to 1.
    """
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)  # 1/sqrt(d_k), a Python float
    # (..., N_q, d_k) @ (..., d_k, N_k) -> (..., N_q, N_k)
    scores = (q * scale) @ np.swapaxes(k, -1, -2)
    if mask is not None:  # a key that may not be attended scores -inf: its weight is 0
        np.copyto(scores, -np.inf, where=~mask)  # (..., N_q, N_k), in place
    weights = softmax.unchecked(scores, out=scores)  # (..., N_q, N_k), written over the scores
    return weights @ v, weights  # (..., N_q, N_k) @ (..., N_k, d_v) -> (..., N_q, d_v)
