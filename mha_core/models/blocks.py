"""The small blocks a real transformer puts around attention.

Attention itself is the core's (``mha_core.core.mha``). A layer of a real model adds:

    embed       token ids -> rows of an embedding table        (N,) -> (N, d_model)
    layer_norm  centre and scale each token (BERT)             (N, d_model) -> (N, d_model)
    rms_norm    scale each token by its root-mean-square (Llama), no centring
    gelu        the smooth ReLU of BERT's feed-forward; gelu_tanh, GPT-2's tanh approximation of it
    swiglu      Llama's gated feed-forward: silu(x W_gate) * (x W_up), then W_down

Pure functions on NumPy arrays; every one keeps the dtype of its input.
"""

from __future__ import annotations

import numpy as np


def embed(table: np.ndarray, ids) -> np.ndarray:
    """Look up one row of ``table`` per token id.

    Parameters
    ----------
    table : ndarray of shape (vocab, d_model)
    ids : int array of shape (N,)

    Returns
    -------
    ndarray of shape (N, d_model), a copy (the table may be a read-only memory map)
    """
    ids = np.asarray(ids)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be a 1-D int array, got dtype {ids.dtype} and shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise ValueError(f"ids must lie in [0, {table.shape[0]}) (the vocabulary), got min {ids.min()} and max {ids.max()}")
    return table[ids]  # (N, d_model): fancy indexing copies


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis.

    Parameters
    ----------
    x : ndarray of shape (..., d_model)
    weight, bias : ndarray of shape (d_model,)
    eps : float
        Added to the variance (BERT: 1e-12).
    """
    mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
    centred = x - mean  # (..., d_model)
    var = np.mean(centred * centred, axis=-1, keepdims=True)  # (..., 1), the biased variance
    return centred / np.sqrt(var + x.dtype.type(eps)) * weight + bias  # (..., d_model)


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis (no centring, no bias).

    Parameters
    ----------
    x : ndarray of shape (..., d_model)
    weight : ndarray of shape (d_model,)
    eps : float
        Added to the mean square (SmolLM2: 1e-5).
    """
    ms = np.mean(x * x, axis=-1, keepdims=True)  # (..., 1)
    return x / np.sqrt(ms + x.dtype.type(eps)) * weight  # (..., d_model)


# Abramowitz & Stegun 7.1.26: erf(z) = 1 - (a1 t + ... + a5 t^5) exp(-z^2), t = 1 / (1 + p z),
# for z >= 0, with an absolute error below 1.5e-7. NumPy has no erf, and BERT's GELU is the exact
# one (with erf), not the tanh approximation, so this stands in for scipy.special.erf.
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf(z: np.ndarray) -> np.ndarray:
    """The error function, to 1.5e-7 (Abramowitz & Stegun 7.1.26); same shape and dtype as ``z``."""
    z = np.asarray(z)
    a = np.abs(z)
    t = 1.0 / (1.0 + _ERF_P * a)
    poly = t * (_ERF_A[0] + t * (_ERF_A[1] + t * (_ERF_A[2] + t * (_ERF_A[3] + t * _ERF_A[4]))))
    return (np.sign(z) * (1.0 - poly * np.exp(-a * a))).astype(z.dtype, copy=False)


def gelu(x: np.ndarray) -> np.ndarray:
    """``x * Phi(x)``, with ``Phi`` the standard normal CDF: ``0.5 x (1 + erf(x / sqrt 2))``."""
    return x * (0.5 * (1.0 + erf(x * x.dtype.type(1 / np.sqrt(2.0)))))  # (..., d)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GPT-2's approximation of ``gelu``: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    c = x.dtype.type(np.sqrt(2.0 / np.pi))
    return 0.5 * x * (1.0 + np.tanh(c * (x + x.dtype.type(0.044715) * x * x * x)))  # (..., d)


def silu(x: np.ndarray) -> np.ndarray:
    """``x * sigmoid(x)`` (also called swish)."""
    return x / (1.0 + np.exp(-x))  # (..., d)


def swiglu(x: np.ndarray, W_gate: np.ndarray, W_up: np.ndarray, W_down: np.ndarray) -> np.ndarray:
    """Llama's feed-forward: ``(silu(x W_gate) * (x W_up)) W_down``.

    Parameters
    ----------
    x : ndarray of shape (N, d_model)
    W_gate, W_up : ndarray of shape (d_model, d_ff)
    W_down : ndarray of shape (d_ff, d_model)

    Returns
    -------
    ndarray of shape (N, d_model)
    """
    gate = silu(x @ W_gate)  # (N, d_model) @ (d_model, d_ff) -> (N, d_ff)
    return (gate * (x @ W_up)) @ W_down  # (N, d_ff) @ (d_ff, d_model) -> (N, d_model)


def gelu_mlp(x: np.ndarray, W_in: np.ndarray, b_in: np.ndarray, W_out: np.ndarray, b_out: np.ndarray,
             act=gelu) -> np.ndarray:
    """BERT's and GPT-2's feed-forward: ``act(x W_in + b_in) W_out + b_out``, ``act`` = ``gelu``
    (BERT) or ``gelu_tanh`` (GPT-2).

    Parameters
    ----------
    x : ndarray of shape (N, d_model)
    W_in : ndarray of shape (d_model, d_ff); b_in of shape (d_ff,)
    W_out : ndarray of shape (d_ff, d_model); b_out of shape (d_model,)
    """
    return act(x @ W_in + b_in) @ W_out + b_out  # (N, d_ff) @ (d_ff, d_model) -> (N, d_model)
