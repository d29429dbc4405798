"""A numerically stable, mask-aware softmax."""

from __future__ import annotations

import numpy as np

from .checks import check_float_array, check_mask


def softmax(x: np.ndarray, axis: int = -1, mask: np.ndarray | None = None) -> np.ndarray:
    """Softmax along ``axis``, stable for any finite input.

    Subtracting each row's maximum before ``exp`` keeps every exponent <= 0, so logits of any
    finite magnitude (1e4, 1e30) give no overflow and no NaN.

    Parameters
    ----------
    x : float ndarray
    axis : int, default -1
    mask : bool ndarray broadcastable to ``x``, optional
        True = keep. Masked entries get weight exactly 0. A row with no kept entry is all
        zeros (not NaN, and not uniform).

    Returns
    -------
    ndarray of the same shape and dtype as ``x``; each row sums to 1 (or 0 if fully masked).
    """
    x = check_float_array(x, "x")
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int, got {type(axis).__name__}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of range for x with {x.ndim} dimensions")
    out = x.copy()
    if mask is not None:
        check_mask(mask, "mask", x.shape)
        np.copyto(out, -np.inf, where=~mask)  # masked logits -> -inf -> weight 0
    return softmax_(out, axis)


def softmax_(s: np.ndarray, axis: int = -1) -> np.ndarray:
    """In-place softmax of a fresh logits array ``s`` (entries may be -inf = masked). Unchecked.

    The trailing underscore marks the in-place variant; ``scaled_dot_product_attention`` uses it
    on the scores it has just allocated, so the N^2 tensor is never copied.
    """
    row_max = np.max(s, axis=axis, keepdims=True)
    row_max[~np.isfinite(row_max)] = 0.0  # fully masked row: max is -inf; use 0 to avoid inf - inf
    s -= row_max  # every logit <= 0 now
    np.exp(s, out=s)  # in (0, 1], masked entries exp(-inf) = 0
    total = np.sum(s, axis=axis, keepdims=True)
    # Multiply by 1/total (0 for a fully masked row, which so stays all zeros): about twice as
    # fast as a masked np.divide(s, total, where=total > 0) over the whole (N_q, N_k) array.
    s *= np.divide(1, total, out=np.zeros_like(total), where=total > 0)
    return s
