"""Notebook 02 (the shape round trip): each claim of its prose, checked next to the sentence it defends.

The notebook keeps one visible check, the round trip itself (section 2: the split is a view).
"""

from __future__ import annotations

from lesson_claims import Claim, claim_tests

NB = "02_shape_round_trip.ipynb"
CLAIMS = [
    Claim(r"Symbols: $B$ batch, $N$ tokens, $d_{model}$ width",
          "import matplotlib.pyplot as plt", "len({B, N, d_model, h, d_k}) == 5"),
    Claim(r"`trace_shapes` runs the layer and records the shape of every step as it happens",
          "ledger = trace_shapes(X, params, h)",
          "shapes['Q as heads: reshape'] == (N, h, d_k) and shapes['Q heads: transpose'] == (h, N, d_k) "
          "and shapes['scores = Q K^T / sqrt(d_k)'] == (h, N, N) "
          "and shapes['head outputs = weights V'] == (h, N, d_k) "
          "and shapes['concat: reshape'] == (N, h * d_k) == (N, d_model)"),
    Claim(r"that the layer gives back exactly the shape it was given",
          "ledger = trace_shapes(X, params, h)",
          "ledger[0] == ('X', (N, d_model)) and ledger[-1][1] == (N, d_model)"),
    Claim(r"concatenating them must interleave the heads back along each token's row, which takes a copy.",
          "heads_out, _ = scaled_dot_product_attention(",
          "heads_out.flags.c_contiguous and not np.shares_memory(concat, heads_out) "
          "and np.allclose(out, multi_head_attention(X, params, h), rtol=0, atol=1e-12)"),
    Claim(r"Whatever the sizes, the output has the input's shape",
          "for d_model_i, h_i, n_i in",
          "y_i.shape == x_i.shape and y_i.dtype == x_i.dtype"),
    Claim(r"The heads go next to the batch axis, giving $(B, h, N, d_k)$: $B \cdot h$ independent attention "
          r"problems",
          "X_batch = rng.standard_normal((B, N, d_model))",
          "shapes_b['Q heads: transpose'] == (B, h, N, d_k) "
          "and shapes_b['scores = Q K^T / sqrt(d_k)'] == (B, h, N, N) "
          "and shapes_b['concat: reshape'] == (B, N, d_model) "
          "and ledger_b[0][1] == ledger_b[-1][1] == (B, N, d_model)"),
    Claim(r"the batched result equals running the layer once per sequence.",
          "out_batch = multi_head_attention(X_batch, params, h)",
          "out_batch.shape == X_batch.shape and gap < 1e-12"),
    Claim(r"NumPy broadcasts it against scores of shape $(B, h, N, N)$, so every sequence and every head gets "
          r"the same lower triangle.",
          "mask = causal_mask(N)  # (N, N), True = may attend",
          "mask.shape == (N, N) and weights.shape == (B, h, N, N) "
          "and np.broadcast_shapes(mask.shape, weights.shape) == weights.shape "
          "and np.all(weights[..., above] == 0.0) and np.allclose(weights.sum(axis=-1), 1.0) "
          "and np.array_equal(explicit, out_c)"),
    Claim("\"head 0\" receives the first tokens' whole rows cut into pieces of $d_k$, instead of block 0 of "
          r"every token.",
          "from mha_core.teaching.pitfalls import split_heads_without_transpose",
          "right.shape == wrong.shape == (h, N, d_k) "
          "and all(np.all(right[i, n] == n) for i in range(h) for n in range(N)) "
          "and wrong_rows > h * N // 2"),
    Claim(r"Through the whole layer the damage is large.",
          "from mha_core.teaching.pitfalls import multi_head_attention_without_tr",
          "rel > 0.1 and frac > 0.9"),
]

test_quotes, test_claim = claim_tests(NB, CLAIMS)
