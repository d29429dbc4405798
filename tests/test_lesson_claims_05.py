"""Notebook 05 (cost): each claim of its prose, checked next to the sentence it defends.

The timing cells' outputs differ from run to run (nbval does not compare them), and a unit test
takes no timing thresholds: the prose says what to look for, and its one sentence about the
clock is about "the stored run", checked here against the stored output it describes.
"""

from __future__ import annotations

import re

import numpy as np
from lesson_claims import Claims, markdown_text, outputs

NB = "05_cost.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    r"that the parameter count, $4\,d_{model}^2$, does not depend on the number of heads $h$",
    after="params_by_h = {h:",
)
def parameters_flat_in_h(init_params, MHAConfig, D_MODEL, params_by_h, HEADS):
    assert all(sum(a.size for a in init_params(MHAConfig(D_MODEL, h), rng=0).values()) == params_by_h[h] == 4 * D_MODEL**2 for h in HEADS)


@CLAIMS(
    r"that the multiply-accumulates (MACs) do not depend on $h$ either",
    after="params_by_h = {h:",
)
def macs_flat_in_h(macs_by_h, HEADS):
    assert all(macs_by_h[h]['total'] == macs_by_h[1]['total'] for h in HEADS)


@CLAIMS(
    r"Each head normalises its own $N \times N$ map, so there are $h N^2$ exponentials instead of $N^2$.",
    after="params_by_h = {h:",
)
def softmax_exps_are_h_n_squared(macs_by_h, N, HEADS):
    assert all(macs_by_h[h]['softmax_exps'] == h * N**2 for h in HEADS)


@CLAIMS(
    r"The two are equal when $4 N d_{model}^2 = 2 N^2 d_{model}$, that is at $N = 2\,d_{model}$.",
    after="cfg = MHAConfig(D_MODEL, 8)",
)
def terms_equal_at_2_d_model(proj, Ns, D_MODEL, attn, at_cross):
    assert (proj == 4 * Ns * D_MODEL**2).all()
    assert (attn == 2 * Ns**2 * D_MODEL).all()
    assert at_cross['projections'] == at_cross['attention']


@CLAIMS(
    r"split into a projection term that grows like $N$ and an attention term that grows like $N^2$",
    after="cfg = MHAConfig(D_MODEL, 8)",
)
def projections_linear_attention_quadratic(doubled, at_cross):
    assert doubled['projections'] == 2 * at_cross['projections']
    assert doubled['attention'] == 4 * at_cross['attention']


@CLAIMS(
    r"`trace_config` runs the layer and counts every matmul it actually performs.",
    after="traced = trace_config(small, 48)",
)
def traced_macs_equal_counted_macs(trace_config, MHAConfig, count_macs):
    assert all(trace_config(MHAConfig(64, h), 48).total_macs() == count_macs(MHAConfig(64, h), 48)['total'] for h in (1, 4, 16))


@CLAIMS(
    r"The score matmul does $d_k$ MACs per score, the softmax one exponential per score",
    after='share = m["softmax_exps"] / m["total"]',
)
def score_macs_are_d_k_per_exp(count_macs, MHAConfig, D_MODEL, N):
    assert all(count_macs(MHAConfig(D_MODEL, h), N)['scores'] == count_macs(MHAConfig(D_MODEL, h), N)['softmax_exps'] * (D_MODEL // h) for h in (1, 8, 64))


@CLAIMS(
    r"They compute the same thing (the first cell checks that their outputs agree)",
    after="looped = multi_head_attention_per_head(x, p, h)",
)
def fused_equals_looped(fused, looped):
    assert np.allclose(fused, looped, atol=1e-5)


@CLAIMS(
    r"That is $8\,d_{model}^2$ weights, twice the attention sublayer's $4\,d_{model}^2$.",
    after="EXPANSION = 4",
)
def ffn_has_twice_the_weights(attn_params, D_MODEL, ffn_params):
    assert attn_params == 4 * D_MODEL**2
    assert ffn_params == 8 * D_MODEL**2 == 2 * attn_params


@CLAIMS(
    r"Per token the FFN also does $8\,d_{model}^2$ MACs against the projections' $4\,d_{model}^2$.",
    after="EXPANSION = 4",
)
def ffn_has_twice_the_macs_per_token(m, N, D_MODEL, ffn_macs_per_token):
    assert m['projections'] // N == 4 * D_MODEL**2
    assert ffn_macs_per_token == 2 * (m['projections'] // N)


@CLAIMS(
    r"The attention core's $2 N^2 d_{model}$ only catches up with the FFN's $8 N d_{model}^2$ at "
    r"$N = 4\,d_{model}$.",
    after="EXPANSION = 4",
)
def attention_catches_ffn_at_4_d_model(count_macs, MHAConfig, D_MODEL, n_equal, ffn_macs_per_token):
    assert count_macs(MHAConfig(D_MODEL, 8), n_equal)['attention'] == n_equal * ffn_macs_per_token
    assert n_equal == 4 * D_MODEL


test_quotes, test_claim = CLAIMS.tests()


def test_the_stored_run_is_what_the_prose_says():
    """"in the stored run the softmax takes far more than its $1/128$ share of the time" (section 4)."""
    assert "in the stored run the softmax takes far more than its $1/128$ share of the time" in markdown_text(NB)
    text = outputs(NB, "ops_ratio = m8")
    ops = int(re.search(r"\((\d+)x fewer operations\)", text).group(1))
    clock = float(re.search(r"softmax / matmuls = ([\d.]+)\)", text).group(1))
    assert ops == 128 and clock * ops > 10  # "far more": at least ten times its share
