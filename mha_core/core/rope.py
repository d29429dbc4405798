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

from .validate import check_angles, check_apply, checked

DEFAULT_ROPE_BASE = 10_000.0  # the RoFormer paper's base; Llama-style models store their own


@checked(check_angles)
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
    theta = base ** (-np.arange(0, d_k, 2, dtype=np.float64) / d_k)  # (d_k/2,)
    # (N, 1) * (1, d_k/2) -> (N, d_k/2)
    return np.asarray(positions, np.float64)[:, None] * theta[None, :]


@checked(check_apply)
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
    positions = np.arange(x.shape[-2]) if positions is None else positions
    # float64, for accuracy at large positions p
    angles = rope_angles.unchecked(positions, x.shape[-1], base)  # (N, d_k/2)
    cos = np.cos(angles).astype(x.dtype)  # (N, d_k/2)
    sin = np.sin(angles).astype(x.dtype)  # (N, d_k/2)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., N, d_k/2) each: the pairs' two coordinates
    out = np.empty_like(x)  # (..., N, d_k)
    out[..., 0::2] = even * cos - odd * sin  # (..., N, d_k/2)
    out[..., 1::2] = even * sin + odd * cos  # (..., N, d_k/2)
    return out
