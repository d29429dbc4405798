"""check_layer_args (core/layer_args.py): one public, keyword-only check of a layer's arguments.

Every refusal through the public functions is tested in tests/test_mha.py (BAD_CALLS, for the
fused layer, the per-head loop, head_outputs and head_contributions); here, what the function
itself promises: keywords only, the sizes it reads, and the memory refusal before allocating.
"""

from __future__ import annotations

import numpy as np
import pytest

from mha_core import MemoryBudgetError, MHAConfig, causal_mask, check_layer_args, init_params
from mha_core.core.layer_args import LayerArgs, check_layer_output

X = np.zeros((2, 5, 16), np.float32)  # (B, N, d_model)


@pytest.mark.parametrize(("n_kv", "group_size"), [(4, 1), (2, 2), (1, 4)], ids=["MHA", "GQA", "MQA"])
def test_reads_the_sizes_from_the_weights(n_kv, group_size):
    p = init_params(MHAConfig(16, 4, n_kv), 0)
    a = check_layer_args(x=X, params=p, n_heads=4, n_kv_heads=n_kv)
    assert isinstance(a, LayerArgs)
    assert (a.h, a.n_kv, a.d_k, a.d_v, a.group_size) == (4, n_kv, 4, 4, group_size)
    assert a.x_kv is a.x and a.mask is None and a.causal is False
    assert a.score_bytes == 2 * 4 * 5 * 5 * 4  # (B, h, N_q, N_k) float32


def test_is_keyword_only():
    p = init_params(MHAConfig(16, 4), 0)
    with pytest.raises(TypeError, match="positional"):
        check_layer_args(X, p, 4)  # positional: refused


def test_causal_mask_is_anded_in_only_when_asked_for():
    p = init_params(MHAConfig(16, 4), 0)
    key = np.array([True, True, True, False, True])  # (N_k,): the fourth key is padding
    a = check_layer_args(x=X, params=p, n_heads=4, mask=key, causal=True)
    assert a.given_mask is key
    np.testing.assert_array_equal(a.mask, causal_mask(5) & key)


def test_refuses_the_score_tensor_over_the_budget_only_when_it_would_be_built():
    p = init_params(MHAConfig(16, 4), 0)
    with pytest.raises(MemoryBudgetError, match=r"attention scores of shape \(2, 4, 5, 5\).*; or else"):
        check_layer_args(x=X, params=p, n_heads=4, max_bytes=100, hint="; or else")
    a = check_layer_args(x=X, params=p, n_heads=4, max_bytes=100, scores=False)  # e.g. the tiled path
    assert a.max_bytes == 100
    with pytest.raises(ValueError, match="max_bytes must be a positive int"):
        check_layer_args(x=X, params=p, n_heads=4, max_bytes=0, scores=False)


def test_output_check_names_the_input_that_was_not_finite():
    p = init_params(MHAConfig(16, 4), 0)
    bad = X.copy()
    bad[0, 1, 2] = np.nan
    a = check_layer_args(x=bad, params=p, n_heads=4)
    check_layer_output(np.zeros(3), a)  # a finite output passes whatever the inputs
    with pytest.raises(ValueError, match="x must be finite, but 1 of its 160 values"):
        check_layer_output(np.full(3, np.nan), a)
