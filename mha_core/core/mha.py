"""Multi-head attention: the round trip of the lessons, as it runs.

    project   Q = X W_Q, K = X W_K, V = X W_V          (..., N, h*d_k)
    split     (..., N, h*d_k) -> (..., h, N, d_k)      split_heads
    attend    every head at once                        scaled_dot_product_attention
    merge     (..., h, N, d_v) -> (..., N, h*d_v)      merge_heads ("concat")
    project   out = concat W_O                          (..., N, d_model)

The options the lessons teach are plain arguments: a mask or ``causal``, ``n_kv_heads`` (GQA,
MQA), ``x_kv`` (cross-attention), ``rope_base`` (RoPE), ``head_mask`` (switching heads off),
biases in ``params``, and ``tiled`` (long context, ``tiled.py``). ``multi_head_attention_per_head``
is the same layer as a loop over heads, the way lesson 01 explains it; the two must agree.
"""

from __future__ import annotations

import numpy as np

from .attention import scaled_dot_product_attention
from .masks import causal_mask
from .rope import apply_rope
from .tiled import shared_matmul, tiled_attention
from .validate import (
    check_head_index,
    check_layer,
    check_merge,
    check_split,
    checked,
    finite_output,
)


def linear(x, params, name, matmul=np.matmul):  # (..., N, d_in) -> (..., N, d_out)
    """``x @ W_name (+ b_name)`` for ``name`` in Q, K, V, O; ``matmul`` computes the product
    (the tiled layer passes ``tiled.shared_matmul``)."""
    y = matmul(x, params[f"W_{name}"])  # (..., N, d_in) @ (d_in, d_out) -> (..., N, d_out)
    return y if f"b_{name}" not in params else y + params[f"b_{name}"]


@checked(check_split)
def split_heads(x, n_heads):  # (..., N, h*d) -> (..., h, N, d)
    """Split the last axis into ``n_heads`` heads: a reshape, then a transpose (a view, no copy).

    Reshaping straight to ``(h, N, d)`` without the transpose gives the right shape and the wrong
    numbers: see notebook 07.
    """
    # reshape to (..., N, h, d), then swap the N and h axes: (..., h, N, d)
    return np.swapaxes(x.reshape(*x.shape[:-1], n_heads, -1), -3, -2)


@checked(check_merge)
def merge_heads(x):  # (..., h, N, d) -> (..., N, h*d)
    """Concatenate the heads back into one width (the texts' "concat"): head ``i`` lands in
    columns ``i*d:(i+1)*d``."""
    # swap back to (..., N, h, d), then reshape to (..., N, h*d), a copy
    return np.swapaxes(x, -3, -2).reshape(*x.shape[:-3], x.shape[-2], -1)


@checked(check_head_index)
def head_columns(i, d) -> slice:
    """The columns ``i*d:(i+1)*d`` of a packed ``(d_model, h*d)`` weight that belong to head ``i``:
    ``W_Q[:, head_columns(i, d_k)]`` is head i's ``W_Q^i``; the same rows of ``W_O`` read head i."""
    return slice(int(i) * d, (int(i) + 1) * d)


@checked(check_layer, after=finite_output)
def multi_head_attention(x, params, n_heads, *, x_kv=None, mask=None, causal=False, n_kv_heads=None,
                         head_mask=None, rope_base=None, tiled=False, return_weights=False,
                         max_bytes=None):
    """Multi-head attention, every head at once.

    Parameters
    ----------
    x : ndarray of shape (N_q, d_model) or (B, N_q, d_model), float32 or float64
    params : dict
        ``W_Q (d_model, h*d_k)``, ``W_K (d_model, n_kv*d_k)``, ``W_V (d_model, n_kv*d_v)``,
        ``W_O (h*d_v, d_model)``, optional ``b_Q, b_K, b_V, b_O``; the dtype of ``x``.
    n_heads : int
        ``h``.
    x_kv : ndarray of shape (N_k, d_model) or (B, N_k, d_model), optional
        Keys and values come from here (cross-attention); default ``x`` (self-attention).
    mask : bool ndarray broadcastable to (B, h, N_q, N_k), optional
        True = may attend. A query with no allowed key outputs zeros before ``W_O``.
    causal : bool, default False
        AND the causal mask (``causal_mask``) into ``mask``: no query sees a later key.
    n_kv_heads : int, optional
        ``n_kv`` for GQA/MQA; default ``h``. Query head ``i`` reads key/value head
        ``i // (h/n_kv)``.
    head_mask : array of shape (h,), optional
        Multiplies each head's output before ``W_O``; 0 switches a head off.
    rope_base : float, optional
        RoPE: rotate every query and key head by its position (0, 1, ...) before the scores
        (Llama-style models). Default None: no rotation.
    tiled : bool, default False
        Run ``tiled_attention`` (an online softmax over tiles of keys: memory O(N), not O(N^2))
        instead of the formula. The same outputs to float rounding; no weights.
    return_weights : bool, default False
        Also return the attention weights, (B, h, N_q, N_k) (no B axis for 2-D ``x``).
    max_bytes : int, optional
        Limit for the score tensor, default 2 GiB; a larger one fails with ``MemoryBudgetError``
        before anything is allocated.

    Returns
    -------
    out : ndarray of the shape and dtype of ``x``
    weights : ndarray of shape (..., h, N_q, N_k), only with ``return_weights``
    """
    x_kv, n_kv = (x if x_kv is None else x_kv), (n_kv_heads or n_heads)
    matmul = shared_matmul if tiled else np.matmul  # tiled: projections on its worker threads too
    q = split_heads.unchecked(linear(x, params, "Q", matmul), n_heads)  # (..., h, N_q, d_k)
    k = split_heads.unchecked(linear(x_kv, params, "K", matmul), n_kv)  # (..., n_kv, N_k, d_k)
    v = split_heads.unchecked(linear(x_kv, params, "V", matmul), n_kv)  # (..., n_kv, N_k, d_v)
    if rope_base is not None:  # RoPE: turn each query and key by its position, before the scores
        q, k = apply_rope.unchecked(q, base=rope_base), apply_rope.unchecked(k, base=rope_base)
    if n_kv != n_heads:  # GQA/MQA: each key/value head serves h/n_kv query heads, side by side
        k, v = (np.repeat(a, n_heads // n_kv, axis=-3) for a in (k, v))  # (..., h, N_k, d_k or d_v)
    if tiled:  # long context, the caller's choice: never the N_q x N_k scores (tiled.py)
        heads, weights = tiled_attention.unchecked(q, k, v, mask, causal=causal), None
    else:
        if causal:  # (N_q, N_k), broadcast over batch and heads
            mask = (causal_mask.unchecked(q.shape[-2], k.shape[-2])
                    & (True if mask is None else mask))
        heads, weights = scaled_dot_product_attention.unchecked(q, k, v, mask)  # (..., h, N_q, d_v)
    if head_mask is not None:  # 0 switches head i off before W_O
        heads = heads * np.asarray(head_mask, heads.dtype)[:, None, None]  # (..., h, N_q, d_v)
    # merge: (..., h, N_q, d_v) -> (..., N_q, h*d_v); then @ W_O -> (..., N_q, d_model)
    out = linear(merge_heads.unchecked(heads), params, "O", matmul)
    return (out, weights) if return_weights else out


@checked(check_layer, after=finite_output)
def multi_head_attention_per_head(x, params, n_heads, *, x_kv=None, mask=None, causal=False,
                                  n_kv_heads=None, head_mask=None, rope_base=None, tiled=False,
                                  return_weights=False, max_bytes=None):
    """The same layer as a loop over heads, the way lesson 01 explains it; arguments as for
    ``multi_head_attention`` (``tiled`` is ignored: every head's weights are built).

    Head ``i`` uses its own columns ``W_Q[:, i*d_k:(i+1)*d_k]`` and, with ``j = i // (h/n_kv)``,
    ``W_K[:, j*d_k:(j+1)*d_k]`` and ``W_V[:, j*d_v:(j+1)*d_v]``. The heads' outputs are
    concatenated along the width and multiplied by ``W_O``.
    """
    x_kv, h, n_kv = (x if x_kv is None else x_kv), n_heads, (n_kv_heads or n_heads)
    d_k, d_v = params["W_Q"].shape[1] // h, params["W_V"].shape[1] // n_kv
    if causal:
        mask = causal_mask.unchecked(x.shape[-2], x_kv.shape[-2]) & (True if mask is None else mask)
    if mask is not None:
        # (..., h, N_q, N_k), a view
        mask = np.broadcast_to(mask, (*x.shape[:-2], h, x.shape[-2], x_kv.shape[-2]))
    outputs, weights = [], []
    for i in range(h):
        j = i // (h // n_kv)  # the key/value head that query head i reads
        q_i = _head_linear(x, params, "Q", head_columns.unchecked(i, d_k))  # (..., N_q, d_k)
        k_j = _head_linear(x_kv, params, "K", head_columns.unchecked(j, d_k))  # (..., N_k, d_k)
        v_j = _head_linear(x_kv, params, "V", head_columns.unchecked(j, d_v))  # (..., N_k, d_v)
        if rope_base is not None:
            q_i = apply_rope.unchecked(q_i, base=rope_base)  # (..., N_q, d_k)
            k_j = apply_rope.unchecked(k_j, base=rope_base)  # (..., N_k, d_k)
        mask_i = None if mask is None else mask[..., i, :, :]  # (..., N_q, N_k)
        # head i's output (..., N_q, d_v) and its weights (..., N_q, N_k)
        head_i, w_i = scaled_dot_product_attention.unchecked(q_i, k_j, v_j, mask_i)
        outputs.append(head_i if head_mask is None else head_i * head_mask[i])
        weights.append(w_i)
    # concat: (..., N_q, h*d_v); then @ W_O -> (..., N_q, d_model)
    out = linear(np.concatenate(outputs, axis=-1), params, "O")
    # the heads' weights stacked: (..., h, N_q, N_k)
    return (out, np.stack(weights, axis=-3)) if return_weights else out


def _head_linear(x, params, name, cols):  # (..., N, d_in) -> (..., N, d)
    """One head's projection: ``x @ W_name[:, cols] (+ b_name[cols])``."""
    y = x @ params[f"W_{name}"][:, cols]  # (..., N, d_in) @ (d_in, d) -> (..., N, d)
    return y if f"b_{name}" not in params else y + params[f"b_{name}"][cols]
