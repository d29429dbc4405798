"""Tiled (online-softmax) attention (core/tiled.py) against the formula, alone and as the
layer's ``tiled=True``."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from references import reference_causal
from strategies import mha_cases, tiled_cases, tol

from mha_core import (
    MemoryBudgetError,
    MHAConfig,
    causal_mask,
    init_params,
    multi_head_attention,
    multi_head_attention_per_head,
    scaled_dot_product_attention,
    tiled_attention,
)
from mha_core.core import tiled


def one_shot(q, k, v, mask=None, scale=None, causal=False):
    """The reference: scaled_dot_product_attention with the causal mask built in full."""
    if causal:
        tri = causal_mask(q.shape[-2], k.shape[-2])  # (N_q, N_k)
        mask = tri if mask is None else mask & tri
    return scaled_dot_product_attention(q, k, v, mask, scale)[0]


@settings(deadline=None, max_examples=150)
@given(tiled_cases())
def test_equals_the_one_shot_path(case):
    out = tiled_attention(case.q, case.k, case.v, case.mask, case.scale, causal=case.causal,
                          block_q=case.block_q, block_k=case.block_k)
    ref = one_shot(case.q, case.k, case.v, case.mask, case.scale, case.causal)
    assert out.shape == ref.shape and out.dtype == case.q.dtype
    np.testing.assert_allclose(out, ref, **tol(case.q.dtype))


@settings(deadline=None, max_examples=40)
@given(tiled_cases())
def test_tile_sizes_and_threads_change_nothing_but_rounding(case):
    a = tiled_attention(case.q, case.k, case.v, case.mask, causal=case.causal, block_q=1, block_k=1)
    b = tiled_attention(case.q, case.k, case.v, case.mask, causal=case.causal, block_q=64, block_k=64)
    np.testing.assert_allclose(a, b, **tol(case.q.dtype))
    # each query block is computed the same way whichever thread runs it: bit for bit equal
    c = tiled_attention(case.q, case.k, case.v, case.mask, causal=case.causal, block_q=2, block_k=3, threads=1)
    d = tiled_attention(case.q, case.k, case.v, case.mask, causal=case.causal, block_q=2, block_k=3, threads=3)
    np.testing.assert_array_equal(c, d)


def test_rows_with_no_allowed_key_give_zeros_not_nan():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 9, 4)) for _ in range(3))  # (B, N, d)
    mask = np.ones((2, 9, 9), dtype=bool)
    mask[0, 3] = False  # item 0, query 3: no key at all
    mask[1, :, :5] = False  # item 1: keys 0-4 hidden, so with causal rows 0-4 see nothing
    out = tiled_attention(q, k, v, mask, causal=True, block_q=2, block_k=2)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[0, 3], 0.0)
    np.testing.assert_array_equal(out[1, :5], 0.0)
    np.testing.assert_allclose(out, one_shot(q, k, v, mask, causal=True), rtol=1e-12, atol=1e-12)


def test_a_masked_first_tile_does_not_hide_very_negative_scores():
    # the only allowed key scores -1000: its weight is 1 whatever the score, so out = its value
    q = np.ones((1, 1))
    k = np.array([[5.0], [-1000.0]])  # (N_k, d_k): key 0 is masked, key 1 scores -1000
    v = np.array([[1.0], [7.0]])
    mask = np.array([[False, True]])
    out = tiled_attention(q, k, v, mask, scale=1.0, block_k=1)
    np.testing.assert_array_equal(out, [[7.0]])


def test_more_queries_than_keys_causal_rows_before_the_first_key_are_zero():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((7, 3)), rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    out = tiled_attention(q, k, v, causal=True, block_q=3, block_k=2)
    assert reference_causal(7, 4)[:3].sum() == 0  # queries 0-2 come before every key
    np.testing.assert_array_equal(out[:3], 0.0)
    np.testing.assert_allclose(out, one_shot(q, k, v, causal=True), rtol=1e-12, atol=1e-12)


def test_large_logits_do_not_overflow():
    # scores up to ~1e4: exp would overflow without the running max; the rescaling keeps it exact
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((3, 40, 8)).astype(np.float32) for _ in range(3))
    out = tiled_attention(q * 100, k * 100, v, block_q=7, block_k=5)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, one_shot(q * 100, k * 100, v), rtol=1e-4, atol=1e-4)


def test_a_growing_max_rescales_the_partial_sums():
    # one query, keys in increasing order of score: every tile raises the max, so every tile
    # rescales what came before; the result must still be the softmax-weighted average
    q = np.ones((1, 1))
    k = np.arange(12, dtype=np.float64)[:, None] * 12.0  # scores 0, 12, ..., 132: each outgrows the last
    v = np.arange(12, dtype=np.float64)[:, None]
    out = tiled_attention(q, k, v, scale=1.0, block_k=1)
    w = np.exp(k[:, 0] - k[:, 0].max())
    np.testing.assert_allclose(out[0, 0], (w / w.sum()) @ v[:, 0], rtol=1e-14)


def test_a_frozen_max_is_kept_until_a_score_outgrows_it(monkeypatch):
    # scores 0, 3, ..., 33, a key per tile: a tile is added against the max as it stands while
    # exp(score - m) <= 2^16 (score - m <= 11.09), and computed again (its scores twice) past that
    scored = []
    real = tiled.scores
    monkeypatch.setattr(tiled, "scores", lambda *a: scored.append(a[6]) or real(*a))  # a[6]: c0
    q = np.ones((1, 1))
    k = np.arange(12, dtype=np.float64)[:, None] * 3.0  # (N_k, 1)
    v = np.arange(12, dtype=np.float64)[:, None]
    out = tiled_attention(q, k, v, scale=1.0, block_k=1)
    w = np.exp(k[:, 0] - k[:, 0].max())
    np.testing.assert_allclose(out[0, 0], (w / w.sum()) @ v[:, 0], rtol=1e-14)
    # m = 0 after key 0; 12 - 0 > 11.09: again, m = 12; 24 - 12 > 11.09: again, m = 24; 33 - 24 is kept
    assert 11 < math.log(tiled.FROZEN_MAX_LIMIT) < 12
    assert sorted(scored) == sorted([*range(12), 4, 8])


def test_a_nan_spoils_only_its_own_row():
    # a NaN fails the frozen-max test (NaN <= limit is False), so its tile goes the full way, and
    # only the query row holding the NaN comes out NaN, as in the formula
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 40, 8)).astype(np.float32) for _ in range(3))
    q[1, 7, 3] = np.nan
    out = tiled_attention(q, k, v, block_q=16, block_k=8)
    ref = one_shot(q, k, v)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    assert np.isnan(out[1, 7]).all() and np.isnan(out).sum() == 8
    np.testing.assert_allclose(out, ref, **tol(np.float32))


def test_causal_skips_the_tiles_above_the_diagonal(monkeypatch):
    computed = []
    real = tiled.tile_mask

    def spy(mask, causal, offset, r0, rows, c0, cols):
        computed.append((r0, c0))
        return real(mask, causal, offset, r0, rows, c0, cols)

    monkeypatch.setattr(tiled, "tile_mask", spy)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((16, 4)) for _ in range(3))
    tiled_attention(q, k, v, causal=True, block_q=4, block_k=4, threads=1)
    # a 4 x 4 grid of tiles: the causal half is 1 + 2 + 3 + 4 = 10 of 16
    assert sorted(computed) == [(r, c) for r in range(0, 16, 4) for c in range(0, r + 1, 4)]
    computed.clear()
    tiled_attention(q, k, v, block_q=4, block_k=4, threads=1)
    assert len(computed) == 16


def test_memory_grows_as_n_not_n_squared():
    n, d = 2048, 16
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, n, d)).astype(np.float32) for _ in range(3))  # (h, N, d)
    score_bytes = 2 * n * n * 4  # (h, N, N) float32: 32 MiB
    tracemalloc.start()
    try:
        tiled_attention(q, k, v, causal=True, block_q=128, block_k=256)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the output + at most five tile-sized arrays per worker thread (scores, causal mask, masked
    # scores, scores - max, exp): 2.8 MiB here on two threads, whatever N is
    expected = q.nbytes + 5 * tiled.blas_threads() * (2 * 128 * 256 * 4)
    assert peak < expected < score_bytes / 10


BAD = [
    ({"block_q": 0}, ValueError, "block_q"),
    ({"block_q": 1.5}, TypeError, "block_q"),
    ({"block_k": -4}, ValueError, "block_k"),
    ({"block_k": True}, TypeError, "block_k"),
    ({"threads": 0}, ValueError, "threads"),
    ({"causal": "yes"}, TypeError, "causal"),
    ({"scale": "big"}, TypeError, "scale"),
    ({"mask": np.ones((3, 5))}, TypeError, "mask"),
    ({"mask": np.ones((4, 5), dtype=bool)}, ValueError, "mask"),
    ({"max_bytes": 0}, ValueError, "max_bytes"),
]


@pytest.mark.parametrize(("kwargs", "exc", "match"), BAD)
def test_rejects_bad_arguments(kwargs, exc, match):
    q, k, v = np.zeros((3, 2)), np.zeros((5, 2)), np.zeros((5, 2))
    with pytest.raises(exc, match=match):
        tiled_attention(q, k, v, **kwargs)


def test_rejects_bad_arrays():
    q = np.zeros((3, 2))
    with pytest.raises(ValueError, match="d_k"):
        tiled_attention(q, np.zeros((5, 3)), np.zeros((5, 2)))
    with pytest.raises(TypeError, match="dtype"):
        tiled_attention(q.astype(np.float32), np.zeros((5, 2)), np.zeros((5, 2)))


def test_refuses_a_tile_over_the_budget():
    q = np.zeros((8, 64, 4), dtype=np.float32)
    with pytest.raises(MemoryBudgetError, match="tile"):
        tiled_attention(q, q, q, block_q=64, block_k=64, max_bytes=8 * 64 * 64 * 4 - 1)


def _layer(n, d_model=16, h=2, dtype=np.float32):
    rng = np.random.default_rng(5)
    params = init_params(MHAConfig(d_model, h), rng, dtype=dtype)
    return rng.standard_normal((1, n, d_model)).astype(dtype), params  # (B, N, d_model)



def test_fused_layer_tiled_and_one_shot_agree_at_a_long_length():
    x, p = _layer(1600, d_model=32, h=4)
    tiled = multi_head_attention(x, p, 4, causal=True, tiled=True)
    out = multi_head_attention(x, p, 4, causal=True)
    np.testing.assert_allclose(tiled, out, rtol=2e-5, atol=2e-6)


@settings(deadline=None, max_examples=120)
@given(mha_cases())
def test_fused_layer_tiled_equals_per_head_loop(case):
    # the tiled layer at toy sizes: masks, causal, GQA, cross-attention, batches, biases
    out = multi_head_attention(case.x, case.params, case.config.n_heads, tiled=True, **case.kwargs)
    ref = multi_head_attention_per_head(case.x, case.params, case.config.n_heads, **case.kwargs)
    np.testing.assert_allclose(out, ref, **tol(case.x.dtype))


def test_weights_at_65536_tokens_are_refused_before_allocating():
    x, p = _layer(65_536, d_model=8, h=1)
    tracemalloc.start()
    try:
        with pytest.raises(MemoryBudgetError, match="pass tiled=True") as err:
            multi_head_attention(x, p, 1, causal=True, return_weights=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "16.00 GiB" in str(err.value)  # 65,536^2 float32 scores
    assert peak < 2**20  # refused before anything N^2 (not even the causal mask) was built


def test_long_causal_layer_never_builds_the_n_by_n_mask():
    x, p = _layer(4096, d_model=8, h=1)
    tracemalloc.start()
    try:
        multi_head_attention(x, p, 1, causal=True, tiled=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4096 * 4096 / 4  # a bool (N, N) mask alone would be 16 MiB


def test_workers_follow_the_blas_threads_as_they_change_and_are_restored():
    from threadpoolctl import threadpool_limits

    before = tiled.blas_threads()
    with threadpool_limits(1, user_api="blas"):
        assert tiled.blas_threads() == 1  # read now, not remembered from an earlier call
    assert tiled.blas_threads() == before
    q = np.random.default_rng(3).standard_normal((2, 600, 8)).astype(np.float32)  # (h, N, d_k), 3 query blocks
    tiled_attention(q, q, q, block_q=200, threads=2)
    assert tiled.blas_threads() == before  # the workers' one-thread limit is lifted afterwards
