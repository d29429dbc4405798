"""The shape ledger (core/ledger.py) is recorded from a real run and agrees with the arrays that
run produced."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import mha_cases

from mha_core import (
    MHAConfig,
    init_params,
    multi_head_attention,
    trace_config,
    trace_shapes,
)


def test_the_ledger_is_the_forward_pass_of_the_layer():
    """The arrays the ledger reads (mha_forward's) are the layer's own: the same output."""
    from mha_core.core.backward import mha_forward

    rng = np.random.default_rng(1)
    for kw in ({}, {"causal": True}, {"n_kv_heads": 2, "rope_base": 1e4}, {"head_mask": np.array([1, 0, 1, 1])}):
        cfg = MHAConfig(16, 4, n_kv_heads=kw.get("n_kv_heads"), bias=True)
        p, x = init_params(cfg, rng, dtype=np.float64), rng.standard_normal((2, 6, 16))
        out, saved = mha_forward(x, p, 4, **kw)
        np.testing.assert_allclose(out, multi_head_attention(x, p, 4, **kw), rtol=1e-12, atol=1e-12)
        assert saved["weights"].shape == (2, 4, 6, 6)


def steps_by_name(steps):
    names = [name for name, _ in steps]
    assert len(set(names)) == len(names), f"duplicate step names in {names}"
    return dict(steps)


@settings(deadline=None, max_examples=60)
@given(mha_cases())
def test_ledger_agrees_with_the_arrays(case):
    h, n_kv, d_model = case.config.n_heads, case.config.n_kv, case.config.d_model
    d_k, d_v = case.config.d_k, case.config.d_v
    lead, n_q, n_k = case.lead, case.n_q, case.n_k
    steps = trace_shapes(case.x, case.params, h, **case.kwargs)
    out, weights = multi_head_attention(case.x, case.params, h, return_weights=True, **case.kwargs)
    assert steps[0] == ("X", case.x.shape)
    assert steps[-1][1] == case.x.shape == out.shape
    s = steps_by_name(steps)
    assert s["Q = X @ W_Q"] == (*lead, n_q, h * d_k)
    src = "X" if case.x_kv is None else "X_kv"  # cross-attention names the sequence K and V come from
    if src == "X_kv":
        assert s["X_kv"] == case.x_kv.shape
    assert s[f"K = {src} @ W_K"] == (*lead, n_k, n_kv * d_k)
    assert s[f"V = {src} @ W_V"] == (*lead, n_k, n_kv * d_v)
    assert s["Q as heads: reshape"] == (*lead, n_q, h, d_k)
    assert s["Q heads: transpose"] == (*lead, h, n_q, d_k)
    assert s["K heads"] == (*lead, n_kv, n_k, d_k)
    # Scores and weights: (.., h, N_q, N_k); with shared kv heads, K and V are repeated to h first.
    heads_axes = (h,)
    if n_kv != h:
        assert s["K, V heads repeated (GQA)"] == (*lead, h, n_k, d_k)
    assert s["scores = Q K^T / sqrt(d_k)"] == (*lead, *heads_axes, n_q, n_k)
    assert s["weights = softmax(scores)"] == s["scores = Q K^T / sqrt(d_k)"]
    assert int(np.prod(s["weights = softmax(scores)"])) == weights.size
    assert s["V heads"] == (*lead, n_kv, n_k, d_v)
    assert s["head outputs = weights V"] == (*lead, *heads_axes, n_q, d_v)
    assert s["heads back: transpose"] == (*lead, n_q, h, d_v)
    assert s["concat: reshape"] == (*lead, n_q, h * d_v)
    assert s["out = concat @ W_O"] == (*lead, n_q, d_model)


def test_worked_example_ledger_matches_the_text():
    # The text's table for d_model=512, h=8, N=100 (d_k=64).
    steps = steps_by_name(trace_config(MHAConfig(512, 8), 100).steps)
    assert steps["X"] == (100, 512)
    assert steps["Q = X @ W_Q"] == (100, 512)
    assert steps["Q as heads: reshape"] == (100, 8, 64)
    assert steps["Q heads: transpose"] == (8, 100, 64)
    assert steps["scores = Q K^T / sqrt(d_k)"] == (8, 100, 100)
    assert steps["head outputs = weights V"] == (8, 100, 64)
    assert steps["concat: reshape"] == (100, 512)
    assert steps["out = concat @ W_O"] == (100, 512)


def test_batched_ledger_keeps_the_batch_axis():
    t = trace_config(MHAConfig(16, 4), 5, batch=3)
    shapes = [shape for _, shape in t.steps]
    assert all(shape[0] == 3 for shape in shapes)
    assert steps_by_name(t.steps)["scores = Q K^T / sqrt(d_k)"] == (3, 4, 5, 5)


X = np.ones((3, 8))
P = init_params(MHAConfig(8, 2), 0, dtype=np.float64)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: trace_shapes(X.astype(int), P, 2), TypeError, "x must have dtype"),
        (lambda: trace_shapes(X[0], P, 2), ValueError, "x must have 2 or 3 dimensions"),
        (lambda: trace_shapes(X, P, 3), ValueError, "n_heads=3 does not divide"),
        (lambda: trace_shapes(X, "P", 2), TypeError, "params must be a dict"),
        (lambda: trace_shapes(X, P, 2, mask=np.ones((3, 3))), TypeError, "mask must have dtype bool"),
        (lambda: trace_shapes(X, P, 2, causal=1), TypeError, "causal must be a bool"),
        (lambda: trace_config({"d_model": 8}, 3), TypeError, "config must be an MHAConfig"),
        (lambda: trace_config(MHAConfig(8, 2), 0), ValueError, "n"),
        (lambda: trace_config(MHAConfig(8, 2), 2.0), TypeError, "n must be a positive int"),
        (lambda: trace_config(MHAConfig(8, 2), 3, batch=0), ValueError, "batch"),
        (lambda: trace_config(MHAConfig(8, 2), 3, batch=True), TypeError, "batch"),
        (lambda: trace_config(MHAConfig(8, 2), 3, seed=-1), ValueError, "seed"),
        (lambda: trace_config(MHAConfig(8, 2), 3, seed=True), TypeError, "seed"),
        (lambda: trace_config(MHAConfig(8, 2), 3, seed="0"), TypeError, "seed"),
        (lambda: trace_config(MHAConfig(8, 2), 3, mask=np.ones((2, 2), bool)), ValueError, "mask of shape"),
    ],
)
def test_trace_rejects(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
