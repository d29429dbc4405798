"""Multi-head attention three ways that must agree, plus GQA/MQA, masks, cross-attention and bad input.

fused (``multi_head_attention``) == per-head loop (``multi_head_attention_per_head``)
== sum over heads of ``head_i @ W_O^i`` (``head_contributions``) + ``b_O``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from references import allowed_keys, reference_mha, reference_mha_case
from strategies import mha_cases, tol

from mha_core import (
    MHAConfig,
    head_contributions,
    head_outputs,
    init_params,
    multi_head_attention,
    multi_head_attention_per_head,
    padding_mask,
)


@settings(deadline=None, max_examples=150)
@given(mha_cases())
def test_fused_equals_per_head_equals_sum_of_contributions(case):
    h, kw = case.config.n_heads, case.kwargs
    out, w = multi_head_attention(case.x, case.params, h, return_weights=True, **kw)
    out_loop, w_loop = multi_head_attention_per_head(case.x, case.params, h, return_weights=True, **kw)
    contrib = head_contributions(case.x, case.params, h, **kw)  # (..., h, N_q, d_model)
    assert out.shape == case.x.shape and out.dtype == case.x.dtype
    assert w.shape == (*case.lead, h, case.n_q, case.n_k) and w.dtype == case.x.dtype
    assert contrib.shape == (*case.lead, h, case.n_q, case.config.d_model)
    t = tol(case.x.dtype)
    np.testing.assert_allclose(out_loop, out, **t)
    np.testing.assert_allclose(w_loop, w, **t)
    np.testing.assert_allclose(contrib.sum(axis=-3) + case.params.get("b_O", 0), out, **t)
    # The weights obey the mask: zero where not allowed, rows sum to 1 or (no key allowed) to 0.
    allowed = allowed_keys(case)
    assert (w[~allowed] == 0).all()
    sums = w.sum(axis=-1)
    np.testing.assert_allclose(sums, allowed.any(axis=-1).astype(float), atol=1e-5)


@settings(deadline=None, max_examples=60)
@given(mha_cases())
def test_matches_independent_float64_reference(case):
    out = multi_head_attention(case.x, case.params, case.config.n_heads, **case.kwargs)
    np.testing.assert_allclose(out, reference_mha_case(case), **tol(case.x.dtype))


@settings(deadline=None, max_examples=80)
@given(mha_cases(max_n=12))
def test_tiled_layer_agrees_with_the_formula(case):
    """``tiled=True`` against the formula layer, with GQA, masks, causal, batch, head masks and
    cross-attention (several tiles are tested in test_tiled.py)."""
    h, kw = case.config.n_heads, case.kwargs
    got = multi_head_attention(case.x, case.params, h, tiled=True, **kw)
    np.testing.assert_allclose(got, multi_head_attention(case.x, case.params, h, **kw), **tol(case.x.dtype))


def merge(heads: np.ndarray) -> np.ndarray:
    """(..., h, N_q, d_v) -> (..., N_q, h*d_v), head i in columns i*d_v:(i+1)*d_v, by concatenation."""
    return np.concatenate([heads[..., i, :, :] for i in range(heads.shape[-3])], axis=-1)


def repeat_kv_heads(params: dict, h: int, n_kv: int) -> dict:
    """Plain-MHA weights in which query head i gets its own copy of kv head i // (h // n_kv)."""
    full = dict(params)
    for name in ("W_K", "W_V", "b_K", "b_V"):
        if name in params:
            a = params[name]
            d = a.shape[-1] // n_kv  # d_k for K, d_v for V
            blocks = [a[..., (i // (h // n_kv)) * d:(i // (h // n_kv) + 1) * d] for i in range(h)]
            full[name] = np.concatenate(blocks, axis=-1)  # (.., h*d)
    return full


@settings(deadline=None, max_examples=60)
@given(mha_cases())
def test_gqa_equals_mha_with_repeated_kv_weights(case):
    h, n_kv = case.config.n_heads, case.config.n_kv
    full = repeat_kv_heads(case.params, h, n_kv)
    assert full["W_K"].shape == full["W_Q"].shape
    out_gqa, w_gqa = multi_head_attention(case.x, case.params, h, return_weights=True, **case.kwargs)
    kw = {**case.kwargs, "n_kv_heads": None}
    out_mha, w_mha = multi_head_attention(case.x, full, h, return_weights=True, **kw)
    t = tol(case.x.dtype)
    np.testing.assert_allclose(out_gqa, out_mha, **t)
    np.testing.assert_allclose(w_gqa, w_mha, **t)


def test_mqa_heads_share_keys():
    # MQA: one kv head; with W_Q's head blocks equal, every head's weights are equal too.
    cfg = MHAConfig(12, 3, n_kv_heads=1)
    p = init_params(cfg, 0, dtype=np.float64)
    p["W_Q"] = np.tile(p["W_Q"][:, :4], (1, 3))
    x = np.random.default_rng(1).standard_normal((5, 12))
    _, w = multi_head_attention(x, p, 3, n_kv_heads=1, return_weights=True)
    np.testing.assert_allclose(w[0], w[1], rtol=1e-12)
    np.testing.assert_allclose(w[0], w[2], rtol=1e-12)


def test_batch_items_are_independent():
    cfg = MHAConfig(8, 2, bias=True)
    p = init_params(cfg, 0, dtype=np.float64)
    x = np.random.default_rng(2).standard_normal((3, 4, 8))
    out = multi_head_attention(x, p, 2, causal=True)
    for b in range(3):
        np.testing.assert_allclose(out[b], multi_head_attention(x[b], p, 2, causal=True), rtol=1e-12, atol=1e-14)


def test_causal_output_ignores_future_tokens():
    cfg = MHAConfig(8, 4, n_kv_heads=2)
    p = init_params(cfg, 3, dtype=np.float64)
    x = np.random.default_rng(3).standard_normal((2, 6, 8))
    changed = x.copy()
    changed[:, 4:] += 10.0  # rewrite the last two tokens
    a, b = (multi_head_attention(v, p, 4, n_kv_heads=2, causal=True) for v in (x, changed))
    np.testing.assert_allclose(a[:, :4], b[:, :4], rtol=1e-12, atol=1e-14)
    assert not np.allclose(a[:, 4:], b[:, 4:])


def test_padding_mask_ignores_padded_keys():
    cfg = MHAConfig(8, 2)
    p = init_params(cfg, 4, dtype=np.float64)
    rng = np.random.default_rng(4)
    x, x_kv = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 5, 8))
    mask = padding_mask([2, 5], 5)
    changed = x_kv.copy()
    changed[0, 2:] = rng.standard_normal((3, 8))  # item 0's padding
    a, w = multi_head_attention(x, p, 2, x_kv=x_kv, mask=mask, return_weights=True)
    b = multi_head_attention(x, p, 2, x_kv=changed, mask=mask)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    assert (w[0, :, :, 2:] == 0).all()
    assert (w[1] > 0).all()


def test_cross_attention_uses_x_kv():
    cfg = MHAConfig(8, 2)
    p = init_params(cfg, 5, dtype=np.float64)
    rng = np.random.default_rng(5)
    x, x_kv = rng.standard_normal((3, 8)), rng.standard_normal((7, 8))
    out, w = multi_head_attention(x, p, 2, x_kv=x_kv, return_weights=True)
    assert out.shape == (3, 8) and w.shape == (2, 3, 7)
    assert not np.allclose(out, multi_head_attention(x, p, 2))
    np.testing.assert_allclose(out, reference_mha(x, p, 2, x_kv=x_kv), rtol=1e-10, atol=1e-12)


def test_head_mask_removes_that_heads_contribution():
    cfg = MHAConfig(12, 3, bias=True)
    p = init_params(cfg, 6, dtype=np.float64)
    x = np.random.default_rng(6).standard_normal((2, 4, 12))
    out = multi_head_attention(x, p, 3)
    contrib = head_contributions(x, p, 3)
    pruned = multi_head_attention(x, p, 3, head_mask=[1, 0, 1])
    pruned_loop = multi_head_attention_per_head(x, p, 3, head_mask=np.array([True, False, True]))
    np.testing.assert_allclose(pruned, out - contrib[:, 1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(pruned_loop, pruned, rtol=1e-10, atol=1e-12)
    heads = head_outputs(x, p, 3, head_mask=[1, 0, 1])
    assert heads.shape == (2, 3, 4, 4) and (heads[:, 1] == 0).all()


def test_no_w_o_no_mixing():
    # The concat of head outputs is exactly what W_O multiplies (head i in columns i*d_v:(i+1)*d_v).
    cfg = MHAConfig(8, 2)
    p = init_params(cfg, 7, dtype=np.float64)
    x = np.random.default_rng(7).standard_normal((5, 8))
    identity = {**p, "W_O": np.eye(8)}
    heads = head_outputs(x, p, 2)  # (h, N, d_v)
    np.testing.assert_allclose(multi_head_attention(x, identity, 2), np.concatenate(list(heads), axis=-1), rtol=1e-12)


# ---------------------------------------------------------------- bad input

CFG = MHAConfig(8, 2)
P64 = init_params(CFG, 0, dtype=np.float64)
P32 = init_params(CFG, 0, dtype=np.float32)
X = np.random.default_rng(0).standard_normal((2, 3, 8))


def _with(**changes):
    p = dict(P64)
    for k, v in changes.items():
        if v is None:
            del p[k]
        else:
            p[k] = v
    return p


def _nan_weights():
    w = P64["W_Q"].copy()
    w[0, 0] = np.nan
    return _with(W_Q=w)


BAD_CALLS = [
    # (args, kwargs, exception, message fragment)
    ((X.tolist(), P64, 2), {}, TypeError, "x must be a numpy.ndarray"),
    ((X.astype(int), P64, 2), {}, TypeError, "x must have dtype float32 or float64"),
    ((X.astype(np.float16), P64, 2), {}, TypeError, "x must have dtype"),
    ((X[0, 0], P64, 2), {}, ValueError, "x must have 2 or 3 dimensions"),
    ((X[None], P64, 2), {}, ValueError, "x must have 2 or 3 dimensions"),
    ((X[:, :0], P64, 2), {}, ValueError, "x must not have an empty axis"),
    ((X[:0], P64, 2), {}, ValueError, "x must not have an empty axis"),
    ((X[..., :6], P64, 2), {}, ValueError, r"params\['W_Q'\] has shape \(8, 8\); its rows must equal x's d_model=6"),
    ((X, P64, 3), {}, ValueError, "n_heads=3 does not divide"),
    ((X, P64, 0), {}, ValueError, "n_heads"),
    ((X, P64, True), {}, TypeError, "n_heads"),
    ((X, P64, 2.0), {}, TypeError, "n_heads"),
    ((X, P64, 2), {"n_kv_heads": 3}, ValueError, "n_kv_heads=3 does not divide n_heads=2"),
    ((X, P64, 2), {"n_kv_heads": 1}, ValueError, r"params\['W_K'\] has shape"),
    ((X, P64, 2), {"n_kv_heads": True}, TypeError, "n_kv_heads"),
    ((X, [P64], 2), {}, TypeError, "params must be a dict"),
    ((X, None, 2), {}, TypeError, "params must be a dict"),
    ((X, _with(W_O=None), 2), {}, ValueError, r"params is missing \['W_O'\]"),
    ((X, _with(W_K=None, W_V=None), 2), {}, ValueError, r"params is missing \['W_K', 'W_V'\]"),
    ((X, _with(W_Q=P64["W_Q"].tolist()), 2), {}, TypeError, r"params\['W_Q'\] must be a numpy.ndarray"),
    ((X, _with(W_Q=P64["W_Q"].astype(int)), 2), {}, TypeError, r"params\['W_Q'\] must have dtype"),
    ((X, _with(W_Q=P64["W_Q"][None]), 2), {}, ValueError, r"params\['W_Q'\] must have 2 dimensions"),
    ((X, _with(W_K=P64["W_K"][:, :6]), 2), {}, ValueError, r"params\['W_K'\] has shape \(8, 6\)"),
    ((X, _with(W_V=P64["W_V"][:, :5]), 2), {}, ValueError, r"params\['W_V'\] has shape \(8, 5\)"),
    ((X, _with(W_O=P64["W_O"][:4]), 2), {}, ValueError, r"params\['W_O'\] has shape \(4, 8\)"),
    ((X, _with(W_O=P64["W_O"].T[:, :6]), 2), {}, ValueError, r"params\['W_O'\] has shape"),
    ((X, _with(b_Q=np.zeros(7)), 2), {}, ValueError, r"params\['b_Q'\] has shape \(7,\), expected \(8,\)"),
    ((X, _with(b_O=np.zeros((1, 8))), 2), {}, ValueError, r"params\['b_O'\] must have 1 dimensions"),
    ((X, _with(b_K=np.zeros(8, np.float32)), 2), {}, TypeError, r"params\['b_K'\] has dtype float32 but x has float64"),
    ((X, P32, 2), {}, TypeError, r"params\['W_Q'\] has dtype float32 but x has float64"),
    ((X.astype(np.float32), P64, 2), {}, TypeError, r"params\['W_Q'\] has dtype float64 but x has float32"),
    ((X, _nan_weights(), 2), {}, ValueError, r"params\['W_Q'\] must be finite"),
    ((np.where(X > 1, np.nan, X), P64, 2), {}, ValueError, "x must be finite"),
    ((X, P64, 2), {"x_kv": X[0]}, ValueError, "x_kv must have 3 dimensions"),
    ((X, P64, 2), {"x_kv": X[:1]}, ValueError, "x_kv must have the same batch size as x"),
    ((X, P64, 2), {"x_kv": X.astype(np.float32)}, TypeError, "x_kv must have the same dtype as x"),
    ((X, P64, 2), {"x_kv": X[..., :6]}, ValueError, r"params\['W_K'\] has shape \(8, 8\), expected .*\(6, 8\)"),
    ((X, P64, 2), {"x_kv": X[:, :0]}, ValueError, "x_kv must not have an empty axis"),
    ((X, P64, 2), {"x_kv": X.astype(int)}, TypeError, "x_kv must have dtype"),
    ((X, P64, 2), {"x_kv": np.where(X > 1, np.inf, X)}, ValueError, "x_kv must be finite"),
    ((X, P64, 2), {"mask": np.ones((3, 3))}, TypeError, "mask must have dtype bool"),
    ((X, P64, 2), {"mask": np.ones((3, 3), np.int8)}, TypeError, "mask must have dtype bool"),
    ((X, P64, 2), {"mask": [[True] * 3] * 3}, TypeError, "mask must be a bool numpy.ndarray"),
    ((X, P64, 2), {"mask": np.ones((3, 4), bool)}, ValueError, "mask of shape"),
    ((X, P64, 2), {"mask": np.ones((3, 2, 3, 3), bool)}, ValueError, "mask of shape"),
    ((X, P64, 2), {"mask": np.ones((5, 2, 2, 3, 3), bool)}, ValueError, "mask of shape .* would enlarge"),
    ((X[0], P64, 2), {"mask": padding_mask([1, 2], 3)}, ValueError, "mask of shape"),
    ((X, P64, 2), {"causal": 1}, TypeError, "causal must be a bool"),
    ((X, P64, 2), {"causal": "yes"}, TypeError, "causal must be a bool"),
    ((X, P64, 2), {"head_mask": [1, 0, 1]}, ValueError, r"head_mask must have shape \(h,\) = \(2,\)"),
    ((X, P64, 2), {"head_mask": ["a", "b"]}, TypeError, "head_mask must be bool or numeric"),
    ((X, P64, 2), {"head_mask": [1.0, np.nan]}, ValueError, "head_mask must be finite"),
    ((X, P64, 2), {"max_bytes": 0}, ValueError, "max_bytes"),
    ((X, P64, 2), {"max_bytes": 1.5}, TypeError, "max_bytes"),
]


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("fn", [multi_head_attention, multi_head_attention_per_head, head_outputs, head_contributions])
@pytest.mark.parametrize(("args", "kwargs", "exc", "match"), BAD_CALLS)
def test_mha_rejects(fn, args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        fn(*args, **kwargs)


def test_head_outputs_rejects_unknown_keywords():
    with pytest.raises(TypeError, match="unexpected keyword argument 'return_weights'"):
        head_outputs(X, P64, 2, return_weights=True)
    with pytest.raises(TypeError, match="unexpected keyword argument 'casual'"):
        head_contributions(X, P64, 2, casual=True)


def test_cross_attention_from_a_different_width():
    # Keys/values may come from a stream of another width (an encoder's d_model_kv).
    h, d_model, d_kv = 2, 8, 6
    rng = np.random.default_rng(8)
    p = init_params(MHAConfig(d_model, h, bias=True), 8, dtype=np.float64)
    p["W_K"], p["W_V"] = rng.standard_normal((d_kv, d_model)), rng.standard_normal((d_kv, d_model))
    x, x_kv = rng.standard_normal((3, d_model)), rng.standard_normal((5, d_kv))
    out = multi_head_attention(x, p, h, x_kv=x_kv)
    np.testing.assert_allclose(out, reference_mha(x, p, h, x_kv=x_kv), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(multi_head_attention_per_head(x, p, h, x_kv=x_kv), out, rtol=1e-10, atol=1e-12)


def test_non_contiguous_input():
    cfg = MHAConfig(8, 2)
    p = init_params(cfg, 9, dtype=np.float64)
    x = np.random.default_rng(9).standard_normal((8, 5)).T  # (N=5, d_model=8), a transposed view
    np.testing.assert_allclose(multi_head_attention(x, p, 2), multi_head_attention(np.ascontiguousarray(x), p, 2))


@pytest.mark.parametrize("d_v", [2, 7])
@pytest.mark.parametrize("n_kv", [3, 1])
def test_value_width_differs_from_key_width(d_v, n_kv):
    # d_k = 12 / 3 = 4: V is sliced by d_v, W_O has h*d_v rows, the output keeps d_model.
    cfg = MHAConfig(12, 3, n_kv_heads=n_kv, bias=True, d_v=d_v)
    p = init_params(cfg, 10, dtype=np.float64)
    assert p["W_V"].shape == (12, n_kv * d_v) and p["W_O"].shape == (3 * d_v, 12)
    x = np.random.default_rng(10).standard_normal((2, 5, 12))
    out = multi_head_attention(x, p, 3, n_kv_heads=n_kv, causal=True)
    assert head_outputs(x, p, 3, n_kv_heads=n_kv).shape == (2, 3, 5, d_v)
    allowed = np.broadcast_to(np.tril(np.ones((5, 5), bool)), (3, 5, 5))
    ref = np.stack([reference_mha(x[b], p, 3, mask=allowed, n_kv=n_kv) for b in range(2)])
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)
    loop = multi_head_attention_per_head(x, p, 3, n_kv_heads=n_kv, causal=True)
    np.testing.assert_allclose(loop, ref, rtol=1e-10, atol=1e-12)
