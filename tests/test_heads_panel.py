"""Tests for mha_core.ui.heads_panel: head_weights (random and trained) and the heads panel's callbacks.

Callbacks are driven the way the browser drives them: by setting widget values, and by feeding
``set_state`` / ``_handle_msg`` the update messages a page would send, including forged ones.
"""

from __future__ import annotations

import re
import sys
import types

import numpy as np
import pytest
from widget_messages import forge, plain_text

import mha_core as m
import mha_core.training
from mha_core.teaching import demo
from mha_core.training.tasks import OffsetPairTask
from mha_core.ui import heads_panel as H


def test_head_weights_random():
    labels, w, title = H.head_weights(4, 12)
    assert labels == list(demo.tokens(12))
    assert w.shape == (4, 12, 12)
    np.testing.assert_allclose(w.sum(-1), 1, rtol=1e-5)
    assert "RANDOM" in title and "no mask" in title
    _, wc, title_c = H.head_weights(4, 12, causal=True)
    assert np.all(wc[:, np.triu_indices(12, 1)[0], np.triu_indices(12, 1)[1]] == 0)
    assert "causal" in title_c
    np.testing.assert_array_equal(H.head_weights(4, 12)[1], w)  # seeded


@pytest.mark.parametrize(
    ("args", "kwargs", "exc", "match"),
    [((3, 10), {}, ValueError, "h=3"), ((4, 1), {}, ValueError, "N"), ((4, 65), {}, ValueError, "N"),
     ((4, 10), {"causal": 1}, TypeError, "causal"), ((4, 10), {"kind": "best"}, ValueError, "weights")],
)
def test_head_weights_validates(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        H.head_weights(*args, **kwargs)


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
    mod.TASK = OffsetPairTask(vocab=16, n=6, offsets=(1, 3))
    monkeypatch.setitem(sys.modules, "mha_core.training.toy_models", mod)
    monkeypatch.setattr(mha_core.training, "toy_models", mod, raising=False)
    return mod


def test_head_weights_trained_uses_pretrained_and_masks_exactly(fake_toy_models):
    assert H.trained_available() == (2, 4)
    labels, w, title = H.head_weights(2, 6, kind="trained")
    assert labels == [f"t{i}" for i in range(6)] and "TRAINED" in title
    assert "causal" in title and "no mask" not in title  # the toy model is always causal
    _, wc, _ = H.head_weights(2, 6, kind="trained", causal=True)
    # uniform weights with the causal mask = softmax of equal logits over keys 0..i: 1 / (i + 1)
    expected = np.tril(np.ones((6, 6))) / np.arange(1, 7)[:, None]
    np.testing.assert_allclose(wc[1], expected)
    np.testing.assert_allclose(w, wc)  # the causal toggle cannot un-mask a causally trained model
    with pytest.raises(ValueError, match="h=8"):
        H.head_weights(8, 6, kind="trained")
    labels, w, title = H.head_weights(2, 20, kind="trained")  # longer than the task: cut to 6
    assert len(labels) == 6 and w.shape == (2, 6, 6) and "6 tokens" in title


def test_head_weights_trained_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "mha_core.training.toy_models", None)  # import fails
    monkeypatch.delattr(mha_core.training, "toy_models", raising=False)
    assert H.trained_available() == ()
    with pytest.raises(ValueError, match="not available"):
        H.head_weights(4, 6, kind="trained")


def _drawn(p):
    """What the heads panel last sent the page: the PNG, or the canvas's weights and query row."""
    return p.image.value if p.renderer == "png" else (p.figure.weights, p.figure.query, p.figure.title)


@pytest.mark.parametrize("renderer", H.HEAD_RENDERERS)
def test_head_explorer_sliders_query_and_cache(renderer):
    p = H.head_explorer(renderer=renderer)
    if renderer == "png":
        assert p.grid.frames_built == len(H.HEAD_CHOICES)  # every h prepared up front
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
        assert p.grid.frames_built == len(H.HEAD_CHOICES)  # no frame was rebuilt


@pytest.mark.parametrize("renderer", H.HEAD_RENDERERS)
def test_head_explorer_refuses_bad_values(renderer):
    p = H.head_explorer(renderer=renderer)
    image = _drawn(p)
    assert p.refresh(query=99) is False and "query" in p.status.value
    assert p.refresh(h=3) is False and "h=3" in p.status.value
    assert _drawn(p) == image
    forge(p.h, {"index": 42})
    assert "ignored a value the page sent for h" in p.status.value


def test_head_explorer_trained_missing_is_a_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "mha_core.training.toy_models", None)
    monkeypatch.delattr(mha_core.training, "toy_models", raising=False)
    p = H.head_explorer()
    image = _drawn(p)
    p.kind.value = "trained"
    assert "not available" in p.status.value and _drawn(p) == image


def test_head_explorer_trained(fake_toy_models):
    p = H.head_explorer(h=4, N=6)
    p.kind.value = "trained"
    assert "TRAINED" in p.caption.value and p.status.value == ""
    assert [label for label, _ in p.query.options][1] == "0: t0"


def test_trained_mode_controls_show_what_the_figure_shows(fake_toy_models):
    """Issue 22: in trained mode the N slider read 20 and the causal button looked off while the
    figure showed N=6 (the toy task's length) and causal weights."""
    p = H.head_explorer(h=16, N=20, causal=False)
    p.kind.value = "trained"
    assert p.status.value == ""
    assert p.h.options == (2, 4) and p.h.value == 4  # only trained models; 16 -> the nearest below
    assert (p.N.max, p.N.value) == (6, 6)
    assert p.causal.value is True and p.causal.disabled and "trained with the causal mask" in p.causal.tooltip
    assert "h=4, N=6" in p.caption.value and "causal mask" in p.caption.value
    assert "tokens 1 and 3 places back" in p.caption.value and "a number 0-15" in p.caption.value
    p.N.value = 4
    assert "N=4" in p.caption.value
    p.kind.value = "random"  # the random settings come back
    assert (p.h.options, p.h.value, p.N.max, p.N.value) == (H.HEAD_CHOICES, 16, H.DEMO_MAX_TOKENS, 20)
    assert p.causal.value is False and not p.causal.disabled
    assert "no mask" in p.caption.value and p.status.value == ""


def test_random_init_keeps_the_mask_the_page_showed_or_says_it_changed(fake_toy_models):
    """Issue 34: the page opens on trained weights with the mask on (locked); "random init" turned
    it off without a word. Now the random layer keeps the mask the reader saw, and a switch that
    does move it (back to a random setting of the reader's own) says so, as for N and h."""
    p = H.head_explorer(kind="trained")
    assert p.causal.value is True and "causal mask: on" in p.causal.description
    p.kind.value = "random"
    assert p.causal.value is True and not p.causal.disabled and p.causal.description == "causal mask: on"
    assert "causal mask" in p.caption.value and "no mask" not in p.caption.value
    moved = re.search(r"class='mha-heads-moved'[^>]*>([^<]*)<", p.caption.value).group(1)
    assert "N is now" in moved and "mask" not in moved  # N moved and says so; the mask did not move
    p.causal.value = False  # the reader's own random setting
    p.kind.value = "trained"
    moved = re.search(r"class='mha-heads-moved'[^>]*>([^<]*)<", p.caption.value).group(1)
    assert "the causal mask is now on (was off): the toy model was trained with it" in moved, moved
    # the fourth cold visit: the mask's reason was "the toy task has that many tokens"; each move has its own
    assert all(("tokens" in part) == part.startswith("N ") for part in moved.split("; ")), moved
    p.kind.value = "random"  # the reader's setting comes back, and the panel says so
    assert p.causal.value is False and p.causal.description == "causal mask: off"
    moved = re.search(r"class='mha-heads-moved'[^>]*>([^<]*)<", p.caption.value).group(1)
    assert "the causal mask is now off (was on)" in moved, moved
    p.N.value = 7  # the note is said once: the next redraw has none
    assert "mha-heads-moved" not in p.caption.value


def test_the_toy_task_labels_are_not_numbered_twice():
    assert H.HeadExplorer._query_options(["0:13", "1:10"]) == [("none", -1), ("0:13", 0), ("1:10", 1)]
    assert H.HeadExplorer._query_options(["The", "animal"])[2] == ("1: animal", 1)


def test_the_toy_task_line_comes_from_the_task():
    from mha_core.training import toy_models

    line = H.toy_task_line()
    a, b = toy_models.TASK.offsets
    assert f"{toy_models.TASK.n} random tokens" in line and f"tokens {a} and {b} places back" in line


def test_head_explorer_download_links():
    p = H.head_explorer(h=2, N=6)
    p.download.click()
    assert "data:image/png;base64," in p.links.value and "data:image/svg+xml;base64," in p.links.value
    p.N.value = 7
    assert p.links.value == ""  # links of an older figure are withdrawn


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [({"h": 3}, ValueError, "h"),
     ({"N": 1}, ValueError, "N"),
     ({"causal": "yes"}, TypeError, "causal"),
     ({"kind": "best"}, ValueError, "kind")],
)
def test_head_explorer_validates_its_starting_values(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        H.head_explorer(**kwargs)


# -- checks that used to run inside notebook 04: the head explorer it embeds ---------------------

def test_head_explorer_query_choices_follow_N_and_the_causal_maps_are_exact():
    probe = H.head_explorer(h=8, N=20)
    probe.N.value = 30
    assert len(probe.query.options) == 1 + 30  # "none" + one entry per token
    probe.causal.value = True
    _, w_30, title = H.head_weights(probe.h.value, 30, causal=True)
    assert w_30.shape == (8, 30, 30) and np.all(w_30[:, ~m.causal_mask(30)] == 0.0)
    assert "causal mask" in title
    assert probe.refresh(query=99) is False  # refused; the last figure stays
    assert "query must be -1 (none) or a token position 0..29, got 99" in plain_text(probe.status.value)


def test_notebook_04_static_maps_are_the_explorers_maps():
    # notebook 04 draws its static grid from the same layer as the explorer (d_model=HEAD_D_MODEL)
    tokens = list(demo.tokens(20))
    cfg = m.MHAConfig(H.HEAD_D_MODEL, 8)
    x = demo.embed_tokens(tokens, cfg.d_model, seed=0)  # (N, d_model)
    _, weights = m.multi_head_attention(x, m.init_params(cfg, rng=0), 8, return_weights=True)
    np.testing.assert_array_equal(weights, H.head_weights(8, 20)[1])
