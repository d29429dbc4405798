"""Notebook 06 (KV cache, GQA): each claim of its prose, checked next to the sentence it defends."""

from __future__ import annotations

import re

import numpy as np
from lesson_claims import Claims, markdown_text, outputs

from mha_core.ui.lesson_figures import clearly_apart

NB = "06_kv_cache_gqa.ipynb"
CLAIMS = Claims(NB)


@CLAIMS(
    r"We keep each layer's $K = X W_K$ and $V = X W_V$ in fp16 (2 bytes a number), exactly what a "
    r"decoder would cache, and compare the bytes with `kv_cache_bytes`.",
    after="cfg = MHAConfig(d_model=256, n_heads=8)",
)
def built_cache_bytes_match_formula(elements, N, cfg, LAYERS, built, kv_cache_bytes):
    assert elements == 2 * N * cfg.d_model * LAYERS
    assert built == kv_cache_bytes(cfg, N, n_layers=LAYERS, dtype=np.float16)


@CLAIMS(
    r"$W_K$ and $W_V$ shrink to $(d_{model}, n_{kv} d_k)$, and so does the cache. $W_Q$ and $W_O$ keep "
    r"their size.",
    after="divisors = [n for n in range(cfg.h, 0, -1)",
)
def gqa_shrinks_w_k_w_v_and_cache(kv_cache_bytes, MHAConfig, cfg, N, LAYERS, mha_cache, divisors, count_params):
    assert all(kv_cache_bytes(MHAConfig(cfg.d_model, cfg.h, n_kv_heads=n), N, n_layers=LAYERS) * (cfg.h // n) == mha_cache for n in divisors)
    assert all(count_params(MHAConfig(cfg.d_model, cfg.h, n_kv_heads=n))['W_K'] == count_params(MHAConfig(cfg.d_model, cfg.h, n_kv_heads=n))['W_V'] == cfg.d_model * n * cfg.d_k and count_params(MHAConfig(cfg.d_model, cfg.h, n_kv_heads=n))['W_Q'] == cfg.d_model**2 for n in divisors)


@CLAIMS(
    r"the same weights give the same output, bit for bit.",
    after="x0 = np.random.default_rng(1)",
)
def gqa_with_h_kv_heads_is_mha(mha_out, gqa_out):
    assert np.array_equal(mha_out, gqa_out)


@CLAIMS(
    r"Copy each key/value column block into its group and plain MHA gives the GQA output",
    after="n_kv = 2",
)
def copied_kv_blocks_give_gqa(shared, copied):
    assert np.allclose(shared, copied, atol=1e-5)


@CLAIMS(
    r"First the whole range as a figure",
    after="BIG = dict(d_model=4096, n_heads=32, layers=32)",
)
def cache_gib_over_the_range(gib, n_kvs):
    assert gib[0] == 16
    assert all(g * n_kvs[0] == gib[0] * n for g, n in zip(gib, n_kvs, strict=True))


@CLAIMS(
    r"At 32 layers, $d_{model} = 4096$, 32k tokens in fp16: 16 GiB (MHA), 4 GiB (GQA, 8 K/V heads), "
    r"0.5 GiB (MQA).",
    after='rows = [("MHA", 32), ("GQA", 8), ("MQA", 1)]',
)
def cache_table_16_4_half_gib(table, N_CTX, BIG, fp16, GIB, total, per_token):
    assert table['MHA'] == 2 * N_CTX * BIG['d_model'] * BIG['layers'] * fp16 == 16 * GIB
    assert table['GQA'] == 4 * GIB
    assert table['MQA'] == GIB // 2
    assert total == N_CTX * per_token


@CLAIMS(
    r"more than the fp16 weights of such a model's attention layers ($32 \times 4 \times 4096^2 \times 2$ "
    r"bytes = 4 GiB)",
    after="attn_weight_bytes = ",
)
def cache_exceeds_attention_weights(attn_weight_bytes, GIB, table):
    assert attn_weight_bytes == 4 * GIB
    assert table['MHA'] == 4 * attn_weight_bytes


@CLAIMS(
    r"running a sequence through the loop (`mha_core.decode`) gives the causal layer's output, for MHA, "
    r"GQA and MQA.",
    after="small = MHAConfig(d_model=64, n_heads=8)",
)
def decode_equals_causal_forward(decode, x_seq, init_params, MHAConfig, multi_head_attention):
    assert all(np.abs(decode(x_seq, init_params(MHAConfig(64, 8, n_kv_heads=n), rng=n, dtype=np.float64), 8, n_kv_heads=n) - multi_head_attention(x_seq, init_params(MHAConfig(64, 8, n_kv_heads=n), rng=n, dtype=np.float64), 8, n_kv_heads=n, causal=True)).max() < 1e-12 for n in (8, 2, 1))


@CLAIMS(
    r"A realistic model this time: 32 layers, $d_{model}=4096$, $h=32$ ($d_k=128$), fp16, batch 1.",
    after="BIG = dict(d_model=4096, n_heads=32, layers=32)",
)
def big_model_sizes(BIG):
    assert BIG['layers'] == 32
    assert BIG['d_model'] // BIG['n_heads'] == 128


@CLAIMS(
    r"MQA's cache is 16 times smaller than MHA's, but each of the 16 query heads still takes a dot product "
    r"with each of the 4,096 cached keys",
    after="DEC = dict(",
)
def mqa_cache_16_times_smaller(cache_mib, DEC):
    assert cache_mib['MHA'] == 16 * cache_mib['MQA']
    assert DEC['n_heads'] == 16
    assert DEC['context'] == 4096


@CLAIMS(
    r"the same number of MACs in every layout (printed above)",
    after="for stage in (*DECODE_STAGES",
)
def same_macs_every_layout(macs, DEC, layouts):
    assert macs == 2 * DEC['n_heads'] * DEC['context'] * (DEC['d_model'] // DEC['n_heads'])
    assert all(layouts[n] * (DEC['n_heads'] // layouts[n]) == DEC['n_heads'] for n in layouts)


@CLAIMS(
    r"before each run it reads a 64 MiB buffer",
    after="DEC = dict(",
)
def eviction_buffer_is_64_mib():
    from mha_core.ui.lesson_figures import EVICT_BYTES

    assert EVICT_BYTES == 64 * 2**20


@CLAIMS(
    r"Same model, 32k context ($N = 32{,}768$), fp16, batch 1.",
    after='rows = [("MHA", 32), ("GQA", 8), ("MQA", 1)]',
)
def context_is_32k(N_CTX):
    assert N_CTX == 32_768 == 32 * 1024


test_quotes, test_claim = CLAIMS.tests()


# -- section 6, the timing cells: their outputs are not compared by nbval (they change from run to
# run), so the sentences about them are checked on the stored run, which is the run the reader sees.


def _per_layout(pattern: str, text: str) -> dict[str, tuple[float, ...]]:
    found = {m[0]: tuple(map(float, m[1:])) for m in re.findall(pattern, text, re.M)}
    assert set(found) == {"MHA", "GQA", "MQA"}, text
    return found


def _stage_table() -> dict[str, dict[str, float]]:
    """The stored "ms per step" table: stage -> layout -> ms."""
    lines = outputs(NB, "for stage in (*DECODE_STAGES").split("\n")
    header = lines[0].split()[3:]
    assert header == ["MHA", "GQA", "MQA"], lines[0]
    table = {}
    for line in lines[1:8]:
        *stage, a, b, c = line.split()
        table[" ".join(stage)] = dict(zip(header, map(float, (a, b, c)), strict=True))
    return table


def _quoted(prose: str) -> None:
    assert prose in markdown_text(NB), f"prose no longer in {NB}: {prose!r}"


def _steps() -> dict[str, tuple[float, float]]:
    """The stored step of each layout: (fastest ms, spread)."""
    found = _per_layout(r"^(MHA|GQA|MQA) \(n_kv=.*one step ([\d.]+) ms \((\d+)%\)", outputs(NB, "DEC = dict("))
    return {name: (ms, pct / 100) for name, (ms, pct) in found.items()}


def _judged(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether the rule's verdict on two printed (rounded) timings is safe from their rounding."""
    return abs(abs(a[0] - b[0]) - (a[0] * a[1] + b[0] * b[1])) > 0.02 + 0.01 * (a[0] + b[0])


def test_stored_run_each_faster_verdict_follows_the_rule():
    """"Whether this run's GQA step is faster than MHA's, and MQA's than GQA's, by more than the
    spreads, the cell of the step times says" (section 6): each printed verdict follows the rule."""
    _quoted("Whether this run's GQA step is faster than MHA's, and MQA's than GQA's, by more than the spreads, "
            "the cell of the step times says")
    step = _steps()
    verdicts = dict(re.findall(r"^(GQA against MHA|MQA against GQA): (clearly apart|not apart)",
                               outputs(NB, "DEC = dict("), re.M))
    assert len(verdicts) == 2
    for pair, verdict in verdicts.items():
        fast, slow = pair.split(" against ")
        if _judged(step[fast], step[slow]):
            assert (verdict == "clearly apart") == clearly_apart(step[fast], step[slow]), (pair, step)
        if verdict == "clearly apart":
            assert step[fast][0] < step[slow][0], (pair, step)  # apart, and in the direction the sentence says


def test_stored_run_the_gain_falls_short_of_the_bytes_only_where_the_rule_says():
    _quoted("Where the measured gain falls short of the bytes by more than the spreads")
    step = _steps()
    found = {m[0]: (float(m[1]), float(m[2]), m[3]) for m in re.findall(
        r"^(GQA|MQA): speed-up over MHA predicted from the bytes read ([\d.]+)x, measured ([\d.]+)x; "
        r"(short of the prediction by more than the spreads|not clearly short)", outputs(NB, "read_mib = {"), re.M)}
    assert set(found) == {"GQA", "MQA"}
    for name, (predicted, measured, verdict) in found.items():
        expected = (step["MHA"][0] / predicted, step["MHA"][1])
        if verdict.startswith("short"):
            assert measured < predicted
        if _judged(expected, step[name]) and measured < predicted:
            assert verdict.startswith("short") == clearly_apart(expected, step[name]), (name, expected, step[name])


def test_stored_run_the_stages_add_up_to_the_step():
    _quoted("their times add up to the step's (the table below prints both, to check).")
    table = _stage_table()
    for name in ("MHA", "GQA", "MQA"):
        parts = sum(ms[name] for stage, ms in table.items() if stage not in ("step", "sum of the stages"))
        assert abs(parts - table["step"][name]) < 0.15 * table["step"][name], (name, parts, table["step"])
        assert abs(parts - table["sum of the stages"][name]) < 0.02, (name, parts, table["sum of the stages"])


def test_stored_run_prints_step_over_sum_for_each_layout():
    """"The last line prints their ratio for each layout" (section 6), and the cell of section 1
    prints kv_cache_bytes beside the cache built by hand, as section 1 promises."""
    _quoted("The last line prints their ratio for each layout")
    table = _stage_table()
    line = next(li for li in outputs(NB, "for stage in (*DECODE_STAGES").split("\n") if li.startswith("step / sum"))
    ratios = dict(zip(("MHA", "GQA", "MQA"), map(float, line.split()[3:]), strict=True))
    for name, ratio in ratios.items():
        assert abs(ratio - table["step"][name] / table["sum of the stages"][name]) < 0.02, (name, ratio)
    built = outputs(NB, "built = sum(K.nbytes")
    assert re.search(r"= ([\d,]+) bytes in fp16", built)[1] == re.search(r"kv_cache_bytes\(.*\) = ([\d,]+) bytes", built)[1]


def test_stored_run_weights_at_one_rate_the_cache_slower_the_smaller_it_is():
    _quoted("The weights are read at about the same rate in all three (the GB/s above), so this stage's time "
            "is roughly in proportion to their bytes, as predicted.")
    _quoted("the GB/s show it, the smaller the cache, the fewer of its bytes the attention gets through per second.")
    rates = _per_layout(r"^(MHA|GQA|MQA): weights read at +([\d.]+) GB/s, KV cache at +([\d.]+) GB/s",
                        outputs(NB, "for stage in (*DECODE_STAGES"))
    weights = [w for w, _ in rates.values()]
    assert max(weights) < 1.5 * min(weights), rates
    assert rates["MHA"][1] > rates["GQA"][1] > rates["MQA"][1], rates


def _stage_spreads() -> dict[str, dict[str, float]]:
    """The stored spreads of the stages: stage -> layout -> spread (a fraction)."""
    lines = outputs(NB, "for stage in (*DECODE_STAGES").split("\n")
    start = lines.index("spread (median run above the fastest):")
    spreads = {}
    for line in lines[start + 1:start + 7]:
        *stage, a, b, c = line.split()
        spreads[" ".join(stage)] = dict(zip(("MHA", "GQA", "MQA"), (int(v.rstrip("%")) / 100 for v in (a, b, c)),
                                            strict=True))
    return spreads


def test_stored_run_softmax_and_checks_do_not_shrink():
    """"the same for all three" by the rule: no two layouts' times are clearly apart."""
    _quoted("it takes about as long in all three.")
    _quoted("is small and the same for all three.")
    table, spreads = _stage_table(), _stage_spreads()
    for stage in ("softmax", "checks + cache write"):
        for a, b in (("MHA", "GQA"), ("GQA", "MQA"), ("MHA", "MQA")):
            timed = (table[stage][a], spreads[stage][a]), (table[stage][b], spreads[stage][b])
            assert not clearly_apart(*timed) or _judged(*timed) is False, (stage, a, b, timed)
    assert all(table["checks + cache write"][n] < 0.15 * table["step"][n] for n in ("MHA", "GQA", "MQA"))
