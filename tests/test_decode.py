"""The KV-cache decoding loop equals the full causal forward, for MHA, GQA and MQA; bad input is refused."""

from __future__ import annotations

import numpy as np
import pytest

from mha_core import (
    KVCache,
    MemoryBudgetError,
    MHAConfig,
    decode,
    decode_step,
    init_kv_cache,
    init_params,
    kv_cache_bytes,
    multi_head_attention,
    prefill,
)

D_MODEL, H, N = 24, 6, 9


def _params(n_kv: int, *, bias: bool = False, dtype=np.float64) -> dict:
    p = init_params(MHAConfig(D_MODEL, H, n_kv_heads=n_kv), rng=n_kv, dtype=dtype)
    if bias:
        rng = np.random.default_rng(7)
        d_k = D_MODEL // H
        for name, size in (("b_Q", H * d_k), ("b_K", n_kv * d_k), ("b_V", n_kv * d_k), ("b_O", D_MODEL)):
            p[name] = rng.standard_normal(size).astype(dtype)
    return p


@pytest.mark.parametrize("n_kv", [6, 3, 2, 1])  # MHA, GQA, GQA, MQA
@pytest.mark.parametrize("batch", [None, 2])
@pytest.mark.parametrize("bias", [False, True])
def test_decode_equals_the_causal_forward(n_kv, batch, bias):
    p = _params(n_kv, bias=bias)
    shape = (N, D_MODEL) if batch is None else (batch, N, D_MODEL)
    x = np.random.default_rng(1).standard_normal(shape)
    full = multi_head_attention(x, p, H, n_kv_heads=n_kv, causal=True)  # (..., N, d_model)
    stepped = decode(x, p, H, n_kv_heads=n_kv)  # (..., N, d_model)
    assert stepped.shape == x.shape and stepped.dtype == x.dtype
    np.testing.assert_allclose(stepped, full, rtol=0, atol=1e-12)


def test_prefill_then_steps_continue_the_prompt():
    p = _params(2)
    x = np.random.default_rng(2).standard_normal((N, D_MODEL))
    full = multi_head_attention(x, p, H, n_kv_heads=2, causal=True)  # (N, d_model)
    cache = prefill(x[:5], p, H, init_kv_cache(p, H, N, n_kv_heads=2), n_kv_heads=2)
    assert cache.length == 5
    rest = np.stack([decode_step(x[t], p, H, cache, n_kv_heads=2) for t in range(5, N)])  # (N-5, d_model)
    np.testing.assert_allclose(rest, full[5:], rtol=0, atol=1e-12)
    assert cache.length == N


@pytest.mark.parametrize("n_kv", [6, 2, 1])
def test_the_cache_holds_what_kv_cache_bytes_counts(n_kv):
    p = _params(n_kv, dtype=np.float32)
    x = np.random.default_rng(3).standard_normal((N, D_MODEL)).astype(np.float32)
    cache = prefill(x, p, H, init_kv_cache(p, H, 2 * N, n_kv_heads=n_kv), n_kv_heads=n_kv)
    assert isinstance(cache, KVCache) and cache.n_kv == n_kv and cache.max_tokens == 2 * N
    assert cache.nbytes == kv_cache_bytes(MHAConfig(D_MODEL, H, n_kv_heads=n_kv), N, dtype=np.float32)


def test_float32_decode_agrees_with_float32_forward():
    p = _params(3, dtype=np.float32)
    x = np.random.default_rng(4).standard_normal((N, D_MODEL)).astype(np.float32)
    np.testing.assert_allclose(decode(x, p, H, n_kv_heads=3),
                               multi_head_attention(x, p, H, n_kv_heads=3, causal=True), rtol=0, atol=1e-5)


def test_bad_input_is_refused_with_a_message():
    p = _params(2)
    cache = init_kv_cache(p, H, 2, n_kv_heads=2)
    token = np.zeros(D_MODEL)
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        decode_step(token, p, H, {"K": 0}, n_kv_heads=2)
    with pytest.raises(ValueError, match="params\\['W_K'\\] has shape"):
        decode_step(token, p, H, cache)  # the weights are GQA (n_kv = 2), the call says n_kv = h
    with pytest.raises(ValueError, match="cache.K has shape"):
        decode_step(token, p, H, init_kv_cache(p, H, 2, n_kv_heads=2, batch=3), n_kv_heads=2)  # batched cache
    with pytest.raises(ValueError, match="x_t must have 1 or 2 dimensions"):
        decode_step(np.zeros((1, 1, D_MODEL)), p, H, cache, n_kv_heads=2)
    with pytest.raises(ValueError, match="rows must equal"):
        decode_step(np.zeros(D_MODEL + 1), p, H, cache, n_kv_heads=2)
    decode_step(token, p, H, cache, n_kv_heads=2)
    decode_step(token, p, H, cache, n_kv_heads=2)
    with pytest.raises(ValueError, match="the cache is full"):
        decode_step(token, p, H, cache, n_kv_heads=2)
    with pytest.raises(ValueError, match="empty cache"):
        prefill(np.zeros((1, D_MODEL)), p, H, _cache_holding(p, 1), n_kv_heads=2)
    with pytest.raises(ValueError, match="max_tokens"):
        init_kv_cache(p, H, 0, n_kv_heads=2)
    with pytest.raises(TypeError, match="params"):
        init_kv_cache("weights", H, 4)
    with pytest.raises(MemoryBudgetError, match="KV cache"):
        init_kv_cache(p, H, 10**9, n_kv_heads=2)


def _cache_holding(p, n_tokens):
    cache = init_kv_cache(p, H, 4, n_kv_heads=2)
    prefill(np.zeros((n_tokens, D_MODEL)), p, H, cache, n_kv_heads=2)
    return cache


@pytest.mark.parametrize("n_kv", [6, 2])
def test_decode_with_rope_equals_the_causal_forward_with_rope(n_kv):
    """RoPE at each token's absolute position: the cached loop equals the full causal forward."""
    p = _params(n_kv)
    x = np.random.default_rng(3).standard_normal((N, D_MODEL))
    full, w_full = multi_head_attention(x, p, H, n_kv_heads=n_kv, causal=True, rope_base=1e4, return_weights=True)
    np.testing.assert_allclose(decode(x, p, H, n_kv_heads=n_kv, rope_base=1e4), full, atol=1e-10)
    # a prompt of 5 tokens prefilled, then the rest one by one, with the new token's weights
    cache = init_kv_cache(p, H, N, n_kv_heads=n_kv)
    prefill(x[:5], p, H, cache, n_kv_heads=n_kv, rope_base=1e4)
    for t in range(5, N):
        out, w = decode_step(x[t], p, H, cache, n_kv_heads=n_kv, rope_base=1e4, return_weights=True)
        np.testing.assert_allclose(out, full[t], atol=1e-10)
        np.testing.assert_allclose(w, w_full[:, t, : t + 1], atol=1e-12)
    # without RoPE in the loop the answer differs: the rotation is really applied
    assert not np.allclose(decode(x, p, H, n_kv_heads=n_kv), full)
    with pytest.raises(ValueError, match="RoPE base"):
        decode(x, p, H, n_kv_heads=n_kv, rope_base=0.5)
