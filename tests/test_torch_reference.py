"""Agreement with PyTorch, an implementation written by other people.

``torch.nn.MultiheadAttention`` stores weights as ``(out, in)`` and computes ``x @ W.T``, so our
``W_Q`` (d_model, h*d_k) is its ``in_proj_weight[:d_model].T``; its bool ``attn_mask`` means
True = NOT allowed. ``F.scaled_dot_product_attention`` takes a bool mask with True = may attend
(as ours) and shares K/V heads with ``enable_gqa=True``.

Every causal case lets torch build its own triangle (``is_causal=True``, ``causal_lower_right``
or ``generate_square_subsequent_mask``), never ours; value widths ``d_v`` differ from ``d_k``
wherever torch allows it (``F.scaled_dot_product_attention``; ``nn.MultiheadAttention`` has one
head width).

Without torch (``make references`` installs it) every test here is skipped, and ``make test`` ends
with a counted NOT RUN list; in CI (``CI=true``) ``tests/conftest.py`` turns that skip into a
failure, so the comparison always runs there.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from references import allowed_keys
from strategies import MAX_D_K, configs, mha_cases, seeds, tol

from mha_core import (
    MHAConfig,
    causal_mask,
    init_params,
    multi_head_attention,
    multi_head_attention_per_head,
    padding_mask,
    scaled_dot_product_attention,
)

# A marker, not pytest.importorskip: `make test-fast` deselects this module by its marker, and a
# module skipped while it is imported would be reported (and in strict mode fail) even so.
try:
    import torch
    from torch.nn.attention.bias import causal_lower_right
except ImportError as err:
    torch = causal_lower_right = None
    NO_TORCH = f"could not import 'torch': {err}"

else:
    NO_TORCH = ""

pytestmark = [pytest.mark.torch, pytest.mark.skipif(torch is None, reason=NO_TORCH)]

F = torch.nn.functional if torch is not None else None
TORCH_DTYPE = ({np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}
               if torch is not None else {})


def t(a: np.ndarray):
    return torch.from_numpy(np.ascontiguousarray(a))


def torch_mha(config: MHAConfig, params: dict):
    """A ``torch.nn.MultiheadAttention`` holding ``params`` (plain MHA: n_kv = h)."""
    dtype = TORCH_DTYPE[params["W_Q"].dtype]
    m = torch.nn.MultiheadAttention(
        config.d_model, config.n_heads, bias=config.bias, batch_first=True, dtype=dtype
    )
    with torch.no_grad():
        # (out, in) layout: stack the transposed W_Q, W_K, W_V into in_proj_weight (3 d_model, d_model).
        m.in_proj_weight.copy_(t(np.concatenate([params["W_Q"].T, params["W_K"].T, params["W_V"].T])))
        m.out_proj.weight.copy_(t(params["W_O"].T))
        if config.bias:
            m.in_proj_bias.copy_(t(np.concatenate([params["b_Q"], params["b_K"], params["b_V"]])))
            m.out_proj.bias.copy_(t(params["b_O"]))
    return m.eval()


@settings(deadline=None, max_examples=60)
@given(mha_cases(gqa=False, same_d_v=True))  # the module has one head width: d_v = d_k
def test_multihead_attention_module(case):
    config, h = case.config, case.config.n_heads
    out, w = multi_head_attention(case.x, case.params, h, return_weights=True, **case.kwargs)
    out_loop = multi_head_attention_per_head(case.x, case.params, h, **case.kwargs)
    allowed = allowed_keys(case)
    # torch's attn_mask: True = not allowed, shape (N_q, N_k) or (B*h, N_q, N_k) / (h, N_q, N_k).
    attn_mask = ~allowed.reshape(-1, case.n_q, case.n_k)
    kv = case.x if case.x_kv is None else case.x_kv
    with torch.no_grad():
        t_out, t_w = torch_mha(config, case.params)(
            t(case.x), t(kv), t(kv), attn_mask=t(attn_mask), need_weights=True, average_attn_weights=False
        )
    t_out, t_w = t_out.numpy(), t_w.numpy()
    assert t_w.shape == w.shape
    # torch gives NaN where a query has no allowed key; ours gives 0. Compare everything else.
    row_ok = allowed.any(axis=-1)  # (B?, h, N_q)
    query_ok = row_ok.all(axis=-2)  # (B?, N_q): no head of this query is fully masked
    tl = tol(case.x.dtype)
    np.testing.assert_allclose(w[row_ok], t_w[row_ok], **tl)
    np.testing.assert_allclose(out[query_ok], t_out[query_ok], **tl)
    np.testing.assert_allclose(out_loop[query_ok], t_out[query_ok], **tl)
    assert (w[~row_ok] == 0).all() and np.isfinite(out).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [False, True])
def test_key_padding_mask_and_is_causal(dtype, bias):
    cfg = MHAConfig(16, 4, bias=bias)
    p = init_params(cfg, 0, dtype=dtype)
    x = np.random.default_rng(0).standard_normal((3, 6, 16)).astype(dtype)
    lengths = [6, 3, 1]
    mask = padding_mask(lengths, 6)  # (B, 1, 1, N_k), True = keep
    m = torch_mha(cfg, p)
    with torch.no_grad():
        t_out, t_w = m(t(x), t(x), t(x), key_padding_mask=t(~mask[:, 0, 0]), average_attn_weights=False)
        # torch's own triangle (-inf above the diagonal); is_causal=True is only a hint about it
        future = torch.nn.Transformer.generate_square_subsequent_mask(6, dtype=TORCH_DTYPE[np.dtype(dtype)])
        c_out, c_w = m(t(x), t(x), t(x), attn_mask=future, is_causal=True, average_attn_weights=False)
    out, w = multi_head_attention(x, p, 4, mask=mask, return_weights=True)
    np.testing.assert_allclose(out, t_out.numpy(), **tol(dtype))
    np.testing.assert_allclose(w, t_w.numpy(), **tol(dtype))
    out, w = multi_head_attention(x, p, 4, causal=True, return_weights=True)
    np.testing.assert_allclose(out, c_out.numpy(), **tol(dtype))
    np.testing.assert_allclose(w, c_w.numpy(), **tol(dtype))


def test_unbatched_input_and_averaged_weights():
    cfg = MHAConfig(12, 3, bias=True)
    p = init_params(cfg, 1, dtype=np.float64)
    x = np.random.default_rng(1).standard_normal((5, 12))
    with torch.no_grad():
        t_out, t_w = torch_mha(cfg, p)(t(x), t(x), t(x))  # default: weights averaged over heads
    out, w = multi_head_attention(x, p, 3, return_weights=True)
    np.testing.assert_allclose(out, t_out.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(w.mean(axis=0), t_w.numpy(), rtol=1e-11, atol=1e-12)


@st.composite
def sdpa_cases(draw):
    """q (B, h, N_q, d_k), k (B, n_kv, N_k, d_k), v (B, n_kv, N_k, d_v), a mask kind that leaves
    every query a key, and the mask itself (the causal one from mha_core, to be checked)."""
    rng = np.random.default_rng(draw(seeds))
    config = draw(configs())
    h, n_kv, d_k, d_v = config.n_heads, config.n_kv, config.d_k, config.d_v
    b, n_q = draw(st.integers(1, 3)), draw(st.integers(1, 6))
    n_k = draw(st.integers(n_q, 7))  # N_k >= N_q: the causal mask never empties a row
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    q = rng.standard_normal((b, h, n_q, d_k)).astype(dtype)
    k = rng.standard_normal((b, n_kv, n_k, d_k)).astype(dtype)
    v = rng.standard_normal((b, n_kv, n_k, d_v)).astype(dtype)
    kind = draw(st.sampled_from(["none", "causal", "random"]))
    if kind == "causal":
        mask = causal_mask(n_q, n_k)
    elif kind == "random":
        mask = rng.random((b, h, n_q, n_k)) < 0.5
        mask[..., -1] = True  # keep one key per row so torch has no NaN rows
    else:
        mask = None
    scale = draw(st.one_of(st.none(), st.floats(0.1, 2.0)))
    return q, k, v, kind, mask, scale


@settings(deadline=None, max_examples=60)
@given(sdpa_cases())
def test_scaled_dot_product_attention_with_gqa(case):
    q, k, v, kind, mask, scale = case
    h, n_kv = q.shape[1], k.shape[1]
    group_size = h // n_kv
    # torch builds its own causal triangle (bottom-right aligned, as ours) instead of reading ours
    t_mask = causal_lower_right(q.shape[2], k.shape[2]) if kind == "causal" else None if mask is None else t(mask)
    with torch.no_grad():
        t_out = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t_mask, scale=scale, enable_gqa=True)
    t_out = t_out.numpy()  # (B, h, N_q, d_v)
    # Ours: view the h query heads as (n_kv, group_size) groups against one K/V head each.
    qg = q.reshape(q.shape[0], n_kv, group_size, *q.shape[2:])  # (B, n_kv, group_size, N_q, d_k)
    mg = None if mask is None else np.broadcast_to(mask, (q.shape[0], h, q.shape[2], k.shape[2])).reshape(
        q.shape[0], n_kv, group_size, q.shape[2], k.shape[2]
    )  # (B, n_kv, group_size, N_q, N_k)
    out, w = scaled_dot_product_attention(qg, k[:, :, None], v[:, :, None], mg, scale)
    np.testing.assert_allclose(out.reshape(t_out.shape), t_out, **tol(q.dtype))


def torch_layer(params: dict, x: np.ndarray, kv: np.ndarray, h: int, n_kv: int, **sdpa_kwargs) -> np.ndarray:
    """The whole layer rebuilt in torch: projections, heads, ``F.sdpa(enable_gqa)``, concat, ``W_O``.

    x (B, N_q, d_model), kv (B, N_k, d_model_kv); ``sdpa_kwargs`` carry the mask or ``is_causal``.
    """
    b, n_q, n_k = x.shape[0], x.shape[1], kv.shape[1]
    d_k, d_v = params["W_Q"].shape[1] // h, params["W_V"].shape[1] // n_kv
    p = {name: t(a) for name, a in params.items()}
    zero = torch.zeros((), dtype=p["W_Q"].dtype)
    with torch.no_grad():
        Q = t(x) @ p["W_Q"] + p.get("b_Q", zero)  # (B, N_q, h*d_k)
        K = t(kv) @ p["W_K"] + p.get("b_K", zero)  # (B, N_k, n_kv*d_k)
        V = t(kv) @ p["W_V"] + p.get("b_V", zero)  # (B, N_k, n_kv*d_v)
        Qh = Q.view(b, n_q, h, d_k).transpose(1, 2)  # (B, h, N_q, d_k)
        Kh = K.view(b, n_k, n_kv, d_k).transpose(1, 2)  # (B, n_kv, N_k, d_k)
        Vh = V.view(b, n_k, n_kv, d_v).transpose(1, 2)  # (B, n_kv, N_k, d_v)
        heads = F.scaled_dot_product_attention(Qh, Kh, Vh, enable_gqa=True, **sdpa_kwargs)  # (B, h, N_q, d_v)
        concat = heads.transpose(1, 2).reshape(b, n_q, h * d_v)  # (B, N_q, h*d_v)
        return (concat @ p["W_O"] + p.get("b_O", zero)).numpy()  # (B, N_q, d_model)


@pytest.mark.filterwarnings("ignore:Lower right causal bias will produce NaNs:UserWarning")  # rows skipped below
@settings(deadline=None, max_examples=40)
@given(mha_cases())
def test_gqa_layer_against_torch_sdpa(case):
    """GQA, d_v != d_k, masks, cross-attention: our layer against the torch rebuild. A causal-only
    case lets torch build its own triangle; otherwise the reference's allowed-key array is passed."""
    h, n_kv = case.config.n_heads, case.config.n_kv
    allowed = allowed_keys(case)
    x = case.x if case.lead else case.x[None]
    kv = x if case.x_kv is None else (case.x_kv if case.lead else case.x_kv[None])
    if case.causal and case.mask is None:
        torch_mask = {"attn_mask": causal_lower_right(x.shape[1], kv.shape[1])}
    else:
        torch_mask = {"attn_mask": t(allowed if case.lead else allowed[None])}  # (B, h, N_q, N_k), True = may attend
    t_out = torch_layer(case.params, x, kv, h, n_kv, **torch_mask)
    out = multi_head_attention(case.x, case.params, h, **case.kwargs)
    out = out if case.lead else out[None]
    # A query with no allowed key in some head is NaN in torch (0 before W_O in ours): skip those rows.
    query_ok = (allowed if case.lead else allowed[None]).any(axis=-1).all(axis=-2)  # (B, N_q)
    np.testing.assert_allclose(out[query_ok], t_out[query_ok], **tol(case.x.dtype))


@pytest.mark.parametrize(("n_q", "n_k"), [(7, 7), (2, 7), (4, 7)])
@pytest.mark.parametrize("d_v", [3, MAX_D_K + 2])
def test_torch_builds_its_own_causal_triangle(n_q, n_k, d_v):
    """Always runs (no hypothesis draw): torch's is_causal=True (square) or causal_lower_right
    (N_q < N_k, as in decoding with a cache) against ``causal=True``, with GQA, batch and d_v != d_k."""
    h, n_kv, d_model = 4, 2, 16  # d_k = 4
    cfg = MHAConfig(d_model, h, n_kv_heads=n_kv, bias=True, d_v=d_v)
    p = init_params(cfg, 11, dtype=np.float64)
    rng = np.random.default_rng(11)
    x, x_kv = rng.standard_normal((2, n_q, d_model)), rng.standard_normal((2, n_k, d_model))
    torch_causal = {"is_causal": True} if n_q == n_k else {"attn_mask": causal_lower_right(n_q, n_k)}
    t_out = torch_layer(p, x, x_kv, h, n_kv, **torch_causal)
    out = multi_head_attention(x, p, h, x_kv=x_kv, n_kv_heads=n_kv, causal=True)
    np.testing.assert_allclose(out, t_out, rtol=1e-10, atol=1e-12)


def test_cross_attention_with_kdim():
    # torch keeps separate q/k/v projection weights when the key width differs (kdim, vdim).
    h, d_model, d_kv = 4, 16, 10
    rng = np.random.default_rng(2)
    p = init_params(MHAConfig(d_model, h, bias=True), 2, dtype=np.float64)
    p["W_K"], p["W_V"] = rng.standard_normal((d_kv, d_model)), rng.standard_normal((d_kv, d_model))
    x, x_kv = rng.standard_normal((2, 3, d_model)), rng.standard_normal((2, 7, d_kv))
    m = torch.nn.MultiheadAttention(d_model, h, batch_first=True, kdim=d_kv, vdim=d_kv, dtype=torch.float64)
    with torch.no_grad():
        m.q_proj_weight.copy_(t(p["W_Q"].T))
        m.k_proj_weight.copy_(t(p["W_K"].T))
        m.v_proj_weight.copy_(t(p["W_V"].T))
        m.in_proj_bias.copy_(t(np.concatenate([p["b_Q"], p["b_K"], p["b_V"]])))
        m.out_proj.weight.copy_(t(p["W_O"].T))
        m.out_proj.bias.copy_(t(p["b_O"]))
        t_out, t_w = m.eval()(t(x), t(x_kv), t(x_kv), average_attn_weights=False)
    out, w = multi_head_attention(x, p, h, x_kv=x_kv, return_weights=True)
    np.testing.assert_allclose(out, t_out.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w, t_w.numpy(), rtol=1e-10, atol=1e-12)
