"""Tests for mha_core.ui.shapes_panel: shape_state and the shape explorer's callbacks.

Callbacks are driven the way the browser drives them: by setting widget values, and by feeding
``set_state`` / ``_handle_msg`` the update messages a page would send, including forged ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from widget_messages import plain_text

import mha_core as m
from mha_core.ui import controls as C
from mha_core.ui import shapes_panel as S


def test_shape_state_runs_the_layer_and_counts():
    s = S.shape_state(2, 10, 512, 8)
    assert s["d_k"] == 512 // 8
    assert s["params"] == 4 * 512**2
    assert s["macs"] == m.count_macs(m.MHAConfig(512, 8), 10, batch=2)
    assert s["steps"][0] == ("X", (2, 10, 512))
    assert ("weights = softmax(scores)", (2, 8, 10, 10)) in s["steps"]
    assert s["steps"][-1][1] == (2, 10, 512)


@pytest.mark.parametrize(
    ("args", "match"),
    [((2, 10, 512, 3), "h=3 does not divide d_model=512"), ((0, 10, 512, 8), "B"),
     ((2, S.SHAPE_MAX_N + 1, 512, 8), "N"), ((2, 10, 500, 4), "d_model"), ((2, 10, 512, 128), "h")],
)
def test_shape_state_refuses_bad_values(args, match):
    with pytest.raises(ValueError, match=match):
        S.shape_state(*args)


def test_shape_state_refuses_wrong_types():
    with pytest.raises(TypeError, match="N"):
        S.shape_state(2, "10", 512, 8)


def test_shape_explorer_updates_live():
    p = S.shape_explorer()
    assert "d_k = d_model / h = 512 / 8 = <span class='mha-dk'>64</span>" in p.summary.value
    p.h.value = 16
    assert "<span class='mha-dk'>32</span>" in p.summary.value
    assert "(B=2, h=16, N=10, d_k=32)" in p.ledger.value
    assert "h=16" in p.boxes.value
    p.N.value = 100
    p.B.value = 3
    assert "(B=3, N=100, d_model=512)" in p.ledger.value
    assert f"{m.count_macs(m.MHAConfig(512, 16), 100, batch=3)['total']:,}" in p.summary.value
    assert p.status.value == ""


def test_shape_explorer_h_offers_only_divisors_of_d_model():
    p = S.shape_explorer()
    p.h.value = 16
    p.d_model.value = 768
    assert p.h.options == C.divisors(768, C.MAX_HEADS)
    assert p.h.value == 16  # still a divisor: kept
    p.d_model.value = 16
    assert p.h.options == (1, 2, 4, 8, 16) and p.h.value == 16
    p.h.value = 8
    p.d_model.value = 768
    p.h.value = 3
    p.d_model.value = 512
    assert p.h.value == 2  # 3 does not divide 512: the nearest smaller divisor
    assert "d_k = d_model / h = 512 / 2" in p.summary.value
    # and the page says so, once (a cold visitor saw h move without a word)
    assert "h is now 2 (was 3): h must divide d_model = 512" in p.status.value
    p.B.value = 3
    assert p.status.value == ""
    p.d_model.value = 768  # h = 2 divides 768: nothing to say
    assert p.h.value == 2 and p.status.value == ""


def test_shape_explorer_forged_h_gives_a_readable_message():
    p = S.shape_explorer()
    before = p.ledger.value
    assert p.refresh(h=3, d_model=512) is False
    assert "h=3 does not divide d_model=512" in p.status.value
    assert "Traceback" not in p.status.value
    assert p.ledger.value == before  # the previous view stays
    assert p.refresh() is True and p.status.value == ""


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [({"h": 3}, ValueError, "h=3 does not divide d_model=512"),
     ({"B": 0}, ValueError, "B"),
     ({"N": "10"}, TypeError, "N")],
)
def test_shape_explorer_validates_its_starting_values(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        S.shape_explorer(**kwargs)


# -- checks that used to run inside notebook 02: the shape explorer it embeds --------------------

def test_shape_explorer_h_follows_d_model_and_its_ledger_is_the_trace():
    probe = S.shape_explorer(B=3, N=5, d_model=512, h=8)
    for width in (768, 64):
        probe.d_model.value = width
        assert all(width % k == 0 for k in probe.h.options) and probe.h.value in probe.h.options
    panel_ledger = S.shape_state(3, 5, 64, 4)["steps"]
    x = np.zeros((3, 5, 64), np.float32)  # (B, N, d_model)
    assert panel_ledger == m.trace_shapes(x, m.init_params(m.MHAConfig(64, 4), 0), 4)
    assert probe.refresh(h=5) is False  # refused, the previous figures stay
    assert "h=5 does not divide d_model=64" in plain_text(probe.status.value)


def test_the_panels_layer_weights_are_made_once_per_d_model_and_h():
    """A move of B or N reuses the layer's weights (at d_model = 1024 making them takes longer than
    the layer's run); they are read-only, so no caller can change what the next one gets, and the
    shapes are the same whatever the seed."""
    S.layer_params.cache_clear()
    first = S.shape_state(1, 4, 256, 8)
    for B, N in ((2, 4), (1, 100), (4, 128)):
        S.shape_state(B, N, 256, 8)
    assert S.layer_params.cache_info().misses == 1
    params = S.layer_params(256, 8, 1)
    assert set(params) == {"W_Q", "W_K", "W_V", "W_O"} and params["W_Q"].shape == (256, 256)
    with pytest.raises(ValueError, match="read-only"):
        params["W_Q"][0, 0] = 1.0
    assert S.shape_state(1, 4, 256, 8, seed=7)["steps"] == first["steps"]


@pytest.mark.parametrize(("seed", "exc"), [(-1, ValueError), (1.5, TypeError), (True, TypeError), ("0", TypeError)])
def test_shape_state_refuses_a_bad_seed(seed, exc):
    with pytest.raises(exc, match="seed"):
        S.shape_state(2, 10, 512, 8, seed=seed)
