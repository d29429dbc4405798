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
(their gradient is the sum over the query heads of the group) and ``W_O``. Its forward is
``mha_core.multi_head_attention``'s own (``mha.layer_forward``), asked to save the
intermediate arrays the backward pass needs.

Symbols: ``B`` batch (optional), ``N_q``/``N_k``, ``h``, ``n_kv``, ``d_k``, ``d_v``, ``d_model``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .attention import scaled_dot_product_attention
from .checks import check_float_array
from .heads import merge_heads, split_heads
from .layer_args import check_layer_args
from .mha import layer_forward

Saved = dict[str, Any]  # what a forward function saves for its backward: arrays and sizes by name


def _unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` over the axes that broadcasting added or stretched, back to ``shape``."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)  # drop a leading axis that broadcasting added
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=stretched, keepdims=True) if stretched else grad


def _check_dout(dout, shape: tuple[int, ...]) -> np.ndarray:
    dout = check_float_array(dout, "dout")
    if dout.shape != tuple(shape):
        raise ValueError(f"dout must have the forward output's shape {tuple(shape)}, got {dout.shape}")
    return dout


def _check_saved(saved, kind: str) -> Saved:
    if not isinstance(saved, dict) or saved.get("kind") != kind:
        got = saved.get("kind") if isinstance(saved, dict) else type(saved).__name__
        raise TypeError(f"saved must be what {kind}_forward returned as saved, got {got!r}")
    return saved


# ---------------------------------------------------------------------------------------------
# scaled dot-product attention


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
    out, weights = scaled_dot_product_attention(q, k, v, mask, scale)  # validates every argument
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
    dk = scale * np.swapaxes(dscores, -1, -2) @ q  # (..., N_k, N_q) @ (..., N_q, d_k) -> (..., N_k, d_k)
    dv = np.swapaxes(weights, -1, -2) @ dout  # (..., N_k, N_q) @ (..., N_q, d_v) -> (..., N_k, d_v)
    return {"q": _unbroadcast(dq, q.shape), "k": _unbroadcast(dk, k.shape), "v": _unbroadcast(dv, v.shape)}


# ---------------------------------------------------------------------------------------------
# multi-head attention


def mha_forward(
    x: np.ndarray,
    params: dict[str, np.ndarray],
    n_heads: int,
    *,
    x_kv: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    causal: bool = False,
    n_kv_heads: int | None = None,
    head_mask: np.ndarray | None = None,
) -> tuple[np.ndarray, Saved]:
    """``multi_head_attention`` that also returns what its backward pass needs.

    Takes the arguments of ``mha_core.multi_head_attention`` (see there) and validates them
    the same way.

    Returns
    -------
    out : ndarray of the shape of ``x``, (N_q, d_model) or (B, N_q, d_model)
    saved : dict
        Inputs and intermediates (``heads``, ``concat``, and under ``att`` what the attention
        saved); pass it to ``mha_backward``. ``saved["weights"]`` has shape (..., h, N_q, N_k).
    """
    cross = x_kv is not None
    a = check_layer_args(x=x, params=params, n_heads=n_heads, x_kv=x_kv, mask=mask, causal=causal,
                         n_kv_heads=n_kv_heads, head_mask=head_mask)
    saved: Saved = {"kind": "mha"}
    out, weights = layer_forward(a, keep_weights=True, saved=saved)  # the core's forward, saving its intermediates
    saved.update(x=a.x, x_kv=a.x_kv, cross=cross, params=params, h=a.h, n_kv=a.n_kv, head_mask=a.head_mask,
                 weights=weights, out_shape=out.shape)
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
    p, x, x_kv, h, n_kv = c["params"], c["x"], c["x_kv"], c["h"], c["n_kv"]
    dout = _check_dout(dout, c["out_shape"])
    lead, n_q, n_k = x.shape[:-2], x.shape[-2], x_kv.shape[-2]
    d_model, d_model_kv = x.shape[-1], x_kv.shape[-1]
    heads, concat = c["heads"], c["concat"]
    d_k, d_v = p["W_Q"].shape[1] // h, heads.shape[-1]
    grads: dict[str, np.ndarray] = {}

    dout2 = dout.reshape(-1, d_model)  # (B*N_q, d_model)
    grads["W_O"] = concat.reshape(-1, h * d_v).T @ dout2  # (h*d_v, B*N_q) @ (B*N_q, d_model)
    if "b_O" in p:
        grads["b_O"] = dout2.sum(0)  # (d_model,)
    dconcat = dout @ p["W_O"].T  # (..., N_q, d_model) @ (d_model, h*d_v) -> (..., N_q, h*d_v)
    dkept = split_heads(dconcat, h)  # (..., h, N_q, d_v)
    if c["head_mask"] is not None:
        grads["head_mask"] = (dkept * heads).reshape(-1, h, n_q * d_v).sum((0, 2))  # (h,)
        dkept = dkept * c["head_mask"][:, None, None]  # (..., h, N_q, d_v)
    # to the shape the attention ran on: (..., h, N_q, d_v), or (..., n_kv, g, N_q, d_v) with GQA
    dheads = dkept.reshape(*c["att"]["weights"].shape[:-1], d_v)
    d = attention_backward(dheads, c["att"])  # q like dheads with d_k; k, v (..., n_kv(, 1), N_k, d)
    dQ = merge_heads(d["q"].reshape(*lead, h, n_q, d_k))  # (..., N_q, h*d_k)
    dK = merge_heads(d["k"].reshape(*lead, n_kv, n_k, d_k))  # (..., N_k, n_kv*d_k)
    dV = merge_heads(d["v"].reshape(*lead, n_kv, n_k, d_v))  # (..., N_k, n_kv*d_v)

    x2, xkv2 = x.reshape(-1, d_model), x_kv.reshape(-1, d_model_kv)  # (B*N_q, d_model), (B*N_k, d_model)
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
