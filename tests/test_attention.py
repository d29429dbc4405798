"""scaled_dot_product_attention against a plain loop written from the formula, in float64."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from references import attention_by_loops
from strategies import dtypes, seeds

from mha_core import causal_mask, scaled_dot_product_attention


@st.composite
def qkv(draw):
    """q, k, v with a leading axis or two, random sizes, and an optional mask."""
    rng = np.random.default_rng(draw(seeds))
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    n_q, n_k = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    d_k, d_v = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    dtype = draw(dtypes)
    q = rng.standard_normal((*lead, n_q, d_k)).astype(dtype)
    k = rng.standard_normal((*lead, n_k, d_k)).astype(dtype)
    v = rng.standard_normal((*lead, n_k, d_v)).astype(dtype)
    kind = draw(st.sampled_from(["none", "random", "causal"]))
    if kind == "random":
        mask = rng.random((*lead, n_q, n_k)) < 0.6
    elif kind == "causal":
        mask = causal_mask(n_q, n_k)
    else:
        mask = None
    scale = draw(st.one_of(st.none(), st.floats(0.05, 2.0)))
    return q, k, v, mask, scale


@settings(deadline=None, max_examples=60)
@given(qkv())
def test_matches_loop_reference(case):
    q, k, v, mask, scale = case
    out, w = scaled_dot_product_attention(q, k, v, mask, scale)
    lead = q.shape[:-2]
    assert out.shape == (*lead, q.shape[-2], v.shape[-1]) and out.dtype == q.dtype
    assert w.shape == (*lead, q.shape[-2], k.shape[-2]) and w.dtype == q.dtype
    full_mask = None if mask is None else np.broadcast_to(mask, w.shape)
    tol = {"rtol": 1e-4, "atol": 1e-5} if q.dtype == np.float32 else {"rtol": 1e-10, "atol": 1e-12}
    for idx in np.ndindex(*lead):
        m = None if full_mask is None else full_mask[idx].tolist()
        ref_out, ref_w = attention_by_loops(q[idx].tolist(), k[idx].tolist(), v[idx].tolist(), m, scale)
        np.testing.assert_allclose(w[idx], ref_w, **tol)
        np.testing.assert_allclose(out[idx], ref_out, **tol)
        if m is not None:
            assert (w[idx][~full_mask[idx]] == 0).all()  # masked keys get exactly 0


def test_default_scale_is_one_over_sqrt_d_k():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((3, 16)) for _ in range(3))
    default = scaled_dot_product_attention(q, k, v)[1]
    explicit = scaled_dot_product_attention(q, k, v, scale=0.25)[1]  # 1/sqrt(16)
    wrong = scaled_dot_product_attention(q, k, v, scale=1.0)[1]
    np.testing.assert_allclose(default, explicit, rtol=1e-12)
    assert not np.allclose(default, wrong)


def test_fully_masked_query_gives_zero_weights_and_zero_output():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
    mask = np.ones((3, 5), dtype=bool)
    mask[1] = False
    out, w = scaled_dot_product_attention(q, k, v, mask)
    assert not np.isnan(out).any()
    assert (w[1] == 0).all() and (out[1] == 0).all()
    np.testing.assert_allclose(w[[0, 2]].sum(axis=-1), 1.0)


def test_causal_weights_have_nothing_above_the_diagonal():
    rng = np.random.default_rng(2)
    q = k = v = rng.standard_normal((2, 6, 4))  # (h, N, d_k)
    _, w = scaled_dot_product_attention(q, k, v, causal_mask(6))
    assert (np.triu(w, k=1) == 0).all()
    np.testing.assert_allclose(w.sum(axis=-1), 1.0)


def test_leading_axes_broadcast():
    # One K/V shared by 3 query heads (..., 1, N_k, d) against (..., 3, N_q, d): GQA in one call.
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 3, 4, 5))
    k, v = rng.standard_normal((2, 1, 6, 5)), rng.standard_normal((2, 1, 6, 2))
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 4, 2) and w.shape == (2, 3, 4, 6)
    for b in range(2):
        for i in range(3):
            ref_out, ref_w = attention_by_loops(q[b, i].tolist(), k[b, 0].tolist(), v[b, 0].tolist())
            np.testing.assert_allclose(out[b, i], ref_out, rtol=1e-10)
            np.testing.assert_allclose(w[b, i], ref_w, rtol=1e-10)


def test_huge_logits_do_not_overflow():
    q = np.full((2, 1), 1e4)
    k = np.array([[1e4], [-1e4], [1e4 - 1]])
    v = np.eye(3)
    out, w = scaled_dot_product_attention(q, k, v)
    assert np.isfinite(out).all() and np.isfinite(w).all()
    np.testing.assert_allclose(w[0], [1.0, 0.0, 0.0], atol=1e-12)


def test_the_function_is_the_formula():
    """The body of ``scaled_dot_product_attention`` is picoGPT's line, and ``.unchecked`` is it."""
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 6))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(4)
    w = np.exp(s - s.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    for fn in (scaled_dot_product_attention, scaled_dot_product_attention.unchecked):
        out, weights = fn(q, k, v)
        np.testing.assert_allclose(weights, w, atol=1e-12)
        np.testing.assert_allclose(out, w @ v, atol=1e-12)
    with pytest.raises(ValueError, match="q and k must have the same d_k"):
        scaled_dot_product_attention(q, k[..., :3], v)  # the checked door refuses what .unchecked trusts


def _arr(*shape, dtype=np.float64):
    return np.ones(shape, dtype=dtype)


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [
        (([[1.0]], _arr(2, 2), _arr(2, 2)), {}, TypeError, "q must be a numpy.ndarray"),
        ((_arr(2, 2), "k", _arr(2, 2)), {}, TypeError, "k must be a numpy.ndarray"),
        ((_arr(2, 2), _arr(2, 2), None), {}, TypeError, "v must be a numpy.ndarray"),
        ((np.ones((2, 2), int), _arr(2, 2), _arr(2, 2)), {}, TypeError, "q must have dtype float32 or float64"),
        ((_arr(2, 2), np.ones((2, 2), bool), _arr(2, 2)), {}, TypeError, "k must have dtype"),
        ((_arr(2, 2), _arr(2, 2, dtype=np.float32), _arr(2, 2)), {}, TypeError, "q, k and v must share one dtype"),
        ((_arr(2), _arr(2, 2), _arr(2, 2)), {}, ValueError, "q must have at least 2 dimensions"),
        ((_arr(2, 2), _arr(2), _arr(2, 2)), {}, ValueError, "k must have at least 2 dimensions"),
        ((_arr(2, 3), _arr(2, 4), _arr(2, 2)), {}, ValueError, "q and k must have the same d_k"),
        ((_arr(2, 3), _arr(4, 3), _arr(5, 2)), {}, ValueError, "k and v must have the same N_k"),
        ((_arr(2, 2, 3), _arr(3, 4, 3), _arr(3, 4, 2)), {}, ValueError, "leading axes .* do not broadcast"),
        ((_arr(0, 3), _arr(4, 3), _arr(4, 2)), {}, ValueError, "q must not have an empty axis"),
        ((_arr(2, 3), _arr(0, 3), _arr(0, 2)), {}, ValueError, "k must not have an empty axis"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"mask": np.ones((2, 4))}, TypeError, "mask must have dtype bool"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"mask": np.ones((2, 4), int)}, TypeError, "mask must have dtype bool"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"mask": [[True] * 4] * 2}, TypeError, "mask must be a bool numpy.ndarray"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"mask": np.ones((4, 2), bool)}, ValueError, "mask of shape"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"mask": np.ones((3, 2, 4), bool)}, ValueError, "mask of shape"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"scale": "0.5"}, TypeError, "scale must be a float"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"scale": True}, TypeError, "scale must be a float"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"scale": float("nan")}, ValueError, "scale must be finite"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"scale": np.inf}, ValueError, "scale must be finite"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"max_bytes": 0}, ValueError, "max_bytes"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"max_bytes": True}, TypeError, "max_bytes"),
        ((_arr(2, 3), _arr(4, 3), _arr(4, 2)), {"max_bytes": 63}, ValueError, "64 bytes"),
    ],
)
def test_attention_rejects(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        scaled_dot_product_attention(*args, **kwargs)
