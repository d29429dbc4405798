"""Tests for mha_core.ui.widgets: the pure state functions and the panels' callbacks.

Callbacks are driven the way the browser drives them: by setting widget values, and by
feeding ``set_state`` / ``_handle_msg`` the update messages a page would send, including
forged ones (an index past the options, a string for an int, h=3 with d_model=512).
"""

from __future__ import annotations

import html
import re
import sys
import types

import numpy as np
import pytest

import mha_core as m
import mha_core.training
from mha_core.teaching import demo
from mha_core.ui import widgets as W


def _forge(widget, state: dict) -> None:
    """Deliver an update message to ``widget`` as the kernel's comm layer would."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}},
                        "buffers": []})


# -- pure functions ---------------------------------------------------------------------------------

def test_divisors():
    assert W.divisors(12) == (1, 2, 3, 4, 6, 12)
    assert W.divisors(768, 64) == tuple(d for d in range(1, 65) if 768 % d == 0)
    with pytest.raises(ValueError, match="n"):
        W.divisors(0)


def test_shape_state_runs_the_layer_and_counts():
    s = W.shape_state(2, 10, 512, 8)
    assert s["d_k"] == 512 // 8
    assert s["params"] == 4 * 512**2
    assert s["macs"] == m.count_macs(m.MHAConfig(512, 8), 10, batch=2)
    assert s["steps"][0] == ("X", (2, 10, 512))
    assert ("weights = softmax(scores)", (2, 8, 10, 10)) in s["steps"]
    assert s["steps"][-1][1] == (2, 10, 512)


@pytest.mark.parametrize(
    ("args", "match"),
    [((2, 10, 512, 3), "h=3 does not divide d_model=512"), ((0, 10, 512, 8), "B"),
     ((2, W.SHAPE_MAX_N + 1, 512, 8), "N"), ((2, 10, 500, 4), "d_model"), ((2, 10, 512, 128), "h")],
)
def test_shape_state_refuses_bad_values(args, match):
    with pytest.raises(ValueError, match=match):
        W.shape_state(*args)


def test_shape_state_refuses_wrong_types():
    with pytest.raises(TypeError, match="N"):
        W.shape_state(2, "10", 512, 8)


def test_head_weights_random():
    labels, w, title = W.head_weights(4, 12)
    assert labels == list(demo.tokens(12))
    assert w.shape == (4, 12, 12)
    np.testing.assert_allclose(w.sum(-1), 1, rtol=1e-5)
    assert "RANDOM" in title and "no mask" in title
    _, wc, title_c = W.head_weights(4, 12, causal=True)
    assert np.all(wc[:, np.triu_indices(12, 1)[0], np.triu_indices(12, 1)[1]] == 0)
    assert "causal" in title_c
    np.testing.assert_array_equal(W.head_weights(4, 12)[1], w)  # seeded


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [((3, 10), {}, ValueError, "h=3"), ((4, 1), {}, ValueError, "N"), ((4, 65), {}, ValueError, "N"),
     ((4, 10), {"causal": 1}, TypeError, "causal"), ((4, 10), {"kind": "best"}, ValueError, "weights")],
)
def test_head_weights_validates(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        W.head_weights(*args, **kwargs)


@pytest.fixture
def fake_toy_models(monkeypatch):
    """A stand-in for mha_core.training.toy_models: uniform weights over a 6-token toy sequence."""
    mod = types.ModuleType("mha_core.training.toy_models")
    mod.AVAILABLE_HEADS = (2, 4)

    def attention_maps(n_heads, n=None, seed=0):
        n = 6 if n is None else n
        assert 2 <= n <= 6
        return [f"t{i}" for i in range(n)], np.full((n_heads, n, n), 1.0 / n)

    mod.attention_maps = attention_maps
    monkeypatch.setitem(sys.modules, "mha_core.training.toy_models", mod)
    monkeypatch.setattr(mha_core.training, "toy_models", mod, raising=False)
    return mod


def test_head_weights_trained_uses_toy_models_and_masks_exactly(fake_toy_models):
    assert W.trained_available() == (2, 4)
    labels, w, title = W.head_weights(2, 6, kind="trained")
    assert labels == [f"t{i}" for i in range(6)] and "TRAINED" in title
    assert "causal" in title and "no mask" not in title  # the toy model is always causal
    _, wc, _ = W.head_weights(2, 6, kind="trained", causal=True)
    # uniform weights with the causal mask = softmax of equal logits over keys 0..i: 1 / (i + 1)
    expected = np.tril(np.ones((6, 6))) / np.arange(1, 7)[:, None]
    np.testing.assert_allclose(wc[1], expected)
    np.testing.assert_allclose(w, wc)  # the causal toggle cannot un-mask a causally trained model
    with pytest.raises(ValueError, match="h=8"):
        W.head_weights(8, 6, kind="trained")
    labels, w, title = W.head_weights(2, 20, kind="trained")  # longer than the task: cut to 6
    assert len(labels) == 6 and w.shape == (2, 6, 6) and "6 tokens" in title


def test_head_weights_trained_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "mha_core.training.toy_models", None)  # import fails
    monkeypatch.delattr(mha_core.training, "toy_models", raising=False)
    assert W.trained_available() == ()
    with pytest.raises(ValueError, match="not available"):
        W.head_weights(4, 6, kind="trained")


@pytest.mark.parametrize("d_model", [64, 512, 4096])
def test_crossover_is_where_attention_catches_up(d_model):
    n = W.crossover_n(d_model)
    cfg = m.MHAConfig(d_model, 8)
    at = m.count_macs(cfg, n)
    assert at["projections"] == at["attention"]
    assert m.count_macs(cfg, n - 1)["projections"] > m.count_macs(cfg, n - 1)["attention"]
    assert m.count_macs(cfg, n + 1)["projections"] < m.count_macs(cfg, n + 1)["attention"]


def test_cost_state_worked_example_and_h_independence():
    s = W.cost_state(512, 8, 100)
    d = 512
    (n1, a), (n2, b) = s["worked"]
    assert (n1, n2) == (100, 2000)
    assert a["projections"] == 4 * 100 * d**2 and a["attention"] == 2 * 100**2 * d
    assert b["projections"] == 4 * 2000 * d**2 and b["attention"] == 2 * 2000**2 * d
    assert a["projections"] > a["attention"] and b["projections"] < b["attention"]
    assert s["worked_params"] == 4 * d * d
    assert {mm["total"] for _, mm in s["by_h"]} == {s["macs"]["total"]}  # h changes nothing...
    exps = [mm["softmax_exps"] for _, mm in s["by_h"]]
    assert exps == sorted(exps) and exps[-1] > exps[0]  # ...but the softmax work
    assert s["crossover"] == 2 * d
    assert len(s["curve_n"]) == len(s["curve_proj"]) == len(s["curve_attn"])
    with pytest.raises(ValueError, match="h=3"):
        W.cost_state(512, 3, 100)


def test_kv_state_bytes_and_kinds():
    model = "large: d_model=4096, h=32, 32 layers"
    s = W.kv_state(model, 8, 8192)
    d_k = 4096 // 32
    assert s["bytes"] == 2 * 8192 * 8 * d_k * 32 * 2  # K and V, N, n_kv, d_k, layers, float16
    assert s["mha_bytes"] == s["bytes"] * 32 // 8
    assert s["kind"] == "GQA"
    assert W.kv_state(model, 32, 8192)["kind"] == "MHA"
    assert W.kv_state(model, 1, 8192)["kind"] == "MQA"
    assert W.kv_state(model, 8, 8192, "float32")["bytes"] == 2 * s["bytes"]
    assert [k for k, _ in s["all"]] == list(W.divisors(32))
    with pytest.raises(ValueError, match="n_kv=3 does not divide h=32"):
        W.kv_state(model, 3, 8192)
    with pytest.raises(ValueError, match="model"):
        W.kv_state("tiny", 1, 8192)
    with pytest.raises(ValueError, match="context"):
        W.kv_state(model, 1, 1000)


# -- panels -------------------------------------------------------------------------------------------

def test_shape_explorer_updates_live():
    p = W.shape_explorer()
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
    p = W.shape_explorer()
    p.h.value = 16
    p.d_model.value = 768
    assert p.h.options == W.divisors(768, W.MAX_HEADS)
    assert p.h.value == 16  # still a divisor: kept
    p.d_model.value = 16
    assert p.h.options == (1, 2, 4, 8, 16) and p.h.value == 16
    p.h.value = 8
    p.d_model.value = 768
    p.h.value = 3
    p.d_model.value = 512
    assert p.h.value == 2  # 3 does not divide 512: the nearest smaller divisor
    assert "d_k = d_model / h = 512 / 2" in p.summary.value


def test_shape_explorer_forged_h_gives_a_readable_message():
    p = W.shape_explorer()
    before = p.ledger.value
    assert p.refresh(h=3, d_model=512) is False
    assert "h=3 does not divide d_model=512" in p.status.value
    assert "Traceback" not in p.status.value
    assert p.ledger.value == before  # the previous view stays
    assert p.refresh() is True and p.status.value == ""


@pytest.mark.parametrize(("control", "state"), [("h", {"index": 99}), ("N", {"value": "abc"}),
                                                ("B", {"value": None}), ("d_model", {"index": -5})])
def test_forged_comm_messages_are_reported_not_raised(control, state):
    p = W.shape_explorer()
    widget = getattr(p, control)
    value, renders = widget.value, p.renders
    _forge(widget, state)  # must not raise
    assert widget.value == value and p.renders == renders
    assert "ignored a value the page sent" in p.status.value and control in p.status.value


def test_a_valid_comm_message_moves_the_slider():
    p = W.shape_explorer()
    _forge(p.h, {"index": p.h.options.index(4)})
    assert p.h.value == 4 and "= <span class='mha-dk'>128</span>" in p.summary.value


def _drawn(p):
    """What the heads panel last sent the page: the PNG, or the canvas's weights and query row."""
    return p.image.value if p.renderer == "png" else (p.figure.weights, p.figure.query, p.figure.title)


@pytest.mark.parametrize("renderer", W.HEAD_RENDERERS)
def test_head_explorer_sliders_query_and_cache(renderer):
    p = W.head_explorer(renderer=renderer)
    if renderer == "png":
        assert p.grid.frames_built == len(W.HEAD_CHOICES)  # every h prepared up front
    first = _drawn(p)
    p.h.value = 16
    p.N.value = 64
    assert len(p.query.options) == 64 + 1
    assert "h=16, N=64" in p.caption.value
    computed = len(p._cache)
    p.query.value = 5
    assert len(p._cache) == computed  # the weights are not recomputed for a new query row
    with_query = _drawn(p)
    p.causal.value = True
    assert "causal mask" in p.caption.value
    assert len({first, with_query, _drawn(p)}) == 3
    p.N.value = 4
    assert p.query.value == -1  # row 5 no longer exists
    assert p.status.value == ""
    if renderer == "png":
        assert p.grid.frames_built == len(W.HEAD_CHOICES)  # no frame was rebuilt


@pytest.mark.parametrize("renderer", W.HEAD_RENDERERS)
def test_head_explorer_refuses_bad_values(renderer):
    p = W.head_explorer(renderer=renderer)
    image = _drawn(p)
    assert p.refresh(query=99) is False and "query" in p.status.value
    assert p.refresh(h=3) is False and "h=3" in p.status.value
    assert _drawn(p) == image
    _forge(p.h, {"index": 42})
    assert "ignored a value the page sent for h" in p.status.value


def test_head_explorer_trained_missing_is_a_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "mha_core.training.toy_models", None)
    monkeypatch.delattr(mha_core.training, "toy_models", raising=False)
    p = W.head_explorer()
    image = _drawn(p)
    p.kind.value = "trained"
    assert "not available" in p.status.value and _drawn(p) == image


def test_head_explorer_trained(fake_toy_models):
    p = W.head_explorer(h=4, N=6)
    p.kind.value = "trained"
    assert "TRAINED" in p.caption.value and p.status.value == ""
    assert [label for label, _ in p.query.options][1] == "0: t0"


def test_head_explorer_download_links():
    p = W.head_explorer(h=2, N=6)
    p.download.click()
    assert "data:image/png;base64," in p.links.value and "data:image/svg+xml;base64," in p.links.value
    p.N.value = 7
    assert p.links.value == ""  # links of an older figure are withdrawn


def test_cost_panel():
    p = W.cost_panel()
    image = p.image.value
    p.N.value = 1000
    assert p.plot.full_draws == 1 and p.image.value != image  # N only moves the marker (blitting)
    assert "<span class='mha-cost-crossover'>1,024</span>" in p.numbers.value
    assert f"{4 * 100 * 512**2:,}" in p.worked.value and f"{2 * 2000**2 * 512:,}" in p.worked.value
    p.N.value = 2000
    assert "attention-bound" in p.numbers.value
    p.d_model.value = 64
    assert p.h.options == W.divisors(64) and p.h.value == 8
    assert "<span class='mha-cost-crossover'>128</span>" in p.numbers.value
    assert p.plot.full_draws == 2
    assert p.by_h.value.count("<tr") == len(W.divisors(64)) + 1
    assert "<tr style='font-weight:bold'><td>8</td>" in p.by_h.value  # the current h
    assert p.refresh(h=3) is False and "h=3" in p.status.value


def test_kv_cache_panel():
    p = W.kv_cache_panel()
    assert "MHA" in p.numbers.value
    image = p.image.value
    p.n_kv.value = 1
    assert p.plot.full_draws == 1 and p.image.value != image  # n_kv only moves the highlight
    assert "<b class='mha-kv-kind'>MQA</b>" in p.numbers.value
    assert "<span class='mha-kv-ratio'>32</span>" in p.numbers.value
    p.model.value = "small: d_model=512, h=8, 6 layers"
    assert [v for _, v in p.n_kv.options] == [8, 4, 2, 1] and p.n_kv.value == 8
    assert p.refresh(n_kv=3) is False and "n_kv=3" in p.status.value
    _forge(p.context, {"index": 1000})
    assert "ignored a value the page sent for context" in p.status.value


def test_panels_display_as_their_widget():
    p = W.kv_cache_panel()
    bundle = p._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == p.widget.model_id


@pytest.mark.parametrize(
    ("factory", "kwargs", "exc", "match"),
    [(W.shape_explorer, {"h": 3}, ValueError, "h=3 does not divide d_model=512"),
     (W.shape_explorer, {"B": 0}, ValueError, "B"),
     (W.shape_explorer, {"N": "10"}, TypeError, "N"),
     (W.head_explorer, {"h": 3}, ValueError, "h"),
     (W.head_explorer, {"N": 1}, ValueError, "N"),
     (W.head_explorer, {"causal": "yes"}, TypeError, "causal"),
     (W.head_explorer, {"kind": "best"}, ValueError, "kind"),
     (W.cost_panel, {"d_model": 500}, ValueError, "d_model"),
     (W.cost_panel, {"N": 99}, ValueError, "N"),
     (W.kv_cache_panel, {"model": "huge"}, ValueError, "model"),
     (W.kv_cache_panel, {"n_tokens": 7}, ValueError, "n_tokens")],
)
def test_panels_validate_their_starting_values(factory, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        factory(**kwargs)


@pytest.mark.parametrize("make", [W.cost_panel, W.kv_cache_panel])
def test_panel_figures_have_no_text_under_10_pt_on_the_page(make):
    from mha_core.ui.viz import rendered_font_sizes

    fig = make().plot.fig
    # a PNG shown one pixel per CSS pixel: s pt at `dpi` reads as s * dpi / 96 pt on the page
    on_page = [(text, pt * fig.dpi / 96) for text, pt in rendered_font_sizes(fig, column_px=10**6)]
    assert on_page and min(pt for _, pt in on_page) >= 10, on_page[:3]


# -- checks that used to run inside the lessons (notebooks 02, 04, 06): the panels the lessons embed --

def _status_text(panel) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", panel.status.value))


# -- notebook 02: the shape explorer ---------------------------------------------------------------

def test_shape_explorer_h_follows_d_model_and_its_ledger_is_the_trace():
    probe = W.shape_explorer(B=3, N=5, d_model=512, h=8)
    for width in (768, 64):
        probe.d_model.value = width
        assert all(width % k == 0 for k in probe.h.options) and probe.h.value in probe.h.options
    panel_ledger = W.shape_state(3, 5, 64, 4)["steps"]
    x = np.zeros((3, 5, 64), np.float32)  # (B, N, d_model)
    assert panel_ledger == m.trace_shapes(x, m.init_params(m.MHAConfig(64, 4), 0), 4)
    assert probe.refresh(h=5) is False  # refused, the previous figures stay
    assert "h=5 does not divide d_model=64" in _status_text(probe)


# -- notebook 04: the head explorer ----------------------------------------------------------------

def test_head_explorer_query_choices_follow_N_and_the_causal_maps_are_exact():
    probe = W.head_explorer(h=8, N=20)
    probe.N.value = 30
    assert len(probe.query.options) == 1 + 30  # "none" + one entry per token
    probe.causal.value = True
    _, w_30, title = W.head_weights(probe.h.value, 30, causal=True)
    assert w_30.shape == (8, 30, 30) and np.all(w_30[:, ~m.causal_mask(30)] == 0.0)
    assert "causal mask" in title
    assert probe.refresh(query=99) is False  # refused; the last figure stays
    assert "query must be -1 (none) or a token position 0..29, got 99" in _status_text(probe)


def test_notebook_04_static_maps_are_the_explorers_maps():
    # notebook 04 draws its static grid from the same layer as the explorer (d_model=HEAD_D_MODEL)
    tokens = list(demo.tokens(20))
    cfg = m.MHAConfig(W.HEAD_D_MODEL, 8)
    x = demo.embed_tokens(tokens, cfg.d_model, seed=0)  # (N, d_model)
    _, weights = m.multi_head_attention(x, m.init_params(cfg, rng=0), 8, return_weights=True)
    np.testing.assert_array_equal(weights, W.head_weights(8, 20)[1])


# -- notebook 06: the KV-cache readout -------------------------------------------------------------

def test_kv_cache_panel_readout_for_gqa_and_refusals():
    large = list(W.KV_MODELS)[-1]  # d_model=4096, h=32, 32 layers
    s = W.kv_state(large, 8, 32_768)
    assert s["bytes"] * 4 == s["mha_bytes"] == 16 * 2**30  # GQA with 8 K/V heads: 25 % of MHA
    p = W.kv_cache_panel(model=large)
    p.n_kv.value = 8
    assert "GQA" in p.numbers.value
    assert p.refresh(n_kv=3) is False and "n_kv=3" in _status_text(p)
