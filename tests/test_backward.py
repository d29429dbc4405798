"""The hand-written backward pass against central finite differences and PyTorch autograd."""

from __future__ import annotations

import numpy as np
import pytest
from gradcheck import MAX_REL_ERR, numeric_grad, relative_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mha_core import MHAConfig, init_params, multi_head_attention, scaled_dot_product_attention
from mha_core.core.backward import attention_backward, attention_forward, mha_backward, mha_forward

# d loss / d b_K is exactly zero (adding q.b_K to a whole row of scores leaves softmax unchanged),
# so both sides are rounding noise; this bound is far below any real gradient here.
ZERO_GRAD_ATOL = 1e-7

FD_SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mha_cases(draw):
    """Small random MHA calls: batch or not, GQA/MQA, bias, causal, a random mask, cross-attention."""
    h = draw(st.sampled_from([1, 2, 4]))
    n_kv = draw(st.sampled_from([d for d in (1, 2, 4) if h % d == 0]))
    d_k, d_v = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    cross = draw(st.booleans())
    n_q = draw(st.integers(1, 4))
    n_k = draw(st.integers(1, 4)) if cross else n_q
    batch = draw(st.sampled_from([None, 1, 2]))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    d_model = h * d_k
    config = MHAConfig(d_model, h, n_kv, draw(st.booleans()), d_v=d_v)
    params = init_params(config, rng, np.float64)
    x = rng.standard_normal((*lead, n_q, d_model))
    x_kv = rng.standard_normal((*lead, n_k, d_model)) if cross else None
    mask = rng.random((*lead, h, n_q, n_k)) < 0.7 if draw(st.booleans()) else None
    head_mask = rng.random(h) if draw(st.booleans()) else None
    kwargs = dict(x_kv=x_kv, mask=mask, causal=draw(st.booleans()), n_kv_heads=n_kv, head_mask=head_mask)
    return x, params, h, kwargs, rng


@given(mha_cases())
@FD_SETTINGS
def test_mha_forward_is_multi_head_attention(case):
    # One forward, not two: mha_forward runs multi_head_attention's own steps, keeping them.
    x, params, h, kwargs, _ = case
    out, saved = mha_forward(x, params, h, **kwargs)
    ref, weights = multi_head_attention(x, params, h, return_weights=True, **kwargs)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(saved["weights"], weights)


@given(mha_cases())
@FD_SETTINGS
def test_mha_backward_matches_finite_differences(case):
    x, params, h, kwargs, rng = case
    out, saved = mha_forward(x, params, h, **kwargs)
    dout = rng.standard_normal(out.shape)  # loss = sum(out * dout), so d loss / d out = dout
    grads = mha_backward(dout, saved)

    inputs = dict(params, x=x)
    if kwargs["x_kv"] is not None:
        inputs["x_kv"] = kwargs["x_kv"]
    if kwargs["head_mask"] is not None:
        inputs["head_mask"] = kwargs["head_mask"]
    assert set(grads) == set(inputs)

    def loss() -> float:
        call = dict(kwargs, x_kv=inputs.get("x_kv"), head_mask=inputs.get("head_mask"))
        return float((multi_head_attention(inputs["x"], params, h, **call) * dout).sum())

    for name, arr in inputs.items():
        assert grads[name].shape == arr.shape, name
        num = numeric_grad(loss, arr)
        if name == "b_K":
            assert np.abs(grads[name]).max() < ZERO_GRAD_ATOL
            assert np.abs(num).max() < ZERO_GRAD_ATOL
        elif np.abs(num).max() > 0:
            assert relative_error(grads[name], num) < MAX_REL_ERR, name
        else:  # e.g. every key masked: the gradient must be exactly zero too
            assert np.abs(grads[name]).max() < ZERO_GRAD_ATOL, name


@given(
    n_q=st.integers(1, 5), n_k=st.integers(1, 5), d_k=st.integers(1, 4), d_v=st.integers(1, 4),
    lead=st.sampled_from([(), (2,), (2, 3)]), use_mask=st.booleans(), seed=st.integers(0, 2**16),
)
@FD_SETTINGS
def test_attention_backward_matches_finite_differences(n_q, n_k, d_k, d_v, lead, use_mask, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((*lead, n_q, d_k))
    k = rng.standard_normal((*lead, n_k, d_k))
    v = rng.standard_normal((*lead, n_k, d_v))
    mask = rng.random((n_q, n_k)) < 0.6 if use_mask else None
    out, saved = attention_forward(q, k, v, mask)
    np.testing.assert_allclose(out, scaled_dot_product_attention(q, k, v, mask)[0], rtol=1e-12)
    dout = rng.standard_normal(out.shape)
    grads = attention_backward(dout, saved)
    for name, arr in (("q", q), ("k", k), ("v", v)):
        num = numeric_grad(lambda: float((scaled_dot_product_attention(q, k, v, mask)[0] * dout).sum()), arr)
        if np.abs(num).max() > 0:
            assert relative_error(grads[name], num) < MAX_REL_ERR, name
        else:
            assert np.abs(grads[name]).max() < ZERO_GRAD_ATOL, name


def test_attention_backward_sums_gradients_of_broadcast_inputs():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((3, 4, 2))  # three heads share one k and one v
    k, v = rng.standard_normal((1, 5, 2)), rng.standard_normal((5, 3))
    out, saved = attention_forward(q, k, v)
    dout = rng.standard_normal(out.shape)
    grads = attention_backward(dout, saved)
    assert grads["k"].shape == k.shape and grads["v"].shape == v.shape
    per_head = [attention_backward(dout[i], attention_forward(q[i], k[0], v)[1]) for i in range(3)]
    np.testing.assert_allclose(grads["v"], sum(g["v"] for g in per_head), rtol=1e-12)
    np.testing.assert_allclose(grads["k"][0], sum(g["k"] for g in per_head), rtol=1e-12)


def test_masked_keys_get_no_gradient():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((4, 3)), rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    mask = np.ones((4, 5), dtype=bool)
    mask[:, 2] = False  # nobody may attend key 2
    _, saved = attention_forward(q, k, v, mask)
    grads = attention_backward(rng.standard_normal((4, 2)), saved)
    assert np.all(grads["k"][2] == 0) and np.all(grads["v"][2] == 0)
    assert np.abs(grads["k"][[0, 1, 3, 4]]).max() > 0


def test_backward_rejects_bad_arguments():
    rng = np.random.default_rng(2)
    params = init_params(MHAConfig(4, 2), 0, np.float64)
    out, saved = mha_forward(rng.standard_normal((3, 4)), params, 2)
    with pytest.raises(ValueError, match="dout must have the forward output's shape"):
        mha_backward(np.zeros((3, 5)), saved)
    with pytest.raises(TypeError, match="dout must be a numpy.ndarray"):
        mha_backward([[0.0] * 4] * 3, saved)
    with pytest.raises(TypeError, match="saved must be what mha_forward returned as saved"):
        mha_backward(out, {"kind": "attention"})
    with pytest.raises(TypeError, match="saved must be what attention_forward returned as saved"):
        attention_backward(out, saved)
    with pytest.raises(ValueError, match="n_kv_heads=3 does not divide n_heads=2"):
        mha_forward(rng.standard_normal((3, 4)), params, 2, n_kv_heads=3)


# ---------------------------------------------------------------------------------------------
# PyTorch autograd as a second, independent reference


def _torch_mha(torch, x, params, h, x_kv, mask, causal, n_kv, head_mask):
    """The same layer written with torch ops, differentiated by autograd."""
    x_kv = x if x_kv is None else x_kv
    Q = x @ params["W_Q"] + params.get("b_Q", 0)
    K = x_kv @ params["W_K"] + params.get("b_K", 0)
    V = x_kv @ params["W_V"] + params.get("b_V", 0)
    *lead, n_q, _ = x.shape
    n_k = x_kv.shape[-2]
    Qh = Q.reshape(*lead, n_q, h, -1).transpose(-3, -2)
    Kh = K.reshape(*lead, n_k, n_kv, -1).transpose(-3, -2).repeat_interleave(h // n_kv, dim=-3)
    Vh = V.reshape(*lead, n_k, n_kv, -1).transpose(-3, -2).repeat_interleave(h // n_kv, dim=-3)
    scores = Qh @ Kh.transpose(-1, -2) / Qh.shape[-1] ** 0.5
    allowed = torch.ones(scores.shape, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    if causal:
        allowed = allowed & torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q)
    heads = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ Vh
    if head_mask is not None:
        heads = heads * head_mask[:, None, None]
    concat = heads.transpose(-3, -2).reshape(*lead, n_q, -1)
    return concat @ params["W_O"] + params.get("b_O", 0)


@pytest.mark.torch
@given(mha_cases())
@settings(max_examples=40, deadline=None)
def test_mha_backward_matches_torch_autograd(case):
    torch = pytest.importorskip("torch")
    x, params, h, kwargs, rng = case
    mask, n_q = kwargs["mask"], x.shape[-2]
    n_k = n_q if kwargs["x_kv"] is None else kwargs["x_kv"].shape[-2]
    if mask is not None:  # torch gives NaN for a query with no allowed key; keep key 0 allowed
        mask = mask.copy()
        mask[..., 0] = True
    causal = kwargs["causal"] and n_k >= n_q  # the same reason: with N_k < N_q early queries see nothing
    kwargs = dict(kwargs, mask=mask, causal=causal)
    out, saved = mha_forward(x, params, h, **kwargs)
    dout = rng.standard_normal(out.shape)
    grads = mha_backward(dout, saved)

    leaves = {name: torch.tensor(a, requires_grad=True) for name, a in params.items()}
    leaves["x"] = torch.tensor(x, requires_grad=True)
    for name in ("x_kv", "head_mask"):
        if kwargs[name] is not None:
            leaves[name] = torch.tensor(kwargs[name], requires_grad=True)
    t_out = _torch_mha(
        torch, leaves["x"], {k: leaves[k] for k in params}, h, leaves.get("x_kv"),
        None if mask is None else torch.tensor(mask), causal, kwargs["n_kv_heads"], leaves.get("head_mask"),
    )
    np.testing.assert_allclose(out, t_out.detach().numpy(), rtol=1e-10, atol=1e-12)
    (t_out * torch.tensor(dout)).sum().backward()
    assert set(grads) == set(leaves)
    for name, leaf in leaves.items():
        np.testing.assert_allclose(grads[name], leaf.grad.numpy(), rtol=1e-9, atol=1e-11, err_msg=name)
