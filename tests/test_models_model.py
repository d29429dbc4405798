"""The shared interface of the real models (mha_core.models.model): text in, ids, maps, and
every kind of bad input refused with a readable message. Runs on MiniLM and SmolLM2."""

from __future__ import annotations

import numpy as np
import pytest

import mha_core.models as models

NAMES = ("minilm", "smollm2")
pytestmark = pytest.mark.models  # the model fixture asks for them by name (getfixturevalue)


@pytest.fixture(params=NAMES)
def model(request):
    return request.getfixturevalue(request.param)


def test_load_keeps_one_model_per_process(model):
    assert models.load(model.name) is model
    assert models.load(model.name.upper()) is model


def test_weights_are_shared_read_only_memory_maps(model):
    """What lets 20 kernels share one copy: no array is a private, writable copy."""
    for key, a in model.arrays.items():
        assert not a.flags.writeable, key
        assert a.base is not None and a.dtype == np.float32, key


def test_interface_shapes(model, sentences):
    ids = model.encode(sentences[0])
    assert ids.ndim == 1 and ids.dtype == np.int64
    toks = model.tokens(ids)
    assert len(toks) == ids.size and all(isinstance(t, str) for t in toks)
    f = model.forward(ids)
    n = ids.size
    assert f.attention.shape == (model.n_layers, model.n_heads, n, n) and f.attention.dtype == np.float32
    assert f.hidden.shape == (model.n_layers + 1, n, model.d_model)
    np.testing.assert_allclose(f.attention.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(model.attention(ids), f.attention)
    assert model.d_k * model.n_heads == model.d_model and model.n_heads % model.n_kv_heads == 0
    assert ("quantised" in model.label) == model.quantised


def test_any_unicode_works(model):
    for text in ["\ud800 lone surrogate", "zero\u200bwidth", "مرحبا بالعالم", "🧑‍🔬🏳️‍🌈", "\x00\x07 control",
                 "ｆｕｌｌｗｉｄｔｈ", "e\u0301 combining"]:
        ids = model.encode(text)
        assert model.attention(ids).shape[-1] == ids.size
        assert len(model.tokens(ids)) == ids.size


@pytest.mark.parametrize("text", ["", "   ", "\n\t"])
def test_empty_text_is_refused(model, text):
    with pytest.raises(ValueError, match="the sentence is empty"):
        model.encode(text)


def test_long_text_is_refused(model):
    with pytest.raises(ValueError, match=rf"the sentence has \d+ tokens, over the cap of {models.MODEL_MAX_TOKENS}"):
        model.encode("word " * 200)
    with pytest.raises(ValueError, match="characters, far over the cap"):
        model.encode("x" * 1_000_000)
    ids = np.ones(models.MODEL_MAX_TOKENS + 1, dtype=np.int64)
    with pytest.raises(ValueError, match="over the cap"):
        model.attention(ids)


def test_bad_ids_and_types(model):
    with pytest.raises(TypeError, match="text must be a str"):
        model.encode(b"bytes")
    with pytest.raises(TypeError, match="use model.encode"):
        model.attention("a sentence")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, "):
        model.attention(np.array([0, model.vocab_size]))
    with pytest.raises(ValueError, match="ids is empty"):
        model.attention(np.array([], dtype=np.int64))
    with pytest.raises(ValueError, match="1-D array of ints"):
        model.attention(np.array([[1, 2]]))
    with pytest.raises(ValueError, match="1-D array of ints"):
        model.attention(np.array([1.5, 2.0]))


def test_head_mask_switches_heads_off(model):
    """head_mask=(layers, h) bool: all True changes nothing; False zeroes a head before W_O,
    which changes the layers after it and leaves the ones before it alone."""
    ids = model.encode("Heads can be switched off one by one.")
    base = model.forward(ids)
    keep = np.ones((model.n_layers, model.n_heads), dtype=bool)
    np.testing.assert_array_equal(model.forward(ids, head_mask=keep).hidden, base.hidden)
    keep[1, 0] = False
    off = model.forward(ids, head_mask=keep)
    np.testing.assert_array_equal(off.hidden[:2], base.hidden[:2])  # embeddings and layer 0 untouched
    np.testing.assert_array_equal(off.attention[:2], base.attention[:2])
    assert np.abs(off.hidden[2] - base.hidden[2]).max() > 1e-3  # layer 1's output moved


def test_head_mask_equals_the_cores_head_mask_on_one_layer(model):
    """Switching off every head of layer 0 makes layer 0's attention add nothing (plus b_O)."""
    ids = model.encode("Nothing from layer zero.")
    keep = np.ones((model.n_layers, model.n_heads), dtype=bool)
    keep[0] = False
    x0 = model.forward(ids, head_mask=keep).hidden  # (layers + 1, N, d_model)
    p = model.layers[0]
    if model.name == "smollm2":  # pre-norm: x + 0, then the feed-forward
        emb = x0[0]
        np.testing.assert_allclose(x0[1], emb + model.mlp(emb, p), atol=1e-5)
    else:  # post-norm: LayerNorm(x + b_O), then the feed-forward
        from mha_core.models.blocks import gelu_mlp, layer_norm

        y = layer_norm(x0[0] + p["b_O"], p["ln1_w"], p["ln1_b"], model.eps)
        y = layer_norm(y + gelu_mlp(y, p["W_in"], p["b_in"], p["W_out"], p["b_out"]), p["ln2_w"], p["ln2_b"], model.eps)
        np.testing.assert_allclose(x0[1], y, atol=1e-5)


def test_bad_head_mask_is_refused(model):
    ids = model.encode("a few words")
    with pytest.raises(ValueError, match=r"head_mask must have shape \(layers, h\)"):
        model.forward(ids, head_mask=np.ones((model.n_layers, model.n_heads + 1), dtype=bool))
    with pytest.raises(TypeError, match="head_mask must be a bool array"):
        model.forward(ids, head_mask=np.ones((model.n_layers, model.n_heads)))
