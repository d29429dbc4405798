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

from .attention import _attend
from .checks import check_float_array, check_memory, check_positive_int
from .heads import split_heads
from .layer_args import check_layer_args
from .mha import _project as _project_traced
from .rope import apply_rope
from .trace import NO_TRACER


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
        """Bytes of the ``length`` tokens stored (what a step reads), not of the whole allocation."""
        return (self.K[..., : self.length, :].size + self.V[..., : self.length, :].size) * self.K.itemsize


def init_kv_cache(params: dict, n_heads: int, max_tokens: int, *, n_kv_heads: int | None = None,
                  batch: int | None = None, max_bytes: int | None = None) -> KVCache:
    """An empty cache for ``max_tokens`` tokens of the layer ``params`` (dtype of ``params``).

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
    max_tokens = check_positive_int(max_tokens, "max_tokens")
    lead = () if batch is None else (check_positive_int(batch, "batch"),)
    W_Q = params.get("W_Q") if isinstance(params, dict) else None
    if not isinstance(W_Q, np.ndarray) or W_Q.ndim != 2:
        raise TypeError("params must be a dict of arrays with a 2-D 'W_Q' (see init_params)")
    c = check_layer_args(x=np.zeros((1, W_Q.shape[0]), W_Q.dtype), params=params, n_heads=n_heads,
                         n_kv_heads=n_kv_heads, scores=False)
    check_memory((*lead, c.n_kv, max_tokens, c.d_k + c.d_v), W_Q.dtype, max_bytes, "the KV cache (K and V side by side)")
    K = np.zeros((*lead, c.n_kv, max_tokens, c.d_k), W_Q.dtype)  # (..., n_kv, max_tokens, d_k)
    V = np.zeros((*lead, c.n_kv, max_tokens, c.d_v), W_Q.dtype)  # (..., n_kv, max_tokens, d_v)
    return KVCache(K, V)


def _check_kv_cache(cache, c, lead: tuple[int, ...], n_new: int) -> KVCache:
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a KVCache (see init_kv_cache), got {type(cache).__name__}")
    want = (*lead, c.n_kv, cache.max_tokens, c.d_k)
    if cache.K.shape != want or cache.K.dtype != c.x.dtype:
        raise ValueError(f"cache.K has shape {cache.K.shape} ({cache.K.dtype}), expected {want} ({c.x.dtype}) "
                         f"for n_kv_heads={c.n_kv}, d_k={c.d_k} and this input")
    if cache.length + n_new > cache.max_tokens:
        raise ValueError(f"the cache is full: {cache.length} + {n_new} tokens > max_tokens={cache.max_tokens}; "
                         f"allocate a larger one with init_kv_cache")
    return cache


def _project(x: np.ndarray, params: dict, w: str, b: str) -> np.ndarray:
    """The fused layer's projection, untraced: (..., d_in) -> (..., d_out)."""
    return _project_traced(NO_TRACER, w, x, params[w], params.get(b))


def prefill(x: np.ndarray, params: dict, n_heads: int, cache: KVCache, *,
            n_kv_heads: int | None = None, rope_base: float | None = None) -> KVCache:
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
    x = check_float_array(x, "x", ndims=(2, 3))
    c = check_layer_args(x=x, params=params, n_heads=n_heads, n_kv_heads=n_kv_heads, rope_base=rope_base,
                         scores=False)
    n = x.shape[-2]
    cache = _check_kv_cache(cache, c, x.shape[:-2], n)
    if cache.length:
        raise ValueError(f"prefill needs an empty cache, got one holding {cache.length} tokens")
    K = split_heads(_project(x, params, "W_K", "b_K"), c.n_kv)  # (..., n_kv, N, d_k)
    if c.rope_base is not None:  # cached keys are stored rotated, each by its own position
        K = apply_rope(K, base=c.rope_base)  # (..., n_kv, N, d_k)
    cache.K[..., :n, :] = K
    cache.V[..., :n, :] = split_heads(_project(x, params, "W_V", "b_V"), c.n_kv)  # (..., n_kv, N, d_v)
    cache.length = n
    return cache


def decode_step(x_t: np.ndarray, params: dict, n_heads: int, cache: KVCache, *,
                n_kv_heads: int | None = None, rope_base: float | None = None,
                return_weights: bool = False):
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
    weights : ndarray of shape (..., h, t + 1), only when ``return_weights``
    """
    x_t = check_float_array(x_t, "x_t", ndims=(1, 2))
    c = check_layer_args(x=x_t[..., None, :], params=params, n_heads=n_heads, n_kv_heads=n_kv_heads,
                         rope_base=rope_base, scores=False)
    lead = x_t.shape[:-1]
    cache = _check_kv_cache(cache, c, lead, 1)
    t = cache.length
    q = _project(x_t, params, "W_Q", "b_Q").reshape(*lead, c.n_kv, c.group_size, c.d_k)  # (..., n_kv, h/n_kv, d_k)
    k = _project(x_t, params, "W_K", "b_K").reshape(*lead, c.n_kv, 1, c.d_k)  # (..., n_kv, 1, d_k)
    if c.rope_base is not None:  # RoPE at the token's absolute position t, for its query and key
        q = apply_rope(q.reshape(*lead, c.h, 1, c.d_k), [t], c.rope_base).reshape(q.shape)  # (..., n_kv, h/n_kv, d_k)
        k = apply_rope(k, [t], c.rope_base)  # (..., n_kv, 1, d_k)
    cache.K[..., t, :] = k[..., 0, :]  # (..., n_kv, d_k)
    cache.V[..., t, :] = _project(x_t, params, "W_V", "b_V").reshape(*lead, c.n_kv, c.d_v)  # (..., n_kv, d_v)
    cache.length = t + 1
    K, V = cache.K[..., : t + 1, :], cache.V[..., : t + 1, :]  # (..., n_kv, t+1, d_k), (..., n_kv, t+1, d_v)
    # the core's attention, with the h/n_kv query heads of a group as its query rows; no mask: the
    # future is not in the cache
    heads, w = _attend(q, K, V, None, 1.0 / np.sqrt(c.d_k))  # (..., n_kv, h/n_kv, d_v), (..., n_kv, h/n_kv, t+1)
    concat = heads.reshape(*lead, c.h * c.d_v)  # (..., h*d_v), query heads in order
    out = _project(concat, params, "W_O", "b_O")  # (..., d_model)
    return (out, w.reshape(*lead, c.h, t + 1)) if return_weights else out  # weights (..., h, t+1)


def decode(x: np.ndarray, params: dict, n_heads: int, *, n_kv_heads: int | None = None,
           rope_base: float | None = None) -> np.ndarray:
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
    x = check_float_array(x, "x", ndims=(2, 3))
    c = check_layer_args(x=x, params=params, n_heads=n_heads, n_kv_heads=n_kv_heads, rope_base=rope_base,
                         scores=False)  # no (N, N) scores
    n = x.shape[-2]
    cache = init_kv_cache(params, c.h, n, n_kv_heads=c.n_kv, batch=x.shape[0] if x.ndim == 3 else None)
    steps = [decode_step(x[..., t, :], params, c.h, cache, n_kv_heads=c.n_kv, rope_base=c.rope_base)
             for t in range(n)]  # N x (..., d_model)
    return np.stack(steps, axis=-2)  # (..., N, d_model)
