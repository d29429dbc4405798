"""Tests for mha_core.ui.kv_panel: kv_state and the KV-cache panel.

Callbacks are driven the way the browser drives them: by setting widget values, and by feeding
``set_state`` / ``_handle_msg`` the update messages a page would send, including forged ones.
"""

from __future__ import annotations

import pytest
from widget_messages import assert_no_text_under_10_pt_on_the_page, forge, plain_text

from mha_core.ui import controls as C
from mha_core.ui import kv_panel as KV


def test_kv_state_bytes_and_kinds():
    model = "large: d_model=4096, h=32, 32 layers"
    s = KV.kv_state(model, 8, 8192)
    d_k = 4096 // 32
    assert s["bytes"] == 2 * 8192 * 8 * d_k * 32 * 2  # K and V, N, n_kv, d_k, layers, float16
    assert s["mha_bytes"] == s["bytes"] * 32 // 8
    assert s["kind"] == "GQA"
    assert KV.kv_state(model, 32, 8192)["kind"] == "MHA"
    assert KV.kv_state(model, 1, 8192)["kind"] == "MQA"
    assert KV.kv_state(model, 8, 8192, "float32")["bytes"] == 2 * s["bytes"]
    assert [k for k, _ in s["all"]] == list(C.divisors(32))
    with pytest.raises(ValueError, match="n_kv=3 does not divide h=32"):
        KV.kv_state(model, 3, 8192)
    with pytest.raises(ValueError, match="model"):
        KV.kv_state("tiny", 1, 8192)
    with pytest.raises(ValueError, match="context"):
        KV.kv_state(model, 1, 1000)


def test_kv_cache_panel():
    p = KV.kv_cache_panel()
    assert "MHA" in p.numbers.value
    image = p.image.value
    p.n_kv.value = 1
    assert p.plot.full_draws == 1 and p.image.value != image  # n_kv only moves the highlight
    assert "<b class='mha-kv-kind'>MQA</b>" in p.numbers.value
    assert "<span class='mha-kv-ratio'>32</span>" in p.numbers.value
    p.model.value = "small: d_model=512, h=8, 6 layers"
    assert [v for _, v in p.n_kv.options] == [1, 2, 4, 8] and p.n_kv.value == 8
    assert p.refresh(n_kv=3) is False and "n_kv=3" in p.status.value
    forge(p.context, {"index": 1000})
    assert "ignored a value the page sent for context" in p.status.value


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [({"model": "huge"}, ValueError, "model"),
     ({"n_tokens": 7}, ValueError, "n_tokens")],
)
def test_kv_cache_panel_validates_its_starting_values(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        KV.kv_cache_panel(**kwargs)


def test_kv_cache_panel_figure_has_no_text_under_10_pt_on_the_page():
    assert_no_text_under_10_pt_on_the_page(KV.kv_cache_panel())


# -- checks that used to run inside notebook 06: the KV-cache readout -----------------------------

def test_kv_cache_panel_readout_for_gqa_and_refusals():
    large = list(KV.KV_MODELS)[-1]  # d_model=4096, h=32, 32 layers
    s = KV.kv_state(large, 8, 32_768)
    assert s["bytes"] * 4 == s["mha_bytes"] == 16 * 2**30  # GQA with 8 K/V heads: 25 % of MHA
    p = KV.kv_cache_panel(model=large)
    p.n_kv.value = 8
    assert "GQA" in p.numbers.value
    assert p.refresh(n_kv=3) is False and "n_kv=3" in plain_text(p.status.value)
