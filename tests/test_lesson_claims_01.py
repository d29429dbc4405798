"""Notebook 01 (one head): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

from lesson_claims import Claim, claim_tests

NB = "01_one_head.ipynb"
CLAIMS = [
    Claim(r"that one head turns $N$ tokens into an output of shape $(N, d_k)$, through three weight matrices of its own",
          "W_Q2, W_K2, W_V2 = ",
          "W_Q2.shape == (small.d_model, d_k) and out2.shape == (10, d_k) and weights2.shape == (10, 10)"),
    Claim(r"Its column slices are views (no copy), and they give each head's queries, up to float rounding.",
          "Q_packed = X @ W_Q",
          "W_Q.shape == (small.d_model, h * d_k) and all(np.shares_memory(W_Q[:, head_cols(i)], W_Q) "
          "for i in range(h)) and all(np.abs(Q_packed[:, head_cols(i)] - X @ W_Q[:, head_cols(i)]).max() < 1e-12 "
          "for i in range(h)) and np.array_equal(Q2_alone, X @ W_Q2)"),
    Claim(r"the fused layer's head outputs (`head_outputs`) equal what each head computes alone from its "
          r"three column slices, and the fused layer equals the explicit loop over heads",
          "fused_heads = head_outputs(X, params, h)",
          "fused_heads.shape == (h, 10, d_k) and all(np.abs(head_alone(i) - fused_heads[i]).max() < 1e-12 "
          "for i in range(h)) and np.abs(fused - looped).max() < 1e-12"),
    Claim(r"After attention, the heads are concatenated along the width (head $i$ fills columns $i\,d_k$ to "
          r"$(i+1)\,d_k$) and one **shared** $W_O$ of shape $(d_{model}, d_{model})$",
          "concat = np.concatenate(list(fused_heads), axis=1)",
          "concat.shape == (10, small.d_model) and all(np.array_equal(concat[:, head_cols(i)], fused_heads[i]) "
          "for i in range(h)) and params['W_O'].shape == (small.d_model, small.d_model) and np.abs(concat @ params['W_O'] - fused).max() < 1e-12"),
    Claim(r"the layer's output is the sum of the $h$ contributions (`head_contributions`)",
          "contributions = [fused_heads[i] @ params",
          "np.stack(contributions).shape == (h, 10, small.d_model) and np.abs(sum(contributions) - fused).max() < 1e-12 "
          "and np.abs(head_contributions(X, params, h) - np.stack(contributions)).max() < 1e-12"),
    Claim(r"The other heads' outputs do not move by a single bit; the final output, after $W_O$, changes "
          r"everywhere, because $W_O$ is where heads mix.",
          "changed_head = 2",
          "all(np.array_equal(new_heads[i], fused_heads[i]) == (i != changed_head) for i in range(h)) "
          "and frac_out == 1.0"),
    Claim("Replace $W_O$ by the identity (\"no mixing\") and the change stays inside head 2's block of "
          "columns; with the real $W_O$ it spreads to every column.",
          "no_mix = {**params",
          "np.array_equal(cols_no_mix, np.arange(small.d_model)[head_cols(changed_head)]) "
          "and delta_mixed.all()"),
    Claim(r"A layer with $d_{model}=4096$ and $h=32$ heads has four $4096 \times 4096$ matrices.",
          "big = MHAConfig(d_model=4096, n_heads=32)",
          "big.d_k == big.d_model // big.h == 128 and per_head == big.d_model * big.d_k "
          "and owned * big.h == counts['W_Q'] + counts['W_K'] + counts['W_V'] "
          "and out_i.shape == (N, big.d_k) and weights_i.shape == (N, N)"),
    Claim(r"At $d_{model}=4096$, $h=32$ that is $(4096, 128)$ each, 1,572,864 weights per head",
          "big = MHAConfig(d_model=4096, n_heads=32)", "owned == 1_572_864"),
]

test_quotes, test_claim = claim_tests(NB, CLAIMS)
