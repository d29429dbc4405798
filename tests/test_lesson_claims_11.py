"""Notebook 11 (long context): each claim of its prose, checked next to the sentence it defends.

Issue 16's finding: the prose said "slope 1" for the tiled path's memory while the cell's own
numbers rose 1.7 -> 3.3 -> 3.8 -> 4.9 MiB over an 8x range of N. The slopes are now computed
from the notebook's own measurements and compared with what the prose says about them.
"""

from __future__ import annotations

from lesson_claims import Claim, claim_tests

NB = "11_long_context.ipynb"
SLOPES = ("[np.log2(b / a) for a, b in zip({0}, {0}[1:])]")
CLAIMS = [
    Claim(r"Doubling $N$ doubles $Q$, $K$ and $V$ but quadruples the scores.",
          "D_MODEL, H, BYTES = 512, 8, 4", "H * (2 * 4096) ** 2 == 4 * H * 4096**2"),
    Claim(r"At 128k tokens one layer's scores would need 512 GiB",
          "D_MODEL, H, BYTES = 512, 8, 4", "H * 131_072**2 * BYTES == 512 * GiB"),
    Claim(r"The result is the softmax-weighted average, yet at no point did we hold more than two scores.",
          "s = np.array([1.0, 3.0, 2.0, 5.0, 0.0, 4.0])", "np.isclose(o / ell, one_shot)"),
    Claim(r"the earlier sums shrink by $\alpha = e^{3-5} \approx 0.135$",
          "s = np.array([1.0, 3.0, 2.0, 5.0, 0.0, 4.0])", "round(float(np.exp(3 - 5)), 3) == 0.135"),
    Claim(r"The answer does not change.", "m_frozen = s[:2].max()",
          "m_frozen == 3 and np.isclose(frozen, one_shot) and p.max() < STALE_MAX_LIMIT"),
    Claim(r"It keeps the result when, for every row, the tile's sum of $e^{s_j - m}$ is at most a limit, $2^{16}$, "
          r"far below what float32 can hold (so no score was more than $\ln 2^{16} \approx 11.1$ above $m$).",
          "m_frozen = s[:2].max()",
          "STALE_MAX_LIMIT == 2**16 and STALE_MAX_LIMIT < np.finfo(np.float32).max / 1e30 "
          "and round(float(np.log(STALE_MAX_LIMIT)), 1) == 11.1"),
    Claim(r"It gives the same output as the one-shot `scaled_dot_product_attention`, with or without a "
          r"causal mask",
          "full, weights = scaled_dot_product_attention(q, k, v)",
          "np.allclose(full, tiled, atol=1e-5) and np.allclose(full_c, tiled_c, atol=1e-5)"),
    Claim(r"so one tile of scores for the 8 heads is 1 MiB.",
          "lengths = [256, 512, 1_024, 2_048]", "H * 128 * 256 * 4 == 2**20"),
    # the slopes, from the measured peaks of this very run
    Claim(r"The one-shot path holds the whole $(h, N, N)$ score tensor, so its peak grows about fourfold each "
          r"time $N$ doubles.",
          "lengths = [256, 512, 1_024, 2_048]",
          "all(3.4 < b / a < 4.1 for a, b in zip(one_shot_mib, one_shot_mib[1:]))"),
    Claim(r"On log-log axes the one-shot line climbs with a slope close to 2.",
          "lengths = [256, 512, 1_024, 2_048]", f"1.8 < {SLOPES.format('one_shot_mib')}[-1] < 2.1"),
    Claim("A **fixed part**, its tile buffers, does not depend on $N$: the column \"tiled minus output\" stays "
          "the same.",
          "lengths = [256, 512, 1_024, 2_048]",
          "np.ptp([t - o for t, o in zip(tiled_mib, output_mib)]) < 0.05"),
    Claim(r"so the whole tiled peak grows by much less than a factor of 2 per doubling.",
          "lengths = [256, 512, 1_024, 2_048]", "all(b / a < 1.6 for a, b in zip(tiled_mib, tiled_mib[1:]))"),
    Claim(r"The tiled line is flatter than slope 1 here, because of its fixed part",
          "lengths = [256, 512, 1_024, 2_048]", f"max({SLOPES.format('tiled_mib')}) < 0.7"),
    Claim(r"What grows is the output, and it doubles with $N$.",
          "lengths = [256, 512, 1_024, 2_048]",
          "all(abs(b / a - 2) < 1e-9 for a, b in zip(output_mib, output_mib[1:]))"),
    Claim(r"its slope approaches 1 only once the output is many times the fixed part, at tens of thousands "
          r"of tokens.",
          "lengths = [256, 512, 1_024, 2_048]",
          # peak(N) = fixed + N * h * d_k * 4 bytes: the slope between N and 2N, from the measured fixed part
          "(lambda fixed, out: np.log2((fixed + 2 * out(32_768)) / (fixed + out(32_768))) > 0.9 "
          "and np.log2((fixed + 2 * out(2_048)) / (fixed + out(2_048))) < 0.7)"
          "(tiled_mib[0] - output_mib[0], lambda n: H * n * 32 * 4 / 2**20)"),
    Claim(r"At 128k tokens the cache of plain multi-head attention is 64 GiB, and GQA with 8 key/value heads "
          r"brings it to 16 GiB, while one new token's scores stay at a few MiB.",
          "LAYERS = 32",
          "kv_cache_bytes(mha_cfg, 131_072, n_layers=LAYERS) == 64 * GiB "
          "and kv_cache_bytes(gqa_cfg, 131_072, n_layers=LAYERS) == 16 * GiB and decode < 10 * 2**20"),
    Claim(r"GQA divides it by $h / n_{kv}$.", "LAYERS = 32", "kv_mha == 4 * kv_gqa and decode < kv_gqa / 1000"),
]

test_quotes, test_claim = claim_tests(NB, CLAIMS)
