"""RoPE (mha_core.core.rope): the relative-position property, agreement with two independent
references, and its place inside the fused layer (between the projections and the scores)."""

from __future__ import annotations

import numpy as np
import pytest

from mha_core import (
    apply_rope,
    head_outputs,
    multi_head_attention,
    multi_head_attention_per_head,
    rope_angles,
    scaled_dot_product_attention,
    split_heads,
)


def _rope_complex(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """An independent float64 reference: each adjacent pair is a complex number times e^{i p theta}."""
    d_k = x.shape[-1]
    z = x[..., 0::2].astype(np.float64) + 1j * x[..., 1::2]  # (..., N, d_k/2)
    theta = np.array([base ** (-2 * i / d_k) for i in range(d_k // 2)])
    z = z * np.exp(1j * positions[:, None] * theta)  # (..., N, d_k/2)
    out = np.empty(x.shape, dtype=np.float64)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


@pytest.mark.parametrize("base", [10_000.0, 100_000.0])
def test_matches_complex_rotation(base):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 40, 16))  # (B, h, N, d_k)
    np.testing.assert_allclose(apply_rope(x, base=base), _rope_complex(x, np.arange(40), base), atol=1e-12)
    x32 = x.astype(np.float32)
    out32 = apply_rope(x32, base=base)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, _rope_complex(x32, np.arange(40), base), atol=1e-5)


def test_score_depends_only_on_the_offset():
    """q at position m and k at position n: the score is the same for (m + s, n + s)."""
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((2, 1, 64))  # one query, one key, d_k=64
    scores = {}
    for m in range(0, 60, 7):
        for n in range(0, 60, 5):
            rq = apply_rope(q, np.array([m]), base=1e5)[0]
            rk = apply_rope(k, np.array([n]), base=1e5)[0]
            scores[(m, n)] = rq @ rk
    by_offset = {}
    for (m, n), s in scores.items():
        by_offset.setdefault(n - m, []).append(s)
    assert sum(len(v) > 1 for v in by_offset.values()) >= 20  # the property is tested, not vacuous
    for offset, values in by_offset.items():
        np.testing.assert_allclose(values, values[0], atol=1e-9, err_msg=f"offset {offset}")
    # ... and it does depend on the offset (RoPE is not a no-op on scores)
    assert np.ptp([v[0] for v in by_offset.values()]) > 0.1


def test_keeps_lengths_and_position_zero():
    x = np.random.default_rng(2).standard_normal((10, 8))
    out = apply_rope(x)
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1))
    np.testing.assert_array_equal(out[0], x[0])  # position 0: angle 0


@pytest.mark.torch
@pytest.mark.transformers
def test_matches_transformers_rotate_half_on_the_unpermuted_layout():
    """transformers pairs dimension i with i + d_k/2 (rotate_half); GGUF and this module pair
    2i with 2i+1. The same vectors, permuted, rotate the same way."""
    torch = pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    d_k, n, base = 64, 33, 1e5
    rng = np.random.default_rng(3)
    x_hf = rng.standard_normal((1, 2, n, d_k)).astype(np.float32)  # (B, h, N, d_k), rotate-half layout
    inv_freq = 1.0 / base ** (torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    freqs = torch.arange(n, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (N, d_k/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (N, d_k)
    q_hf, _ = llama.apply_rotary_pos_emb(torch.from_numpy(x_hf).double(), torch.from_numpy(x_hf).double(),
                                         emb.cos()[None], emb.sin()[None])
    perm = np.stack([np.arange(d_k // 2), np.arange(d_k // 2) + d_k // 2], axis=1).reshape(-1)  # 0, 32, 1, 33, ...
    ours = apply_rope(x_hf[..., perm], base=base)  # adjacent-pair layout
    np.testing.assert_allclose(ours, q_hf.numpy()[..., perm], atol=2e-5)


def test_inside_the_fused_layer():
    """rope_base rotates Q and K after the projections, before the scores; fused == per-head."""
    rng = np.random.default_rng(4)
    n, d_model, h, n_kv, d_k = 12, 24, 6, 2, 4
    x = rng.standard_normal((n, d_model))
    p = {"W_Q": rng.standard_normal((d_model, h * d_k)), "W_K": rng.standard_normal((d_model, n_kv * d_k)),
         "W_V": rng.standard_normal((d_model, n_kv * d_k)), "W_O": rng.standard_normal((h * d_k, d_model))}
    out, w = multi_head_attention(x, p, h, n_kv_heads=n_kv, causal=True, rope_base=500.0, return_weights=True)
    # by hand: project, split, rotate, attend (kv head j serves query heads 3j..3j+2)
    Qh = apply_rope(split_heads(x @ p["W_Q"], h), base=500.0)  # (h, N, d_k)
    Kh = apply_rope(split_heads(x @ p["W_K"], n_kv), base=500.0)  # (n_kv, N, d_k)
    Vh = split_heads(x @ p["W_V"], n_kv)  # (n_kv, N, d_k)
    group_size = h // n_kv
    mask = np.tril(np.ones((n, n), dtype=bool))
    _, w_ref = scaled_dot_product_attention(Qh, np.repeat(Kh, group_size, axis=0), np.repeat(Vh, group_size, axis=0), mask)
    np.testing.assert_allclose(w, w_ref, atol=1e-12)
    out_loop, w_loop = multi_head_attention_per_head(x, p, h, n_kv_heads=n_kv, causal=True, rope_base=500.0,
                                                     return_weights=True)
    np.testing.assert_allclose(out_loop, out, atol=1e-10)
    np.testing.assert_allclose(w_loop, w, atol=1e-12)
    assert head_outputs(x, p, h, n_kv_heads=n_kv, causal=True, rope_base=500.0).shape == (h, n, d_k)
    plain = multi_head_attention(x, p, h, n_kv_heads=n_kv, causal=True, return_weights=True)[1]
    assert np.abs(plain - w).max() > 1e-3  # the hook changes the maps


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"positions": np.arange(3)}, ValueError, "positions must have shape"),
    ({"base": 1.0}, ValueError, "base must be a finite number > 1"),
    ({"base": "big"}, TypeError, "base must be a number"),
    ({"base": float("nan")}, ValueError, "base must be a finite number > 1"),
])
def test_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        apply_rope(np.zeros((4, 8)), **kwargs)


def test_bad_width_and_layer_arguments():
    with pytest.raises(ValueError, match="d_k must be a positive even int"):
        apply_rope(np.zeros((4, 7)))
    with pytest.raises(ValueError, match="1-D int array"):
        rope_angles(np.array([0.5, 1.5]), 8)
    x = np.zeros((4, 6))
    p = {"W_Q": np.ones((6, 6)), "W_K": np.ones((6, 6)), "W_V": np.ones((6, 6)), "W_O": np.ones((6, 6))}
    with pytest.raises(ValueError, match="d_k must be a positive even int, got d_k=3"):
        multi_head_attention(x, p, 2, rope_base=100.0)  # d_k = 3
    with pytest.raises(TypeError, match="the RoPE base must be a number"):
        multi_head_attention(x, p, 3, rope_base="1e4")
