"""Checking the arguments of one multi-head attention layer, kept out of the layer's own code.

``check_layer_args`` checks everything ``multi_head_attention`` is given (the input, the
weights, the head counts, the masks) and returns a ``LayerArgs``: the same arrays plus the sizes
read from them (``h``, ``n_kv``, ``d_k``, ``d_v``). The layer (``mha.py``), the KV-cache decoder
(``decode.py``), the backward pass (``backward.py``), the pitfalls and the benchmarks all call
it, so a bad argument gets the same message wherever it enters.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .checks import check_finite, check_float_array, check_mask, check_memory, check_positive_int
from .masks import causal_mask
from .rope import check_rope

WEIGHT_NAMES = ("W_Q", "W_K", "W_V", "W_O")
BIAS_NAMES = ("b_Q", "b_K", "b_V", "b_O")
WEIGHTS_HINT = (  # the memory error's advice when the weights were asked for
    "; or leave return_weights out: without the weights the layer runs tiled (online-softmax) "
    "attention, whose memory grows as N, not N^2"
)


@dataclass(frozen=True)
class LayerArgs:
    """One checked call: the arrays and the sizes read from them."""

    x: np.ndarray  # (..., N_q, d_model)
    x_kv: np.ndarray  # (..., N_k, d_model)
    params: dict
    h: int
    n_kv: int
    d_k: int
    d_v: int
    given_mask: np.ndarray | None  # the caller's `mask` argument: bool, broadcastable to (..., h, N_q, N_k)
    causal: bool
    head_mask: np.ndarray | None  # (h,)
    max_bytes: int | None
    rope_base: float | None = None  # RoPE between the projections and the scores (rope.py)

    @property
    def group_size(self) -> int:
        """Query heads per key/value head, ``h // n_kv`` (1 for MHA, ``h`` for MQA)."""
        return self.h // self.n_kv

    @cached_property
    def mask(self) -> np.ndarray | None:
        """The mask the attention applies: ``given_mask`` AND, with ``causal``, the causal mask. Built only when first asked for
        (the tiled path never asks, so a long causal call never holds an N_q x N_k mask)."""
        if not self.causal:
            return self.given_mask
        tri = causal_mask(self.x.shape[-2], self.x_kv.shape[-2])  # (N_q, N_k)
        return tri if self.given_mask is None else self.given_mask & tri

    @property
    def score_bytes(self) -> int:
        """Bytes of the whole score tensor (..., h, N_q, N_k)."""
        shape = (*self.x.shape[:-2], self.h, self.x.shape[-2], self.x_kv.shape[-2])
        return int(np.prod(shape, dtype=np.int64)) * self.x.itemsize


def check_layer_args(
    *, x, params, n_heads, x_kv=None, mask=None, causal=False, n_kv_heads=None, head_mask=None,
    max_bytes=None, rope_base=None, scores=True, hint="",
) -> LayerArgs:
    """Check the arguments of ``multi_head_attention`` (see there for each one).

    With ``scores`` (the default), also refuse before allocating a (..., h, N_q, N_k) score
    tensor over ``max_bytes``: for a call that holds the whole tensor (weights kept, or traced).
    ``hint`` is added to that message: another way to make the call fit.

    Returns
    -------
    LayerArgs
    """
    x = check_float_array(x, "x", ndims=(2, 3))
    h = check_positive_int(n_heads, "n_heads")
    n_kv = h if n_kv_heads is None else check_positive_int(n_kv_heads, "n_kv_heads")
    if h % n_kv:
        raise ValueError(f"n_kv_heads={n_kv} does not divide n_heads={h}")
    if x_kv is None:
        x_kv = x
    else:
        x_kv = check_float_array(x_kv, "x_kv", ndims=(x.ndim,))
        if x_kv.shape[:-2] != x.shape[:-2]:
            raise ValueError(f"x_kv must have the same batch size as x, got {x_kv.shape} and {x.shape}")
        if x_kv.dtype != x.dtype:
            raise TypeError(f"x_kv must have the same dtype as x ({x.dtype}), got {x_kv.dtype}")
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
    d_k, d_v = _check_params(params, x, x_kv, h, n_kv)

    lead = x.shape[:-2]
    scores_shape = (*lead, h, x.shape[-2], x_kv.shape[-2])  # (..., h, N_q, N_k)
    if mask is not None:
        check_mask(mask, "mask", scores_shape)
    if head_mask is not None:
        head_mask = np.asarray(head_mask)
        if head_mask.shape != (h,):
            raise ValueError(f"head_mask must have shape (h,) = ({h},), got {head_mask.shape}")
        if not (head_mask.dtype == bool or np.issubdtype(head_mask.dtype, np.number)):
            raise TypeError(f"head_mask must be bool or numeric, got {head_mask.dtype}")
        head_mask = head_mask.astype(x.dtype)
        check_finite(head_mask, "head_mask")
    if scores:
        check_memory(scores_shape, x.dtype, max_bytes, "the attention scores", hint=hint)
    elif max_bytes is not None:
        check_positive_int(max_bytes, "max_bytes")
    if rope_base is not None:
        rope_base = check_rope(rope_base, d_k)
    return LayerArgs(x, x_kv, params, h, n_kv, d_k, d_v, mask, bool(causal), head_mask, max_bytes, rope_base)


def _check_params(params, x: np.ndarray, x_kv: np.ndarray, h: int, n_kv: int) -> tuple[int, int]:
    """Check the weights' names, dtypes and shapes against ``x``, ``h`` and ``n_kv``; return d_k, d_v."""
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of arrays (see init_params), got {type(params).__name__}")
    missing = [k for k in WEIGHT_NAMES if k not in params]
    if missing:
        raise ValueError(f"params is missing {missing}; expected keys {list(WEIGHT_NAMES)} (+ optional biases)")
    for name in (*WEIGHT_NAMES, *BIAS_NAMES):
        if name in params:
            a = check_float_array(params[name], f"params['{name}']", ndims=(2,) if name[0] == "W" else (1,))
            if a.dtype != x.dtype:
                raise TypeError(
                    f"params['{name}'] has dtype {a.dtype} but x has {x.dtype}; "
                    f"use init_params(..., dtype=np.{x.dtype}) or x.astype(np.{a.dtype})"
                )
    d_model, d_model_kv = x.shape[-1], x_kv.shape[-1]
    W_Q, W_K, W_V, W_O = (params[k] for k in WEIGHT_NAMES)
    if W_Q.shape[0] != d_model:
        raise ValueError(f"params['W_Q'] has shape {W_Q.shape}; its rows must equal x's d_model={d_model}")
    if W_Q.shape[1] % h:
        raise ValueError(f"n_heads={h} does not divide params['W_Q'].shape[1]={W_Q.shape[1]} (= h*d_k)")
    d_k = W_Q.shape[1] // h
    if W_K.shape != (d_model_kv, n_kv * d_k):
        raise ValueError(
            f"params['W_K'] has shape {W_K.shape}, expected (d_model, n_kv*d_k) = "
            f"({d_model_kv}, {n_kv * d_k}) for n_kv_heads={n_kv}, d_k={d_k}"
        )
    if W_V.shape[0] != d_model_kv or W_V.shape[1] % n_kv:
        raise ValueError(
            f"params['W_V'] has shape {W_V.shape}, expected ({d_model_kv}, n_kv*d_v) with n_kv={n_kv}"
        )
    d_v = W_V.shape[1] // n_kv
    if W_O.shape != (h * d_v, d_model):
        raise ValueError(f"params['W_O'] has shape {W_O.shape}, expected (h*d_v, d_model) = ({h * d_v}, {d_model})")
    expected_bias = {"b_Q": h * d_k, "b_K": n_kv * d_k, "b_V": n_kv * d_v, "b_O": d_model}
    for name, size in expected_bias.items():
        if name in params and params[name].shape != (size,):
            raise ValueError(f"params['{name}'] has shape {params[name].shape}, expected ({size},)")
    return d_k, d_v


def check_layer_output(out: np.ndarray, args: LayerArgs) -> None:
    """Cheap post-check of a layer's output; only on failure find which input was not finite."""
    if np.isfinite(out).all():
        return
    check_finite(args.x, "x")
    check_finite(args.x_kv, "x_kv")
    for name, a in args.params.items():
        check_finite(a, f"params['{name}']")
    raise ValueError("the output overflowed to inf/NaN although every input is finite; inputs are too large for the dtype")
