"""Notebook 02 (the shape round trip): each claim of its prose, checked next to the sentence it defends.

The notebook keeps one visible check, the round trip itself (section 2: the split is a view).
"""

from __future__ import annotations

import numpy as np
from lesson_claims import Claims

NB = "02_shape_round_trip.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    r"Symbols: $B$ batch, $N$ tokens, $d_{model}$ width",
    after="import matplotlib.pyplot as plt",
)
def symbols_are_distinct_sizes(B, N, d_model, h, d_k):
    assert len({B, N, d_model, h, d_k}) == 5


@CLAIMS(
    r"`trace_shapes` runs the layer once and lists the shape of every array it computes, in the order they were made",
    after="ledger = trace_shapes(X, params, h)",
)
def ledger_shapes_of_every_step(ledger, N, h, d_k, d_model):
    shapes = dict(ledger)
    assert shapes['Q as heads: reshape'] == (N, h, d_k)
    assert shapes['Q heads: transpose'] == (h, N, d_k)
    assert shapes['scores = Q K^T / sqrt(d_k)'] == (h, N, N)
    assert shapes['head outputs = weights V'] == (h, N, d_k)
    assert shapes['concat: reshape'] == (N, h * d_k) == (N, d_model)


@CLAIMS(
    r"that the layer gives back exactly the shape it was given",
    after="ledger = trace_shapes(X, params, h)",
)
def ledger_ends_on_the_input_shape(ledger, N, d_model):
    assert ledger[0] == ('X', (N, d_model))
    assert ledger[-1][1] == (N, d_model)


@CLAIMS(
    r"Both only change how the same memory is indexed.",
    after="Q_heads = split_heads(Q, h)  # (h, N, d_k)",
)
def the_split_is_a_view_and_merge_undoes_it(Q, Q_heads, h, N, d_k, merge_heads):
    assert Q_heads.shape == (h, N, d_k)
    assert np.shares_memory(Q_heads, Q)
    assert all(np.array_equal(Q_heads[i], Q[:, i * d_k:(i + 1) * d_k]) for i in range(h))
    assert np.array_equal(merge_heads(Q_heads), Q)


@CLAIMS(
    r"the split is one `reshape` and one `swapaxes`, the merge the same two steps backwards.",
    after="print(source(split_heads))",
)
def split_and_merge_are_reshape_and_swapaxes(source, split_heads, merge_heads):
    split, merge = source(split_heads), source(merge_heads)
    assert split.count(".reshape(") == 1 and split.count("np.swapaxes(") == 1
    assert merge.count(".reshape(") == 1 and merge.count("np.swapaxes(") == 1
    assert merge.index("np.swapaxes(") < merge.index(".reshape(")  # swap back first, then the reshape


@CLAIMS(
    r"concatenating them must interleave the heads back along each token's row, which takes a copy.",
    after="heads_out, _ = scaled_dot_product_attention(",
)
def concat_is_a_copy(heads_out, concat, out, multi_head_attention, X, params, h):
    assert heads_out.flags.c_contiguous
    assert not np.shares_memory(concat, heads_out)
    assert np.allclose(out, multi_head_attention(X, params, h), rtol=0, atol=1e-12)


@CLAIMS(
    r"Whatever the sizes, the output has the input's shape",
    after="for d_model_i, h_i, n_i in",
)
def output_shape_is_input_shape(y_i, x_i):
    assert y_i.shape == x_i.shape
    assert y_i.dtype == x_i.dtype


@CLAIMS(
    r"The heads go next to the batch axis, giving $(B, h, N, d_k)$: $B \cdot h$ independent attention "
    r"problems",
    after="X_batch = rng.standard_normal((B, N, d_model))",
)
def batched_ledger_shapes(B, h, N, d_k, d_model, ledger_b):
    shapes_b = dict(ledger_b)
    assert shapes_b['Q heads: transpose'] == (B, h, N, d_k)
    assert shapes_b['scores = Q K^T / sqrt(d_k)'] == (B, h, N, N)
    assert shapes_b['concat: reshape'] == (B, N, d_model)
    assert ledger_b[0][1] == ledger_b[-1][1] == (B, N, d_model)


@CLAIMS(
    r"the batched result equals running the layer once per sequence.",
    after="out_batch = multi_head_attention(X_batch, params, h)",
)
def batch_equals_per_sequence(out_batch, X_batch, gap):
    assert out_batch.shape == X_batch.shape
    assert gap < 1e-12


@CLAIMS(
    r"NumPy broadcasts it against scores of shape $(B, h, N, N)$, so every sequence and every head gets "
    r"the same lower triangle.",
    after="mask = causal_mask(N)  # (N, N), True = may attend",
)
def mask_broadcasts_over_batch_and_heads(mask, N, weights, B, h, above, explicit, out_c):
    assert mask.shape == (N, N)
    assert weights.shape == (B, h, N, N)
    assert np.broadcast_shapes(mask.shape, weights.shape) == weights.shape
    assert np.all(weights[..., above] == 0.0)
    assert np.allclose(weights.sum(axis=-1), 1.0)
    assert np.array_equal(explicit, out_c)


@CLAIMS(
    "\"head 0\" receives the first tokens' whole rows cut into pieces of $d_k$, instead of block 0 of "
    r"every token.",
    after="from mha_core.teaching.pitfalls import split_heads_without_transpose",
)
def split_without_transpose_misplaces_rows(right, wrong, h, N, d_k, wrong_rows):
    assert right.shape == wrong.shape == (h, N, d_k)
    assert all(np.all(right[i, n] == n) for i in range(h) for n in range(N))
    assert wrong_rows > h * N // 2


@CLAIMS(
    r"Through the whole layer the damage is large.",
    after="from mha_core.teaching.pitfalls import multi_head_attention_without_tr",
)
def split_without_transpose_damages_the_layer(rel, frac):
    assert rel > 0.1
    assert frac > 0.9


test_quotes, test_claim = CLAIMS.tests()
