"""Rotary position embedding (RoPE): positions enter attention as rotations of Q and K.

Learned or sinusoidal position vectors are *added* to the token embeddings before the first
layer. RoPE instead *rotates* each query and each key, inside every layer, between the
projections and the scores (Su et al. 2021, "RoFormer"). The width ``d_k`` is cut into
``d_k / 2`` adjacent pairs ``(x[2i], x[2i+1])``; the pair ``i`` of a vector at position ``p`` is
turned by the angle ``p * theta_i`` with ``theta_i = base ** (-2i / d_k)``:

    x'[2i]   = x[2i] cos(p theta_i) - x[2i+1] sin(p theta_i)
    x'[2i+1] = x[2i] sin(p theta_i) + x[2i+1] cos(p theta_i)

Why it works: rotating ``q`` by ``m theta`` and ``k`` by ``n theta`` turns ``q . k`` into
``q . R((n - m) theta) k``. The score between two tokens depends on their *offset* ``n - m``,
never on where the pair sits in the sentence. Pair 0 turns fastest (one radian per token);
the last pairs turn so slowly that they carry almost pure content.

Layouts: this module rotates adjacent pairs, as the paper and GGUF files do. PyTorch code
(``transformers``' ``rotate_half``) pairs dimension ``i`` with ``i + d_k/2`` instead; the two
layouts differ only by a fixed permutation of the columns of ``W_Q`` and ``W_K``, and give the
same scores.
"""

from __future__ import annotations

import numpy as np

from .checks import check_float_array

DEFAULT_ROPE_BASE = 10_000.0  # the RoFormer paper's base; Llama-style models store their own


def check_rope(base, d_k) -> float:
    """``base`` as a float if RoPE can use it with width ``d_k``: a number > 1 and an even d_k."""
    if isinstance(d_k, bool) or not isinstance(d_k, (int, np.integer)) or d_k < 2 or d_k % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions: d_k must be a positive even int, got d_k={d_k!r}")
    if isinstance(base, bool) or not isinstance(base, (int, float, np.integer, np.floating)):
        raise TypeError(f"the RoPE base must be a number, got {type(base).__name__} {base!r}")
    if not (np.isfinite(base) and base > 1):
        raise ValueError(f"the RoPE base must be a finite number > 1, got {base}")
    return float(base)


def rope_angles(positions, d_k: int, base: float = DEFAULT_ROPE_BASE) -> np.ndarray:
    """The rotation angle of every pair at every position, in float64.

    Parameters
    ----------
    positions : int array of shape (N,)
    d_k : int, even
    base : float, default 10000
        ``theta_i = base ** (-2i / d_k)``; a larger base turns the slow pairs more slowly.

    Returns
    -------
    angles : ndarray of shape (N, d_k // 2), ``positions[:, None] * theta[None, :]``
    """
    base = check_rope(base, d_k)
    positions = np.asarray(positions)
    if positions.ndim != 1 or not np.issubdtype(positions.dtype, np.integer):
        raise ValueError(f"positions must be a 1-D int array, got dtype {positions.dtype} and shape {positions.shape}")
    theta = base ** (-np.arange(0, d_k, 2, dtype=np.float64) / d_k)  # (d_k/2,)
    return positions.astype(np.float64)[:, None] * theta[None, :]  # (N, 1) * (1, d_k/2) -> (N, d_k/2)


def apply_rope(x, positions=None, base: float = DEFAULT_ROPE_BASE) -> np.ndarray:
    """Rotate every adjacent pair of ``x``'s last axis by its position's angle.

    Parameters
    ----------
    x : ndarray of shape (..., N, d_k), float32 or float64
        Queries or keys, one head or many (e.g. (B, h, N, d_k)).
    positions : int array of shape (N,), optional
        The position of each of the N rows; default ``0, 1, ..., N-1``.
    base : float, default 10000

    Returns
    -------
    ndarray of the same shape and dtype as ``x``; each pair keeps its length.
    """
    x = check_float_array(x, "x")
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., N, d_k), got shape {x.shape}")
    n, d_k = x.shape[-2], x.shape[-1]
    if positions is None:
        positions = np.arange(n)
    positions = np.asarray(positions)
    if positions.shape != (n,):
        raise ValueError(f"positions must have shape (N,) = ({n},), got {positions.shape}")
    angles = rope_angles(positions, d_k, base)  # (N, d_k/2), float64 for accuracy at large p
    cos = np.cos(angles).astype(x.dtype)  # (N, d_k/2)
    sin = np.sin(angles).astype(x.dtype)  # (N, d_k/2)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., N, d_k/2) each: the pairs' two coordinates
    out = np.empty_like(x)  # (..., N, d_k)
    out[..., 0::2] = even * cos - odd * sin  # (..., N, d_k/2)
    out[..., 1::2] = even * sin + odd * cos  # (..., N, d_k/2)
    return out
