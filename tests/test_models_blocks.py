"""The blocks around attention (mha_core.models.blocks) against their definitions, computed
independently (math.erf, float64 formulas)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mha_core.models.blocks import embed, erf, gelu, gelu_mlp, layer_norm, rms_norm, silu, swiglu

RNG = np.random.default_rng(0)


def test_erf_matches_math_erf():
    z = np.linspace(-6, 6, 2001)
    ref = np.array([math.erf(v) for v in z])
    assert np.abs(erf(z) - ref).max() < 2e-7  # Abramowitz & Stegun 7.1.26's bound is 1.5e-7
    assert erf(z.astype(np.float32)).dtype == np.float32


def test_gelu_is_x_times_the_normal_cdf():
    x = np.linspace(-8, 8, 801)
    ref = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    np.testing.assert_allclose(gelu(x), ref, atol=1e-6)
    assert gelu(np.float32([1.0])).dtype == np.float32


def test_layer_norm():
    x = RNG.standard_normal((5, 16)) * 3 + 2
    w, b = RNG.standard_normal(16), RNG.standard_normal(16)
    y = layer_norm(x, np.ones(16), np.zeros(16), 1e-12)
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-12)
    np.testing.assert_allclose(y.std(-1), 1, atol=1e-9)
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(layer_norm(x, w, b, 1e-5), ref, atol=1e-12)


def test_rms_norm():
    x = RNG.standard_normal((5, 16))
    w = RNG.standard_normal(16)
    ref = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(rms_norm(x, w, 1e-5), ref, atol=1e-12)
    y = rms_norm(x, np.ones(16), 0.0)
    np.testing.assert_allclose(np.sqrt((y**2).mean(-1)), 1, atol=1e-12)


def test_silu_and_swiglu():
    x = np.linspace(-10, 10, 101)
    np.testing.assert_allclose(silu(x), x / (1 + np.exp(-x)), atol=1e-12)
    h = RNG.standard_normal((4, 8))
    Wg, Wu, Wd = RNG.standard_normal((8, 12)), RNG.standard_normal((8, 12)), RNG.standard_normal((12, 8))
    out = swiglu(h, Wg, Wu, Wd)
    assert out.shape == (4, 8)
    ref = np.stack([(silu(r @ Wg) * (r @ Wu)) @ Wd for r in h])  # token by token
    np.testing.assert_allclose(out, ref, atol=1e-10)


def test_gelu_mlp():
    x = RNG.standard_normal((3, 6))
    W1, b1, W2, b2 = RNG.standard_normal((6, 10)), RNG.standard_normal(10), RNG.standard_normal((10, 6)), RNG.standard_normal(6)
    np.testing.assert_allclose(gelu_mlp(x, W1, b1, W2, b2), gelu(x @ W1 + b1) @ W2 + b2)


def test_embed_copies_rows_and_checks_ids():
    table = np.arange(12.0).reshape(4, 3)
    table.flags.writeable = False  # like a read-only memory map
    out = embed(table, np.array([3, 0, 3]))
    np.testing.assert_array_equal(out, table[[3, 0, 3]])
    out[0, 0] = -1.0  # a copy: writable, and the table is untouched
    assert table[3, 0] == 9.0
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 4\)"):
        embed(table, np.array([4]))
    with pytest.raises(ValueError, match="1-D int array"):
        embed(table, np.array([[1]]))
