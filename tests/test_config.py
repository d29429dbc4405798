"""MHAConfig validates itself; init_params makes the promised shapes, dtypes and scale."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from strategies import configs

from mha_core import MHAConfig, init_params


@settings(deadline=None, max_examples=60)
@given(configs())
def test_init_params_shapes_follow_the_convention(config):
    p = init_params(config, 0)
    d, h, n_kv = config.d_model, config.n_heads, config.n_kv
    d_k, d_v = d // h, config.d_v
    assert config.d_k == d_k
    assert config.n_kv == (h if config.n_kv_heads is None else config.n_kv_heads)
    assert config.group_size * config.n_kv == h
    expected = {"W_Q": (d, h * d_k), "W_K": (d, n_kv * d_k), "W_V": (d, n_kv * d_v), "W_O": (h * d_v, d)}
    if config.bias:
        expected.update({"b_Q": (h * d_k,), "b_K": (n_kv * d_k,), "b_V": (n_kv * d_v,), "b_O": (d,)})
    assert {k: v.shape for k, v in p.items()} == expected


@pytest.mark.parametrize("dtype", [np.float32, np.float64, "float64"])
def test_init_params_dtype(dtype):
    p = init_params(MHAConfig(8, 2, bias=True), 1, dtype=dtype)
    assert all(a.dtype == np.dtype(dtype) for a in p.values())


def test_same_seed_same_weights_and_generator_accepted():
    cfg = MHAConfig(16, 4, 2, bias=True)
    a, b = init_params(cfg, 7), init_params(cfg, np.random.default_rng(7))
    c = init_params(cfg, 8)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["W_Q"], c["W_Q"])


def test_init_scale_keeps_unit_variance():
    # Each W has entries of variance 1/fan_in, so x @ W keeps x's variance (about 1).
    cfg = MHAConfig(256, 4)
    p = init_params(cfg, 0, dtype=np.float64)
    for name, w in p.items():
        assert abs(w.var() * w.shape[0] - 1.0) < 0.05, name
    x = np.random.default_rng(1).standard_normal((512, 256))
    assert 0.9 < (x @ p["W_Q"]).var() < 1.1


def test_config_properties_and_frozen():
    cfg = MHAConfig(512, 8, n_kv_heads=2)
    assert (cfg.h, cfg.d_k, cfg.n_kv, cfg.group_size) == (8, 64, 2, 4)
    assert MHAConfig(512, 8).n_kv == 8
    assert MHAConfig(512, 8, 1).group_size == 8  # MQA
    assert MHAConfig(512, 8).d_v == 64 and MHAConfig(512, 8, d_v=32).d_v == 32  # d_v defaults to d_k
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.d_model = 4


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"d_model": 0, "n_heads": 1}, ValueError, "d_model"),
        ({"d_model": -8, "n_heads": 2}, ValueError, "d_model"),
        ({"d_model": 8.0, "n_heads": 2}, TypeError, "d_model"),
        ({"d_model": "8", "n_heads": 2}, TypeError, "d_model"),
        ({"d_model": True, "n_heads": 1}, TypeError, "d_model"),
        ({"d_model": 8, "n_heads": 0}, ValueError, "n_heads"),
        ({"d_model": 8, "n_heads": True}, TypeError, "n_heads"),
        ({"d_model": 8, "n_heads": 2.0}, TypeError, "n_heads"),
        ({"d_model": 10, "n_heads": 4}, ValueError, "n_heads=4 does not divide d_model=10"),
        ({"d_model": 8, "n_heads": 4, "n_kv_heads": 3}, ValueError, "n_kv_heads=3 does not divide n_heads=4"),
        ({"d_model": 8, "n_heads": 4, "n_kv_heads": 0}, ValueError, "n_kv_heads"),
        ({"d_model": 8, "n_heads": 4, "n_kv_heads": 8}, ValueError, "n_kv_heads=8 does not divide"),
        ({"d_model": 8, "n_heads": 4, "n_kv_heads": False}, TypeError, "n_kv_heads"),
        ({"d_model": 8, "n_heads": 4, "bias": 1}, TypeError, "bias"),
        ({"d_model": 8, "n_heads": 4, "bias": "yes"}, TypeError, "bias"),
        ({"d_model": 8, "n_heads": 4, "d_v": 0}, ValueError, "d_v must be a positive int"),
        ({"d_model": 8, "n_heads": 4, "d_v": 2.0}, TypeError, "d_v must be a positive int"),
    ],
)
def test_config_rejects(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        MHAConfig(**kwargs)


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [
        (({"d_model": 8, "n_heads": 2},), {}, TypeError, "config must be an MHAConfig"),
        ((None,), {}, TypeError, "config must be an MHAConfig"),
        ((MHAConfig(8, 2),), {"dtype": np.int64}, TypeError, "dtype must be float32 or float64"),
        ((MHAConfig(8, 2),), {"dtype": np.float16}, TypeError, "dtype must be float32 or float64"),
        ((MHAConfig(8, 2),), {"dtype": "garbage"}, TypeError, "dtype must be float32 or float64"),
        ((MHAConfig(8, 2),), {"rng": "seed"}, TypeError, "rng must be"),
        ((MHAConfig(8, 2),), {"rng": 1.5}, TypeError, "rng must be"),
        ((MHAConfig(8, 2),), {"rng": True}, TypeError, "rng must be"),
        ((MHAConfig(8, 2),), {"rng": -1}, ValueError, "rng must be a non-negative"),
    ],
)
def test_init_params_rejects(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        init_params(*args, **kwargs)


@pytest.mark.parametrize(("n_kv", "kind"), [(None, "MHA"), (8, "MHA"), (4, "GQA"), (2, "GQA"), (1, "MQA")])
def test_kind_names_the_key_value_layout(n_kv, kind):
    assert MHAConfig(512, 8, n_kv_heads=n_kv).kind == kind
