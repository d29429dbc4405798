"""Splitting the width into heads and merging it back.

``split_heads``: ``(..., N, h*d) -> (..., N, h, d) -> (..., h, N, d)``, a reshape then a transpose.
``merge_heads`` undoes it. Forgetting the transpose (reshaping straight to ``(h, N, d)``)
gives the right shape and the wrong numbers: see ``notebooks/07_pitfalls``.
"""

from __future__ import annotations

import numpy as np

from .checks import check_positive_int


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """Split the last axis into heads: ``(..., N, h*d) -> (..., h, N, d)``.

    Returns a view of ``x`` (no copy) whenever ``x``'s layout allows one, which it does for
    any C-contiguous input.

    Parameters
    ----------
    x : ndarray of shape (..., N, h*d), at least 2-D
    n_heads : int
        ``h``; must divide ``x.shape[-1]``.
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions (..., N, h*d), got shape {x.shape}")
    if 0 in x.shape:
        raise ValueError(f"x must not have an empty axis, got shape {x.shape}")
    h = check_positive_int(n_heads, "n_heads")
    *lead, n, width = x.shape
    if width % h:
        raise ValueError(f"n_heads={h} does not divide the last axis of x (width {width})")
    x = x.reshape(*lead, n, h, width // h)  # (..., N, h, d)
    return np.swapaxes(x, -3, -2)  # (..., h, N, d)


def head_columns(i: int, d: int) -> slice:
    """The columns ``i*d:(i+1)*d`` of a packed ``(d_model, h*d)`` weight that belong to head ``i``.

    ``W_Q[:, head_columns(i, d_k)]`` is head ``i``'s own ``W_Q^i`` (a view); the same slice of
    ``W_O``'s rows is the part of ``W_O`` that reads head ``i``.
    """
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
        raise TypeError(f"i must be a head index (an int >= 0), got {type(i).__name__} {i!r}")
    if i < 0:
        raise ValueError(f"i must be a head index >= 0, got i={i}")
    d = check_positive_int(d, "d")
    return slice(int(i) * d, (int(i) + 1) * d)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """Concatenate heads back into one width: ``(..., h, N, d) -> (..., N, h*d)``.

    This is the "concat" of the texts; head ``i`` lands in columns ``i*d:(i+1)*d``.

    Parameters
    ----------
    x : ndarray of shape (..., h, N, d), at least 3-D
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim < 3:
        raise ValueError(f"x must have at least 3 dimensions (..., h, N, d), got shape {x.shape}")
    if 0 in x.shape:
        raise ValueError(f"x must not have an empty axis, got shape {x.shape}")
    *lead, h, n, d = x.shape
    x = np.swapaxes(x, -3, -2)  # (..., N, h, d)
    return x.reshape(*lead, n, h * d)  # (..., N, h*d)  (copies: the heads are interleaved back)
