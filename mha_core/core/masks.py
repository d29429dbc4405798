"""Attention masks. Convention everywhere: a bool array where ``True`` means "may attend"."""

from __future__ import annotations

import numpy as np

from .checks import check_positive_int


def causal_mask(n_q: int, n_k: int | None = None) -> np.ndarray:
    """Causal (no peeking ahead) mask of shape ``(N_q, N_k)``, True = may attend.

    Query ``i`` may attend key ``j`` when ``j <= i + (N_k - N_q)``. With ``N_q == N_k`` this is
    the lower triangle. When ``N_q < N_k`` (decoding with a KV cache: the queries are the last
    ``N_q`` positions) the triangle is aligned to the bottom right, so the last query sees every
    key. Broadcasting the ``(N_q, N_k)`` result against scores ``(B, h, N_q, N_k)`` applies the
    same mask to every batch item and head.
    """
    n_q = check_positive_int(n_q, "n_q")
    n_k = n_q if n_k is None else check_positive_int(n_k, "n_k")
    return np.tri(n_q, n_k, k=n_k - n_q, dtype=bool)  # (N_q, N_k)


def padding_mask(lengths, n_k: int) -> np.ndarray:
    """Key-padding mask ``(B, 1, 1, N_k)``: item ``b`` may attend its first ``lengths[b]`` keys.

    The two singleton axes broadcast over heads and queries.
    """
    n_k = check_positive_int(n_k, "n_k")
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise TypeError(f"lengths must be a 1-D sequence of ints, got {lengths.dtype} of shape {lengths.shape}")
    if lengths.size == 0 or (lengths < 1).any() or (lengths > n_k).any():
        raise ValueError(f"lengths must each be in [1, n_k={n_k}], got {lengths.tolist()}")
    keep = np.arange(n_k) < lengths[:, None]  # (B, N_k)
    return keep[:, None, None, :]  # (B, 1, 1, N_k)
