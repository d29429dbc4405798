"""Tests for mha_core.ui.heads_panel: head_weights (random and trained) and the heads panel's callbacks.

Callbacks are driven the way the browser drives them: by setting widget values, and by feeding
``set_state`` / ``_handle_msg`` the update messages a page would send, including forged ones.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest
from widget_messages import forge

import mha_core.training
from mha_core.teaching import demo
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
def fake_pretrained(monkeypatch):
    """A stand-in for mha_core.training.pretrained: uniform weights over a 6-token toy sequence."""
    mod = types.ModuleType("mha_core.training.pretrained")
    mod.AVAILABLE_HEADS = (2, 4)

    def attention_maps(n_heads, n=None, seed=0):
        n = 6 if n is None else n
        assert 2 <= n <= 6
        return [f"t{i}" for i in range(n)], np.full((n_heads, n, n), 1.0 / n)

    mod.attention_maps = attention_maps
    monkeypatch.setitem(sys.modules, "mha_core.training.pretrained", mod)
    monkeypatch.setattr(mha_core.training, "pretrained", mod, raising=False)
    return mod


def test_head_weights_trained_uses_pretrained_and_masks_exactly(fake_pretrained):
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
    monkeypatch.setitem(sys.modules, "mha_core.training.pretrained", None)  # import fails
    monkeypatch.delattr(mha_core.training, "pretrained", raising=False)
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
    monkeypatch.setitem(sys.modules, "mha_core.training.pretrained", None)
    monkeypatch.delattr(mha_core.training, "pretrained", raising=False)
    p = H.head_explorer()
    image = _drawn(p)
    p.kind.value = "trained"
    assert "not available" in p.status.value and _drawn(p) == image


def test_head_explorer_trained(fake_pretrained):
    p = H.head_explorer(h=4, N=6)
    p.kind.value = "trained"
    assert "TRAINED" in p.caption.value and p.status.value == ""
    assert [label for label, _ in p.query.options][1] == "0: t0"


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
