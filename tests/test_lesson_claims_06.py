"""Notebook 06 (KV cache, GQA): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

import re

from lesson_claims import Claim, claim_tests, markdown_text, outputs

NB = "06_kv_cache_gqa.ipynb"
CLAIMS = [
    Claim(r"We keep each layer's $K = X W_K$ and $V = X W_V$ in fp16 (2 bytes a number), exactly what a "
          r"decoder would cache, and compare the bytes with `kv_cache_bytes`.",
          "cfg = MHAConfig(d_model=256, n_heads=8)",
          "elements == 2 * N * cfg.d_model * LAYERS "
          "and built == kv_cache_bytes(cfg, N, n_layers=LAYERS, dtype=np.float16)"),
    Claim(r"$W_K$ and $W_V$ shrink to $(d_{model}, n_{kv} d_k)$, and so does the cache. $W_Q$ and $W_O$ keep "
          r"their size.",
          "divisors = [n for n in range(cfg.h, 0, -1)",
          "all(kv_cache_bytes(MHAConfig(cfg.d_model, cfg.h, n_kv_heads=n), N, n_layers=LAYERS) * (cfg.h // n) "
          "== mha_cache for n in divisors) "
          "and all(count_params(MHAConfig(cfg.d_model, cfg.h, n_kv_heads=n))['W_K'] "
          "== count_params(MHAConfig(cfg.d_model, cfg.h, n_kv_heads=n))['W_V'] == cfg.d_model * n * cfg.d_k "
          "and count_params(MHAConfig(cfg.d_model, cfg.h, n_kv_heads=n))['W_Q'] == cfg.d_model**2 "
          "for n in divisors)"),
    Claim(r"the same weights give the same output, bit for bit.",
          "x0 = np.random.default_rng(1)", "np.array_equal(mha_out, gqa_out)"),
    Claim(r"Copy each key/value column block into its group and plain MHA gives the GQA output",
          "n_kv = 2", "np.allclose(shared, copied, atol=1e-5)"),
    Claim(r"First the whole range as a figure",
          "BIG = dict(d_model=4096, n_heads=32, layers=32)",
          "gib[0] == 16 and all(g * n_kvs[0] == gib[0] * n for g, n in zip(gib, n_kvs, strict=True))"),
    Claim(r"At 32 layers, $d_{model} = 4096$, 32k tokens in fp16: 16 GiB (MHA), 4 GiB (GQA, 8 K/V heads), "
          r"0.5 GiB (MQA).",
          'rows = [("MHA", 32), ("GQA", 8), ("MQA", 1)]',
          "table['MHA'] == 2 * N_CTX * BIG['d_model'] * BIG['layers'] * fp16 == 16 * GIB "
          "and table['GQA'] == 4 * GIB and table['MQA'] == GIB // 2 and total == N_CTX * per_token"),
    Claim(r"more than the fp16 weights of such a model's attention layers ($32 \times 4 \times 4096^2 \times 2$ "
          r"bytes = 4 GiB)",
          "attn_weight_bytes = ", "attn_weight_bytes == 4 * GIB and table['MHA'] == 4 * attn_weight_bytes"),
    Claim(r"running a sequence through the loop (`mha_core.decode`) gives the causal layer's output, for MHA, "
          r"GQA and MQA.",
          "small = MHAConfig(d_model=64, n_heads=8)",
          "all(np.abs(decode(x_seq, init_params(MHAConfig(64, 8, n_kv_heads=n), rng=n, dtype=np.float64), 8, "
          "n_kv_heads=n) - multi_head_attention(x_seq, init_params(MHAConfig(64, 8, n_kv_heads=n), rng=n, "
          "dtype=np.float64), 8, n_kv_heads=n, causal=True)).max() < 1e-12 for n in (8, 2, 1))"),
    Claim(r"A realistic model this time: 32 layers, $d_{model}=4096$, $h=32$ ($d_k=128$), fp16, batch 1.",
          "BIG = dict(d_model=4096, n_heads=32, layers=32)",
          "BIG['layers'] == 32 and BIG['d_model'] // BIG['n_heads'] == 128"),
    Claim(r"Same model, 32k context ($N = 32{,}768$), fp16, batch 1.",
          'rows = [("MHA", 32), ("GQA", 8), ("MQA", 1)]', "N_CTX == 32_768 == 32 * 1024"),
]

test_quotes, test_claim = claim_tests(NB, CLAIMS)


def test_the_stored_decoding_run_is_what_the_prose_says():
    """"On the stored run GQA decoded faster than MHA and MQA faster still" (section 6): read from the
    stored output of the timing cell, which is the run the sentence describes."""
    prose = "On the stored run GQA decoded faster than MHA and MQA faster still"
    assert prose in markdown_text(NB)
    rates = dict(re.findall(r"^(MHA|GQA|MQA) \(n_kv=.*?([\d.]+) tokens/s", outputs(NB, "DEC = dict("), re.M))
    assert set(rates) == {"MHA", "GQA", "MQA"}
    assert float(rates["MHA"]) < float(rates["GQA"]) < float(rates["MQA"])
