"""Multi-head attention, two ways that must agree.

``multi_head_attention``: the way it is run. Three fused projections (one matmul each for all
heads), ``split_heads``, one batched attention over every head at once, ``merge_heads``, ``W_O``.
The attention runs one-shot (``_attend``) when the weights are wanted, traced or small, and
tiled with an online softmax (``flash._flash``) otherwise: see ``uses_tiles``.

``multi_head_attention_per_head``: the way it is explained. A Python loop over heads, each
using its own column slice ``W_Q[:, i*d_k:(i+1)*d_k]``, then concat and ``W_O``.

``head_contributions`` shows the third view: the output is a sum over heads of
``head_i @ W_O[i*d_v:(i+1)*d_v, :]``.

Symbols: ``B`` batch (optional), ``N_q``/``N_k`` query/key lengths, ``h`` query heads,
``n_kv`` key/value heads (GQA/MQA; query head ``i`` uses kv head ``i // (h // n_kv)``),
``d_k``/``d_v`` per-head widths.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .checks import check_finite, check_float_array, check_mask, check_memory, check_positive_int
from .attention import _attend, scaled_dot_product_attention
from .flash import _flash
from .heads import head_columns, merge_heads, split_heads
from .masks import causal_mask
from .rope import apply_rope, check_rope
from .trace import NO_TRACER

WEIGHT_NAMES = ("W_Q", "W_K", "W_V", "W_O")
BIAS_NAMES = ("b_Q", "b_K", "b_V", "b_O")
# The fused layer switches from one-shot to tiled (online-softmax) attention when the score
# tensor (B, h, N_q, N_k) would exceed this: h=8, N > 362 in float32. Measured on the shared
# 2-core machine, the tiled path was 2.6x faster than the one-shot path at N=512 and 2.9x at
# N=256 (its BLAS calls run one thread per worker, which a busy machine punishes far less), and
# its memory grows as N instead of N^2. Below it (N=100: 0.3 MiB) the one-shot path is kept:
# one block, no thread-pool set-up, and the same work. benchmarks/RESULTS_long_context.md.
TILED_MIN_SCORE_BYTES = 4 * 2**20
WEIGHTS_HINT = (
    "; or leave return_weights out: without the weights the layer runs tiled (online-softmax) "
    "attention, whose memory grows as N, not N^2"
)


@dataclass(frozen=True)
class _Call:
    """One validated call: the arrays and the sizes derived from them."""

    x: np.ndarray  # (..., N_q, d_model)
    x_kv: np.ndarray  # (..., N_k, d_model)
    params: dict
    h: int
    n_kv: int
    d_k: int
    d_v: int
    key_mask: np.ndarray | None  # the caller's mask: bool, broadcastable to (..., h, N_q, N_k)
    causal: bool
    head_mask: np.ndarray | None  # (h,)
    max_bytes: int | None
    rope_base: float | None = None  # RoPE between the projections and the scores (rope.py)

    @property
    def group(self) -> int:
        return self.h // self.n_kv

    @cached_property
    def mask(self) -> np.ndarray | None:
        """``key_mask`` AND the causal mask: an (N_q, N_k) array, built only when first asked for
        (the tiled path never asks, so a long causal call never holds an N_q x N_k mask)."""
        if not self.causal:
            return self.key_mask
        tri = causal_mask(self.x.shape[-2], self.x_kv.shape[-2])  # (N_q, N_k)
        return tri if self.key_mask is None else self.key_mask & tri

    def bias(self, name: str):
        return self.params.get(name)


def _validate(
    x, params, n_heads, x_kv, mask, causal, n_kv_heads, head_mask, max_bytes, rope_base=None, *,
    scores=True, hint="",
) -> _Call:
    """Check every argument; with ``scores``, also refuse a (..., h, N_q, N_k) score tensor over
    the memory budget (for a call that holds the whole tensor: weights kept or traced)."""
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

    lead = x.shape[:-2]
    n_q, n_k = x.shape[-2], x_kv.shape[-2]
    scores_shape = (*lead, h, n_q, n_k)  # (..., h, N_q, N_k)
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
    return _Call(x, x_kv, params, h, n_kv, d_k, d_v, mask, bool(causal), head_mask, max_bytes, rope_base)


def uses_tiles(c: _Call, keep_weights: bool, traced: bool) -> bool:
    """Which attention the fused layer runs: tiled (online softmax, never the N_q x N_k scores)
    unless the weights are wanted, a tracer records the textbook steps, or the score tensor is
    at most ``TILED_MIN_SCORE_BYTES``."""
    if keep_weights or traced:
        return False
    lead, n_q, n_k = c.x.shape[:-2], c.x.shape[-2], c.x_kv.shape[-2]
    score_bytes = int(np.prod((*lead, c.h, n_q, n_k), dtype=np.int64)) * c.x.itemsize
    return score_bytes > TILED_MIN_SCORE_BYTES


def _project(t, name: str, x: np.ndarray, W: np.ndarray, b) -> np.ndarray:
    """``x @ W (+ b)`` on the flattened tokens: (..., N, d_in) -> (..., N, d_out)."""
    lead = x.shape[:-1]
    y = t.matmul(name, x.reshape(-1, x.shape[-1]), W, shape=(*lead, W.shape[1]))  # (B*N, d_in) @ (d_in, d_out) -> (B*N, d_out)
    if b is not None:
        y += b
    return y.reshape(*lead, W.shape[1])  # (..., N, d_out)


def _heads_forward(
    c: _Call, t, keep_weights: bool = True, keep: dict | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Fused projections, split, one batched attention. Returns heads (..., h, N_q, d_v) and
    weights (..., h, N_q, N_k), or None for the weights when not ``keep_weights``.

    ``keep``, a dict, receives what the backward pass needs (``core/backward.py``): ``att``, the
    attention's ``q, k, v, weights, scale`` in the grouped shapes it ran on, and ``heads``
    before ``head_mask``."""
    p = c.params
    lead, n_q, n_k = c.x.shape[:-2], c.x.shape[-2], c.x_kv.shape[-2]
    t.record("X", c.x)  # (..., N_q, d_model)
    Q = _project(t, "Q = X @ W_Q", c.x, p["W_Q"], c.bias("b_Q"))  # (..., N_q, h*d_k)
    K = _project(t, "K = X @ W_K", c.x_kv, p["W_K"], c.bias("b_K"))  # (..., N_k, n_kv*d_k)
    V = _project(t, "V = X @ W_V", c.x_kv, p["W_V"], c.bias("b_V"))  # (..., N_k, n_kv*d_v)
    t.record("Q as heads: reshape", Q.reshape(*lead, n_q, c.h, c.d_k))  # (..., N_q, h, d_k)
    Qh = t.record("Q heads: transpose", split_heads(Q, c.h))  # (..., h, N_q, d_k)
    Kh = t.record("K heads", split_heads(K, c.n_kv))  # (..., n_kv, N_k, d_k)
    Vh = t.record("V heads", split_heads(V, c.n_kv))  # (..., n_kv, N_k, d_v)
    if c.rope_base is not None:  # RoPE: turn each query and key by its position, before the scores
        Qh = t.record("Q rotated: RoPE", apply_rope(Qh, base=c.rope_base))  # (..., h, N_q, d_k)
        Kh = t.record("K rotated: RoPE", apply_rope(Kh, base=c.rope_base))  # (..., n_kv, N_k, d_k)
    tiled = keep is None and uses_tiles(c, keep_weights, t is not NO_TRACER)  # backward keeps weights
    mask = c.key_mask if tiled else c.mask  # the tiled path applies `causal` tile by tile
    if c.group > 1:  # GQA/MQA: view the h query heads as n_kv groups of g sharing one K/V head
        Qh = Qh.reshape(*lead, c.n_kv, c.group, n_q, c.d_k)  # (..., n_kv, g, N_q, d_k)
        Kh = Kh[..., :, None, :, :]  # (..., n_kv, 1, N_k, d_k), broadcast over the group
        Vh = Vh[..., :, None, :, :]  # (..., n_kv, 1, N_k, d_v)
        if mask is not None:
            full = np.broadcast_to(mask, (*lead, c.h, n_q, n_k))  # (..., h, N_q, N_k), a view
            mask = full.reshape(*lead, c.n_kv, c.group, n_q, n_k)  # (..., n_kv, g, N_q, N_k)
    # _attend / _flash: the attention functions without re-checking what _validate has checked
    scale = 1.0 / np.sqrt(c.d_k)
    if tiled:
        heads, weights = _flash(Qh, Kh, Vh, mask, scale, causal=c.causal), None
    else:
        heads, weights = _attend(Qh, Kh, Vh, mask, scale, tracer=t, keep_weights=keep_weights)
    if keep is not None:
        keep["att"] = {"kind": "attention", "q": Qh, "k": Kh, "v": Vh, "weights": weights, "scale": scale}
    heads = heads.reshape(*lead, c.h, n_q, c.d_v)  # (..., h, N_q, d_v)
    if keep is not None:
        keep["heads"] = heads
    if weights is not None:
        weights = weights.reshape(*lead, c.h, n_q, n_k)  # (..., h, N_q, N_k)
    if c.head_mask is not None:
        heads = heads * c.head_mask[:, None, None]  # (..., h, N_q, d_v), pruned heads -> 0
    return heads, weights


def _check_output(out: np.ndarray, c: _Call) -> None:
    """Cheap post-check; only on failure find which input was not finite."""
    if np.isfinite(out).all():
        return
    check_finite(c.x, "x")
    check_finite(c.x_kv, "x_kv")
    for name, a in c.params.items():
        check_finite(a, f"params['{name}']")
    raise ValueError("the output overflowed to inf/NaN although every input is finite; inputs are too large for the dtype")


def multi_head_attention(
    x, params, n_heads, *, x_kv=None, mask=None, causal=False, n_kv_heads=None,
    return_weights=False, head_mask=None, max_bytes=None, tracer=None, rope_base=None,
):
    """Multi-head attention, batched over every head at once.

    Parameters
    ----------
    x : ndarray of shape (N_q, d_model) or (B, N_q, d_model), float32 or float64
    params : dict
        ``W_Q (d_model, h*d_k)``, ``W_K (d_model, n_kv*d_k)``, ``W_V (d_model, n_kv*d_v)``,
        ``W_O (h*d_v, d_model)``, optional ``b_Q, b_K, b_V, b_O``; same dtype as ``x``.
    n_heads : int
        ``h``.
    x_kv : ndarray of shape (N_k, d_model) or (B, N_k, d_model), optional
        Keys/values come from here (cross-attention); default ``x`` (self-attention).
    mask : bool ndarray broadcastable to (B, h, N_q, N_k), optional
        True = may attend. A query with no allowed key outputs zeros before ``W_O``.
    causal : bool, default False
        AND a causal mask (see ``causal_mask``) into ``mask``.
    n_kv_heads : int, optional
        ``n_kv`` for GQA/MQA; default ``h``. Query head ``i`` uses kv head ``i // (h // n_kv)``.
    return_weights : bool, default False
        Also return the attention weights, shape (B, h, N_q, N_k) (no B axis for 2-D ``x``).
        Without them (and without a tracer) a score tensor over ``TILED_MIN_SCORE_BYTES``
        (4 MiB: h=8, N > 362 in float32) is never built: the attention runs tile by tile with
        an online softmax (``flash_attention``), the same numbers to float rounding, in memory
        that grows as N instead of N^2. Smaller calls run one-shot (no thread pool to start).
    head_mask : array of shape (h,), optional
        Multiplies each head's output before ``W_O``; 0 removes (prunes) a head.
    max_bytes : int, optional
        Limit for the score tensor when it is built (weights returned, or a tracer), default
        2 GiB; larger requests fail with ``MemoryBudgetError`` before allocating.
    tracer : Tracer, optional
        Records every step's shape and every matmul's MACs (one-shot, at full size).
    rope_base : float, optional
        Rotary position embedding: when given, every query and key head is rotated by its
        position (0, 1, ...) with ``apply_rope(..., base=rope_base)`` after the projections
        and before the scores (Llama-style models). Default None: no rotation.

    Returns
    -------
    out : ndarray of the same shape and dtype as ``x``
    weights : ndarray of shape (..., h, N_q, N_k), only when ``return_weights``
    """
    c = _validate(
        x, params, n_heads, x_kv, mask, causal, n_kv_heads, head_mask, max_bytes, rope_base,
        scores=return_weights or tracer is not None, hint=WEIGHTS_HINT if return_weights else "",
    )
    out, weights = _layer_forward(c, tracer or NO_TRACER, return_weights)
    return (out, weights) if return_weights else out


def _layer_forward(c: _Call, t, keep_weights: bool, keep: dict | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The layer on a validated call: ``_heads_forward``, concat, ``W_O``. Returns the output
    (..., N_q, d_model) and the weights (None unless ``keep_weights``); ``keep`` as in
    ``_heads_forward``, plus ``concat``."""
    heads, weights = _heads_forward(c, t, keep_weights, keep)  # (..., h, N_q, d_v), (..., h, N_q, N_k)
    t.record("heads back: transpose", np.swapaxes(heads, -3, -2))  # (..., N_q, h, d_v)
    concat = t.record("concat: reshape", merge_heads(heads))  # (..., N_q, h*d_v)
    out = _project(t, "out = concat @ W_O", concat, c.params["W_O"], c.bias("b_O"))  # (..., N_q, d_model)
    if keep is not None:
        keep["concat"] = concat
    _check_output(out, c)
    return out, weights


def multi_head_attention_per_head(
    x, params, n_heads, *, x_kv=None, mask=None, causal=False, n_kv_heads=None,
    return_weights=False, head_mask=None, max_bytes=None, tracer=None, rope_base=None,
):
    """The readable reference: an explicit loop over heads. Same signature and result as
    ``multi_head_attention``.

    Head ``i`` uses its own slices ``W_Q[:, i*d_k:(i+1)*d_k]`` and, with ``j = i // (h // n_kv)``,
    ``W_K[:, j*d_k:(j+1)*d_k]`` and ``W_V[:, j*d_v:(j+1)*d_v]``. The head outputs are
    concatenated along the width and multiplied by ``W_O``.
    """
    c = _validate(x, params, n_heads, x_kv, mask, causal, n_kv_heads, head_mask, max_bytes, rope_base)
    t = tracer or NO_TRACER
    p, d_k, d_v = params, c.d_k, c.d_v
    lead, n_q, n_k = c.x.shape[:-2], c.x.shape[-2], c.x_kv.shape[-2]
    full_mask = None if c.mask is None else np.broadcast_to(c.mask, (*lead, c.h, n_q, n_k))
    head_outs, head_weights = [], []
    kv_heads = {}  # j -> (K_j, V_j): with GQA a key/value head is computed once and shared
    for i in range(c.h):
        j = i // c.group  # the key/value head this query head reads
        q_cols = head_columns(i, d_k)
        Q_i = t.matmul(f"Q_{i}", c.x, p["W_Q"][:, q_cols])  # (..., N_q, d_k)
        if "b_Q" in p:
            Q_i = Q_i + p["b_Q"][q_cols]
        if c.rope_base is not None:
            Q_i = apply_rope(Q_i, base=c.rope_base)  # (..., N_q, d_k), rotated by position
        if j not in kv_heads:
            k_cols, v_cols = head_columns(j, d_k), head_columns(j, d_v)
            K_j = t.matmul(f"K_{j}", c.x_kv, p["W_K"][:, k_cols])  # (..., N_k, d_k)
            V_j = t.matmul(f"V_{j}", c.x_kv, p["W_V"][:, v_cols])  # (..., N_k, d_v)
            if "b_K" in p:
                K_j = K_j + p["b_K"][k_cols]
            if "b_V" in p:
                V_j = V_j + p["b_V"][v_cols]
            if c.rope_base is not None:
                K_j = apply_rope(K_j, base=c.rope_base)  # (..., N_k, d_k), rotated by position
            kv_heads[j] = (K_j, V_j)
        K_i, V_i = kv_heads[j]  # (..., N_k, d_k), (..., N_k, d_v)
        mask_i = None if full_mask is None else full_mask[..., i, :, :]  # (..., N_q, N_k)
        head_i, w_i = scaled_dot_product_attention(Q_i, K_i, V_i, mask_i, tracer=t, max_bytes=c.max_bytes)  # (..., N_q, d_v)
        if c.head_mask is not None:
            head_i = head_i * c.head_mask[i]
        head_outs.append(head_i)
        head_weights.append(w_i)
    concat = np.concatenate(head_outs, axis=-1)  # (..., N_q, h*d_v)
    out = t.matmul("out = concat @ W_O", concat, p["W_O"])  # (..., N_q, d_model)
    if "b_O" in p:
        out = out + p["b_O"]
    _check_output(out, c)
    if return_weights:
        return out, np.stack(head_weights, axis=-3)  # (..., h, N_q, N_k)
    return out


def head_outputs(x, params, n_heads, **kwargs) -> np.ndarray:
    """Each head's output before ``W_O``: shape (..., h, N_q, d_v).

    Takes the keyword arguments of ``multi_head_attention`` except ``return_weights``.
    """
    c = _validate(x, params, n_heads, **_call_kwargs(kwargs), scores=kwargs.get("tracer") is not None)
    heads, _ = _heads_forward(c, kwargs.get("tracer") or NO_TRACER, keep_weights=False)
    _check_output(heads, c)  # NaN/inf input -> an error naming it, as in multi_head_attention
    return heads  # (..., h, N_q, d_v)


def head_contributions(x, params, n_heads, **kwargs) -> np.ndarray:
    """What each head adds to the output: ``head_i @ W_O[i*d_v:(i+1)*d_v, :]``, shape (..., h, N_q, d_model).

    Summed over the head axis (plus ``b_O`` if present) this equals ``multi_head_attention``:
    concat followed by ``W_O`` is the same as a sum of per-head projections.
    """
    heads = head_outputs(x, params, n_heads, **kwargs)  # (..., h, N_q, d_v)
    h, d_v = heads.shape[-3], heads.shape[-1]
    W_O_heads = params["W_O"].reshape(h, d_v, -1)  # (h, d_v, d_model): row block i is W_O^i
    return heads @ W_O_heads  # (..., h, N_q, d_v) @ (h, d_v, d_model) -> (..., h, N_q, d_model)


def _call_kwargs(kwargs: dict) -> dict:
    allowed = {"x_kv", "mask", "causal", "n_kv_heads", "head_mask", "max_bytes", "tracer", "rope_base"}
    unknown = set(kwargs) - allowed
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}; allowed: {sorted(allowed)}")
    out = {k: kwargs.get(k) for k in allowed - {"tracer"}}
    out["causal"] = kwargs.get("causal", False)
    return out
