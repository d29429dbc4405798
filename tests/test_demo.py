"""Tests for mha_core.teaching.demo: the demo sentence and its embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from mha_core.teaching import demo


def test_sentence_is_a_real_sentence_of_word_tokens():
    assert 16 <= len(demo.SENTENCE) <= 24
    assert all(isinstance(t, str) and t and " " not in t for t in demo.SENTENCE)
    assert demo.SENTENCE[0][0].isupper() and demo.SENTENCE[-1] == "."
    assert demo.SENTENCE.count("it") == 2  # the two pronouns that refer back
    assert demo.TEXT.endswith(".") and ", so" in demo.TEXT


def test_passage_starts_with_sentence_and_reaches_max_tokens():
    assert demo.PASSAGE[: len(demo.SENTENCE)] == demo.SENTENCE
    assert len(demo.PASSAGE) >= demo.DEMO_MAX_TOKENS
    assert demo.tokens() == demo.SENTENCE
    assert demo.tokens(5) == demo.SENTENCE[:5]
    assert len(demo.tokens(demo.DEMO_MAX_TOKENS)) == demo.DEMO_MAX_TOKENS


@pytest.mark.parametrize("bad", [0, -1, 10_000])
def test_tokens_refuses_bad_n(bad):
    with pytest.raises(ValueError, match="n"):
        demo.tokens(bad)


def test_embed_tokens_shape_dtype_and_determinism():
    x = demo.embed_tokens(demo.SENTENCE, 64)
    assert x.shape == (len(demo.SENTENCE), 64)
    assert x.dtype == np.float32
    np.testing.assert_array_equal(x, demo.embed_tokens(list(demo.SENTENCE), 64, seed=0))
    assert not np.allclose(x, demo.embed_tokens(demo.SENTENCE, 64, seed=1))


def test_equal_tokens_differ_only_by_position_code():
    toks = demo.SENTENCE
    i, j = [k for k, t in enumerate(toks) if t == "it"]
    x = demo.embed_tokens(toks, 32).astype(np.float64)
    pe = demo.positional_encoding(len(toks), 32)
    np.testing.assert_allclose(x[i] - pe[i], x[j] - pe[j], atol=1e-6)
    assert not np.allclose(x[i], x[j])


def test_token_vector_does_not_depend_on_the_rest_of_the_sentence():
    a = demo.embed_tokens(["animal"], 16)
    b = demo.embed_tokens(["animal", "street"], 16)
    np.testing.assert_allclose(a[0], b[0])


def test_positional_encoding_matches_the_formula():
    pe = demo.positional_encoding(5, 6)
    p, i = 3, 1  # position 3, pair 1 -> columns 2 (sin) and 3 (cos)
    angle = p / demo.POSITION_BASE ** (2 * i / 6)
    assert pe[p, 2] == pytest.approx(np.sin(angle))
    assert pe[p, 3] == pytest.approx(np.cos(angle))
    assert demo.positional_encoding(4, 5).shape == (4, 5)  # odd width drops the last cosine
    assert np.abs(pe).max() <= 1.0


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        (("the cat", 8), TypeError, "tokens"),
        (([], 8), ValueError, "at least one"),
        ((["a", ""], 8), TypeError, r"tokens\[1\]"),
        ((["a", 3], 8), TypeError, r"tokens\[1\]"),
        ((["a"], 0), ValueError, "d_model"),
        ((["a"], 8.0), TypeError, "d_model"),
    ],
)
def test_embed_tokens_validates(args, exc, match):
    with pytest.raises(exc, match=match):
        demo.embed_tokens(*args)


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0"])
def test_embed_tokens_refuses_bad_seed(seed):
    with pytest.raises(TypeError, match="seed"):
        demo.embed_tokens(["a"], 4, seed=seed)
