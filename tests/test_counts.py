"""count_params against the arrays, count_macs against the products of one forward pass (the ledger), kv_cache_bytes.

The closed forms in ``mha_core.core.counts`` are never restated here: parameters are summed from
``init_params``' arrays and MACs from what actually ran.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import batches, configs, lengths, mha_cases

from mha_core import (
    Ledger,
    MHAConfig,
    count_macs,
    count_params,
    init_params,
    kv_cache_bytes,
    trace_config,
)
from mha_core.core.ledger import ledger

# Worked example of the source text: d_model=512, h=8 (d_k=64), N=100 tokens.
WORKED = MHAConfig(512, 8)
WORKED_N = 100


@settings(deadline=None, max_examples=60)
@given(configs())
def test_count_params_is_the_size_of_the_arrays(config):
    p = init_params(config, 0)
    counts = count_params(config)
    assert counts["total"] == sum(a.size for a in p.values())
    assert {k: v for k, v in counts.items() if k != "total"} == {k: a.size for k, a in p.items()}


@pytest.mark.parametrize("h", [1, 2, 4, 8, 16])
def test_params_do_not_depend_on_h(h):
    # With n_kv = h, h only repartitions the width: 4 d_model^2 (+ 4 d_model biases) for every h.
    base = count_params(MHAConfig(64, 1, bias=True))["total"]
    assert count_params(MHAConfig(64, h, bias=True))["total"] == base


def category(step: str) -> str:
    """Which ``count_macs`` entry a traced matmul belongs to, from its step name."""
    if step.startswith("Q"):
        return "q_proj"
    if step.startswith("K"):
        return "k_proj"
    if step.startswith("V"):
        return "v_proj"
    if step.startswith("scores"):
        return "scores"
    if step.startswith("head outputs"):
        return "weighted_sum"
    if step.startswith("out"):
        return "out_proj"
    raise AssertionError(f"unclassified matmul step {step!r}")


def traced_macs(book: Ledger) -> dict[str, int]:
    out = dict.fromkeys(["q_proj", "k_proj", "v_proj", "scores", "weighted_sum", "out_proj"], 0)
    for step, macs in book.macs:
        out[category(step)] += macs
    return out


@settings(deadline=None, max_examples=80)
@given(mha_cases())
def test_count_macs_equals_traced_macs(case):
    t = ledger(case.x, case.params, case.config.n_heads, **case.kwargs)
    batch = case.lead[0] if case.lead else 1
    n_k = None if case.x_kv is None else case.n_k
    expected = count_macs(case.config, case.n_q, batch=batch, n_k=n_k)
    got = traced_macs(t)
    for key, value in got.items():
        assert expected[key] == value, key
    assert expected["projections"] == got["q_proj"] + got["k_proj"] + got["v_proj"] + got["out_proj"]
    assert expected["attention"] == got["scores"] + got["weighted_sum"]
    assert expected["total"] == sum(got.values()) == t.total_macs()
    # softmax_exps: one exponential per score entry.
    assert expected["softmax_exps"] == batch * case.config.n_heads * case.n_q * case.n_k


@settings(deadline=None, max_examples=30)
@given(configs(), lengths, batches)
def test_trace_config_macs_equal_count_macs(config, n, batch):
    t = trace_config(config, n, batch=batch)
    assert t.total_macs() == count_macs(config, n, batch=batch or 1)["total"]


def test_worked_example_params():
    assert count_params(WORKED)["total"] == 1_048_576
    assert count_params(WORKED)["W_Q"] == 262_144


def test_worked_example_macs_formula_and_run():
    m = count_macs(WORKED, WORKED_N)
    assert m["projections"] == 104_857_600
    assert m["attention"] == 10_240_000
    assert m["total"] == 115_097_600
    t = trace_config(WORKED, WORKED_N)  # an actual float32 run of the layer
    got = traced_macs(t)
    assert got["q_proj"] + got["k_proj"] + got["v_proj"] + got["out_proj"] == 104_857_600
    assert got["scores"] + got["weighted_sum"] == 10_240_000
    assert t.total_macs() == 115_097_600


def test_attention_overtakes_projections_at_long_context():
    # The text's N=2000 remark: projections ~2.1 B MACs, attention ~4.1 B.
    m = count_macs(WORKED, 2000)
    assert round(m["projections"] / 1e9, 1) == 2.1
    assert round(m["attention"] / 1e9, 1) == 4.1
    assert m["attention"] > m["projections"]
    assert count_macs(WORKED, 100)["attention"] < count_macs(WORKED, 100)["projections"]


def test_macs_scale_with_batch():
    a, b = count_macs(MHAConfig(16, 4, 2), 5, n_k=7), count_macs(MHAConfig(16, 4, 2), 5, n_k=7, batch=3)
    assert all(b[k] == 3 * a[k] for k in a)


@settings(deadline=None, max_examples=40)
@given(configs(), st.integers(1, 50), st.integers(1, 4), st.integers(1, 3),
       st.sampled_from([np.float16, np.float32, np.float64, np.int8]))
def test_kv_cache_bytes_equals_the_cached_arrays(config, n, layers, batch, dtype):
    # The cache holds K and V, (B, N, n_kv*d_k) each, for every layer.
    params = init_params(config, 0)
    k_row, v_row = params["W_K"].shape[1], params["W_V"].shape[1]
    per_layer = np.empty((batch, n, k_row), dtype).nbytes + np.empty((batch, n, v_row), dtype).nbytes
    assert kv_cache_bytes(config, n, n_layers=layers, batch=batch, dtype=dtype) == layers * per_layer


def test_gqa_shrinks_the_kv_cache_by_h_over_n_kv():
    full = kv_cache_bytes(MHAConfig(512, 8), 4096, n_layers=12)
    assert kv_cache_bytes(MHAConfig(512, 8, 2), 4096, n_layers=12) * 4 == full
    assert kv_cache_bytes(MHAConfig(512, 8, 1), 4096, n_layers=12) * 8 == full
    assert full == 2 * 4096 * 512 * 12 * 2  # 2 (K and V) * N * d_model * layers * 2 bytes (float16)


@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        (lambda: count_params({"d_model": 8}), TypeError, "config must be an MHAConfig"),
        (lambda: count_params(None), TypeError, "config must be an MHAConfig"),
        (lambda: count_macs("cfg", 3), TypeError, "config must be an MHAConfig"),
        (lambda: count_macs(WORKED, 0), ValueError, "n"),
        (lambda: count_macs(WORKED, 10.0), TypeError, "n must be a positive int"),
        (lambda: count_macs(WORKED, True), TypeError, "n must be a positive int"),
        (lambda: count_macs(WORKED, 10, batch=0), ValueError, "batch"),
        (lambda: count_macs(WORKED, 10, batch=True), TypeError, "batch"),
        (lambda: count_macs(WORKED, 10, n_k=-1), ValueError, "n_k"),
        (lambda: count_macs(WORKED, 10, n_k=2.5), TypeError, "n_k"),
        (lambda: kv_cache_bytes(3, 10), TypeError, "config must be an MHAConfig"),
        (lambda: kv_cache_bytes(WORKED, 0), ValueError, "n_tokens"),
        (lambda: kv_cache_bytes(WORKED, False), TypeError, "n_tokens"),
        (lambda: kv_cache_bytes(WORKED, 10, n_layers=0), ValueError, "n_layers"),
        (lambda: kv_cache_bytes(WORKED, 10, n_layers=True), TypeError, "n_layers"),
        (lambda: kv_cache_bytes(WORKED, 10, batch=-2), ValueError, "batch"),
        (lambda: kv_cache_bytes(WORKED, 10, dtype="garbage"), TypeError, "dtype"),
    ],
)
def test_counts_reject(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
