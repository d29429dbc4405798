"""Notebook 07 (pitfalls): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

from lesson_claims import Claim, claim_tests

NB = "07_pitfalls.ipynb"
CLAIMS = [
    Claim(r"Dividing by $\sqrt{d_{model}} = \sqrt{h\,d_k}$ shrinks it by a further $\sqrt{h}$.",
          "cfg = MHAConfig(512, 8)", "np.isclose(spread_right / spread_wrong, np.sqrt(cfg.h))"),
    Claim(r"The wrong scale pushes every row towards the uniform average.",
          "cfg = MHAConfig(512, 8)", "ent_wrong > ent_right and max_wrong < max_right"),
    Claim(r"Both are fixed by $d_{model}$. The head count only decides how the same matrices are cut up.",
          "N_COUNT = 100",
          "len(set(totals.values())) == 1 and all(sum(a.size for a in init_params(MHAConfig(512, h), rng=0)"
          ".values()) == totals[h][0] for h in totals)"),
    Claim(r"Head $i$'s $W_Q^i$ is a column block of $W_Q$, of shape $(d_{model}, d_k)$: it has a row for every "
          r"input feature.",
          "small = MHAConfig(64, 8)", "W_Q3.shape == (small.d_model, small.d_k) and (moved > 1e-6).all()"),
    Claim(r"Without the output projection the layer returns the concatenated heads: output columns $i\,d_v$ "
          r"to $(i+1)\,d_v$ are head $i$ and nothing else.",
          "concat = pf.multi_head_attention_without_w_o(Xs, p, small.h)",
          "np.allclose(concat[:, 3 * d_v:4 * d_v], base[3]) and (blocks_without[off_diagonal] == 0).all() "
          "and (np.diag(blocks_without) > 0).all()"),
    Claim(r"$W_O$ is the only place where the heads of a layer exchange information.",
          "concat = pf.multi_head_attention_without_w_o(Xs, p, small.h)", "(blocks_with > 0).all()"),
    Claim(r"Taking the softmax over axis $-2$ normalises the columns instead.",
          "q, k, v = (rng.standard_normal((small.h, 10, small.d_k))",
          "np.allclose(cols, 1.0) and not np.allclose(rows, 1.0) and np.allclose(good_w.sum(axis=-1), 1.0)"),
    Claim(r"the rows no longer sum to 1",
          "mask = causal_mask(10)",
          "(row_sums[:, :-1] < 1).all() and np.allclose(row_sums[:, -1], 1.0)"),
    Claim(r"so the future still leaks into the past.",
          "mask = causal_mask(10)", "(leak_right[:, :-1] == 0).all() and leak_wrong[:, :-1].max() > 0.01"),
    Claim(r"A single reshape straight to $(h, N, d_k)$ has the same shape, but it reads the numbers in memory "
          r"order",
          "N_SHOW, H_SHOW, DK_SHOW = 6, 3, 4",
          "right_split.shape == wrong_split.shape == (H_SHOW, N_SHOW, DK_SHOW) "
          "and (right_split == np.arange(N_SHOW)[None, :, None]).all() and misplaced > 0.5"),
    Claim(r"On real numbers the error in one split tensor is as large as the tensor itself.",
          "Qs, Ks, Vs = (Xs @ p[w]", "split_err > 0.5 and layer_err > 0.5"),
    Claim(r"Each device can compute its heads' contributions $\text{head}_i W_O^i$, but that is only a partial "
          r"output. The real output is the sum of both partials",
          "contrib = head_contributions(Xs, p, small.h)",
          "not np.allclose(device_0, full) and np.allclose(device_0 + device_1, full)"),
    Claim(r"that is 16 MiB per layer and 512 MiB per forward pass",
          "LAYERS, D_BIG, N_PROMPT = 32, 4096, 2048",
          "per_layer == 16 * 2**20 and LAYERS * per_layer == 512 * 2**20"),
    Claim(r"Measured on notebook 03's worked example ($d_{model}=512$, $h=8$, $d_k=64$)",
          "cfg = MHAConfig(512, 8)", "cfg.d_k == 64"),
]

test_quotes, test_claim = claim_tests(NB, CLAIMS)
