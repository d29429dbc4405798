"""The Tracer (core/trace.py) records each step's shape and each matmul's MACs, and changes nothing."""

from __future__ import annotations

import numpy as np

from mha_core import MHAConfig, Tracer, init_params, multi_head_attention


def test_tracing_does_not_change_the_output():
    cfg = MHAConfig(12, 3, bias=True)
    p = init_params(cfg, 0, dtype=np.float64)
    x = np.random.default_rng(0).standard_normal((2, 4, 12))
    t = Tracer()
    np.testing.assert_array_equal(multi_head_attention(x, p, 3, tracer=t), multi_head_attention(x, p, 3))
    assert t.steps and t.macs


def test_tracer_record_and_matmul():
    t = Tracer()
    a, b = np.ones((2, 3, 4)), np.ones((4, 5))
    assert t.record("a", a) is a
    np.testing.assert_array_equal(t.matmul("ab", a, b), np.full((2, 3, 5), 4.0))
    t.matmul("flat", a.reshape(6, 4), b, shape=(2, 3, 5))
    assert t.steps == [("a", (2, 3, 4)), ("ab", (2, 3, 5)), ("flat", (2, 3, 5))]
    assert t.macs == [("ab", 2 * 3 * 5 * 4), ("flat", 6 * 5 * 4)]
    assert t.total_macs() == 240 and t.total_macs("fl") == 120
