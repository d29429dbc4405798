"""Notebook 04 (head heatmaps): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

import numpy as np
from lesson_claims import Claims

NB = "04_head_heatmaps.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    r"one row per query token, one column per key token, shape $(N, N)$ per head and $(h, N, N)$ for "
    r"the layer",
    after="_, weights = multi_head_attention(X, params, h, return_weights=True)",
)
def weights_shape(X, N, cfg, params, weights, h):
    assert X.shape == (N, cfg.d_model)
    assert X.dtype == params['W_Q'].dtype
    assert weights.shape == (h, N, N)


@CLAIMS(
    r"that every row is a probability distribution (it sums to 1)",
    after="_, weights = multi_head_attention(X, params, h, return_weights=True)",
)
def rows_sum_to_1(weights, row_sums):
    assert np.all(weights >= 0)
    assert np.allclose(row_sums, 1.0, atol=1e-5)


# the finding of issue 16: the rows are spread out, but not "nearly uniform"
@CLAIMS(
    r"each head's largest weight is a few times the $1/N$ that a uniform row gives every key",
    after='query = tokens.index("it")',
)
def largest_weight_a_few_times_uniform(top, N):
    assert 1.5 < top.min() * N
    assert top.max() * N < 10


@CLAIMS(
    r"far from the 1 of a head that picks one key",
    after='query = tokens.index("it")',
)
def largest_weight_far_from_1(top):
    assert top.max() < 0.5


@CLAIMS(
    r"which key gets it is an accident of the random seed, not a meaning.",
    after='query = tokens.index("it")',
)
def winning_key_is_an_accident(same_winner, h):
    assert same_winner < h // 2


@CLAIMS(
    r"Not every row of a random layer is that flat.",
    after="column_mean = weights.mean(axis=1)",
)
def some_rows_are_not_flat(weights, top, N):
    assert weights.max() > 2 * top.max()  # a row far more peaked than any head's row of "it"
    assert weights.max() * N > 10


@CLAIMS(
    r"draws weight from many rows and shows as a bright column",
    after="column_mean = weights.mean(axis=1)",
)
def a_bright_column(column_mean, head_b, key_b, weights, N):
    assert column_mean[head_b, key_b] > 3 / N  # several times uniform, on average over every query
    assert (weights[head_b, :, key_b] > 1 / N).mean() > 0.5  # above uniform in most rows of that head


@CLAIMS(
    r"the random seed put it there, not the sentence.",
    after="column_mean = weights.mean(axis=1)",
)
def the_bright_column_moves_with_the_seed(multi_head_attention, init_params, X, cfg, h, head_b, key_b):
    other = multi_head_attention(X, init_params(cfg, rng=1), h, return_weights=True)[1].mean(axis=1)  # (h, N_k)
    assert other[head_b].argmax() != key_b


@CLAIMS(
    r"that the causal mask makes every weight above the diagonal exactly 0, for every head and every "
    r"sequence of a batch",
    after="from mha_core.teaching.demo import PASSAGE",
)
def causal_weights_above_diagonal_are_0(w_causal, B, h, N, future):
    assert w_causal.shape == (B, h, N, N)
    assert np.all(w_causal[..., future] == 0.0)
    assert np.allclose(w_causal.sum(axis=-1), 1.0, atol=1e-5)


@CLAIMS(
    r"the first token attends only to itself.",
    after="from mha_core.teaching.demo import PASSAGE",
)
def first_token_attends_to_itself(w_causal):
    assert np.all(w_causal[..., 0, 0] == 1.0)


@CLAIMS(
    r"on the same random layer as the figures above ($d_{model} = 128$, seed 0): at $h = 8$ and $N = 20$ "
    r"it shows the first figure again.",
    after="_, weights = multi_head_attention(X, params, h, return_weights=True)",
)
def explorer_defaults_match_the_figures(h, N, cfg):
    assert h == 8
    assert N == 20
    assert cfg.d_model == 128


test_quotes, test_claim = CLAIMS.tests()
