"""Notebook 07 (pitfalls): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

import numpy as np
from lesson_claims import Claims

NB = "07_pitfalls.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    r"Dividing by $\sqrt{d_{model}} = \sqrt{h\,d_k}$ shrinks it by a further $\sqrt{h}$.",
    after="cfg = MHAConfig(512, 8)",
)
def wrong_scale_shrinks_by_sqrt_h(spread_right, spread_wrong, cfg):
    assert np.isclose(spread_right / spread_wrong, np.sqrt(cfg.h))


@CLAIMS(
    r"The wrong scale pushes every row towards the uniform average.",
    after="cfg = MHAConfig(512, 8)",
)
def wrong_scale_flattens_rows(ent_wrong, ent_right, max_wrong, max_right):
    assert ent_wrong > ent_right
    assert max_wrong < max_right


@CLAIMS(
    r"Both are fixed by $d_{model}$. The head count only decides how the same matrices are cut up.",
    after="N_COUNT = 100",
)
def counts_fixed_by_d_model(totals, init_params, MHAConfig):
    assert len(set(totals.values())) == 1
    assert all(sum(a.size for a in init_params(MHAConfig(512, h), rng=0).values()) == totals[h][0] for h in totals)


@CLAIMS(
    r"Head $i$'s $W_Q^i$ is a column block of $W_Q$, of shape $(d_{model}, d_k)$: it has a row for every "
    r"input feature.",
    after="small = MHAConfig(64, 8)",
)
def head_w_q_reads_every_feature(W_Q3, small, moved):
    assert W_Q3.shape == (small.d_model, small.d_k)
    assert (moved > 1e-6).all()


@CLAIMS(
    r"Without the output projection the layer returns the concatenated heads: output columns $i\,d_v$ "
    r"to $(i+1)\,d_v$ are head $i$ and nothing else.",
    after="concat = pf.multi_head_attention_without_w_o(Xs, p, small.h)",
)
def without_w_o_heads_stay_in_their_columns(concat, d_v, base, blocks_without, off_diagonal):
    assert np.allclose(concat[:, 3 * d_v:4 * d_v], base[3])
    assert (blocks_without[off_diagonal] == 0).all()
    assert (np.diag(blocks_without) > 0).all()


@CLAIMS(
    r"$W_O$ is the only place where the heads of a layer exchange information.",
    after="concat = pf.multi_head_attention_without_w_o(Xs, p, small.h)",
)
def w_o_mixes_the_heads(blocks_with):
    assert (blocks_with > 0).all()


@CLAIMS(
    r"Taking the softmax over axis $-2$ normalises the columns instead.",
    after="q, k, v = (rng.standard_normal((small.h, 10, small.d_k))",
)
def softmax_on_axis_minus_2_normalises_columns(cols, rows, good_w):
    assert np.allclose(cols, 1.0)
    assert not np.allclose(rows, 1.0)
    assert np.allclose(good_w.sum(axis=-1), 1.0)


@CLAIMS(
    r"the rows no longer sum to 1",
    after="mask = causal_mask(10)",
)
def mask_after_softmax_rows_do_not_sum_to_1(row_sums):
    assert (row_sums[:, :-1] < 1).all()
    assert np.allclose(row_sums[:, -1], 1.0)


@CLAIMS(
    r"so the future still leaks into the past.",
    after="mask = causal_mask(10)",
)
def mask_after_softmax_leaks_the_future(leak_right, leak_wrong):
    assert (leak_right[:, :-1] == 0).all()
    assert leak_wrong[:, :-1].max() > 0.01


@CLAIMS(
    r"A single reshape straight to $(h, N, d_k)$ has the same shape, but it reads the numbers in memory "
    r"order",
    after="N_SHOW, H_SHOW, DK_SHOW = 6, 3, 4",
)
def reshape_without_transpose_misplaces(right_split, wrong_split, H_SHOW, N_SHOW, DK_SHOW, misplaced):
    assert right_split.shape == wrong_split.shape == (H_SHOW, N_SHOW, DK_SHOW)
    assert (right_split == np.arange(N_SHOW)[None, :, None]).all()
    assert misplaced > 0.5


@CLAIMS(
    r"Here the error in one split tensor is larger than the tensor itself (printed below: more than 100%); "
    r"for random values it is about $\sqrt{2f}$, where $f$ is the share of entries that land in the wrong place",
    after="Qs, Ks, Vs = (Xs @ p[w]",
)
def reshape_without_transpose_error_is_large(split_err, layer_err, pf, split_heads, Qs, small):
    assert split_err >= 1.0
    assert layer_err > 0.5
    moved = np.mean(pf.split_heads_without_transpose(Qs, small.h) != split_heads(Qs, small.h))  # f
    assert abs(split_err - np.sqrt(2 * moved)) < 0.1 * split_err


@CLAIMS(
    r"Each device can compute its heads' contributions $\text{head}_i W_O^i$, but that is only a partial "
    r"output. The real output is the sum of both partials",
    after="contrib = head_contributions(Xs, p, small.h)",
)
def partial_outputs_add_up(device_0, full, device_1):
    assert not np.allclose(device_0, full)
    assert np.allclose(device_0 + device_1, full)


@CLAIMS(
    r"that is 16 MiB per layer and 512 MiB per forward pass",
    after="LAYERS, D_BIG, N_PROMPT = 32, 4096, 2048",
)
def scores_mib_per_layer_and_pass(per_layer, LAYERS):
    assert per_layer == 16 * 2**20
    assert LAYERS * per_layer == 512 * 2**20


@CLAIMS(
    r"Measured at the size of notebook 03's worked example ($d_{model}=512$, $h=8$, $d_k=64$; random inputs "
    r"and random weights from `init_params`, not a trained model)",
    after="cfg = MHAConfig(512, 8)",
)
def worked_example_d_k_is_64(cfg):
    assert cfg.d_k == 64


test_quotes, test_claim = CLAIMS.tests()
