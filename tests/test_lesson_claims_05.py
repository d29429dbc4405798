"""Notebook 05 (cost): each claim of its prose, checked next to the sentence it defends.

The timing cells' outputs differ from run to run (nbval does not compare them), and a unit test
takes no timing thresholds: the prose says what to look for, and its sentences about the clock
are checked here against the stored output they describe, by the lesson's own rule (two times
differ only when their gap is larger than their spreads added up, ``clearly_apart``).
"""

from __future__ import annotations

import re

import numpy as np
from lesson_claims import Claims, code_sources, markdown_text, outputs

from mha_core.ui.lesson_figures import clearly_apart

NB = "05_cost.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    r"that the parameter count, $4\,d_{model}^2$ for the four weight matrices (plus $4\,d_{model}$ when the "
    r"projections carry biases), does not depend on the number of heads $h$",
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


@CLAIMS(
    r"has $4\,d_{model}^2 + 4\,d_{model}$: the last line prints both.",
    after="with_biases = count_params(",
)
def parameters_with_and_without_biases(with_biases, D_MODEL, count_params, MHAConfig, init_params):
    assert with_biases == 4 * D_MODEL**2 + 4 * D_MODEL == 1_050_624
    assert sum(a.size for a in init_params(MHAConfig(D_MODEL, 8, bias=True), rng=0).values()) == with_biases
    assert count_params(MHAConfig(D_MODEL, 8))["total"] == 4 * D_MODEL**2


test_quotes, test_claim = CLAIMS.tests()


# -- the timing cells, read from the stored run ------------------------------------------------------

_ROW = re.compile(r"^ *(\d+) +(\d+) +([\d.]+) \( *(\d+)%\) +([\d.]+) \( *(\d+)%\) +([\d.]+) +([\d.]+) \( *(\d+)%\)$", re.M)


def _table() -> dict[int, dict[str, tuple[float, float]]]:
    """The stored timing table: h -> part -> (fastest ms, spread)."""
    rows = _ROW.findall(outputs(NB, "matmul_flops = 2 * count_macs"))
    assert len(rows) == 8, rows
    return {int(r[0]): {"forward": (float(r[2]), int(r[3]) / 100), "matmuls": (float(r[4]), int(r[5]) / 100),
                        "softmax": (float(r[7]), int(r[8]) / 100)} for r in rows}


def test_the_stored_timing_table_is_timed_the_way_06_times():
    """"we time the way notebook 06 does: BLAS runs on one thread ... we keep the **fastest** run" (section 4)."""
    prose = markdown_text(NB)
    assert "So we time the way notebook 06 does: BLAS runs on one thread" in prose
    assert "one BLAS thread, fastest of 15 interleaved rounds" in outputs(NB, "matmul_flops = 2 * count_macs")
    assert any("fastest_ms(runs" in src for src in code_sources(NB))  # section 5 times the same way


def test_each_verdict_against_h1_follows_the_rule():
    """Every "the same" / "clearly slower" / "clearly faster" the cell of section 4 prints agrees with
    the stored table's numbers, and the Recap's "where a slowdown shows, it is at large h (small d_k)"."""
    assert "where a slowdown shows, it is at large $h$ (small $d_k$)" in markdown_text(NB)
    table = _table()
    text = outputs(NB, "base = timing[1]")
    verdicts = dict(re.findall(r"^h= *(\d+) .*the h=1 time, (the same|clearly slower|clearly faster);", text, re.M))
    assert len(verdicts) == 8, text
    slower = []
    for h, verdict in verdicts.items():
        mine, base = table[int(h)]["forward"], table[1]["forward"]
        # printed values are rounded: a verdict within the rounding of the rule's edge is not judged
        edge = abs(abs(mine[0] - base[0]) - (mine[0] * mine[1] + base[0] * base[1]))
        if edge > 0.02 + 0.01 * (mine[0] + base[0]):
            expected = ("clearly slower" if mine[0] > base[0] else "clearly faster") if clearly_apart(mine, base) else "the same"
            assert verdict == expected, (h, verdict, mine, base)
        if verdict == "clearly slower":
            slower.append(int(h))
    assert "clearly faster" not in verdicts.values(), "a faster h would need a sentence of its own"
    assert all(h >= 16 for h in slower), slower


def test_the_narrow_matmuls_are_clearly_slower():
    """"at $d_k = 4$ the matmuls move almost as many bytes as they do arithmetic, and their GFLOP/s
    tends to fall" (section 4): the same MACs take clearly longer at d_k = 4 than at d_k = 64."""
    assert "and their GFLOP/s tends to fall" in markdown_text(NB)
    table = _table()
    narrow, wide = table[128]["matmuls"], table[8]["matmuls"]
    assert narrow[0] > wide[0] and clearly_apart(narrow, wide), (narrow, wide)


def test_the_softmax_takes_more_than_its_share_by_more_than_the_spreads():
    """"in the stored run the softmax takes far more than its $1/128$ share of the time, by more than
    the spreads" (section 4)."""
    assert ("in the stored run the softmax takes far more than its $1/128$ share of the time, by more than the "
            "spreads") in markdown_text(NB)
    text = outputs(NB, "ops_ratio = m8")
    ops = int(re.search(r"\((\d+)x fewer operations\)", text).group(1))
    soft, s_soft, mat, s_mat = re.search(
        r"clock: softmax ([\d.]+) ms \((\d+)%\), both matmuls ([\d.]+) ms \((\d+)%\)", text).groups()
    soft, mat = float(soft), float(mat)
    share = (mat / ops, float(s_mat) / 100)  # what the softmax would take if it cost what its operations cost
    assert ops == 128 and clearly_apart((soft, float(s_soft) / 100), share) and soft > 10 * share[0]


def test_the_loop_against_fused_verdicts_follow_the_rule():
    """Section 5: "Read the ratio only when the second cell says the two are clearly apart"."""
    assert "Read the ratio only when the second cell says the two are clearly apart" in markdown_text(NB)
    rows = re.findall(r"^h= *(\d+): fused +([\d.]+) ms \((\d+)%\), loop +([\d.]+) ms \((\d+)%\), loop/fused = [\d.]+, "
                      r"(clearly apart|not apart)", outputs(NB, "runs[h, \"loop\"]"), re.M)
    assert len(rows) == 2
    for _, f, s_f, lo, s_l, verdict in rows:
        fused, loop = (float(f), int(s_f) / 100), (float(lo), int(s_l) / 100)
        edge = abs(abs(loop[0] - fused[0]) - (fused[0] * fused[1] + loop[0] * loop[1]))
        if edge > 0.05:
            assert (verdict == "clearly apart") == clearly_apart(fused, loop), (fused, loop, verdict)


def test_no_sentence_rests_on_a_peak_that_is_not_measured():
    assert "close to the CPU's peak" not in markdown_text(NB)

