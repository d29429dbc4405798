"""Scaled dot-product attention: the whole computation of one head (or of many, batched).

    scores  = Q K^T / sqrt(d_k)          (..., N_q, N_k)
    weights = softmax(scores) over keys   (..., N_q, N_k)
    out     = weights V                   (..., N_q, d_v)

Each query row's softmax needs only that row's scores, so the three steps can also run on a
block of query rows at a time. ``_attend`` does exactly that when no tracer is watching (see
``SCORE_BLOCK_BYTES``); with a tracer it runs each step once at full size, as written above,
so the recorded shapes and MACs are the textbook ones. Both give the same numbers.
"""

from __future__ import annotations

import math

import numpy as np

from .checks import check_float_array, check_mask, check_memory
from .softmax import softmax_
from .trace import NO_TRACER

# Size of one block of scores (..., rows, N_k) in the blocked path. A block this size stays in
# the CPU's last-level cache from the Q K^T matmul through the softmax's passes to the weighted
# sum, and its memory is reused block after block instead of page-faulting a fresh N^2 array.
# Below one block (e.g. h=8, N <= 724 in float32, B=1) nothing changes. See benchmarks/RESULTS.md.
SCORE_BLOCK_BYTES = 16 * 2**20
# ... but never more blocks than this. Every block costs B*h small BLAS calls per matmul, and on a
# busy machine each multi-threaded BLAS call can wait for a free core: with 64 blocks (h=64,
# N=2048) one forward took 12 s under load, against 0.56 s for torch. Above 8 blocks the extra cache reuse
# bought little even on an idle core.
MAX_SCORE_BLOCKS = 8


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
    return _attend(q, k, v, mask, scale, tracer=tracer)


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


def _attend(q, k, v, mask, scale: float, *, tracer=None, keep_weights: bool = True):
    """``scaled_dot_product_attention`` on arguments already checked; ``weights`` is None
    unless ``keep_weights``.

    With a ``tracer`` the steps run once over all query rows and are recorded. Without one they
    run on blocks of query rows (``SCORE_BLOCK_BYTES``); the weights, when kept, are written
    block by block straight into their final (..., N_q, N_k) array.
    """
    q = q * q.dtype.type(scale)  # (..., N_q, d_k); scaling q costs N*d_k, scaling the scores N^2
    k_t = np.swapaxes(k, -1, -2)  # (..., d_k, N_k), a view
    if tracer is not None and tracer is not NO_TRACER:
        scores = tracer.matmul("scores = Q K^T / sqrt(d_k)", q, k_t)  # (..., N_q, N_k)
        if mask is not None:
            np.copyto(scores, -np.inf, where=~mask)  # not allowed -> -inf -> weight exactly 0
        weights = tracer.record("weights = softmax(scores)", softmax_(scores, axis=-1))  # (..., N_q, N_k)
        out = tracer.matmul("head outputs = weights V", weights, v)  # (..., N_q, d_v)
        return out, weights

    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n_q, n_k = q.shape[-2], k.shape[-2]
    out = np.empty((*lead, n_q, v.shape[-1]), dtype=q.dtype)  # (..., N_q, d_v)
    weights = np.empty((*lead, n_q, n_k), dtype=q.dtype) if keep_weights else None  # (..., N_q, N_k)
    rows_by_size = SCORE_BLOCK_BYTES // (math.prod(lead) * n_k * q.itemsize)
    rows_by_count = math.ceil(n_q / MAX_SCORE_BLOCKS)
    rows = min(n_q, max(1, rows_by_size, rows_by_count))  # query rows per block
    # Without kept weights, one block buffer is allocated once and reused by every block.
    block = None if keep_weights else np.empty((*lead, rows, n_k), dtype=q.dtype)  # (..., rows, N_k)
    for start in range(0, n_q, rows):
        blk = slice(start, start + rows)  # a block of query rows (the last may be shorter)
        n_blk = min(rows, n_q - start)
        scores = weights[..., blk, :] if keep_weights else block[..., :n_blk, :]  # (..., n_blk, N_k)
        np.matmul(q[..., blk, :], k_t, out=scores)  # (..., n_blk, d_k) @ (..., d_k, N_k)
        if mask is not None:
            rows_mask = mask[..., blk, :] if mask.ndim >= 2 and mask.shape[-2] != 1 else mask
            np.copyto(scores, -np.inf, where=~rows_mask)  # not allowed -> -inf -> weight exactly 0
        softmax_(scores, axis=-1)  # (..., n_blk, N_k), in place
        np.matmul(scores, v, out=out[..., blk, :])  # (..., n_blk, N_k) @ (..., N_k, d_v) -> (..., n_blk, d_v)
    return out, weights
