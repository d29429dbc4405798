"""Notebook 01 (one head): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

import numpy as np
from lesson_claims import Claims

NB = "01_one_head.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    r"that one head turns $N$ tokens into an output of shape $(N, d_k)$, through three weight matrices of its own",
    after="W_Q2, W_K2, W_V2 = ",
)
def one_head_shapes(W_Q2, small, d_k, out2, weights2):
    assert W_Q2.shape == (small.d_model, d_k)
    assert out2.shape == (10, d_k)
    assert weights2.shape == (10, 10)


@CLAIMS(
    r"Its column slices are views (no copy), and they give each head's queries, up to float rounding.",
    after="Q_packed = X @ W_Q",
)
def head_columns_are_views(W_Q, small, h, d_k, head_cols, Q_packed, X, Q2_alone, W_Q2):
    assert W_Q.shape == (small.d_model, h * d_k)
    assert all(np.shares_memory(W_Q[:, head_cols(i)], W_Q) for i in range(h))
    assert all(np.abs(Q_packed[:, head_cols(i)] - X @ W_Q[:, head_cols(i)]).max() < 1e-12 for i in range(h))
    assert np.array_equal(Q2_alone, X @ W_Q2)


@CLAIMS(
    r"the fused layer's head outputs (`head_outputs`) equal what each head computes alone from its "
    r"three column slices, and the fused layer equals the explicit loop over heads",
    after="fused_heads = head_outputs(X, params, h)",
)
def fused_heads_equal_heads_alone(fused_heads, h, d_k, head_alone, fused, looped):
    assert fused_heads.shape == (h, 10, d_k)
    assert all(np.abs(head_alone(i) - fused_heads[i]).max() < 1e-12 for i in range(h))
    assert np.abs(fused - looped).max() < 1e-12


@CLAIMS(
    r"After attention, the heads are concatenated along the width (head $i$ fills columns $i\,d_k$ to "
    r"$(i+1)\,d_k$) and one **shared** $W_O$ of shape $(d_{model}, d_{model})$",
    after="concat = np.concatenate(list(fused_heads), axis=1)",
)
def concat_then_one_shared_w_o(concat, small, head_cols, fused_heads, h, params, fused):
    assert concat.shape == (10, small.d_model)
    assert all(np.array_equal(concat[:, head_cols(i)], fused_heads[i]) for i in range(h))
    assert params['W_O'].shape == (small.d_model, small.d_model)
    assert np.abs(concat @ params['W_O'] - fused).max() < 1e-12


@CLAIMS(
    r"the layer's output is the sum of the $h$ contributions (`head_contributions`)",
    after="contributions = [fused_heads[i] @ params",
)
def output_is_sum_of_head_contributions(contributions, h, small, fused, head_contributions, X, params):
    assert np.stack(contributions).shape == (h, 10, small.d_model)
    assert np.abs(sum(contributions) - fused).max() < 1e-12
    assert np.abs(head_contributions(X, params, h) - np.stack(contributions)).max() < 1e-12


@CLAIMS(
    r"The other heads' outputs do not move by a single bit; the final output, after $W_O$, changes "
    r"everywhere, because $W_O$ is where heads mix.",
    after="changed_head = 2",
)
def changing_one_head_moves_only_its_output(new_heads, fused_heads, changed_head, h, frac_out):
    assert all(np.array_equal(new_heads[i], fused_heads[i]) == (i != changed_head) for i in range(h))
    assert frac_out == 1.0


@CLAIMS(
    "Replace $W_O$ by the identity (\"no mixing\") and the change stays inside head 2's block of "
    "columns; with the real $W_O$ it spreads to every column.",
    after="no_mix = {**params",
)
def identity_w_o_keeps_the_change_in_its_block(cols_no_mix, small, head_cols, changed_head, delta_mixed):
    assert np.array_equal(cols_no_mix, np.arange(small.d_model)[head_cols(changed_head)])
    assert delta_mixed.all()


@CLAIMS(
    r"A layer with $d_{model}=4096$ and $h=32$ heads has four $4096 \times 4096$ matrices.",
    after="big = MHAConfig(d_model=4096, n_heads=32)",
)
def big_layer_shapes_and_counts(big, per_head, owned, counts, out_i, N, weights_i):
    assert big.d_k == big.d_model // big.h == 128
    assert per_head == big.d_model * big.d_k
    assert owned * big.h == counts['W_Q'] + counts['W_K'] + counts['W_V']
    assert out_i.shape == (N, big.d_k)
    assert weights_i.shape == (N, N)


@CLAIMS(
    r"At $d_{model}=4096$, $h=32$ that is $(4096, 128)$ each, 1,572,864 weights per head",
    after="big = MHAConfig(d_model=4096, n_heads=32)",
)
def weights_per_head_at_4096_32(owned):
    assert owned == 1_572_864


test_quotes, test_claim = CLAIMS.tests()
