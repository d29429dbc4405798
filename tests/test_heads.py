"""split_heads / merge_heads: the round trip, the layout of each head, and zero-copy splitting."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_core import head_columns, merge_heads, split_heads


@st.composite
def head_arrays(draw):
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    n, h, d = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    x = np.arange(np.prod((*lead, n, h * d)), dtype=dtype).reshape(*lead, n, h * d)  # (..., N, h*d)
    return x, h


@settings(deadline=None, max_examples=80)
@given(head_arrays())
def test_round_trip_and_layout(case):
    x, h = case
    *lead, n, width = x.shape
    d = width // h
    heads = split_heads(x, h)
    assert heads.shape == (*lead, h, n, d)
    assert heads.dtype == x.dtype
    # Head i holds columns i*d:(i+1)*d of every token, in token order.
    for i in range(h):
        np.testing.assert_array_equal(heads[..., i, :, :], x[..., :, i * d:(i + 1) * d])
    back = merge_heads(heads)
    assert back.shape == x.shape
    np.testing.assert_array_equal(back, x)
    # And the other way round: split(merge(y)) == y for a head-shaped array.
    y = np.random.default_rng(0).standard_normal((*lead, h, n, d))
    np.testing.assert_array_equal(split_heads(merge_heads(y), h), y)


@settings(deadline=None, max_examples=40)
@given(head_arrays())
def test_split_is_a_view_for_contiguous_input(case):
    x, h = case
    heads = split_heads(x, h)
    assert np.shares_memory(heads, x)
    assert heads.base is not None
    x[..., 0, 0] = -1.0  # a write through x shows up in the view
    assert (heads[..., 0, 0, 0] == -1.0).all()


def test_merge_heads_is_the_concat_of_heads():
    rng = np.random.default_rng(0)
    heads = [rng.standard_normal((2, 5, 3)) for _ in range(4)]  # h=4 heads of (B, N, d)
    stacked = np.stack(heads, axis=-3)  # (B, h, N, d)
    np.testing.assert_array_equal(merge_heads(stacked), np.concatenate(heads, axis=-1))


def test_reshape_without_transpose_is_wrong():
    # The pitfall the module docstring warns about: right shape, wrong numbers.
    x = np.arange(4 * 6, dtype=float).reshape(4, 6)  # (N=4, h*d=6)
    wrong = x.reshape(2, 4, 3)  # (h, N, d) without the transpose
    assert wrong.shape == split_heads(x, 2).shape
    assert not np.array_equal(wrong, split_heads(x, 2))


def test_non_contiguous_input_still_correct():
    x = np.arange(5 * 12, dtype=float).reshape(12, 5).T  # (N=5, 12), Fortran-ordered view
    heads = split_heads(x, 3)
    np.testing.assert_array_equal(merge_heads(heads), x)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: split_heads([[1.0, 2.0]], 1), TypeError, "x must be a numpy.ndarray"),
        (lambda: split_heads(np.zeros(4), 2), ValueError, "x must have at least 2 dimensions"),
        (lambda: split_heads(np.zeros((3, 6)), 4), ValueError, "n_heads=4 does not divide"),
        (lambda: split_heads(np.zeros((3, 6)), 0), ValueError, "n_heads"),
        (lambda: split_heads(np.zeros((3, 6)), True), TypeError, "n_heads"),
        (lambda: split_heads(np.zeros((3, 6)), 2.0), TypeError, "n_heads"),
        (lambda: split_heads(np.zeros((0, 6)), 2), ValueError, "x must not have an empty axis"),
        (lambda: split_heads(np.zeros((2, 0, 6)), 2), ValueError, "x must not have an empty axis"),
        (lambda: merge_heads(np.zeros((3, 6))), ValueError, "x must have at least 3 dimensions"),
        (lambda: merge_heads("heads"), TypeError, "x must be a numpy.ndarray"),
        (lambda: merge_heads(np.zeros((2, 0, 3))), ValueError, "x must not have an empty axis"),
    ],
)
def test_heads_reject(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_head_columns_pick_each_heads_block():
    W = np.arange(3 * 12).reshape(3, 12)  # (d_model, h*d_k) with h=4, d_k=3
    blocks = [W[:, head_columns(i, 3)] for i in range(4)]
    assert all(np.shares_memory(b, W) for b in blocks)
    np.testing.assert_array_equal(np.concatenate(blocks, axis=1), W)  # the heads tile the width
    np.testing.assert_array_equal(np.stack(blocks), split_heads(W, 4))  # the same blocks split_heads makes


@pytest.mark.parametrize(("i", "d", "exc", "match"), [
    (-1, 3, ValueError, "i must be a head index >= 0, got i=-1"),
    (1.0, 3, TypeError, "i must be a head index"),
    (True, 3, TypeError, "i must be a head index"),
    (0, 0, ValueError, "d must be a positive int"),
])
def test_head_columns_rejects(i, d, exc, match):
    with pytest.raises(exc, match=match):
        head_columns(i, d)
