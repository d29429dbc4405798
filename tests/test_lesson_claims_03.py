"""Notebook 03 (the worked example): each claim of its prose, checked next to the sentence it defends.

The worked example's numbers are printed by the notebook; strict nbval proves a fresh run prints
them again, and these checks tie each printed number to its formula.
"""

from __future__ import annotations

from lesson_claims import Claim, claim_tests

NB = "03_worked_example.ipynb"
CLAIMS = [
    Claim(r"$d_{model}=512$, $h=8$: $d_k=64$", "cfg = MHAConfig(d_model=512, n_heads=8)", "d_k == 64"),
    Claim(r"`trace_config` runs the layer once on random input and records every step's shape",
          "trace_100 = trace_config(cfg, N, seed=0)",
          "shapes['Q heads: transpose'] == (h, N, d_k) and shapes['scores = Q K^T / sqrt(d_k)'] == (h, N, N) "
          "and shapes['out = concat @ W_O'] == shapes['X'] == (N, d_model)"),
    Claim(r"parameters $4 \times 262{,}144 = 1{,}048{,}576$, independent of $h$.",
          "params = count_params(cfg)",
          "all(params[name] == d_model * d_model == 262_144 for name in ('W_Q', 'W_K', 'W_V', 'W_O')) "
          "and params['total'] == 4 * d_model**2 == 1_048_576 "
          "and sum(w.size for w in arrays.values()) == params['total'] "
          "and all(count_params(MHAConfig(d_model, hh))['total'] == params['total'] for hh in (1, 2, 4, 16))"),
    Claim(r"$N=100$: $104{,}857{,}600$ projection MACs $+ 10{,}240{,}000$ attention MACs $= 115{,}097{,}600$ "
          r"MACs, about 230 M FLOPs; projections are about $10\times$ the attention core.",
          "macs_100 = count_macs(cfg, N)",
          "proj == 4 * N * d_model**2 == 104_857_600 and attn == 2 * N**2 * d_model == 10_240_000 "
          "and total == proj + attn == 115_097_600 and round(flops / 1e6, -1) == 230 "
          "and round(ratio_100) == 10"),
    Claim(r"The tracer notes the MACs of every matrix product as it happens",
          "def traced_terms(tracer)",
          "traced_terms(trace_100) == (proj, attn) and trace_100.total_macs() == total"),
    Claim(r"$N=2000$: about 2.1 B projection MACs against about 4.1 B attention MACs: the quadratic term wins.",
          "N_long = 2000",
          "(proj_long, attn_long) == (4 * N_long * d_model**2, 2 * N_long**2 * d_model) "
          "and round(proj_long / 1e9, 1) == 2.1 and round(attn_long / 1e9, 1) == 4.1 "
          "and attn_long > proj_long and traced_terms(trace_long) == (proj_long, attn_long)"),
    Claim(r"the scan finds it for several widths, and the two terms are exactly equal there.",
          "def crossover(config: MHAConfig, n_max: int)",
          "all(crossover(MHAConfig(w, 8), 4 * w) == 2 * w for w in (256, 512, 1024)) "
          "and all(count_macs(MHAConfig(w, 8), 2 * w)['attention'] "
          "== count_macs(MHAConfig(w, 8), 2 * w)['projections'] for w in (256, 512, 1024))"),
    Claim(r"The terms are equal at exactly $N = 2\,d_{model}$ (1,024 here).",
          "def crossover(config: MHAConfig, n_max: int)", "N_star == 1_024"),
]

test_quotes, test_claim = claim_tests(NB, CLAIMS)
