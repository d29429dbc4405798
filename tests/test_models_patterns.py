"""Head-pattern scores on synthetic attention maps whose right answer is known by construction."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_core.core.attention import softmax
from mha_core.core.masks import causal_mask
from mha_core.models import patterns as P


def shifted(n: int, offset: int) -> np.ndarray:
    """Row i puts all its weight on key i + offset, or on itself where that key does not exist."""
    w = np.zeros((n, n))
    for i in range(n):
        j = i + offset
        w[i, j if 0 <= j < n else i] = 1.0
    return w


def uniform_causal(n: int) -> np.ndarray:
    """Row i spreads its weight evenly over keys 0..i: (N, N)."""
    return np.tril(np.ones((n, n))) / np.arange(1, n + 1)[:, None]


def random_weights(rng, shape, causal=False) -> np.ndarray:
    return softmax(rng.standard_normal(shape), axis=-1, mask=causal_mask(shape[-1]) if causal else None)


# -- previous / next token -------------------------------------------------------------------------

def test_a_previous_token_head_scores_one_and_zero_on_the_next_token():
    w = shifted(7, -1)
    assert P.previous_token_score(w) == pytest.approx(1.0)
    assert P.next_token_score(w) == pytest.approx(0.0)


def test_a_next_token_head_scores_one_on_the_next_token():
    w = shifted(7, +1)
    assert P.next_token_score(w) == pytest.approx(1.0)
    assert P.previous_token_score(w) == pytest.approx(0.0)


def test_uniform_causal_rows_give_the_mean_of_one_over_i_plus_one():
    n = 9
    expected = np.mean([1 / (i + 1) for i in range(1, n)])
    assert P.previous_token_score(uniform_causal(n)) == pytest.approx(expected)
    assert P.next_token_score(uniform_causal(n)) == pytest.approx(0.0)


def test_scores_keep_the_leading_axes_and_find_the_planted_head():
    rng = np.random.default_rng(0)
    w = random_weights(rng, (3, 4, 10, 10))  # (layers, h, N, N)
    w[2, 1] = shifted(10, -1)
    s = P.previous_token_score(w)
    assert s.shape == (3, 4)
    assert P.top_heads(s, 1) == [(2, 1, pytest.approx(1.0))]
    assert np.delete(s.ravel(), 2 * 4 + 1).max() < 0.5  # random heads are far below


@settings(deadline=None, max_examples=50)
@given(st.integers(2, 12), st.integers(0, 2**32 - 1), st.booleans())
def test_scores_are_the_mean_of_the_diagonal_and_lie_in_0_1(n, seed, causal):
    w = random_weights(np.random.default_rng(seed), (2, n, n), causal=causal)
    prev, nxt = P.previous_token_score(w), P.next_token_score(w)
    for k in range(2):
        assert prev[k] == pytest.approx(np.mean([w[k, i, i - 1] for i in range(1, n)]))
        assert nxt[k] == pytest.approx(np.mean([w[k, i, i + 1] for i in range(n - 1)]))
    assert ((0 <= prev) & (prev <= 1) & (0 <= nxt) & (nxt <= 1)).all()
    if causal:
        assert (nxt == 0).all()


# -- attention to chosen keys (first token, [SEP], punctuation) --------------------------------------

def test_a_sink_head_scores_one_on_the_first_token_and_uniform_scores_one_over_n():
    n = 6
    sink = np.zeros((n, n))
    sink[:, 0] = 1.0
    assert P.key_score(sink, [0]) == pytest.approx(1.0)
    assert P.key_score(np.full((n, n), 1 / n), [0]) == pytest.approx(1 / n)
    assert P.key_score(np.full((n, n), 1 / n), [0, 3, 5]) == pytest.approx(3 / n)


@settings(deadline=None, max_examples=50)
@given(st.integers(1, 10), st.integers(0, 2**32 - 1), st.data())
def test_key_score_sums_the_keys_and_averages_the_queries(n, seed, data):
    w = random_weights(np.random.default_rng(seed), (3, n, n))
    keys = data.draw(st.lists(st.integers(0, n - 1), min_size=1, unique=True))
    queries = data.draw(st.lists(st.integers(0, n - 1), min_size=1, unique=True))
    got = P.key_score(w, keys, queries=queries)
    np.testing.assert_allclose(got, w[:, queries][:, :, keys].sum(-1).mean(-1))
    np.testing.assert_allclose(P.key_score(w, list(range(n))), 1.0)  # all keys: the whole row


def test_punctuation_and_special_tokens_are_found_by_their_text():
    toks = ["[CLS]", "the", "cat", ",", "sat", "##.", "Ġ!", " ?", "«", "it's", "[SEP]", ""]
    assert P.punctuation_positions(toks) == [3, 5, 6, 7, 8]
    assert P.token_positions(toks, "[SEP]") == [10]
    assert P.token_positions(toks, ["[CLS]", "[SEP]"]) == [0, 10]


def test_bert_pattern_scores_find_each_planted_head():
    toks = ["[CLS]", "the", "cat", ",", "sat", ".", "[SEP]"]
    n = len(toks)
    sink, sep, punct = np.zeros((n, n)), np.zeros((n, n)), np.zeros((n, n))
    sink[:, 0] = 1.0
    sep[:, 6] = 1.0
    punct[:, [3, 5]] = 0.5
    w = np.stack([shifted(n, -1), shifted(n, 1), sink, sep, punct])  # (5, N, N): one head per pattern
    scores = P.bert_pattern_scores(w, toks)
    assert tuple(scores) == P.BERT_PATTERNS
    for k, name in enumerate(P.BERT_PATTERNS):
        assert scores[name].shape == (5,)
        assert np.argmax(scores[name]) == k and scores[name][k] == pytest.approx(1.0)


@pytest.mark.parametrize(("toks", "words"), [
    (["the", "cat", ".", "[SEP]"], "start with \\[CLS\\]"),
    (["[CLS]", "cat", "sat", "[SEP]"], "punctuation"),
    (["[CLS]", "cat", ".", "sat"], "\\[SEP\\]"),
    (["[CLS]", ".", "[SEP]"], "N=4"),
])
def test_bert_pattern_scores_refuse_inputs_that_are_not_bert_like(toks, words):
    with pytest.raises(ValueError, match=words):
        P.bert_pattern_scores(np.full((4, 4), 0.25), toks)


# -- induction -----------------------------------------------------------------------------------

def induction_map(n: int, period: int, start: int) -> np.ndarray:
    """Second-copy queries attend to the token after their earlier occurrence; others to themselves."""
    w = np.eye(n)
    for i in range(start + period, start + 2 * period):
        w[i] = 0.0
        w[i, i - period + 1] = 1.0
    return w


@pytest.mark.parametrize(("period", "start"), [(1, 0), (5, 0), (5, 1), (8, 2)])
def test_an_induction_head_scores_one_and_a_previous_token_head_scores_zero(period, start):
    n = start + 2 * period
    assert P.induction_score(induction_map(n, period, start), period, start=start) == pytest.approx(1.0)
    if period > 1:  # period 1: key i - 1 + 1 = i, not i - 1
        assert P.induction_score(shifted(n, -1), period, start=start) == pytest.approx(0.0)


def test_uniform_causal_induction_score_is_the_mean_of_one_over_i_plus_one():
    period, start = 6, 1
    n = start + 2 * period
    expected = np.mean([1 / (i + 1) for i in range(start + period, n)])
    assert P.induction_score(uniform_causal(n), period, start=start) == pytest.approx(expected)


def test_induction_score_ignores_tokens_after_the_second_copy():
    w = np.eye(12)
    w[5:10] = induction_map(12, 5, 0)[5:10]
    assert P.induction_score(w, 5) == pytest.approx(1.0)


# -- losses on a repeated sequence ---------------------------------------------------------------

def test_token_losses_match_the_definition_and_log_vocab_for_flat_logits():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((6, 11)).astype(np.float32)
    ids = rng.integers(0, 11, size=6)
    got = P.token_losses(logits, ids)
    p = np.exp(logits.astype(np.float64))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(got, [-np.log(p[t, ids[t + 1]]) for t in range(5)], rtol=1e-6)
    np.testing.assert_allclose(P.token_losses(np.zeros((4, 50)), np.arange(4)), np.log(50))
    assert np.isfinite(P.token_losses(np.array([[1e4, -1e4], [0, 0]]), np.array([0, 1]))).all()


def test_repeat_losses_split_the_two_copies():
    period, start, vocab = 5, 1, 30
    rng = np.random.default_rng(2)
    ids = P.repeated_tokens(rng, np.arange(2, vocab), period, prefix=[0])
    logits = np.zeros((len(ids), vocab))  # first copy: flat, log(vocab) per token
    for t in range(start + period, len(ids) - 1):  # second copy: the next token is certain
        logits[t, ids[t + 1]] = 50.0
    first, second = P.repeat_losses(logits, ids, period, start=start)
    assert first.shape == second.shape == (period - 1,)
    np.testing.assert_allclose(first, np.log(vocab))
    assert second.max() < 1e-6


def test_repeated_tokens_are_distinct_and_repeat_once():
    ids = P.repeated_tokens(np.random.default_rng(3), np.arange(100, 200), 40, prefix=[1])
    assert ids.shape == (81,) and ids[0] == 1
    np.testing.assert_array_equal(ids[1:41], ids[41:])
    assert len(set(ids[1:41])) == 40 and set(ids[1:]) <= set(range(100, 200))


# -- top heads -----------------------------------------------------------------------------------

def test_top_heads_ranks_best_first_with_ties_in_order():
    s = np.array([[0.1, 0.9, 0.3], [0.9, 0.2, 0.5]])
    assert P.top_heads(s, 3) == [(0, 1, 0.9), (1, 0, 0.9), (1, 2, 0.5)]


# -- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("weights", "error", "words"), [
    ([[1.0]], TypeError, "numpy.ndarray"),
    (np.ones((2, 2), dtype=np.int64), TypeError, "float"),
    (np.ones(3), ValueError, "(..., N, N)"),
    (np.ones((2, 3)) / 3, ValueError, "(..., N, N)"),
    (np.full((2, 2), np.nan), ValueError, "finite"),
    (np.array([[2.0, -1.0], [0.5, 0.5]]), ValueError, ">= 0"),
    (np.ones((3, 3)), ValueError, "sum to 1"),
])
def test_bad_weights_are_refused_with_a_clear_message(weights, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        P.previous_token_score(weights)


def test_bad_arguments_name_themselves():
    w = np.eye(10)
    with pytest.raises(ValueError, match="N >= 2"):
        P.previous_token_score(np.ones((1, 1)))
    with pytest.raises(ValueError, match="N >= 12"):
        P.induction_score(w, 6)
    with pytest.raises(ValueError, match="period"):
        P.induction_score(w, 0)
    with pytest.raises(TypeError, match="start"):
        P.induction_score(w, 2, start=1.5)
    with pytest.raises(ValueError, match="keys must be positions"):
        P.key_score(w, [10])
    with pytest.raises(ValueError, match="keys must not repeat"):
        P.key_score(w, [1, 1])
    with pytest.raises(ValueError, match="non-empty"):
        P.key_score(w, [])
    with pytest.raises(ValueError, match="k must be"):
        P.top_heads(np.ones((2, 2)), 5)
    with pytest.raises(ValueError, match="ids must have N=3"):
        P.token_losses(np.zeros((3, 4)), np.arange(2))
    with pytest.raises(ValueError, match=r"ids must be in \[0, vocab-1\]"):
        P.token_losses(np.zeros((3, 4)), np.array([0, 1, 4]))
    with pytest.raises(ValueError, match="must repeat"):
        P.repeat_losses(np.zeros((6, 9)), np.arange(6), 3)
    with pytest.raises(ValueError, match="period must be >= 2"):
        P.repeat_losses(np.zeros((2, 9)), np.array([4, 4]), 1)
    with pytest.raises(TypeError, match="tokens must be a list"):
        P.punctuation_positions("a, b")


def test_self_token_score_is_the_mean_of_the_main_diagonal():
    n = 6
    assert P.self_token_score(np.eye(n)[None]) == pytest.approx([1.0])  # every token on itself
    assert P.self_token_score(np.eye(n, k=-1)[None] + np.eye(n)[None] * (np.arange(n) == 0)[:, None]) == \
        pytest.approx([1 / n])  # previous-token head: only token 0 (no previous) on itself
    w = softmax(np.random.default_rng(0).standard_normal((2, 3, n, n)), axis=-1)  # (2, 3, N, N)
    np.testing.assert_allclose(P.self_token_score(w), np.diagonal(w, axis1=-2, axis2=-1).mean(-1))
    with pytest.raises(ValueError, match="sum to 1"):
        P.self_token_score(np.ones((n, n)))


def _maps(rows: np.ndarray) -> np.ndarray:
    """(heads, N, N) maps whose every row is ``rows[head]`` (each (N,), summing to 1)."""
    n = rows.shape[-1]
    return np.repeat(rows[:, None, :], n, axis=1).astype(np.float64)


def test_query_row_finds_words_by_their_text_and_reads_the_query_row():
    toks = ["[CLS]", "the", "animal", "street", "it", "[SEP]"]
    maps = _maps(np.array([[0.1, 0.1, 0.5, 0.1, 0.1, 0.1], [0.5, 0.1, 0.1, 0.1, 0.1, 0.1]]))
    maps[0, 4] = [0.0, 0.0, 0.9, 0.1, 0.0, 0.0]  # head 0: "it" looks at "animal"
    r = P.query_row(maps, toks, "it", ("animal", "street"))
    assert r.query == 4 and r.positions == {"it": 4, "animal": 2, "street": 3}
    assert np.allclose(r.on("animal"), [0.9, 0.1]) and np.allclose(r.on("street"), [0.1, 0.1])
    assert np.allclose(r.others_on("animal"), [0.5, 0.1])  # the other five queries of each head
    bpe = P.query_row(maps, ["The", " animal", "Ġstreet", " it", ",", "."], " it".strip(), ["animal", "street"])
    assert bpe.positions == {"it": 3, "animal": 1, "street": 2}
    with pytest.raises(ValueError, match="'dog' is not among the tokens"):
        P.query_row(maps, toks, "it", ["dog"])
    with pytest.raises(ValueError, match="tokens must have N=6"):
        P.query_row(maps, toks[:5], "it", ["animal"])


def test_swap_test_counts_heads_with_and_against_and_leaves_the_swapped_word_out():
    toks_a = ["[CLS]", "animal", "street", "it", "tired", "[SEP]"]
    toks_b = ["[CLS]", "animal", "street", "it", "wide", "[SEP]"]
    base = np.full((3, 6), 1 / 6)
    a, b = _maps(base.copy()), _maps(base.copy())
    a[0, 3] = [0.0, 0.6, 0.1, 0.0, 0.3, 0.0]  # head 0 follows the meaning: animal with "tired" ...
    b[0, 3] = [0.0, 0.1, 0.6, 0.0, 0.3, 0.0]  # ... street with "wide"
    a[1, 3] = [0.0, 0.1, 0.6, 0.0, 0.3, 0.0]  # head 1 goes the other way
    b[1, 3] = [0.0, 0.6, 0.1, 0.0, 0.3, 0.0]
    a[2, 3] = [0.0, 0.2, 0.2, 0.0, 0.6, 0.0]  # head 2: only the weight on the swapped word moves
    b[2, 3] = [0.3, 0.2, 0.2, 0.0, 0.0, 0.3]
    ra, rb = (P.query_row(m, t, "it", ("animal", "street")) for m, t in ((a, toks_a), (b, toks_b)))
    s = P.swap_test(ra, rb, "animal", "street")
    assert (s.with_meaning, s.against, s.shift) == (1, 1, (0,))
    # head 2's 0.6 on "tired" against 0 on "wide" is left out (else the change would be 0.6);
    # its [CLS] and [SEP] (the same tokens in both) move by 0.3, heads 0 and 1 by 0.5
    assert np.isclose(s.change, 0.5)
