"""Multi-head attention, two ways that must agree.

``multi_head_attention``: the way it is run. Three fused projections (one matmul each for all
heads), ``split_heads``, one batched attention over every head at once, ``merge_heads``, ``W_O``.

``multi_head_attention_per_head``: the way it is explained. A Python loop over heads, each
using its own column slice ``W_Q[:, i*d_k:(i+1)*d_k]``, then concat and ``W_O``.

``head_contributions`` shows the third view: the output is a sum over heads of
``head_i @ W_O[i*d_v:(i+1)*d_v, :]``.

Symbols: ``B`` batch (optional), ``N_q``/``N_k`` query/key lengths, ``h`` query heads,
``n_kv`` key/value heads (GQA/MQA: query head ``i`` uses kv head ``i // group_size``, with
``group_size = h // n_kv``; shape comments write that axis ``h/n_kv``), ``d_k``/``d_v`` per-head
widths. ``t`` is the tracer, ``a`` the checked arguments (``layer_args.check_layer_args``).
"""

from __future__ import annotations

import numpy as np

from .attention import _attend, scaled_dot_product_attention
from .flash import _blocked, _flash, _shared_matmul
from .heads import head_columns, merge_heads, split_heads
from .layer_args import WEIGHTS_HINT, LayerArgs, check_layer_args, check_layer_output
from .rope import apply_rope
from .trace import NO_TRACER

# Up to this size of the score tensor (B, h, N_q, N_k) the layer runs the formula as written
# (h=8: N <= 512 in float32, both of the dashboard's lengths). Above it the tiled path is faster
# and needs memory that grows as N instead of N^2. Measured (benchmarks/RESULTS_long_context.md,
# "Which attention path is fastest", re-measured by every `make bench`): on a busy machine, at one
# thread the two crossed near N=500; at the default two threads the tiled path was the slower at N=512.
FORMULA_MAX_SCORE_BYTES = 8 * 2**20
# Causal attention switches sooner, at this fraction of it (3 MiB; h=8: N <= 313): the tiled
# path skips the tiles above the diagonal (about half the work) while the formula computes every
# score and then masks half of them. At one thread the two crossed near N=300; at N=512 the
# tiled path took about two thirds of the formula's time. The run of 1 December 2026 (16:48 UTC,
# quiet, every call timed after a pause) agrees at one thread (the picked path within 12% of the
# fastest from N=100 to 1024, inside its noise) but not everywhere at two threads: the formula won
# at causal N=384 (1.18x) and the tiled path at N=512 (1.07x). One run was not enough to move the
# constants (benchmarks/RESULTS_long_context.md).
CAUSAL_SWITCH_FRACTION = 3 / 8


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
        Without them (and without a tracer) a score tensor over ``FORMULA_MAX_SCORE_BYTES``
        (8 MiB: h=8, N > 512 in float32; causal: 3/8 of it, ``CAUSAL_SWITCH_FRACTION``,
        N > 313) is never built: the attention runs tile by tile with
        an online softmax (``flash_attention``), the same numbers to float rounding, in memory
        that grows as N instead of N^2. With them, such a call runs on blocks of query rows
        (``blocked_attention``): the same weights, built a block at a time (``attention_path``).
    head_mask : array of shape (h,), optional
        Multiplies each head's output before ``W_O``; 0 removes (prunes) a head.
    max_bytes : int, optional
        Limit for the score tensor when it is built (weights returned, or a tracer), default
        2 GiB; larger requests fail with ``MemoryBudgetError`` before allocating.
    tracer : Tracer, optional
        Records every step's shape and every matmul's MACs (the formula, at full size).
    rope_base : float, optional
        Rotary position embedding: when given, every query and key head is rotated by its
        position (0, 1, ...) with ``apply_rope(..., base=rope_base)`` after the projections
        and before the scores (Llama-style models). Default None: no rotation.

    Returns
    -------
    out : ndarray of the same shape and dtype as ``x``
    weights : ndarray of shape (..., h, N_q, N_k), only when ``return_weights``
    """
    args = check_layer_args(
        x=x, params=params, n_heads=n_heads, x_kv=x_kv, mask=mask, causal=causal, n_kv_heads=n_kv_heads,
        head_mask=head_mask, max_bytes=max_bytes, rope_base=rope_base,
        scores=return_weights or tracer is not None, hint=WEIGHTS_HINT if return_weights else "",
    )
    out, weights = layer_forward(args, tracer or NO_TRACER, keep_weights=return_weights)
    return (out, weights) if return_weights else out


def layer_forward(a: LayerArgs, t=NO_TRACER, *, keep_weights=False, saved=None):
    """The layer on checked arguments: ``heads_forward``, concat, ``W_O``. Returns the output
    (..., N_q, d_model) and the weights (..., h, N_q, N_k), None if the tiled path ran (never with
    ``keep_weights``). ``saved``, a dict, receives what ``heads_forward`` saves, and ``concat``."""
    heads, weights = heads_forward(a, t, keep_weights=keep_weights, saved=saved)  # (..., h, N_q, d_v)
    t.record("heads back: transpose", np.swapaxes(heads, -3, -2))  # (..., N_q, h, d_v), noted for the ledger only
    concat = t.record("concat: reshape", merge_heads(heads))  # (..., N_q, h*d_v): merge_heads transposes and reshapes
    tiled = weights is None  # the tiled path ran (it keeps no weights): its workers do W_O too
    out = _project(t, "out = concat @ W_O", concat, a.params["W_O"], a.params.get("b_O"), shared=tiled)  # (..., N_q, d_model)
    if saved is not None:
        saved["concat"] = concat
    check_layer_output(out, a)
    return out, weights


def heads_forward(a: LayerArgs, t=NO_TRACER, *, keep_weights=False, saved=None):
    """Fused projections, split into heads, one attention over every head at once. Returns the
    heads (..., h, N_q, d_v), after ``head_mask``, and the weights as ``layer_forward`` does.
    ``saved``, a dict, receives what the backward pass (``backward.py``) needs: ``att`` (the
    attention's ``q, k, v, weights, scale`` in the shapes it ran on) and ``heads``."""
    p = a.params
    path = attention_path(a, keep_weights=keep_weights or saved is not None, traced=t is not NO_TRACER)
    tiled = path == "tiled"  # its worker threads do the projections too (flash._shared_matmul)
    t.record("X", a.x)  # (..., N_q, d_model)
    Q = _project(t, "Q = X @ W_Q", a.x, p["W_Q"], p.get("b_Q"), shared=tiled)  # (..., N_q, h*d_k)
    K = _project(t, "K = X @ W_K", a.x_kv, p["W_K"], p.get("b_K"), shared=tiled)  # (..., N_k, n_kv*d_k)
    V = _project(t, "V = X @ W_V", a.x_kv, p["W_V"], p.get("b_V"), shared=tiled)  # (..., N_k, n_kv*d_v)
    t.record("Q as heads: reshape", Q.reshape(*Q.shape[:-1], a.h, a.d_k))  # (..., N_q, h, d_k), for the ledger only
    Qh = t.record("Q heads: transpose", split_heads(Q, a.h))  # (..., h, N_q, d_k): split_heads reshapes and transposes
    Kh = t.record("K heads", split_heads(K, a.n_kv))  # (..., n_kv, N_k, d_k)
    Vh = t.record("V heads", split_heads(V, a.n_kv))  # (..., n_kv, N_k, d_v)
    if a.rope_base is not None:  # RoPE: turn each query and key by its position, before the scores
        Qh = t.record("Q rotated: RoPE", apply_rope(Qh, base=a.rope_base))  # (..., h, N_q, d_k)
        Kh = t.record("K rotated: RoPE", apply_rope(Kh, base=a.rope_base))  # (..., n_kv, N_k, d_k)
    heads, weights = _grouped_attention(a, Qh, Kh, Vh, path, t, saved)  # (..., h, N_q, d_v), (..., h, N_q, N_k)
    if a.head_mask is not None:
        heads = heads * a.head_mask[:, None, None]  # (..., h, N_q, d_v), pruned heads -> 0
    return heads, weights


def attention_path(a: LayerArgs, *, keep_weights: bool, traced: bool) -> str:
    """Which of three equal computations the layer runs for its attention: ``"formula"``
    (``attention._attend``: scores, mask, softmax, weights @ V) when a tracer
    records the steps or the score tensor is at most ``FORMULA_MAX_SCORE_BYTES`` (causal: that
    times ``CAUSAL_SWITCH_FRACTION``); else
    ``"blocked"`` (``flash._blocked``, blocks of query rows) when the weights are kept; else
    ``"tiled"`` (``flash._flash``, online softmax, never the N_q x N_k scores).
    """
    limit = FORMULA_MAX_SCORE_BYTES * (CAUSAL_SWITCH_FRACTION if a.causal else 1)  # bytes of scores
    if traced or a.score_bytes <= limit:
        return "formula"
    return "blocked" if keep_weights else "tiled"


def _grouped_attention(a: LayerArgs, Qh, Kh, Vh, path: str, t, saved):
    """Attention of every query head. With GQA (``group_size = h/n_kv > 1``) the h query heads
    are viewed as n_kv groups of h/n_kv that share one key/value head, without copying K or V."""
    lead, n_q, n_k, group_size = a.x.shape[:-2], a.x.shape[-2], a.x_kv.shape[-2], a.group_size
    mask = a.given_mask if path == "tiled" else a.mask  # the tiled path applies `causal` tile by tile
    if group_size > 1:
        Qh = Qh.reshape(*lead, a.n_kv, group_size, n_q, a.d_k)  # (..., n_kv, h/n_kv, N_q, d_k)
        Kh = Kh[..., :, None, :, :]  # (..., n_kv, 1, N_k, d_k), broadcast over the group
        Vh = Vh[..., :, None, :, :]  # (..., n_kv, 1, N_k, d_v)
        if mask is not None:
            full = np.broadcast_to(mask, (*lead, a.h, n_q, n_k))  # (..., h, N_q, N_k), a view
            mask = full.reshape(*lead, a.n_kv, group_size, n_q, n_k)  # (..., n_kv, h/n_kv, N_q, N_k)
    scale = 1.0 / np.sqrt(a.d_k)
    if path == "tiled":
        heads, weights = _flash(Qh, Kh, Vh, mask, scale, causal=a.causal), None
    elif path == "blocked":
        heads, weights = _blocked(Qh, Kh, Vh, mask, scale)
    else:
        heads, weights = _attend(Qh, Kh, Vh, mask, scale, t)
    if saved is not None:
        saved["att"] = {"kind": "attention", "q": Qh, "k": Kh, "v": Vh, "weights": weights, "scale": scale}
    heads = heads.reshape(*lead, a.h, n_q, a.d_v)  # (..., h, N_q, d_v)
    if saved is not None:
        saved["heads"] = heads
    if weights is not None:
        weights = weights.reshape(*lead, a.h, n_q, n_k)  # (..., h, N_q, N_k)
    return heads, weights


def _project(t, name: str, x: np.ndarray, W: np.ndarray, b, *, shared: bool = False) -> np.ndarray:
    """``x @ W (+ b)`` on the flattened tokens: (..., N, d_in) -> (..., N, d_out). ``shared``:
    the rows shared by the tiled path's worker threads (``flash._shared_matmul``, never traced)."""
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])  # (B*N, d_in)
    if shared:
        y = _shared_matmul(x2, W)  # (B*N, d_in) @ (d_in, d_out) -> (B*N, d_out)
    else:
        y = t.matmul(name, x2, W, shape=(*lead, W.shape[1]))  # (B*N, d_in) @ (d_in, d_out) -> (B*N, d_out)
    if b is not None:
        y += b
    return y.reshape(*lead, W.shape[1])  # (..., N, d_out)


def multi_head_attention_per_head(
    x, params, n_heads, *, x_kv=None, mask=None, causal=False, n_kv_heads=None,
    return_weights=False, head_mask=None, max_bytes=None, tracer=None, rope_base=None,
):
    """The readable reference: an explicit loop over heads. Same signature and result as
    ``multi_head_attention``, but it always builds every head's N_q x N_k weights.

    Head ``i`` uses its own slices ``W_Q[:, i*d_k:(i+1)*d_k]`` and, with ``j = i // (h/n_kv)``,
    ``W_K[:, j*d_k:(j+1)*d_k]`` and ``W_V[:, j*d_v:(j+1)*d_v]``. The head outputs are
    concatenated along the width and multiplied by ``W_O``.
    """
    a = check_layer_args(x=x, params=params, n_heads=n_heads, x_kv=x_kv, mask=mask, causal=causal,
                         n_kv_heads=n_kv_heads, head_mask=head_mask, max_bytes=max_bytes, rope_base=rope_base)
    t, p = tracer or NO_TRACER, params
    full_mask = None if a.mask is None else np.broadcast_to(a.mask, (*a.x.shape[:-2], a.h, a.x.shape[-2], a.x_kv.shape[-2]))
    head_outs, head_weights = [], []
    kv_heads = {}  # j -> (K_j, V_j): with GQA a key/value head is computed once and shared
    for i in range(a.h):
        j = i // a.group_size  # the key/value head this query head reads
        Q_i = _rope(a, _head_project(t, f"Q_{i}", a.x, p, "Q", head_columns(i, a.d_k)))  # (..., N_q, d_k)
        if j not in kv_heads:  # head_columns(j, d) is the slice j*d:(j+1)*d
            K_j = _rope(a, _head_project(t, f"K_{j}", a.x_kv, p, "K", head_columns(j, a.d_k)))  # (..., N_k, d_k)
            kv_heads[j] = K_j, _head_project(t, f"V_{j}", a.x_kv, p, "V", head_columns(j, a.d_v))  # V_j (..., N_k, d_v)
        K_j, V_j = kv_heads[j]
        mask_i = None if full_mask is None else full_mask[..., i, :, :]  # (..., N_q, N_k)
        head_i, w_i = scaled_dot_product_attention(Q_i, K_j, V_j, mask_i, tracer=t, max_bytes=a.max_bytes)  # (..., N_q, d_v)
        head_outs.append(head_i if a.head_mask is None else head_i * a.head_mask[i])  # (..., N_q, d_v)
        head_weights.append(w_i)
    concat = np.concatenate(head_outs, axis=-1)  # (..., N_q, h*d_v)
    out = t.matmul("out = concat @ W_O", concat, p["W_O"])  # (..., N_q, d_model)
    if "b_O" in p:
        out = out + p["b_O"]  # (..., N_q, d_model)
    check_layer_output(out, a)
    return (out, np.stack(head_weights, axis=-3)) if return_weights else out  # weights (..., h, N_q, N_k)


def _head_project(t, name: str, x: np.ndarray, p: dict, which: str, cols: slice) -> np.ndarray:
    """One head's projection: ``x @ W[:, cols] (+ b[cols])`` for ``which`` in Q, K, V."""
    y = t.matmul(name, x, p[f"W_{which}"][:, cols])  # (..., N, d_model) @ (d_model, d) -> (..., N, d)
    return y + p[f"b_{which}"][cols] if f"b_{which}" in p else y  # (..., N, d)


def _rope(a: LayerArgs, z: np.ndarray) -> np.ndarray:
    """``z`` (..., N, d_k) turned by position when the layer uses RoPE, else ``z`` itself."""
    return z if a.rope_base is None else apply_rope(z, base=a.rope_base)


def head_outputs(
    x, params, n_heads, *, x_kv=None, mask=None, causal=False, n_kv_heads=None, head_mask=None,
    max_bytes=None, tracer=None, rope_base=None,
) -> np.ndarray:
    """Each head's output before ``W_O``: shape (..., h, N_q, d_v). Arguments as for
    ``multi_head_attention``, without ``return_weights``."""
    a = check_layer_args(x=x, params=params, n_heads=n_heads, x_kv=x_kv, mask=mask, causal=causal,
                         n_kv_heads=n_kv_heads, head_mask=head_mask, max_bytes=max_bytes, rope_base=rope_base,
                         scores=tracer is not None)
    heads, _ = heads_forward(a, tracer or NO_TRACER)
    check_layer_output(heads, a)  # NaN/inf input -> an error naming it, as in multi_head_attention
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
