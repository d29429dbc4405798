"""Notebook 05 (cost): each claim of its prose, checked next to the sentence it defends.

The timing cells' outputs differ from run to run (nbval does not compare them), and a unit test
takes no timing thresholds: the prose says what to look for, and its one sentence about the
clock is about "the stored run", checked here against the stored output it describes.
"""

from __future__ import annotations

import re

from lesson_claims import Claim, claim_tests, markdown_text, outputs

NB = "05_cost.ipynb"
CLAIMS = [
    Claim(r"that the parameter count, $4\,d_{model}^2$, does not depend on the number of heads $h$",
          "params_by_h = {h:",
          "all(sum(a.size for a in init_params(MHAConfig(D_MODEL, h), rng=0).values()) == params_by_h[h] "
          "== 4 * D_MODEL**2 for h in HEADS)"),
    Claim(r"that the multiply-accumulates (MACs) do not depend on $h$ either",
          "params_by_h = {h:", "all(macs_by_h[h]['total'] == macs_by_h[1]['total'] for h in HEADS)"),
    Claim(r"Each head normalises its own $N \times N$ map, so there are $h N^2$ exponentials instead of $N^2$.",
          "params_by_h = {h:", "all(macs_by_h[h]['softmax_exps'] == h * N**2 for h in HEADS)"),
    Claim(r"The two are equal when $4 N d_{model}^2 = 2 N^2 d_{model}$, that is at $N = 2\,d_{model}$.",
          "cfg = MHAConfig(D_MODEL, 8)",
          "(proj == 4 * Ns * D_MODEL**2).all() and (attn == 2 * Ns**2 * D_MODEL).all() "
          "and at_cross['projections'] == at_cross['attention']"),
    Claim(r"split into a projection term that grows like $N$ and an attention term that grows like $N^2$",
          "cfg = MHAConfig(D_MODEL, 8)",
          "doubled['projections'] == 2 * at_cross['projections'] "
          "and doubled['attention'] == 4 * at_cross['attention']"),
    Claim(r"`trace_config` runs the layer and counts every matmul it actually performs.",
          "traced = trace_config(small, 48)",
          "all(trace_config(MHAConfig(64, h), 48).total_macs() == count_macs(MHAConfig(64, h), 48)['total'] "
          "for h in (1, 4, 16))"),
    Claim(r"The score matmul does $d_k$ MACs per score, the softmax one exponential per score",
          'share = m["softmax_exps"] / m["total"]',
          "all(count_macs(MHAConfig(D_MODEL, h), N)['scores'] "
          "== count_macs(MHAConfig(D_MODEL, h), N)['softmax_exps'] * (D_MODEL // h) for h in (1, 8, 64))"),
    Claim(r"They compute the same thing (the first cell checks that their outputs agree)",
          "looped = multi_head_attention_per_head(x, p, h)", "np.allclose(fused, looped, atol=1e-5)"),
    Claim(r"That is $8\,d_{model}^2$ weights, twice the attention sublayer's $4\,d_{model}^2$.",
          "EXPANSION = 4",
          "attn_params == 4 * D_MODEL**2 and ffn_params == 8 * D_MODEL**2 == 2 * attn_params"),
    Claim(r"Per token the FFN also does $8\,d_{model}^2$ MACs against the projections' $4\,d_{model}^2$.",
          "EXPANSION = 4",
          "m['projections'] // N == 4 * D_MODEL**2 and ffn_macs_per_token == 2 * (m['projections'] // N)"),
    Claim(r"The attention core's $2 N^2 d_{model}$ only catches up with the FFN's $8 N d_{model}^2$ at "
          r"$N = 4\,d_{model}$.",
          "EXPANSION = 4",
          "count_macs(MHAConfig(D_MODEL, 8), n_equal)['attention'] == n_equal * ffn_macs_per_token "
          "and n_equal == 4 * D_MODEL"),
]

test_quotes, test_claim = claim_tests(NB, CLAIMS)


def test_the_stored_run_is_what_the_prose_says():
    """"in the stored run the softmax takes far more than its $1/128$ share of the time" (section 4)."""
    assert "in the stored run the softmax takes far more than its $1/128$ share of the time" in markdown_text(NB)
    text = outputs(NB, "ops_ratio = m8")
    ops = int(re.search(r"\((\d+)x fewer operations\)", text).group(1))
    clock = float(re.search(r"softmax / matmuls = ([\d.]+)\)", text).group(1))
    assert ops == 128 and clock * ops > 10  # "far more": at least ten times its share
