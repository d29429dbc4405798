"""validate.py: the checks at the door, the ``checked`` decorator, and the memory guard on the N^2 scores."""

from __future__ import annotations

import tracemalloc
from functools import partial

import numpy as np
import pytest

from mha_core import (
    DEFAULT_MAX_SCORE_BYTES,
    MemoryBudgetError,
    MHAConfig,
    init_params,
    multi_head_attention,
    multi_head_attention_per_head,
    scaled_dot_product_attention,
)
from mha_core.core.validate import (
    check_finite,
    check_float_array,
    check_layer,
    check_mask,
    check_positive_int,
    checked,
    finite_output,
)

P32 = init_params(MHAConfig(64, 8), 0, dtype=np.float32)
P64 = init_params(MHAConfig(64, 8), 0, dtype=np.float64)


def huge_input(n: int, d_model: int = 64, dtype=np.float32) -> np.ndarray:
    """An (N, d_model) input that takes no memory: every row is a view of one row."""
    return np.broadcast_to(np.ones((1, d_model), dtype), (n, d_model))  # (N, d_model), stride 0


def test_default_limit_is_2_gib():
    assert DEFAULT_MAX_SCORE_BYTES == 2 * 1024**3
    assert issubclass(MemoryBudgetError, ValueError)


# The formula layer holds the (h, N, N) scores, with or without returning them (tiled=True does not,
# tests/test_tiled.py); the per-head loop holds every head's.
HOLDS_SCORES = [multi_head_attention, partial(multi_head_attention, return_weights=True), multi_head_attention_per_head]


@pytest.mark.parametrize("fn", HOLDS_SCORES)
@pytest.mark.parametrize(("dtype", "params"), [(np.float32, P32), (np.float64, P64)])
def test_guard_refuses_before_allocating(fn, dtype, params):
    n = 100_000  # scores (h=8, N, N): 8e10 entries, hundreds of GB
    x = huge_input(n, dtype=dtype)
    need = 8 * n * n * np.dtype(dtype).itemsize
    tracemalloc.start()
    try:
        with pytest.raises(MemoryBudgetError) as info:
            fn(x, params, 8)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # nothing N-sized (let alone N^2-sized) was allocated
    msg = str(info.value)
    assert f"{need:,} bytes" in msg  # the bytes it would need
    assert f"{DEFAULT_MAX_SCORE_BYTES:,} bytes" in msg  # and the limit
    assert "(8, 100000, 100000)" in msg and "max_bytes" in msg


def test_guard_counts_the_batch_and_heads():
    x = np.ones((3, 10, 64), np.float32)  # B=3, N=10: scores (3, 8, 10, 10) float32
    need = 3 * 8 * 10 * 10 * 4
    multi_head_attention(x, P32, 8, max_bytes=need, return_weights=True)  # exactly at the limit: allowed
    with pytest.raises(MemoryBudgetError, match=f"would need {need:,} bytes"):
        multi_head_attention(x, P32, 8, max_bytes=need - 1, return_weights=True)


def test_guard_uses_n_k_for_cross_attention():
    x, x_kv = np.ones((4, 64)), np.ones((9, 64))
    need = 8 * 4 * 9 * 8  # (h, N_q, N_k) float64
    multi_head_attention(x, P64, 8, x_kv=x_kv, max_bytes=need, return_weights=True)
    with pytest.raises(MemoryBudgetError, match=rf"shape \(8, 4, 9\).*{need:,} bytes"):
        multi_head_attention(x, P64, 8, x_kv=x_kv, max_bytes=need - 1, return_weights=True)


def test_max_bytes_can_raise_the_limit():
    x = huge_input(20_000)  # (h, N, N) float32 = 12.8 GB, over the default
    with pytest.raises(MemoryBudgetError):
        multi_head_attention(x, P32, 8, return_weights=True)
    small = np.ones((40, 64), np.float32)
    with pytest.raises(MemoryBudgetError, match="would need 51,200 bytes"):
        multi_head_attention(small, P32, 8, max_bytes=10_000, return_weights=True)  # 8*40*40*4 = 51,200 > 10,000
    assert multi_head_attention(small, P32, 8, max_bytes=60_000, return_weights=True)[0].shape == (40, 64)
    assert multi_head_attention(small, P32, 8, max_bytes=10_000, tiled=True).shape == (40, 64)  # tiled: no N^2


def test_sdpa_guard():
    q = np.broadcast_to(np.ones((1, 1, 4)), (2, 50_000, 4))  # (B, N, d_k), a view
    need = 2 * 50_000 * 50_000 * 8
    with pytest.raises(MemoryBudgetError, match=f"{need:,} bytes"):
        scaled_dot_product_attention(q, q, q)
    with pytest.raises(MemoryBudgetError, match="would need 200 bytes"):
        scaled_dot_product_attention(np.ones((5, 4)), np.ones((5, 4)), np.ones((5, 4)), max_bytes=199)


@pytest.mark.parametrize(
    ("value", "exc"), [(0, ValueError), (-1, ValueError), (True, TypeError), (1.0, TypeError), ("3", TypeError), (None, TypeError)]
)
def test_check_positive_int_rejects(value, exc):
    with pytest.raises(exc, match="width must be a positive int"):
        check_positive_int(value, "width")


def test_check_positive_int_accepts_numpy_ints():
    assert check_positive_int(np.int64(3), "n") == 3 and type(check_positive_int(np.int64(3), "n")) is int


@pytest.mark.parametrize(
    ("value", "ndims", "exc", "match"),
    [
        ([1.0], None, TypeError, "a must be a numpy.ndarray"),
        (np.ones(3, int), None, TypeError, "a must have dtype float32 or float64, got int64"),
        (np.ones(3, complex), None, TypeError, "a must have dtype"),
        (np.ones((2, 2)), (3,), ValueError, r"a must have 3 dimensions, got shape \(2, 2\)"),
        (np.ones((2, 2)), (1, 3), ValueError, "a must have 1 or 3 dimensions"),
        (np.ones((2, 0)), None, ValueError, r"a must not have an empty axis, got shape \(2, 0\)"),
    ],
)
def test_check_float_array_rejects(value, ndims, exc, match):
    with pytest.raises(exc, match=match):
        check_float_array(value, "a", ndims)


@pytest.mark.parametrize(
    ("mask", "exc", "match"),
    [
        (np.ones((3, 4)), TypeError, "m must have dtype bool"),
        ([[True]], TypeError, "m must be a bool numpy.ndarray"),
        (np.ones((4, 3), bool), ValueError, "does not broadcast"),
        (np.ones((2, 2, 3, 4), bool), ValueError, "would enlarge"),
    ],
)
def test_check_mask_rejects(mask, exc, match):
    with pytest.raises(exc, match=match):
        check_mask(mask, "m", (2, 3, 4))


@pytest.mark.parametrize("shape", [(3, 4), (4,), (1, 1), (2, 1, 4)])
def test_check_mask_accepts_broadcastable(shape):
    m = np.ones(shape, bool)
    assert check_mask(m, "m", (2, 3, 4)) is m


def test_check_finite_counts_the_bad_values():
    a = np.ones(10)
    a[[1, 3]] = [np.nan, np.inf]
    with pytest.raises(ValueError, match="w must be finite, but 2 of its 10 values are NaN or inf"):
        check_finite(a, "w")
    check_finite(np.ones(3), "w")


X = np.zeros((2, 5, 16), np.float32)  # (B, N, d_model)
P16 = init_params(MHAConfig(16, 4), 0)


def test_the_layers_refusal_names_the_long_context_function():
    with pytest.raises(MemoryBudgetError, match=r"attention scores of shape \(2, 4, 5, 5\).*pass tiled=True: tiled_attention"):
        check_layer(X, P16, 4, max_bytes=100)
    check_layer(X, P16, 4, max_bytes=100, tiled=True)  # the tiled path never builds the scores
    with pytest.raises(ValueError, match="max_bytes must be a positive int"):
        check_layer(X, P16, 4, max_bytes=0, tiled=True)
    with pytest.raises(ValueError, match="tiled=True keeps no attention weights"):
        multi_head_attention(X, P16, 4, tiled=True, return_weights=True)


def test_output_check_names_the_input_that_was_not_finite():
    bad = X.copy()
    bad[0, 1, 2] = np.nan
    assert finite_output(np.zeros(3), bad, P16) is not None  # a finite output passes whatever the inputs
    with pytest.raises(ValueError, match="x must be finite, but 1 of its 160 values"):
        finite_output(np.full(3, np.nan), bad, P16)
    with pytest.raises(ValueError, match="overflowed"):
        finite_output(np.full(3, np.inf), X, P16)


def test_checked_runs_the_check_first_and_unchecked_is_the_maths_alone():
    calls = []

    def check(a, b=0):
        calls.append(("check", a, b))
        if a < 0:
            raise ValueError("a must be >= 0")

    @checked(check, after=lambda out, a, b=0: out + 100)
    def add(a, b=0):
        """a + b"""
        calls.append(("add", a, b))
        return a + b

    assert add(1, b=2) == 103 and calls == [("check", 1, 2), ("add", 1, 2)]
    assert add.__doc__ == "a + b" and add.__name__ == "add" and add.__wrapped__ is add.unchecked
    with pytest.raises(ValueError, match="a must be >= 0"):
        add(-1)
    assert add.unchecked(-1) == -1  # the maths alone trusts its input
    assert not [c for c in calls if c == ("add", -1, 0)][1:]  # the checked call never reached the maths
