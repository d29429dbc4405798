"""Notebook 04 (head heatmaps): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

from lesson_claims import Claim, claim_tests

NB = "04_head_heatmaps.ipynb"
CLAIMS = [
    Claim(r"one row per query token, one column per key token, shape $(N, N)$ per head and $(h, N, N)$ for "
          r"the layer",
          "_, weights = multi_head_attention(X, params, h, return_weights=True)",
          "X.shape == (N, cfg.d_model) and X.dtype == params['W_Q'].dtype and weights.shape == (h, N, N)"),
    Claim(r"that every row is a probability distribution (it sums to 1)",
          "_, weights = multi_head_attention(X, params, h, return_weights=True)",
          "np.all(weights >= 0) and np.allclose(row_sums, 1.0, atol=1e-5)"),
    # the finding of issue 16: the rows are spread out, but not "nearly uniform"
    Claim(r"each head's largest weight is a few times the $1/N$ that a uniform row gives every key",
          'query = tokens.index("it")', "1.5 < top.min() * N and top.max() * N < 10"),
    Claim(r"far from the 1 of a head that picks one key", 'query = tokens.index("it")', "top.max() < 0.5"),
    Claim(r"which key gets it is an accident of the random seed, not a meaning.",
          'query = tokens.index("it")', "same_winner < h // 2"),
    Claim(r"that the causal mask makes every weight above the diagonal exactly 0, for every head and every "
          r"sequence of a batch",
          "from mha_core.teaching.demo import PASSAGE",
          "w_causal.shape == (B, h, N, N) and np.all(w_causal[..., future] == 0.0) "
          "and np.allclose(w_causal.sum(axis=-1), 1.0, atol=1e-5)"),
    Claim(r"the first token attends only to itself.",
          "from mha_core.teaching.demo import PASSAGE", "np.all(w_causal[..., 0, 0] == 1.0)"),
    Claim(r"on the same random layer as the figures above ($d_{model} = 128$, seed 0): at $h = 8$ and $N = 20$ "
          r"it shows the first figure again.",
          "_, weights = multi_head_attention(X, params, h, return_weights=True)",
          "h == 8 and N == 20 and cfg.d_model == 128"),
]

test_quotes, test_claim = claim_tests(NB, CLAIMS)
