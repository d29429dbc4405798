"""Decoding one token at a time with a KV cache (MHA, GQA, MQA).

A decoder generates token ``t`` after tokens ``0 .. t-1``. Causal attention means that the keys
and values of the earlier tokens never change, so they are computed once, kept in a cache, and
each new token only computes its own query, key and value, appends the key and value, and
attends over the cache. ``decode`` runs that loop over a whole sequence and must give the same
output as ``multi_head_attention(x, ..., causal=True)`` (the tests check it).

With ``n_kv`` key/value heads (GQA; MQA is ``n_kv = 1``) the cache holds ``n_kv`` heads instead of
``h``, so every step reads ``h / n_kv`` times fewer cached bytes.

Symbols: ``B`` batch (optional), ``t`` tokens cached so far, ``h`` query heads, ``n_kv``
key/value heads (``h/n_kv`` query heads per key/value head), ``d_k``/``d_v`` head widths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .attention import scaled_dot_product_attention
from .mha import linear, split_heads
from .rope import apply_rope
from .validate import check_decode, check_decode_step, check_kv_cache_init, check_prefill, checked


@dataclass
class KVCache:
    """Keys and values of the tokens seen so far, in arrays allocated once for ``max_tokens``.

    Attributes
    ----------
    K : ndarray of shape (..., n_kv, max_tokens, d_k)
    V : ndarray of shape (..., n_kv, max_tokens, d_v)
    length : int
        Tokens stored so far; ``K[..., :length, :]`` is valid.
    """

    K: np.ndarray
    V: np.ndarray
    length: int = 0

    @property
    def max_tokens(self) -> int:
        return self.K.shape[-2]

    @property
    def n_kv(self) -> int:
        return self.K.shape[-3]

    @property
    def nbytes(self) -> int:
        """Bytes of the ``length`` tokens stored (what a step reads), not of the allocation."""
        stored = self.K[..., : self.length, :].size + self.V[..., : self.length, :].size
        return stored * self.K.itemsize


@checked(check_kv_cache_init)
def init_kv_cache(params, n_heads, max_tokens, *, n_kv_heads=None, batch=None,
                  max_bytes=None) -> KVCache:
    """An empty cache for ``max_tokens`` tokens of the layer ``params`` (the dtype of ``params``).

    Parameters
    ----------
    params : dict
        The layer's weights, as for ``multi_head_attention``.
    n_heads : int
        ``h``.
    max_tokens : int
        Room to allocate.
    n_kv_heads : int, optional
        ``n_kv``; default ``h``.
    batch : int, optional
        ``B``; default no batch axis.
    max_bytes : int, optional
        Limit for the allocation (default 2 GiB); a larger cache fails before allocating.

    Returns
    -------
    KVCache with ``K`` of shape (B, n_kv, max_tokens, d_k) (no ``B`` when ``batch`` is None).
    """
    n_kv = n_kv_heads or n_heads
    lead = () if batch is None else (batch,)
    d_k, d_v = params["W_K"].shape[1] // n_kv, params["W_V"].shape[1] // n_kv
    # (..., n_kv, max_tokens, d_k) and (..., n_kv, max_tokens, d_v)
    K = np.zeros((*lead, n_kv, max_tokens, d_k), params["W_K"].dtype)
    V = np.zeros((*lead, n_kv, max_tokens, d_v), params["W_V"].dtype)
    return KVCache(K, V)


@checked(check_prefill)
def prefill(x, params, n_heads, cache, *, n_kv_heads=None, rope_base=None) -> KVCache:
    """Store the keys and values of a prompt ``x`` in an empty ``cache`` (one matmul each).

    The prompt's own outputs are those of ``multi_head_attention(x, ..., causal=True)``; this
    only fills the cache so that ``decode_step`` can continue after the prompt.

    Parameters
    ----------
    x : ndarray of shape (N, d_model) or (B, N, d_model)
    params, n_heads, n_kv_heads, rope_base : as for ``multi_head_attention``
    cache : KVCache
        Empty (``length == 0``), from ``init_kv_cache``.

    Returns
    -------
    the same ``cache``, now with ``length == N``.
    """
    n, n_kv = x.shape[-2], n_kv_heads or n_heads
    K = split_heads.unchecked(linear(x, params, "K"), n_kv)  # (..., n_kv, N, d_k)
    if rope_base is not None:  # keys are cached rotated, each by its own position
        K = apply_rope.unchecked(K, base=rope_base)  # (..., n_kv, N, d_k)
    cache.K[..., :n, :] = K
    cache.V[..., :n, :] = split_heads.unchecked(linear(x, params, "V"), n_kv)  # (..., n_kv, N, d_v)
    cache.length = n
    return cache


@checked(check_decode_step)
def decode_step(x_t, params, n_heads, cache, *, n_kv_heads=None, rope_base=None,
                return_weights=False):
    """One new token: append its key and value to ``cache`` and attend over every cached token.

    Parameters
    ----------
    x_t : ndarray of shape (d_model,) or (B, d_model)
        The new token (its position is ``cache.length``).
    params, n_heads, n_kv_heads : as for ``multi_head_attention``
    cache : KVCache
        Updated in place (``length`` grows by 1).
    rope_base : float, optional
        As for ``multi_head_attention``: the new query and key are rotated by the token's
        absolute position ``cache.length`` (the cached keys were rotated when stored).
    return_weights : bool, default False
        Also return the new token's attention over the ``t + 1`` cached tokens.

    Returns
    -------
    out : ndarray of the shape of ``x_t``: the layer's output for the new token.
    weights : ndarray of shape (..., h, t + 1), only with ``return_weights``
    """
    t, lead, h, n_kv = cache.length, x_t.shape[:-1], n_heads, n_kv_heads or n_heads
    x1 = x_t[..., None, :]  # (..., 1, d_model): the new token as a sequence of one
    q = split_heads.unchecked(linear(x1, params, "Q"), h)  # (..., h, 1, d_k)
    k = split_heads.unchecked(linear(x1, params, "K"), n_kv)  # (..., n_kv, 1, d_k)
    if rope_base is not None:  # RoPE at the token's absolute position t
        q, k = apply_rope.unchecked(q, [t], rope_base), apply_rope.unchecked(k, [t], rope_base)
    cache.K[..., t:t + 1, :] = k
    # (..., n_kv, 1, d_v)
    cache.V[..., t:t + 1, :] = split_heads.unchecked(linear(x1, params, "V"), n_kv)
    cache.length = t + 1
    # (..., n_kv, t+1, d_k), (..., n_kv, t+1, d_v)
    K, V = cache.K[..., : t + 1, :], cache.V[..., : t + 1, :]
    # GQA without copying the cache: the h/n_kv query heads of a group are the query rows of its
    # key/value head. No mask: the future is not in the cache.
    q = q.reshape(*lead, n_kv, h // n_kv, q.shape[-1])  # (..., n_kv, h/n_kv, d_k)
    # (..., n_kv, h/n_kv, d_v), (..., n_kv, h/n_kv, t+1)
    heads, w = scaled_dot_product_attention.unchecked(q, K, V)
    # the groups' rows are the h heads in order: (..., h*d_v) -> (..., d_model)
    out = linear(heads.reshape(*lead, -1), params, "O")
    return (out, w.reshape(*lead, h, t + 1)) if return_weights else out  # weights (..., h, t+1)


@checked(check_decode)
def decode(x, params, n_heads, *, n_kv_heads=None, rope_base=None):
    """Run ``x`` through the layer one token at a time with a KV cache.

    Parameters
    ----------
    x : ndarray of shape (N, d_model) or (B, N, d_model)
    params, n_heads, n_kv_heads, rope_base : as for ``multi_head_attention``

    Returns
    -------
    ndarray of the shape of ``x``; equals ``multi_head_attention(x, ..., causal=True)`` up to
    float rounding.
    """
    cache = init_kv_cache.unchecked(params, n_heads, x.shape[-2], n_kv_heads=n_kv_heads,
                                    batch=x.shape[0] if x.ndim == 3 else None)
    # N outputs of shape (..., d_model)
    steps = [decode_step.unchecked(x[..., t, :], params, n_heads, cache, n_kv_heads=n_kv_heads,
                                   rope_base=rope_base) for t in range(x.shape[-2])]
    return np.stack(steps, axis=-2)  # (..., N, d_model)
