"""softmax: rows sum to 1, masked entries are exactly 0, no NaN at extreme magnitudes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import logits, seeds

from mha_core import causal_mask, softmax


def softmax_by_definition(row: list[float]) -> list[float]:
    """exp(x_i - max) / sum_j exp(x_j - max), one Python float at a time."""
    m = max(row)
    e = [math.exp(v - m) for v in row]
    s = sum(e)
    return [v / s for v in e]


@settings(deadline=None, max_examples=80)
@given(logits(max_magnitude=1e4), st.data())
def test_rows_sum_to_one_and_match_definition(x, data):
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    p = softmax(x, axis=axis)
    assert p.shape == x.shape and p.dtype == x.dtype
    assert np.isfinite(p).all()
    assert (p >= 0).all()
    atol = 1e-6 if x.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(p.sum(axis=axis), 1.0, atol=atol)
    moved = np.moveaxis(x.astype(np.float64), axis, -1).reshape(-1, x.shape[axis])
    expected = np.array([softmax_by_definition(r.tolist()) for r in moved])
    got = np.moveaxis(p, axis, -1).reshape(-1, x.shape[axis])
    np.testing.assert_allclose(got, expected, atol=10 * atol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("magnitude", [1e4, 1e30, 1e38])
def test_no_nan_for_huge_logits(dtype, magnitude):
    x = np.array([[magnitude, -magnitude, 0.0], [-magnitude, -magnitude, -magnitude], [magnitude, magnitude, 1.0]], dtype=dtype)
    p = softmax(x)
    assert not np.isnan(p).any()
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(p[0], [1.0, 0.0, 0.0], atol=1e-6)
    np.testing.assert_allclose(p[1], [1 / 3] * 3, atol=1e-6)
    np.testing.assert_allclose(p[2], [0.5, 0.5, 0.0], atol=1e-6)


def test_shift_invariance_and_input_untouched():
    x = np.random.default_rng(0).standard_normal((3, 5))
    before = x.copy()
    np.testing.assert_allclose(softmax(x), softmax(x + 1234.5), atol=1e-9)
    np.testing.assert_array_equal(x, before)  # softmax does not write into its input


@settings(deadline=None, max_examples=60)
@given(logits(max_magnitude=1e30), seeds)
def test_masked_entries_are_exactly_zero(x, seed):
    mask = np.random.default_rng(seed).random(x.shape) < 0.6
    p = softmax(x, mask=mask)
    assert not np.isnan(p).any()
    assert (p[~mask] == 0).all()
    sums = p.sum(axis=-1)
    some_kept = mask.any(axis=-1)
    np.testing.assert_allclose(sums[some_kept], 1.0, atol=1e-5)
    assert (sums[~some_kept] == 0).all()  # fully masked rows are all zeros


def test_fully_masked_row_is_zeros_not_nan_or_uniform():
    x = np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]])
    mask = np.array([[True, False, True], [False, False, False]])
    p = softmax(x, mask=mask)
    assert (p[1] == 0).all()
    np.testing.assert_allclose(p[0], softmax_by_definition([1.0, 3.0])[:1] + [0.0] + softmax_by_definition([1.0, 3.0])[1:])


@pytest.mark.parametrize("n", [1, 2, 7])
def test_causal_mask_respected(n):
    x = np.random.default_rng(n).standard_normal((2, n, n)) * 100  # (h, N, N)
    p = softmax(x, mask=causal_mask(n))
    assert (np.triu(p, k=1) == 0).all()  # no weight above the diagonal
    np.testing.assert_allclose(p.sum(axis=-1), 1.0)
    assert (p[:, 0, 0] == 1.0).all()  # the first token can only attend to itself


def test_mask_broadcasts():
    x = np.zeros((2, 3, 4))
    mask = np.array([True, True, False, False])  # (N_k,), broadcasts over rows
    p = softmax(x, mask=mask)
    np.testing.assert_allclose(p[..., :2], 0.5)
    assert (p[..., 2:] == 0).all()


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: softmax([1.0, 2.0]), TypeError, "x must be a numpy.ndarray"),
        (lambda: softmax(np.array([1, 2])), TypeError, "x must have dtype float32 or float64"),
        (lambda: softmax(np.array([1, 2], dtype=np.float16)), TypeError, "x must have dtype"),
        (lambda: softmax(np.zeros((2, 0))), ValueError, "x must not have an empty axis"),
        (lambda: softmax(np.zeros((2, 3)), axis=2), ValueError, "axis=2 is out of range"),
        (lambda: softmax(np.zeros((2, 3)), axis=-3), ValueError, "axis=-3 is out of range"),
        (lambda: softmax(np.zeros((2, 3)), axis=1.0), TypeError, "axis must be an int"),
        (lambda: softmax(np.zeros((2, 3)), axis=True), TypeError, "axis must be an int"),
        (lambda: softmax(np.zeros((2, 3)), mask=np.ones((2, 3))), TypeError, "mask must have dtype bool"),
        (lambda: softmax(np.zeros((2, 3)), mask=[[True] * 3] * 2), TypeError, "mask must be a bool numpy.ndarray"),
        (lambda: softmax(np.zeros((2, 3)), mask=np.ones((2, 4), bool)), ValueError, "mask of shape"),
        (lambda: softmax(np.zeros((2, 3)), mask=np.ones((5, 2, 3), bool)), ValueError, "mask of shape .* would enlarge"),
    ],
)
def test_softmax_rejects(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
