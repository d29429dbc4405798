"""Attention masks. Convention everywhere: a bool array where ``True`` means "may attend"."""

from __future__ import annotations

import numpy as np

from .validate import check_causal, check_padding, checked


@checked(check_causal)
def causal_mask(n_q: int, n_k: int | None = None) -> np.ndarray:  # -> (N_q, N_k)
    """Causal (no peeking ahead) mask of shape ``(N_q, N_k)``, True = may attend.

    Query ``i`` may attend key ``j`` when ``j <= i + (N_k - N_q)``. With ``N_q == N_k`` this is
    the lower triangle. When ``N_q < N_k`` (decoding with a KV cache: the queries are the last
    ``N_q`` positions) the triangle is aligned to the bottom right, so the last query sees every
    key. Broadcasting the ``(N_q, N_k)`` result against scores ``(B, h, N_q, N_k)`` applies the
    same mask to every batch item and head.
    """
    n_k = n_q if n_k is None else n_k
    return np.tri(n_q, n_k, k=n_k - n_q, dtype=bool)  # (N_q, N_k)


@checked(check_padding)
def padding_mask(lengths, n_k: int) -> np.ndarray:  # (B,) -> (B, 1, 1, N_k)
    """Key-padding mask ``(B, 1, 1, N_k)``: item ``b`` may attend its first ``lengths[b]`` keys.

    The two singleton axes broadcast over heads and queries.
    """
    keep = np.arange(n_k) < np.asarray(lengths)[:, None]  # (B, N_k)
    return keep[:, None, None, :]  # (B, 1, 1, N_k)
