"""The backward pass of attention, written by hand: one line per gradient.

Each forward function here returns ``(out, saved)``, the output and the intermediate arrays its
backward needs; the backward takes ``(dout, saved)`` and returns a dict of gradients with the
same keys and shapes as the inputs it differentiates.

Scaled dot-product attention (one head, or many batched over leading axes)::

    scores  = scale * q k^T        dq = scale * dscores k          (..., N_q, d_k)
    weights = softmax(scores)      dk = scale * dscores^T q        (..., N_k, d_k)
    out     = weights v            dv = weights^T dout             (..., N_k, d_v)

    dweights = dout v^T
    dscores  = weights * (dweights - sum(dweights * weights, over keys))

A masked score is ``-inf``, its weight is exactly 0, so its ``dscores`` is exactly 0 too:
masks need no special case in the backward pass.

Multi-head attention adds the projections, the split into heads, GQA's shared key/value heads
(their gradient is the sum over the query heads that read them) and ``W_O``. ``mha_forward`` runs
the layer's own pieces (``linear``, ``split_heads``, ``scaled_dot_product_attention``,
``merge_heads``) in the layer's order and keeps every intermediate array; the tests check that
its output is ``multi_head_attention``'s, and the shape ledger (``ledger.py``) lists the same
intermediates.

Symbols: ``B`` batch (optional), ``N_q``/``N_k``, ``h``, ``n_kv``, ``d_k``, ``d_v``, ``d_model``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .attention import scaled_dot_product_attention
from .masks import causal_mask
from .mha import linear, merge_heads, split_heads
from .rope import apply_rope
from .validate import check_attention, check_float_array, check_forward, checked

Saved = dict[str, Any]  # what a forward function saves for its backward: arrays and sizes by name


def _unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes that broadcasting added or stretched, back to ``shape``."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)  # drop a leading axis that broadcasting added
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True) if stretched else grad


def _check_dout(dout, shape: tuple[int, ...]) -> np.ndarray:
    check_float_array(dout, "dout")
    if dout.shape != tuple(shape):
        raise ValueError(f"dout must have the forward output's shape {tuple(shape)}, "
                         f"got {dout.shape}")
    return dout


def _check_saved(saved, kind: str) -> Saved:
    if not isinstance(saved, dict) or saved.get("kind") != kind:
        got = saved.get("kind") if isinstance(saved, dict) else type(saved).__name__
        raise TypeError(f"saved must be what {kind}_forward returned as saved, got {got!r}")
    return saved


# ---------------------------------------------------------------------------------------------
# scaled dot-product attention


@checked(check_attention)
def attention_forward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    scale: float | None = None,
) -> tuple[np.ndarray, Saved]:
    """``scaled_dot_product_attention`` that also returns what its backward pass needs.

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional
        True = may attend.
    scale : float, optional
        Default ``1 / sqrt(d_k)``.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
    saved : dict
        ``q, k, v, weights, scale``; pass it to ``attention_backward``.
    """
    out, weights = scaled_dot_product_attention.unchecked(q, k, v, mask, scale)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else float(scale)
    return out, {"kind": "attention", "q": q, "k": k, "v": v, "weights": weights, "scale": scale}


def attention_backward(dout: np.ndarray, saved: Saved) -> dict[str, np.ndarray]:
    """Gradients of ``attention_forward`` with respect to ``q``, ``k`` and ``v``.

    Parameters
    ----------
    dout : ndarray of shape (..., N_q, d_v)
        Gradient of the loss with respect to the forward output.
    saved : dict
        From ``attention_forward``.

    Returns
    -------
    dict with ``q (..., N_q, d_k)``, ``k (..., N_k, d_k)``, ``v (..., N_k, d_v)``, each of the
    shape of the forward input (gradients of broadcast inputs are summed back).
    """
    c = _check_saved(saved, "attention")
    q, k, v, weights, scale = c["q"], c["k"], c["v"], c["weights"], c["scale"]
    lead = weights.shape[:-2]
    dout = _check_dout(dout, (*lead, q.shape[-2], v.shape[-1]))
    dweights = dout @ np.swapaxes(v, -1, -2)  # (..., N_q, d_v) @ (..., d_v, N_k) -> (..., N_q, N_k)
    dscores = weights * (dweights - (dweights * weights).sum(-1, keepdims=True))  # (..., N_q, N_k)
    dq = scale * dscores @ k  # (..., N_q, N_k) @ (..., N_k, d_k) -> (..., N_q, d_k)
    # (..., N_k, N_q) @ (..., N_q, d_k) -> (..., N_k, d_k)
    dk = scale * np.swapaxes(dscores, -1, -2) @ q
    dv = np.swapaxes(weights, -1, -2) @ dout  # (..., N_k, N_q) @ (..., N_q, d_v) -> (..., N_k, d_v)
    return {"q": _unbroadcast(dq, q.shape), "k": _unbroadcast(dk, k.shape),
            "v": _unbroadcast(dv, v.shape)}


# ---------------------------------------------------------------------------------------------
# multi-head attention


@checked(check_forward)
def mha_forward(x, params, n_heads, *, x_kv=None, mask=None, causal=False, n_kv_heads=None,
                head_mask=None, rope_base=None, max_bytes=None) -> tuple[np.ndarray, Saved]:
    """``multi_head_attention`` that also returns every intermediate array, by its lesson name.

    Takes the arguments of ``mha_core.multi_head_attention`` (without ``tiled`` and
    ``return_weights``: the backward pass needs the weights) and checks them the same way.

    Returns
    -------
    out : ndarray of the shape of ``x``, (N_q, d_model) or (B, N_q, d_model)
    saved : dict
        ``x, x_kv, Q, K, V`` (projections), ``q, k, v`` (heads, after RoPE; ``k, v`` repeated to
        ``h`` heads for GQA), ``weights (..., h, N_q, N_k)``, ``heads (..., h, N_q, d_v)`` (after
        ``head_mask``), ``concat (..., N_q, h*d_v)``, ``out``, and the sizes; pass it to
        ``mha_backward``.
    """
    x_kv_in, x_kv = x_kv, (x if x_kv is None else x_kv)
    h, n_kv = n_heads, n_kv_heads or n_heads
    # the projections, (..., N_q, h*d_k), (..., N_k, n_kv*d_k), (..., N_k, n_kv*d_v)
    Q, K, V = linear(x, params, "Q"), linear(x_kv, params, "K"), linear(x_kv, params, "V")
    q = split_heads.unchecked(Q, h)  # (..., h, N_q, d_k)
    k, v = split_heads.unchecked(K, n_kv), split_heads.unchecked(V, n_kv)  # (..., n_kv, N_k, d)
    if rope_base is not None:
        q, k = apply_rope.unchecked(q, base=rope_base), apply_rope.unchecked(k, base=rope_base)
    if n_kv != h:  # GQA/MQA, as in the layer
        k, v = (np.repeat(a, h // n_kv, axis=-3) for a in (k, v))  # (..., h, N_k, d)
    if causal:
        mask = causal_mask.unchecked(x.shape[-2], x_kv.shape[-2]) & (True if mask is None else mask)
    # the heads' outputs (..., h, N_q, d_v) and weights (..., h, N_q, N_k)
    kept, weights = scaled_dot_product_attention.unchecked(q, k, v, mask)
    hm = None if head_mask is None else np.asarray(head_mask, x.dtype)
    heads = kept if hm is None else kept * hm[:, None, None]  # (..., h, N_q, d_v)
    concat = merge_heads.unchecked(heads)  # (..., N_q, h*d_v)
    out = linear(concat, params, "O")  # (..., N_q, d_model)
    saved: Saved = {"kind": "mha", "x": x, "x_kv": x_kv, "cross": x_kv_in is not None, "h": h,
                    "n_kv": n_kv, "params": params, "head_mask": hm, "rope_base": rope_base,
                    "Q": Q, "K": K, "V": V, "q": q, "k": k, "v": v, "weights": weights,
                    "kept": kept, "heads": heads, "concat": concat, "out": out}
    return out, saved


def mha_backward(dout: np.ndarray, saved: Saved) -> dict[str, np.ndarray]:
    """Gradients of ``mha_forward``.

    Parameters
    ----------
    dout : ndarray of shape (..., N_q, d_model)
        Gradient of the loss with respect to the layer's output.
    saved : dict
        From ``mha_forward``.

    Returns
    -------
    dict with ``x`` (..., N_q, d_model); ``x_kv`` (..., N_k, d_model) for cross-attention (for
    self-attention the key/value path is already summed into ``x``); one entry per weight and
    bias in ``params`` (``W_Q (d_model, h*d_k)`` and so on); and ``head_mask`` (h,) when a
    head mask was given: d loss / d head_mask[i] is a first-order estimate of what removing
    head ``i`` would change.
    """
    c = _check_saved(saved, "mha")
    if c["rope_base"] is not None:
        raise ValueError("mha_backward does not differentiate through RoPE: "
                         "call mha_forward without rope_base")
    p, x, x_kv, h, n_kv = c["params"], c["x"], c["x_kv"], c["h"], c["n_kv"]
    dout = _check_dout(dout, c["out"].shape)
    lead, n_k = x.shape[:-2], x_kv.shape[-2]
    d_model, d_model_kv = x.shape[-1], x_kv.shape[-1]
    kept, concat = c["kept"], c["concat"]
    d_k, d_v = p["W_Q"].shape[1] // h, kept.shape[-1]
    grads: dict[str, np.ndarray] = {}

    dout2 = dout.reshape(-1, d_model)  # (B*N_q, d_model)
    grads["W_O"] = concat.reshape(-1, h * d_v).T @ dout2  # (h*d_v, B*N_q) @ (B*N_q, d_model)
    if "b_O" in p:
        grads["b_O"] = dout2.sum(0)  # (d_model,)
    dconcat = dout @ p["W_O"].T  # (..., N_q, d_model) @ (d_model, h*d_v) -> (..., N_q, h*d_v)
    dheads = split_heads.unchecked(dconcat, h)  # (..., h, N_q, d_v)
    if c["head_mask"] is not None:
        # (h,): d loss / d head_mask[i] sums head i's dheads * kept
        grads["head_mask"] = (dheads * kept).reshape(-1, h, kept.shape[-2] * d_v).sum((0, 2))
        dheads = dheads * c["head_mask"][:, None, None]  # (..., h, N_q, d_v)
    # every query head's gradients: q (..., h, N_q, d_k); k, v (..., h, N_k, d_k or d_v)
    att = {"kind": "attention", "q": c["q"], "k": c["k"], "v": c["v"], "weights": c["weights"],
           "scale": 1.0 / np.sqrt(c["q"].shape[-1])}  # what attention_forward would have saved
    d = attention_backward(dheads, att)
    # GQA: key/value head j was repeated for its h/n_kv query heads, so its gradient is their sum
    dk = d["k"].reshape(*lead, n_kv, h // n_kv, n_k, d_k).sum(-3)  # (..., n_kv, N_k, d_k)
    dv = d["v"].reshape(*lead, n_kv, h // n_kv, n_k, d_v).sum(-3)  # (..., n_kv, N_k, d_v)
    dQ = merge_heads.unchecked(d["q"])  # (..., N_q, h*d_k)
    # (..., N_k, n_kv*d_k), (..., N_k, n_kv*d_v)
    dK, dV = merge_heads.unchecked(dk), merge_heads.unchecked(dv)

    # (B*N_q, d_model), (B*N_k, d_model)
    x2, xkv2 = x.reshape(-1, d_model), x_kv.reshape(-1, d_model_kv)
    grads["W_Q"] = x2.T @ dQ.reshape(-1, h * d_k)  # (d_model, B*N_q) @ (B*N_q, h*d_k)
    grads["W_K"] = xkv2.T @ dK.reshape(-1, n_kv * d_k)  # (d_model, B*N_k) @ (B*N_k, n_kv*d_k)
    grads["W_V"] = xkv2.T @ dV.reshape(-1, n_kv * d_v)  # (d_model, B*N_k) @ (B*N_k, n_kv*d_v)
    for name, dY in (("b_Q", dQ), ("b_K", dK), ("b_V", dV)):
        if name in p:
            grads[name] = dY.reshape(-1, dY.shape[-1]).sum(0)  # (width,)
    dx = dQ @ p["W_Q"].T  # (..., N_q, h*d_k) @ (h*d_k, d_model) -> (..., N_q, d_model)
    dx_kv = dK @ p["W_K"].T + dV @ p["W_V"].T  # (..., N_k, d_model)
    if c["cross"]:
        grads["x"], grads["x_kv"] = dx, dx_kv
    else:
        grads["x"] = dx + dx_kv  # self-attention: x feeds the queries, keys and values
    return grads
