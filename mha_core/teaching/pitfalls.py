"""The classic multi-head attention mistakes, written down on purpose.

Each function here mirrors a correct ``mha_core`` function with exactly ONE deliberate error,
marked ``<- the error`` in the code. They exist for two reasons:

* ``notebooks/07_pitfalls`` runs them next to the correct code and measures the damage;
* ``mha_core.teaching.exercises`` runs them on the same seeded inputs as a reader's attempt, so a
  wrong attempt can be named ("your output matches attention with the scores divided by
  sqrt(d_model)").

Never use them for anything else. ``PITFALLS`` maps each mistake's name to its function and a
one-line explanation. ``attention_entropy`` measures how spread out attention weights are.

Symbols: ``h`` heads, ``N_q``/``N_k`` query/key lengths, ``d_k``/``d_v`` per-head widths,
``d_model = h * d_k``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from ..core.attention import scaled_dot_product_attention, softmax
from ..core.ledger import head_outputs
from ..core.masks import causal_mask
from ..core.mha import merge_heads, split_heads
from ..core.validate import (
    BIAS_NAMES,
    WEIGHT_NAMES,
    check_float_array,
    check_layer,
    check_mask,
    check_positive_int,
)

__all__ = [
    "PITFALLS",
    "Pitfall",
    "attention_entropy",
    "attention_ignoring_mask",
    "attention_mask_after_softmax",
    "attention_mask_by_multiplying",
    "attention_mask_inverted",
    "attention_scaled_by_d_k",
    "attention_scaled_by_sqrt_d_model",
    "attention_softmax_over_queries",
    "attention_without_scale",
    "causal_mask_inverted",
    "causal_mask_upper",
    "causal_mask_without_diagonal",
    "layer_with",
    "merge_heads_without_transpose",
    "multi_head_attention_merge_without_transpose",
    "multi_head_attention_split_without_transpose",
    "multi_head_attention_transposed_weights",
    "multi_head_attention_without_transpose",
    "multi_head_attention_without_w_o",
    "softmax_over_queries",
    "softmax_without_max_subtraction",
    "split_heads_without_transpose",
]


# --------------------------------------------------------------------------- attention core


def _check_qkv(q, k, v, mask, *, need_heads: bool = False):
    """Validate ``q (..., N_q, d_k)``, ``k (..., N_k, d_k)``, ``v (..., N_k, d_v)`` and the mask."""
    min_ndim = 3 if need_heads else 2
    for a, name in ((q, "q"), (k, "k"), (v, "v")):
        check_float_array(a, name)
    for name, a in (("q", q), ("k", k), ("v", v)):
        if a.ndim < min_ndim:
            axes = "(..., h, N, d)" if need_heads else "(..., N, d)"
            raise ValueError(f"{name} must have at least {min_ndim} dimensions {axes}, got shape {a.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same d_k, got q {q.shape} and k {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same N_k, got k {k.shape} and v {v.shape}")
    if mask is not None:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        check_mask(mask, "mask", (*lead, q.shape[-2], k.shape[-2]))
    return q, k, v


def attention_scaled_by_sqrt_d_model(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """WRONG: divides the logits by ``sqrt(d_model)`` instead of ``sqrt(d_k)``.

    The dot products sum over ``d_k`` terms, so ``sqrt(d_k)`` is what brings them back to unit
    scale. Dividing by ``sqrt(d_model) = sqrt(h * d_k)`` shrinks every logit by a further
    ``sqrt(h)``, which flattens the softmax towards uniform weights.

    Parameters
    ----------
    q : ndarray of shape (..., h, N_q, d_k)
        The heads axis is required: it is how ``d_model = h * d_k`` is known.
    k : ndarray of shape (..., h, N_k, d_k)
    v : ndarray of shape (..., h, N_k, d_v)
    mask : bool ndarray broadcastable to (..., h, N_q, N_k), optional. True = may attend.

    Returns
    -------
    out : ndarray of shape (..., h, N_q, d_v)
    weights : ndarray of shape (..., h, N_q, N_k)
    """
    q, k, v = _check_qkv(q, k, v, mask, need_heads=True)
    d_model = q.shape[-3] * q.shape[-1]  # h * d_k
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d_model)  # (..., h, N_q, N_k)  <- the error
    weights = softmax(scores, axis=-1, mask=mask)  # (..., h, N_q, N_k)
    return weights @ v, weights  # (..., h, N_q, d_v), (..., h, N_q, N_k)


def attention_without_scale(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """WRONG: forgets the ``1/sqrt(d_k)`` scale altogether.

    The logits' spread then grows like ``sqrt(d_k)``, and the softmax saturates towards one-hot
    rows whose gradients vanish.

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional. True = may attend.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
    weights : ndarray of shape (..., N_q, N_k)
    """
    q, k, v = _check_qkv(q, k, v, mask)
    scores = q @ np.swapaxes(k, -1, -2)  # (..., N_q, N_k)  <- the error: no / sqrt(d_k)
    weights = softmax(scores, axis=-1, mask=mask)  # (..., N_q, N_k)
    return weights @ v, weights  # (..., N_q, d_v), (..., N_q, N_k)


def attention_softmax_over_queries(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """WRONG: normalises each column (over the queries) instead of each row (over the keys).

    Each query's weights must be a probability distribution over the keys it reads. Over the
    wrong axis, the columns sum to 1 and a query's row can sum to anything.

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional. True = may attend.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
    weights : ndarray of shape (..., N_q, N_k); its columns sum to 1, its rows do not.
    """
    q, k, v = _check_qkv(q, k, v, mask)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., N_q, N_k)
    weights = softmax(scores, axis=-2, mask=mask)  # (..., N_q, N_k)  <- the error: axis=-2
    return weights @ v, weights  # (..., N_q, d_v), (..., N_q, N_k)


def attention_mask_after_softmax(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """WRONG: applies the mask after the softmax by zeroing weights, without renormalising.

    The softmax has already spread probability over the masked (future) keys, so the remaining
    weights of a row sum to less than 1 and their relative sizes were set with the future in view.

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional. True = may attend.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
    weights : ndarray of shape (..., N_q, N_k); masked rows sum to less than 1.
    """
    q, k, v = _check_qkv(q, k, v, mask)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., N_q, N_k)
    weights = softmax(scores, axis=-1)  # (..., N_q, N_k), every key including the future
    if mask is not None:
        weights = np.where(mask, weights, 0.0).astype(q.dtype)  # (..., N_q, N_k)  <- the error
    return weights @ v, weights  # (..., N_q, d_v), (..., N_q, N_k)


def attention_scaled_by_d_k(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """WRONG: divides the logits by ``d_k`` instead of ``sqrt(d_k)``.

    The logits' standard deviation grows like ``sqrt(d_k)`` (a sum of ``d_k`` unit terms), so
    ``sqrt(d_k)`` brings it back to 1; dividing by ``d_k`` shrinks it to ``1/sqrt(d_k)`` and the
    weights drift towards uniform as heads get wider.

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional. True = may attend.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
    weights : ndarray of shape (..., N_q, N_k)
    """
    q, k, v = _check_qkv(q, k, v, mask)
    scores = q @ np.swapaxes(k, -1, -2) / q.shape[-1]  # (..., N_q, N_k)  <- the error: / d_k
    weights = softmax(scores, axis=-1, mask=mask)  # (..., N_q, N_k)
    return weights @ v, weights  # (..., N_q, d_v), (..., N_q, N_k)


def attention_ignoring_mask(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """WRONG: accepts a mask and never uses it, so every query reads every key (the future too).

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional. Validated, then ignored.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
    weights : ndarray of shape (..., N_q, N_k); blocked keys get weight too.
    """
    q, k, v = _check_qkv(q, k, v, mask)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., N_q, N_k)
    weights = softmax(scores, axis=-1)  # (..., N_q, N_k)  <- the error: mask never applied
    return weights @ v, weights  # (..., N_q, d_v), (..., N_q, N_k)


def attention_mask_inverted(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """WRONG: reads the mask in PyTorch's boolean convention, True = blocked.

    ``torch.nn.MultiheadAttention``'s boolean ``attn_mask`` marks the positions NOT allowed;
    ``mha_core`` (like ``torch.nn.functional.scaled_dot_product_attention``) marks the allowed
    ones. Read the wrong way, a causal mask lets each query see only the future, and the last
    query sees nothing: its row of weights is all zeros here (NaN in a plain ``-inf`` softmax).

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional. True = may attend.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
    weights : ndarray of shape (..., N_q, N_k)
    """
    q, k, v = _check_qkv(q, k, v, mask)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., N_q, N_k)
    blocked = None if mask is None else ~np.asarray(mask)  # <- the error: True read as "blocked"
    weights = softmax(scores, axis=-1, mask=blocked)  # (..., N_q, N_k)
    return weights @ v, weights  # (..., N_q, d_v), (..., N_q, N_k)


def attention_mask_by_multiplying(q, k, v, mask=None) -> tuple[np.ndarray, np.ndarray]:
    """WRONG: multiplies the scores by the mask, so a blocked logit becomes 0 instead of -inf.

    ``exp(0) = 1``: a blocked key still gets a share of the weight, as much as a key whose
    score happened to be 0.

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional. True = may attend.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
    weights : ndarray of shape (..., N_q, N_k); blocked keys get weight.
    """
    q, k, v = _check_qkv(q, k, v, mask)
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., N_q, N_k)
    if mask is not None:
        scores = scores * mask  # (..., N_q, N_k)  <- the error: blocked logits 0, not -inf
    weights = softmax(scores, axis=-1)  # (..., N_q, N_k)
    return weights @ v, weights  # (..., N_q, d_v), (..., N_q, N_k)


# --------------------------------------------------------------------------- softmax


def softmax_over_queries(x: np.ndarray) -> np.ndarray:
    """WRONG: softmax of scores ``(..., N_q, N_k)`` over axis -2 (the queries) instead of -1 (the keys).

    Parameters
    ----------
    x : float ndarray of shape (..., N_q, N_k), at least 2-D

    Returns
    -------
    ndarray of the same shape; its columns sum to 1, its rows do not.
    """
    check_float_array(x, "x")
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions (..., N_q, N_k), got shape {x.shape}")
    return softmax(x, axis=-2)  # (..., N_q, N_k)  <- the error: axis=-2


def softmax_without_max_subtraction(x: np.ndarray) -> np.ndarray:
    """WRONG: the textbook formula ``exp(x) / sum(exp(x))`` without subtracting the row maximum.

    Correct for small logits, but ``exp`` overflows to ``inf`` above about 709 (float64) or 88
    (float32), and ``inf / inf`` is NaN. Overflow warnings are silenced: the NaN is the point.

    Parameters
    ----------
    x : float ndarray of shape (..., N_k)

    Returns
    -------
    ndarray of the same shape; NaN in every row whose largest logit overflows.
    """
    check_float_array(x, "x")
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)  # (..., N_k)  <- the error: no x - max(x) first
        return e / e.sum(axis=-1, keepdims=True)  # (..., N_k)


# --------------------------------------------------------------------------- causal masks


def causal_mask_upper(n: int) -> np.ndarray:
    """WRONG: the upper triangle, so each query may attend itself and the FUTURE, not the past.

    Parameters
    ----------
    n : int
        Sequence length ``N``.

    Returns
    -------
    bool ndarray of shape (N, N), True = may attend.
    """
    n = check_positive_int(n, "n")
    return np.triu(np.ones((n, n), dtype=bool))  # (N, N)  <- the error: triu instead of tril


def causal_mask_without_diagonal(n: int) -> np.ndarray:
    """WRONG: the strict lower triangle, so a token may not attend to itself.

    The first query then has no allowed key at all.

    Parameters
    ----------
    n : int
        Sequence length ``N``.

    Returns
    -------
    bool ndarray of shape (N, N), True = may attend.
    """
    n = check_positive_int(n, "n")
    return np.tri(n, n, k=-1, dtype=bool)  # (N, N)  <- the error: k=-1 drops the diagonal


def causal_mask_inverted(n: int) -> np.ndarray:
    """WRONG: True marks the BLOCKED positions (the opposite of mha_core's True = may attend).

    Both conventions exist in the wild (PyTorch's ``nn.MultiheadAttention`` boolean
    ``attn_mask`` uses True = blocked), so mixing them up is easy and silent.

    Parameters
    ----------
    n : int
        Sequence length ``N``.

    Returns
    -------
    bool ndarray of shape (N, N), True = may NOT attend.
    """
    n = check_positive_int(n, "n")
    return ~np.tri(n, n, dtype=bool)  # (N, N)  <- the error: inverted


# --------------------------------------------------------------------------- heads


def split_heads_without_transpose(x: np.ndarray, n_heads: int) -> np.ndarray:
    """WRONG: ``(..., N, h*d) -> (..., h, N, d)`` by one reshape, without the transpose.

    The shape is right, so nothing crashes, but the reshape reads the values in memory order:
    "head 0" gets the first ``N/h`` tokens' full rows chopped into pieces, not column block 0
    of every token.

    Parameters
    ----------
    x : ndarray of shape (..., N, h*d), at least 2-D
    n_heads : int
        ``h``; must divide ``x.shape[-1]``.

    Returns
    -------
    ndarray of shape (..., h, N, d) holding scrambled values.
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim < 2:
        raise ValueError(f"x must have at least 2 dimensions (..., N, h*d), got shape {x.shape}")
    h = check_positive_int(n_heads, "n_heads")
    *lead, n, width = x.shape
    if width % h:
        raise ValueError(f"n_heads={h} does not divide the last axis of x (width {width})")
    return x.reshape(*lead, h, n, width // h)  # (..., h, N, d)  <- the error: no (N, h, d) + swapaxes


def merge_heads_without_transpose(x: np.ndarray) -> np.ndarray:
    """WRONG: ``(..., h, N, d) -> (..., N, h*d)`` by one reshape, without moving heads back beside each other.

    Row ``n`` of the result should be ``[head_0[n], head_1[n], ...]``; instead it is a run of
    consecutive values of head 0, then head 1, in memory order.

    Parameters
    ----------
    x : ndarray of shape (..., h, N, d), at least 3-D

    Returns
    -------
    ndarray of shape (..., N, h*d) holding scrambled values.
    """
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim < 3:
        raise ValueError(f"x must have at least 3 dimensions (..., h, N, d), got shape {x.shape}")
    *lead, h, n, d = x.shape
    return x.reshape(*lead, n, h * d)  # (..., N, h*d)  <- the error: no swapaxes(-3, -2) first


# --------------------------------------------------------------------------- the whole layer


def multi_head_attention_without_w_o(x, params, n_heads, *, causal: bool = False) -> np.ndarray:
    """WRONG: multi-head attention that stops at the concat and never applies ``W_O``.

    The shape is still ``(..., N, d_model)`` (because ``h * d_v = d_model``), but output columns
    ``i*d_v:(i+1)*d_v`` hold head ``i`` alone: the heads never mix.

    Parameters
    ----------
    x : ndarray of shape (N, d_model) or (B, N, d_model)
    params : dict of weights from ``init_params`` (``W_O`` is ignored, which is the error)
    n_heads : int
        ``h``.
    causal : bool, default False

    Returns
    -------
    ndarray of shape (..., N, h*d_v)
    """
    heads = head_outputs(x, params, n_heads, causal=causal)  # (..., h, N, d_v), validated there
    return merge_heads(heads)  # (..., N, h*d_v)  <- the error: no @ params["W_O"]


def layer_with(x, params, n_heads, causal: bool = False, *, split: bool = False, merge: bool = False,
               transposed: tuple[str, ...] = (), attention: Callable = scaled_dot_product_attention) -> np.ndarray:
    """The layer (no biases) with the split and/or the merge done by one reshape, the ``transposed``
    weights as ``W.T``, and ``attention(q, k, v, mask)`` in place of ``scaled_dot_product_attention``.

    With no mistake asked for it is the right layer: the whole-layer pitfalls are built on it, and so
    is the checkers' view of a wrong attention (a wrong scale, say) at layer level.
    """
    if any(b in params for b in BIAS_NAMES):
        raise ValueError("params must have no biases for the whole-layer pitfalls")
    check_layer(x, params, n_heads, causal=causal)
    W = {w: params[w].T if w in transposed else params[w] for w in WEIGHT_NAMES}  # (d_model, d_model) each
    split_fn = split_heads_without_transpose if split else split_heads
    q, k, v = (split_fn(x @ W[w], n_heads) for w in ("W_Q", "W_K", "W_V"))  # (..., h, N, d_k)
    mask = causal_mask(x.shape[-2]) if causal else None  # (N, N)
    heads, _ = attention(q, k, v, mask)  # (..., h, N, d_v)
    merge_fn = merge_heads_without_transpose if merge else merge_heads
    return merge_fn(heads) @ W["W_O"]  # (..., N, h*d_v) @ (h*d_v, d_model) -> (..., N, d_model)


def multi_head_attention_without_transpose(x, params, n_heads, *, causal: bool = False) -> np.ndarray:
    """WRONG: the layer with ``split_heads_without_transpose`` and ``merge_heads_without_transpose``.

    Every shape is right, so nothing fails; but each "head" mixes rows of different tokens, and
    the merge scatters them back to the wrong places. With ``h = 1`` the two mistakes vanish.

    Parameters
    ----------
    x : ndarray of shape (N, d_model) or (B, N, d_model)
    params : dict of weights from ``init_params`` (no biases, ``n_kv = h``)
    n_heads : int
        ``h``.
    causal : bool, default False

    Returns
    -------
    ndarray of shape (..., N, d_model)
    """
    return layer_with(x, params, n_heads, causal, split=True, merge=True)  # <- the error, twice


def multi_head_attention_split_without_transpose(x, params, n_heads, *, causal: bool = False) -> np.ndarray:
    """WRONG: the layer whose split is one reshape (no transpose) while its merge is right.

    Parameters and result as ``multi_head_attention_without_transpose``.
    """
    return layer_with(x, params, n_heads, causal, split=True)  # <- the error


def multi_head_attention_merge_without_transpose(x, params, n_heads, *, causal: bool = False) -> np.ndarray:
    """WRONG: the layer whose merge is one reshape (no transpose) while its split is right.

    Parameters and result as ``multi_head_attention_without_transpose``.
    """
    return layer_with(x, params, n_heads, causal, merge=True)  # <- the error


def multi_head_attention_transposed_weights(x, params, n_heads, *, causal: bool = False,
                                            transposed=WEIGHT_NAMES) -> np.ndarray:
    """WRONG: ``x @ W.T`` instead of ``x @ W`` for the weights named in ``transposed`` (default all four).

    ``mha_core`` stores ``W_Q`` as ``(d_model, h*d_k)`` and computes ``Q = X @ W_Q``; PyTorch's
    ``nn.Linear`` stores the transpose, ``(out, in)``, and computes ``X @ W.T``. With square
    weights both shapes fit, so nothing fails and every number is wrong.

    Parameters
    ----------
    x : ndarray of shape (N, d_model) or (B, N, d_model)
    params : dict of weights from ``init_params`` (no biases, ``n_kv = h``: every weight is square,
        which ``check_layer_args`` checks)
    n_heads : int
        ``h``.
    causal : bool, default False
    transposed : iterable of str, default all four
        Which of ``"W_Q", "W_K", "W_V", "W_O"`` are used transposed.

    Returns
    -------
    ndarray of shape (..., N, d_model)
    """
    transposed = tuple(transposed)
    if not set(transposed) <= set(WEIGHT_NAMES):
        raise ValueError(f"transposed must name weights among {WEIGHT_NAMES}, got {transposed!r}")
    return layer_with(x, params, n_heads, causal, transposed=transposed)  # <- the error: x @ W.T


# --------------------------------------------------------------------------- measuring damage


def attention_entropy(weights: np.ndarray) -> np.ndarray:
    """Shannon entropy (nats) of each row of attention weights, with ``0 * log 0 = 0``.

    ``log(N_k)`` means uniform attention (the row says nothing); 0 means one-hot.

    Parameters
    ----------
    weights : float ndarray of shape (..., N_q, N_k), non-negative

    Returns
    -------
    ndarray of shape (..., N_q)
    """
    check_float_array(weights, "weights")
    w = weights
    if (w < 0).any():
        raise ValueError("weights must be non-negative (attention weights are probabilities)")
    logw = np.log(np.where(w > 0, w, 1.0))  # (..., N_q, N_k); log 1 = 0 where w == 0
    return -(w * logw).sum(axis=-1)  # (..., N_q)


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class Pitfall:
    """One named mistake.

    Attributes
    ----------
    name : str
        Registry key, e.g. ``"scale_sqrt_d_model"``.
    fn : callable
        The wrong function, same signature as the correct one it mirrors.
    mirrors : str
        The correct ``mha_core`` counterpart.
    answer : str
        What a matching output was computed as: "attention with the scores divided by sqrt(d_model)".
    explanation : str
        One line: what is wrong and why it matters.
    """

    name: str
    fn: Callable
    mirrors: str
    answer: str
    explanation: str


_ALL = (
    Pitfall(
        "scale_sqrt_d_model", attention_scaled_by_sqrt_d_model, "scaled_dot_product_attention",
        "attention with the scores divided by sqrt(d_model)",
        "divide by sqrt(d_k), the width of one head: each score sums d_k products. sqrt(d_model) "
        "shrinks the scores a further sqrt(h) times and the weights come out too flat",
    ),
    Pitfall(
        "scale_missing", attention_without_scale, "scaled_dot_product_attention",
        "attention without the 1/sqrt(d_k) scale",
        "divide the scores by sqrt(d_k): unscaled, they grow with the head width and the softmax "
        "puts nearly all the weight on one key",
    ),
    Pitfall(
        "attention_softmax_over_queries", attention_softmax_over_queries, "scaled_dot_product_attention",
        "attention with the softmax taken over the queries (axis -2)",
        "each query's weights must sum to 1 over the keys: take the softmax over the last axis",
    ),
    Pitfall(
        "mask_after_softmax", attention_mask_after_softmax, "scaled_dot_product_attention",
        "attention masked after the softmax, the blocked weights set to 0 and the rest left as "
        "they were",
        "set the blocked scores to -inf before the softmax; zeroing weights afterwards leaves "
        "rows that sum to less than 1",
    ),
    Pitfall(
        "softmax_over_queries", softmax_over_queries, "softmax",
        "a softmax over axis -2 instead of the last axis",
        "each row along the last axis must sum to 1: sum (and take the maximum) over axis=-1",
    ),
    Pitfall(
        "softmax_unstable", softmax_without_max_subtraction, "softmax",
        "the softmax formula without subtracting the maximum first, where exp overflows to inf "
        "and inf / inf gives NaN",
        "subtract the maximum along the last axis first, x - x.max(axis=-1, keepdims=True): the "
        "result is the same and exp can no longer overflow",
    ),
    Pitfall(
        "causal_mask_upper", causal_mask_upper, "causal_mask",
        "the upper triangle, where each token sees the future",
        "query i may attend keys j <= i, the lower triangle: np.tril(np.ones((n, n), dtype=bool))",
    ),
    Pitfall(
        "causal_mask_without_diagonal", causal_mask_without_diagonal, "causal_mask",
        "the lower triangle without its diagonal, where no token sees itself",
        "keep the diagonal (j <= i, not j < i), otherwise the first token attends to nothing: "
        "np.tril(np.ones((n, n), dtype=bool))",
    ),
    Pitfall(
        "causal_mask_inverted", causal_mask_inverted, "causal_mask",
        "the mask with True and False swapped, True marking the blocked keys",
        "here True means 'may attend': flip your mask with ~, or build np.tril(np.ones((n, n), "
        "dtype=bool))",
    ),
    Pitfall(
        "split_without_transpose", split_heads_without_transpose, "split_heads",
        "a single reshape to (..., h, N, d_k) without the transpose",
        "reshape to (..., N, h, d_k) first, then swap the N and h axes with np.swapaxes(x, -3, "
        "-2); one reshape gives the right shape with each head holding pieces of other tokens",
    ),
    Pitfall(
        "merge_without_transpose", merge_heads_without_transpose, "merge_heads",
        "a single reshape to (..., N, h*d_v) without the transpose",
        "swap the h and N axes back first, np.swapaxes(x, -3, -2), then reshape the last two axes "
        "into one",
    ),
    Pitfall(
        "no_output_projection", multi_head_attention_without_w_o, "multi_head_attention",
        "the heads concatenated without W_O",
        "multiply the concatenated heads by W_O: it is the only place the heads mix",
    ),
    Pitfall(
        "scale_d_k", attention_scaled_by_d_k, "scaled_dot_product_attention",
        "attention with the scores divided by d_k instead of sqrt(d_k)",
        "divide the scores by the square root, sqrt(d_k); dividing by d_k shrinks them too much "
        "and the weights come out too flat",
    ),
    Pitfall(
        "mask_ignored", attention_ignoring_mask, "scaled_dot_product_attention",
        "attention computed without the mask",
        "your function takes mask but never uses it. Pass it on, softmax(scores, axis=-1, "
        "mask=mask), or set the blocked scores (mask False) to -inf before the softmax",
    ),
    Pitfall(
        "mask_inverted", attention_mask_inverted, "scaled_dot_product_attention",
        "attention with the mask read backwards, True as blocked",
        "here True means 'may attend' (some libraries, such as PyTorch's nn.MultiheadAttention, "
        "use the opposite): block where the mask is False, np.where(mask, scores, -np.inf)",
    ),
    Pitfall(
        "mask_multiplied", attention_mask_by_multiplying, "scaled_dot_product_attention",
        "attention with the scores multiplied by the mask",
        "a blocked score must become -inf, not 0 (exp(0) = 1 still gets weight): np.where(mask, "
        "scores, -np.inf)",
    ),
    Pitfall(
        "layer_without_transpose", multi_head_attention_without_transpose, "multi_head_attention",
        "the layer with both the split and the merge done by a single reshape, without the "
        "transposes",
        "split: reshape to (..., N, h, d_k), then swap the N and h axes; merge: swap them back, "
        "then reshape the last two axes into one",
    ),
    Pitfall(
        "layer_split_without_transpose", multi_head_attention_split_without_transpose, "multi_head_attention",
        "the layer with a right merge but a split done by a single reshape, without the transpose",
        "in the split, reshape to (..., N, h, d_k) first, then swap the N and h axes; one reshape "
        "to (..., h, N, d_k) gives each head pieces of other tokens",
    ),
    Pitfall(
        "layer_merge_without_transpose", multi_head_attention_merge_without_transpose, "multi_head_attention",
        "the layer with a right split but a merge done by a single reshape, without the transpose",
        "in the merge, swap the h and N axes back to (..., N, h, d_v) before reshaping the last "
        "two axes into one",
    ),
    Pitfall(
        "weights_transposed", multi_head_attention_transposed_weights, "multi_head_attention",
        "the layer with every weight transposed, x @ W.T",
        "here Q = x @ W_Q, with W_Q of shape (d_model, h*d_k). x @ W.T raised no error only "
        "because these weights are square (d_model x d_model); some libraries store weights "
        "transposed and write x @ W.T",
    ),
)

PITFALLS: MappingProxyType = MappingProxyType({p.name: p for p in _ALL})
"""Read-only registry: pitfall name -> ``Pitfall``."""
