"""Checks that used to run inside the lessons (notebooks 02, 04, 06) and now live here.

The notebooks keep the idea, the figure and one assert per claim; what checks the machinery
(the panels' callbacks, their refusal of values a forged browser message could send) is tested
here, so that nothing that was checked is lost.
"""

from __future__ import annotations

import html
import re

import numpy as np

import mha_core as m
from mha_core.teaching import demo
from mha_core.ui.heads_panel import HEAD_D_MODEL, head_explorer, head_weights
from mha_core.ui.kv_panel import KV_MODELS, kv_cache_panel, kv_state
from mha_core.ui.shapes_panel import shape_explorer, shape_state


def _status_text(panel) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", panel.status.value))


# -- notebook 02: the shape explorer ---------------------------------------------------------------

def test_shape_explorer_h_follows_d_model_and_its_ledger_is_the_trace():
    probe = shape_explorer(B=3, N=5, d_model=512, h=8)
    for width in (768, 64):
        probe.d_model.value = width
        assert all(width % k == 0 for k in probe.h.options) and probe.h.value in probe.h.options
    panel_ledger = shape_state(3, 5, 64, 4)["steps"]
    x = np.zeros((3, 5, 64), np.float32)  # (B, N, d_model)
    assert panel_ledger == m.trace_shapes(x, m.init_params(m.MHAConfig(64, 4), 0), 4)
    assert probe.refresh(h=5) is False  # refused, the previous figures stay
    assert "h=5 does not divide d_model=64" in _status_text(probe)


# -- notebook 04: the head explorer ----------------------------------------------------------------

def test_head_explorer_query_choices_follow_N_and_the_causal_maps_are_exact():
    probe = head_explorer(h=8, N=20)
    probe.N.value = 30
    assert len(probe.query.options) == 1 + 30  # "none" + one entry per token
    probe.causal.value = True
    _, w_30, title = head_weights(probe.h.value, 30, causal=True)
    assert w_30.shape == (8, 30, 30) and np.all(w_30[:, ~m.causal_mask(30)] == 0.0)
    assert "causal mask" in title
    assert probe.refresh(query=99) is False  # refused; the last figure stays
    assert "query must be -1 (none) or a token position 0..29, got 99" in _status_text(probe)


def test_notebook_04_static_maps_are_the_explorers_maps():
    # notebook 04 draws its static grid from the same layer as the explorer (d_model=HEAD_D_MODEL)
    tokens = list(demo.tokens(20))
    cfg = m.MHAConfig(HEAD_D_MODEL, 8)
    x = demo.embed_tokens(tokens, cfg.d_model, seed=0)  # (N, d_model)
    _, weights = m.multi_head_attention(x, m.init_params(cfg, rng=0), 8, return_weights=True)
    np.testing.assert_array_equal(weights, head_weights(8, 20)[1])


# -- notebook 06: the KV-cache readout -------------------------------------------------------------

def test_kv_cache_panel_readout_for_gqa_and_refusals():
    large = list(KV_MODELS)[-1]  # d_model=4096, h=32, 32 layers
    s = kv_state(large, 8, 32_768)
    assert s["bytes"] * 4 == s["mha_bytes"] == 16 * 2**30  # GQA with 8 K/V heads: 25 % of MHA
    p = kv_cache_panel(model=large)
    p.n_kv.value = 8
    assert "GQA" in p.numbers.value
    assert p.refresh(n_kv=3) is False and "n_kv=3" in _status_text(p)
