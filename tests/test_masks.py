"""causal_mask and padding_mask: True = may attend, checked against their definitions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from references import reference_causal

from mha_core import causal_mask, padding_mask


@settings(deadline=None, max_examples=60)
@given(st.integers(1, 12), st.one_of(st.none(), st.integers(1, 12)))
def test_causal_mask_matches_definition(n_q, n_k):
    m = causal_mask(n_q, n_k)
    n_k_eff = n_q if n_k is None else n_k
    assert m.dtype == np.bool_
    assert m.shape == (n_q, n_k_eff)
    np.testing.assert_array_equal(m, reference_causal(n_q, n_k_eff))
    if n_k_eff >= n_q:
        assert m[-1].all()  # the last query (newest token) sees every key
        assert m.sum(axis=-1).min() >= 1  # nobody is left with no key


def test_square_causal_is_lower_triangle():
    m = causal_mask(4)
    expected = np.array(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=bool
    )
    np.testing.assert_array_equal(m, expected)


def test_causal_with_kv_cache_is_bottom_right_aligned():
    # 2 new queries after 3 cached tokens: positions 3 and 4 of N_k = 5.
    expected = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(causal_mask(2, 5), expected)


@settings(deadline=None, max_examples=40)
@given(st.lists(st.integers(1, 7), min_size=1, max_size=4), st.integers(0, 3))
def test_padding_mask_matches_definition(lens, extra):
    n_k = max(lens) + extra
    m = padding_mask(lens, n_k)
    assert m.dtype == np.bool_
    assert m.shape == (len(lens), 1, 1, n_k)
    for b, length in enumerate(lens):
        np.testing.assert_array_equal(m[b, 0, 0], [j < length for j in range(n_k)])
    # It broadcasts against scores (B, h, N_q, N_k).
    assert np.broadcast_shapes(m.shape, (len(lens), 3, 2, n_k)) == (len(lens), 3, 2, n_k)


def test_padding_mask_accepts_numpy_ints():
    np.testing.assert_array_equal(padding_mask(np.array([2, 1], dtype=np.int32), 2)[:, 0, 0], [[1, 1], [1, 0]])


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: causal_mask(0), ValueError, "n_q"),
        (lambda: causal_mask(-3), ValueError, "n_q"),
        (lambda: causal_mask(True), TypeError, "n_q"),
        (lambda: causal_mask(3.0), TypeError, "n_q"),
        (lambda: causal_mask(3, 0), ValueError, "n_k"),
        (lambda: causal_mask(3, False), TypeError, "n_k"),
        (lambda: causal_mask(3, "4"), TypeError, "n_k"),
        (lambda: padding_mask([1, 2], 0), ValueError, "n_k"),
        (lambda: padding_mask([1, 2], True), TypeError, "n_k"),
        (lambda: padding_mask([1.0, 2.0], 3), TypeError, "lengths"),
        (lambda: padding_mask([True, False], 3), TypeError, "lengths"),
        (lambda: padding_mask([[1, 2]], 3), TypeError, "lengths"),
        (lambda: padding_mask(["a"], 3), TypeError, "lengths"),
        (lambda: padding_mask([], 3), (TypeError, ValueError), "lengths"),
        (lambda: padding_mask([0, 2], 3), ValueError, r"lengths must each be in \[1, n_k=3\]"),
        (lambda: padding_mask([4], 3), ValueError, "lengths"),
    ],
)
def test_masks_reject(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
