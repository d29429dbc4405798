"""Notebook 11 (long context): each claim of its prose, checked next to the sentence it defends.

Issue 16's finding: the prose said "slope 1" for the tiled path's memory while the cell's own
numbers rose 1.7 -> 3.3 -> 3.8 -> 4.9 MiB over an 8x range of N. The slopes are now computed
from the notebook's own measurements and compared with what the prose says about them.
"""

from __future__ import annotations

import numpy as np
from lesson_claims import Claims

NB = "12_long_context.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    r"Doubling $N$ doubles $Q$, $K$ and $V$ but quadruples the scores.",
    after="D_MODEL, H, BYTES = 512, 8, 4",
)
def doubling_n_quadruples_scores(H):
    assert H * (2 * 4096) ** 2 == 4 * H * 4096**2


@CLAIMS(
    r"At 128k tokens one layer's scores would need 512 GiB",
    after="D_MODEL, H, BYTES = 512, 8, 4",
)
def scores_512_gib_at_128k(H, BYTES, GiB):
    assert H * 131_072**2 * BYTES == 512 * GiB


@CLAIMS(
    r"The result is the softmax-weighted average, yet no step of the loop read more than two scores.",
    after="s = np.array([1.0, 3.0, 2.0, 5.0, 0.0, 4.0])",
)
def online_softmax_equals_the_formula(o, ell, formula):
    assert np.isclose(o / ell, formula)


@CLAIMS(
    r"the earlier sums shrink by $\alpha = e^{3-5} \approx 0.135$",
    after="s = np.array([1.0, 3.0, 2.0, 5.0, 0.0, 4.0])",
)
def alpha_is_0_135():
    assert round(float(np.exp(3 - 5)), 3) == 0.135


@CLAIMS(
    r"The answer does not change.",
    after="m_frozen = s[:2].max()",
)
def frozen_max_same_answer(m_frozen, frozen, formula, p, tiled):
    assert m_frozen == 3
    assert np.isclose(frozen, formula)
    assert p.max() < tiled.FROZEN_MAX_LIMIT  # e^(5 - 3) = 7.4: nowhere near overflowing


@CLAIMS(
    r"It keeps the result when, for every row, the tile's sum of $e^{s_j - m}$ is at most a limit, $2^{16}$, "
    r"far below what float32 can hold (so no score was more than $\ln 2^{16} \approx 11.1$ above $m$).",
    after="m_frozen = s[:2].max()",
)
def frozen_max_limit_2_16(tiled):
    assert tiled.FROZEN_MAX_LIMIT == 2**16
    assert tiled.FROZEN_MAX_LIMIT < np.finfo(np.float32).max / 1e30
    assert round(float(np.log(tiled.FROZEN_MAX_LIMIT)), 1) == 11.1


@CLAIMS(
    r"Here is `query_block`, the function that does one block of queries, as it is in `mha_core/core/tiled.py`",
    after="print(source(tiled.query_block))",
)
def the_loop_shown_is_the_loop_that_runs(tiled, source):
    src = source(tiled.query_block)
    for step in ("m_new = np.maximum(m,", "alpha = np.exp(m - shift)", "p = np.exp(np.subtract(s, shift",
                 "ell *= alpha", "ell += p.sum(", "o *= alpha", "o += p @ v[", "return o /"):
        assert step in src, step
    assert "query_block(q, k, v," in source(tiled.tiled_attention)  # what tiled_attention runs


@CLAIMS(
    r"It gives the same output as the formula that builds the whole matrix, "
    '`scaled_dot_product_attention` ("the formula" below), with or without a causal mask',
    after="full, weights = scaled_dot_product_attention(q, k, v)",
)
def tiled_equals_the_formula(full, tiled_out, full_c, tiled_c):
    assert np.allclose(full, tiled_out, atol=1e-5)
    assert np.allclose(full_c, tiled_c, atol=1e-5)


@CLAIMS(
    r"so one tile of scores for the 8 heads is 1 MiB.",
    after="lengths = [256, 512, 1_024, 2_048]",
)
def one_tile_is_1_mib(H):
    assert H * 128 * 256 * 4 == 2**20


# the slopes, from the measured peaks of this very run
@CLAIMS(
    r"The formula holds the whole $(h, N, N)$ score tensor, so its peak grows about fourfold each "
    r"time $N$ doubles.",
    after="lengths = [256, 512, 1_024, 2_048]",
)
def formula_peak_fourfold(formula_mib):
    assert all(3.4 < b / a < 4.1 for a, b in zip(formula_mib, formula_mib[1:], strict=False))


@CLAIMS(
    r"On log-log axes the formula's line climbs with a slope close to 2.",
    after="lengths = [256, 512, 1_024, 2_048]",
)
def formula_slope_close_to_2(formula_mib):
    slopes = [np.log2(b / a) for a, b in zip(formula_mib, formula_mib[1:], strict=False)]
    assert 1.8 < slopes[-1] < 2.1


@CLAIMS(
    "does not depend on $N$: the column \"tiled minus output\" stays the same.",
    after="lengths = [256, 512, 1_024, 2_048]",
)
def tiled_fixed_part_constant(tiled_mib, output_mib):
    assert np.ptp([t - o for t, o in zip(tiled_mib, output_mib, strict=True)]) < 0.05


@CLAIMS(
    r"so the whole tiled peak grows by much less than a factor of 2 per doubling.",
    after="lengths = [256, 512, 1_024, 2_048]",
)
def tiled_peak_grows_less_than_2x(tiled_mib):
    assert all(b / a < 1.6 for a, b in zip(tiled_mib, tiled_mib[1:], strict=False))


@CLAIMS(
    r"The tiled line is flatter than slope 1 here, because of its fixed part",
    after="lengths = [256, 512, 1_024, 2_048]",
)
def tiled_slope_below_1(tiled_mib):
    slopes = [np.log2(b / a) for a, b in zip(tiled_mib, tiled_mib[1:], strict=False)]
    assert max(slopes) < 0.7


@CLAIMS(
    r"What grows is the output, and it doubles with $N$.",
    after="lengths = [256, 512, 1_024, 2_048]",
)
def output_doubles_with_n(output_mib):
    assert all(abs(b / a - 2) < 1e-9 for a, b in zip(output_mib, output_mib[1:], strict=False))


@CLAIMS(
    r"its slope approaches 1 only once the output is many times the fixed part, at tens of thousands "
    r"of tokens.",
    after="lengths = [256, 512, 1_024, 2_048]",
)
def tiled_slope_near_1_only_at_tens_of_thousands(tiled_mib, output_mib, H):
    # peak(N) = fixed + N * h * d_k * 4 bytes: the slope between N and 2N, from the measured fixed part
    fixed = tiled_mib[0] - output_mib[0]

    def out(n):
        return H * n * 32 * 4 / 2**20

    assert np.log2((fixed + 2 * out(32_768)) / (fixed + out(32_768))) > 0.9
    assert np.log2((fixed + 2 * out(2_048)) / (fixed + out(2_048))) < 0.7


@CLAIMS(
    r"At 128k tokens the cache of plain multi-head attention is 64 GiB, and GQA with 8 key/value heads "
    r"brings it to 16 GiB, while one new token's scores stay at a few MiB.",
    after="LAYERS = 32",
)
def kv_cache_64_and_16_gib_at_128k(kv_cache_bytes, mha_cfg, LAYERS, GiB, gqa_cfg, decode):
    assert kv_cache_bytes(mha_cfg, 131_072, n_layers=LAYERS) == 64 * GiB
    assert kv_cache_bytes(gqa_cfg, 131_072, n_layers=LAYERS) == 16 * GiB
    assert decode < 10 * 2**20


@CLAIMS(
    r"GQA divides it by $h / n_{kv}$.",
    after="LAYERS = 32",
)
def gqa_divides_the_cache(kv_mha, kv_gqa, decode):
    assert kv_mha == 4 * kv_gqa
    assert decode < kv_gqa / 1000


@CLAIMS(
    r"Tiling removes the $N^2$ term from the *memory* that computing attention needs; the "
    r"computation of the attention core itself is still $2N^2 d_{model}$ multiply-accumulates per layer, as in "
    r"05, with the projections on top.",
    after="mha_cfg = MHAConfig(d_model=4096, n_heads=32)",
)
def tiling_keeps_the_n_squared_computation(mha_cfg):
    from mha_core import count_macs

    for n in (2_048, 32_768):
        assert count_macs(mha_cfg, n)["attention"] == 2 * n * n * mha_cfg.d_model


test_quotes, test_claim = CLAIMS.tests()
