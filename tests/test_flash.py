"""Blocked and tiled (online-softmax) attention (core/flash.py) against the formula, and the
fused layer's choice between the three."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from references import reference_causal
from strategies import flash_cases, mha_cases, tol

from mha_core import (
    MemoryBudgetError,
    MHAConfig,
    Tracer,
    blocked_attention,
    causal_mask,
    flash_attention,
    init_params,
    multi_head_attention,
    multi_head_attention_per_head,
    scaled_dot_product_attention,
)
from mha_core.core import flash, mha


def one_shot(q, k, v, mask=None, scale=None, causal=False):
    """The reference: scaled_dot_product_attention with the causal mask built in full."""
    if causal:
        tri = causal_mask(q.shape[-2], k.shape[-2])  # (N_q, N_k)
        mask = tri if mask is None else mask & tri
    return scaled_dot_product_attention(q, k, v, mask, scale)[0]


@settings(deadline=None, max_examples=150)
@given(flash_cases())
def test_equals_the_one_shot_path(case):
    out = flash_attention(case.q, case.k, case.v, case.mask, case.scale, causal=case.causal,
                          block_q=case.block_q, block_k=case.block_k)
    ref = one_shot(case.q, case.k, case.v, case.mask, case.scale, case.causal)
    assert out.shape == ref.shape and out.dtype == case.q.dtype
    np.testing.assert_allclose(out, ref, **tol(case.q.dtype))


@settings(deadline=None, max_examples=40)
@given(flash_cases())
def test_tile_sizes_and_threads_change_nothing_but_rounding(case):
    a = flash_attention(case.q, case.k, case.v, case.mask, causal=case.causal, block_q=1, block_k=1)
    b = flash_attention(case.q, case.k, case.v, case.mask, causal=case.causal, block_q=64, block_k=64)
    np.testing.assert_allclose(a, b, **tol(case.q.dtype))
    # each query block is computed the same way whichever thread runs it: bit for bit equal
    c = flash_attention(case.q, case.k, case.v, case.mask, causal=case.causal, block_q=2, block_k=3, threads=1)
    d = flash_attention(case.q, case.k, case.v, case.mask, causal=case.causal, block_q=2, block_k=3, threads=3)
    np.testing.assert_array_equal(c, d)


def test_rows_with_no_allowed_key_give_zeros_not_nan():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 9, 4)) for _ in range(3))  # (B, N, d)
    mask = np.ones((2, 9, 9), dtype=bool)
    mask[0, 3] = False  # item 0, query 3: no key at all
    mask[1, :, :5] = False  # item 1: keys 0-4 hidden, so with causal rows 0-4 see nothing
    out = flash_attention(q, k, v, mask, causal=True, block_q=2, block_k=2)
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
    out = flash_attention(q, k, v, mask, scale=1.0, block_k=1)
    np.testing.assert_array_equal(out, [[7.0]])


def test_more_queries_than_keys_causal_rows_before_the_first_key_are_zero():
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((7, 3)), rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    out = flash_attention(q, k, v, causal=True, block_q=3, block_k=2)
    assert reference_causal(7, 4)[:3].sum() == 0  # queries 0-2 come before every key
    np.testing.assert_array_equal(out[:3], 0.0)
    np.testing.assert_allclose(out, one_shot(q, k, v, causal=True), rtol=1e-12, atol=1e-12)


def test_large_logits_do_not_overflow():
    # scores up to ~1e4: exp would overflow without the running max; the rescaling keeps it exact
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((3, 40, 8)).astype(np.float32) for _ in range(3))
    out = flash_attention(q * 100, k * 100, v, block_q=7, block_k=5)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, one_shot(q * 100, k * 100, v), rtol=1e-4, atol=1e-4)


def test_a_growing_max_rescales_the_partial_sums():
    # one query, keys in increasing order of score: every tile raises the max, so every tile
    # rescales what came before; the result must still be the softmax-weighted average
    q = np.ones((1, 1))
    k = np.arange(12, dtype=np.float64)[:, None] * 12.0  # scores 0, 12, ..., 132: each outgrows the last
    v = np.arange(12, dtype=np.float64)[:, None]
    out = flash_attention(q, k, v, scale=1.0, block_k=1)
    w = np.exp(k[:, 0] - k[:, 0].max())
    np.testing.assert_allclose(out[0, 0], (w / w.sum()) @ v[:, 0], rtol=1e-14)


def test_a_stale_max_is_kept_until_a_score_outgrows_it(monkeypatch):
    # scores 0, 3, ..., 33, a key per tile: a tile is added against the max as it stands while
    # exp(score - m) <= 2^16 (score - m <= 11.09), and redone (its scores computed twice) past that
    scored = []
    real = flash._tile_scores
    monkeypatch.setattr(flash, "_tile_scores", lambda *a: scored.append(a[7]) or real(*a))  # a[7]: c0
    q = np.ones((1, 1))
    k = np.arange(12, dtype=np.float64)[:, None] * 3.0  # (N_k, 1)
    v = np.arange(12, dtype=np.float64)[:, None]
    out = flash_attention(q, k, v, scale=1.0, block_k=1)
    w = np.exp(k[:, 0] - k[:, 0].max())
    np.testing.assert_allclose(out[0, 0], (w / w.sum()) @ v[:, 0], rtol=1e-14)
    # m = 0 after key 0; 12 - 0 > 11.09: redo, m = 12; 24 - 12 > 11.09: redo, m = 24; 33 - 24 is kept
    assert math.log(flash.STALE_MAX_LIMIT) < 12
    assert sorted(scored) == sorted([*range(12), 4, 8])


def test_a_nan_spoils_only_its_own_row():
    # a NaN score fails the stale-max check (NaN <= limit is False): its tile goes the full way,
    # and only the query row holding the NaN comes out NaN, as in the formula
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 40, 8)).astype(np.float32) for _ in range(3))
    q[1, 7, 3] = np.nan
    out = flash_attention(q, k, v, block_q=16, block_k=8)
    ref = one_shot(q, k, v)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    assert np.isnan(out[1, 7]).all() and np.isnan(out).sum() == 8
    np.testing.assert_allclose(out, ref, **tol(np.float32))


def test_causal_skips_the_tiles_above_the_diagonal(monkeypatch):
    computed = []
    real = flash._tile_mask

    def spy(mask, causal, offset, r0, r1, c0, c1):
        computed.append((r0, c0))
        return real(mask, causal, offset, r0, r1, c0, c1)

    monkeypatch.setattr(flash, "_tile_mask", spy)
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((16, 4)) for _ in range(3))
    flash_attention(q, k, v, causal=True, block_q=4, block_k=4, threads=1)
    # a 4 x 4 grid of tiles: the causal half is 1 + 2 + 3 + 4 = 10 of 16
    assert sorted(computed) == [(r, c) for r in range(0, 16, 4) for c in range(0, r + 1, 4)]
    computed.clear()
    flash_attention(q, k, v, block_q=4, block_k=4, threads=1)
    assert len(computed) == 16


def test_memory_grows_as_n_not_n_squared():
    n, d = 2048, 16
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, n, d)).astype(np.float32) for _ in range(3))  # (h, N, d)
    score_bytes = 2 * n * n * 4  # (h, N, N) float32: 32 MiB
    tracemalloc.start()
    try:
        flash_attention(q, k, v, causal=True, block_q=128, block_k=256)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # the output + a few tile-sized arrays per worker thread: under 2.5 MiB here
    expected = q.nbytes + 8 * (2 * 128 * 256 * 4)
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
        flash_attention(q, k, v, **kwargs)


def test_rejects_bad_arrays():
    q = np.zeros((3, 2))
    with pytest.raises(ValueError, match="d_k"):
        flash_attention(q, np.zeros((5, 3)), np.zeros((5, 2)))
    with pytest.raises(TypeError, match="dtype"):
        flash_attention(q.astype(np.float32), np.zeros((5, 2)), np.zeros((5, 2)))


def test_refuses_a_tile_over_the_budget():
    q = np.zeros((8, 64, 4), dtype=np.float32)
    with pytest.raises(MemoryBudgetError, match="tile"):
        flash_attention(q, q, q, block_q=64, block_k=64, max_bytes=8 * 64 * 64 * 4 - 1)


@pytest.mark.parametrize("mask_kind", ["none", "causal", "random", "padding"])
def test_blocked_attention_equals_the_formula(monkeypatch, mask_kind):
    """Force many query-row blocks (tiny SCORE_BLOCK_BYTES) and compare with the formula."""
    rng = np.random.default_rng(7)
    q = rng.standard_normal((2, 3, 21, 4))  # (B, h, N_q, d_k)
    k = rng.standard_normal((2, 3, 13, 4))  # (B, h, N_k, d_k)
    v = rng.standard_normal((2, 3, 13, 5))  # (B, h, N_k, d_v)
    masks = {
        "none": None,
        "causal": causal_mask(21, 13),
        "random": rng.random((2, 3, 21, 13)) < 0.5,
        "padding": (np.arange(13) < np.array([5, 13])[:, None])[:, None, None, :],  # (B, 1, 1, N_k)
    }
    mask = masks[mask_kind]
    ref_out, ref_w = scaled_dot_product_attention(q, k, v, mask, tracer=Tracer())
    monkeypatch.setattr(flash, "SCORE_BLOCK_BYTES", 8)
    out, w = blocked_attention(q, k, v, mask)
    np.testing.assert_allclose(out, ref_out, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(w, ref_w, rtol=1e-12, atol=1e-14)


def test_blocked_attention_refuses_weights_over_the_budget():
    q = np.zeros((8, 64, 4), dtype=np.float32)
    with pytest.raises(MemoryBudgetError, match="weights"):
        blocked_attention(q, q, q, max_bytes=8 * 64 * 64 * 4 - 1)


# --- the fused layer's choice of path -------------------------------------------------------


def _spy_paths(monkeypatch) -> list[str]:
    """Record which attention the fused layer ran: "formula", "blocked" or "tiled"."""
    paths = []
    real = {"formula": mha._attend, "blocked": mha._blocked, "tiled": mha._flash}
    for path, name in (("formula", "_attend"), ("blocked", "_blocked"), ("tiled", "_flash")):
        monkeypatch.setattr(mha, name, lambda *a, path=path, **kw: paths.append(path) or real[path](*a, **kw))
    return paths


def _layer(n, d_model=16, h=2, dtype=np.float32):
    rng = np.random.default_rng(5)
    params = init_params(MHAConfig(d_model, h), rng, dtype=dtype)
    return rng.standard_normal((1, n, d_model)).astype(dtype), params  # (B, N, d_model)


def test_fused_layer_chooses_the_path_by_size(monkeypatch):
    paths = _spy_paths(monkeypatch)
    # h=2, float32: the scores (1, 2, N, N) take 8 N^2 bytes
    limit = mha.FORMULA_MAX_SCORE_BYTES * mha.CAUSAL_SWITCH_FRACTION  # the calls below are causal
    small = math.isqrt(int(limit // 8))
    big = small + 1
    assert 8 * small**2 <= limit < 8 * big**2
    for n, want in ((small, "formula"), (big, "tiled")):
        x, p = _layer(n)
        paths.clear()
        multi_head_attention(x, p, 2, causal=True)
        assert paths == [want], n
    x, p = _layer(big)
    paths.clear()
    multi_head_attention(x, p, 2, causal=True, return_weights=True)  # the weights need the whole tensor
    multi_head_attention(x, p, 2, causal=True, tracer=Tracer())  # the tracer records the textbook steps
    assert paths == ["blocked", "formula"]


def test_only_the_tiled_layer_shares_its_projections_among_the_workers(monkeypatch):
    shared = []
    real = mha._shared_matmul
    monkeypatch.setattr(mha, "_shared_matmul", lambda x, w: shared.append(w.shape) or real(x, w))
    limit = mha.FORMULA_MAX_SCORE_BYTES * mha.CAUSAL_SWITCH_FRACTION
    big = math.isqrt(int(limit // 8)) + 1  # h=2, float32: the first causal length on the tiled path
    x, p = _layer(big)
    multi_head_attention(x, p, 2, causal=True)  # tiled: W_Q, W_K, W_V and W_O on the workers
    assert shared == [p["W_Q"].shape, p["W_K"].shape, p["W_V"].shape, p["W_O"].shape]
    shared.clear()
    multi_head_attention(x, p, 2, causal=True, return_weights=True)  # blocked: numpy's own BLAS threads
    multi_head_attention(*_layer(16), 2)  # formula
    assert shared == []


@pytest.mark.parametrize("rows", [1, 2, 3, 37])
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_shared_matmul_equals_the_matmul(rows, threads):
    rng = np.random.default_rng(rows)
    for dtype in (np.float32, np.float64):
        x, w = rng.standard_normal((rows, 6)).astype(dtype), rng.standard_normal((6, 4)).astype(dtype)
        y = flash._shared_matmul(x, w, threads=threads)
        assert y.shape == (rows, 4) and y.dtype == dtype
        np.testing.assert_allclose(y, x @ w, **tol(dtype))


def test_fused_layer_tiled_and_one_shot_agree_at_a_long_length():
    x, p = _layer(1600, d_model=32, h=4)
    tiled = multi_head_attention(x, p, 4, causal=True)
    out, _ = multi_head_attention(x, p, 4, causal=True, return_weights=True)  # blocked
    np.testing.assert_allclose(tiled, out, rtol=2e-5, atol=2e-6)


@settings(deadline=None, max_examples=120)
@given(mha_cases())
def test_fused_layer_tiled_equals_per_head_loop(case):
    # force the tiled path at toy sizes: masks, causal, GQA, cross-attention, batches, biases
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mha, "FORMULA_MAX_SCORE_BYTES", 0)
        paths = _spy_paths(mp)
        out = multi_head_attention(case.x, case.params, case.config.n_heads, **case.kwargs)
        assert paths == ["tiled"]
    ref = multi_head_attention_per_head(case.x, case.params, case.config.n_heads, **case.kwargs)
    np.testing.assert_allclose(out, ref, **tol(case.x.dtype))


def test_weights_at_65536_tokens_are_refused_before_allocating():
    x, p = _layer(65_536, d_model=8, h=1)
    tracemalloc.start()
    try:
        with pytest.raises(MemoryBudgetError, match="leave return_weights out") as err:
            multi_head_attention(x, p, 1, causal=True, return_weights=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "16.00 GiB" in str(err.value)  # 65,536^2 float32 scores
    assert peak < 2**20  # refused before anything N^2 (not even the causal mask) was built


def test_without_weights_the_budget_does_not_apply():
    x, p = _layer(1500)
    budget = 2**20  # far below the (1, 2, 1500, 1500) scores' 18 MB
    with pytest.raises(MemoryBudgetError, match="return_weights"):
        multi_head_attention(x, p, 2, return_weights=True, max_bytes=budget)
    out = multi_head_attention(x, p, 2, max_bytes=budget)
    np.testing.assert_allclose(out, multi_head_attention(x, p, 2), rtol=0, atol=0)


def test_long_causal_layer_never_builds_the_n_by_n_mask():
    x, p = _layer(4096, d_model=8, h=1)
    tracemalloc.start()
    try:
        multi_head_attention(x, p, 1, causal=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4096 * 4096 / 4  # a bool (N, N) mask alone would be 16 MiB


def test_the_dashboards_lengths_run_the_formula_and_longer_ones_tiled(monkeypatch):
    # h=8, float32: 8 MiB of scores is N=512, the dashboard's longest slider position; causal
    # calls switch at 3/8 of that, 3 MiB, N=313
    paths = _spy_paths(monkeypatch)
    rng = np.random.default_rng(2)
    params = init_params(MHAConfig(16, 8), rng)
    for n, causal, want in ((100, False, "formula"), (512, False, "formula"), (513, False, "tiled"),
                            (100, True, "formula"), (313, True, "formula"), (314, True, "tiled"), (512, True, "tiled")):
        paths.clear()
        multi_head_attention(rng.standard_normal((n, 16)).astype(np.float32), params, 8, causal=causal)
        assert paths == [want], (n, causal)
    assert 8 * 512 * 512 * 4 == mha.FORMULA_MAX_SCORE_BYTES


def test_workers_follow_the_blas_threads_as_they_change_and_are_restored():
    from threadpoolctl import threadpool_limits

    before = flash.blas_threads()
    with threadpool_limits(1, user_api="blas"):
        assert flash.blas_threads() == 1  # read now, not remembered from an earlier call
    assert flash.blas_threads() == before
    q = np.random.default_rng(3).standard_normal((2, 600, 8)).astype(np.float32)  # (h, N, d_k), 3 query blocks
    flash_attention(q, q, q, block_q=200, threads=2)
    assert flash.blas_threads() == before  # the workers' one-thread limit is lifted afterwards
