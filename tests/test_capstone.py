"""mha_core.teaching.capstone: the capstone's counts, the loop without a cache, the timing verdict,
and the stored verdicts of notebooks/solutions/capstone_solutions.ipynb."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from lesson_claims import NOTEBOOKS, output_text

from mha_core.teaching import capstone
from mha_core.teaching.decoder_exercises import decoder_parts

SOLUTIONS = "solutions/capstone_solutions.ipynb"


def test_the_verdict_needs_the_runs_apart():
    assert capstone._verdict([1.0, 1.1, 1.2], [2.0, 2.1, 2.2], True).startswith("the cache is faster")
    assert capstone._verdict([2.0, 2.1], [1.0, 1.1], True).startswith("the cache is slower")
    assert "cannot be told apart" in capstone._verdict([1.0, 2.5], [2.0, 2.1], True)
    assert "different tokens" in capstone._verdict([1.0], [2.0], False)


def test_the_speedup_is_best_over_best():
    assert capstone.CacheTiming((2.0, 1.0), (4.0, 3.0), True, "").speedup == 3.0
    assert capstone.CacheTiming((), (), False, "").speedup is None


def test_the_entry_points_validate():
    with pytest.raises(TypeError, match="model"):
        capstone.model_numbers(object(), 3)
    with pytest.raises(TypeError, match="parts"):
        capstone.recompute_loop(lambda x, p, c: x, [1], 1, parts=None)
    with pytest.raises(TypeError, match="layer"):
        capstone.recompute_loop(None, [1], 1, parts=None)
    with pytest.raises(TypeError, match="generate"):
        capstone.time_the_cache(None, None, [1], 1, parts=None)


def test_model_numbers_validates_n_tokens(smollm2):
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="n_tokens"):
            capstone.model_numbers(smollm2, bad)


def test_the_counts_match_the_arrays_and_one_mac_per_weight(smollm2):
    n = capstone.model_numbers(smollm2, 7)
    assert n.counted == n.params["total"] == sum(a.size for a in smollm2.arrays.values())
    m = n.macs_per_token
    assert m["projections"] + m["ffn"] + m["head"] == n.params["total"] - n.params["norms"]
    # written out: 30 layers x 9 heads of d_k = 64 reading 7 keys, for scores and for values
    assert m["attention"] == smollm2.n_layers * 2 * smollm2.n_heads * 7 * smollm2.d_k
    assert n.kv_bytes == smollm2.n_layers * 7 * smollm2.n_kv_heads * 2 * smollm2.d_k * 4


def test_the_recomputing_loop_writes_the_models_tokens(smollm2):
    from decoder_solutions import layer_step, new_cache

    def layer(x, p, cfg):  # the independent float64 layer of tests/decoder_solutions.py, no cache kept
        return layer_step(x, p, cfg, new_cache(), np.arange(x.shape[0])).astype(np.float32)

    ids = smollm2.encode("The capital of France is")
    want = [s.id for s in smollm2.write(ids, 3)]
    assert capstone.recompute_loop(layer, ids, 3, decoder_parts(smollm2)) == want


def test_a_blank_or_broken_reader_is_not_timed(smollm2):
    parts = decoder_parts(smollm2)

    def blank(ids, n_new, parts):
        raise NotImplementedError("your code here")

    t = capstone.time_the_cache(blank, blank, np.array([1, 2]), 1, parts)
    assert t.verdict.startswith("not measured yet") and t.cached == () and t.speedup is None
    t = capstone.time_the_cache(lambda *a: 1 / 0, blank, np.array([1, 2]), 1, parts)
    assert "ZeroDivisionError" in t.verdict


def test_the_capstone_solutions_pass_on_their_own_prompt():
    """The stored verdicts of the solutions: both checkers say "correct", and the timing cell
    prints a verdict of time_the_cache (strict nbval proves a fresh run prints the same checks)."""
    cells = [c for c in json.loads((NOTEBOOKS / SOLUTIONS).read_text())["cells"] if c["cell_type"] == "code"]
    verdicts = [output_text(c) for c in cells if re.search(r"^verdict = ", "".join(c["source"]), re.M)]
    assert len(verdicts) == 5 and all(v.startswith("Feedback (correct)") for v in verdicts)
    repeated = output_text(next(c for c in cells if "repeated = [" in "".join(c["source"])))
    assert repeated.startswith("Feedback (not yet, pitfall cache_after_repeat)")
    source = "".join(next(c for c in cells if "check_generation_loop(generate" in "".join(c["source"]))["source"])
    from mha_core.teaching.decoder_exercises import GEN_PROMPT

    assert re.search(r'^PROMPT = "(.+)"', source, re.M).group(1) != GEN_PROMPT  # a prompt of its own
    timing = output_text(next(c for c in cells if "time_the_cache(" in "".join(c["source"])))
    assert re.search(r"^verdict: the ", timing, re.M)


# ------------------------------------------------------------------ the reader's own counts


def test_the_param_checker_names_its_slips(smollm2):
    parts = decoder_parts(smollm2)
    vocab, d = smollm2.arrays["tok_embed"].shape
    right = sum(a.size for p in parts.layers for a in p.values()) + vocab * d + d

    def answer(value):
        return capstone.check_param_count(lambda layers, v, dm: value, smollm2)

    assert answer(right).ok
    assert answer(float(right)).ok  # a whole float is a whole number
    assert answer(right + vocab * d).pitfall == "head_counted_twice"
    assert answer(right - vocab * d).pitfall == "no_embedding"
    assert answer(right - d).pitfall == "no_final_norm"
    assert not answer(right + 1).ok and answer(right + 1).pitfall is None
    assert not answer("many").ok
    with pytest.raises(TypeError, match="fn"):
        capstone.check_param_count(None, smollm2)


def test_the_mac_checker_needs_both_lengths_and_names_its_slips(smollm2):
    def macs(t, part_fn=lambda m: m["total"]):
        return part_fn(capstone.model_numbers(smollm2, t).macs_per_token)

    def check(fn):
        return capstone.check_macs_per_token(fn, smollm2, 7)

    assert check(lambda t, layers, cfg, vocab: macs(t)).ok
    assert not check(lambda t, layers, cfg, vocab: macs(7)).ok  # right at 7, wrong at 14
    assert check(lambda t, layers, cfg, vocab: macs(t) - macs(t, lambda m: m["attention"]) // 2).pitfall == "scores_only"
    assert check(lambda t, layers, cfg, vocab: macs(t) - macs(t, lambda m: m["head"])).pitfall == "no_head"
    n_kv_only = lambda t, layers, cfg, vocab: macs(t) - macs(t, lambda m: m["attention"]) * 2 // 3  # noqa: E731
    assert check(n_kv_only).pitfall == "attention_with_n_kv_heads"
    with pytest.raises(ValueError, match="n_tokens"):
        capstone.check_macs_per_token(lambda *a: 0, smollm2, 0)


def test_the_cache_checker_reads_the_readers_arrays(smollm2):
    def caches(heads, n, dtype=np.float32):
        shape = (heads, n, smollm2.d_k)  # (heads, T, d_k)
        return [{"k": np.zeros(shape, dtype), "v": np.zeros(shape, dtype)} for _ in range(smollm2.n_layers)]

    right = caches(smollm2.n_kv_heads, 5)
    assert capstone.check_kv_bytes(capstone.cache_nbytes, right, smollm2, 5).ok
    assert capstone.check_kv_bytes(lambda c: capstone.cache_nbytes(c) // 4, right, smollm2, 5).pitfall == \
        "numbers_not_bytes"
    assert capstone.check_kv_bytes(lambda c: capstone.cache_nbytes(c[0]), right, smollm2, 5).pitfall == "one_layer"
    assert capstone.check_kv_bytes(capstone.cache_nbytes, caches(smollm2.n_heads, 5), smollm2, 5).pitfall == \
        "cache_after_repeat"
    mixed = caches(smollm2.n_kv_heads, 5)
    mixed[1] = caches(smollm2.n_kv_heads, 5, np.float64)[1]  # one layer in float64, as after np.sqrt(d_k)
    assert capstone.check_kv_bytes(capstone.cache_nbytes, mixed, smollm2, 5).pitfall == "float64_cache"
    assert not capstone.check_kv_bytes(capstone.cache_nbytes, caches(smollm2.n_kv_heads, 6), smollm2, 5).ok
    empty = capstone.check_kv_bytes(capstone.cache_nbytes, [{} for _ in range(smollm2.n_layers)], smollm2, 5)
    assert not empty.ok and not empty.attempted


def test_written_returns_nothing_for_a_blank_loop(smollm2, capsys):
    parts = decoder_parts(smollm2)

    def blank(ids, n_new, parts, caches=None):
        raise NotImplementedError("your code here")

    assert capstone.written(blank, [1, 2], 3, parts, [{} for _ in parts.layers]) == []
    assert "not written yet" in capsys.readouterr().out
    with pytest.raises(TypeError, match="caches"):
        capstone.written(blank, [1, 2], 3, parts, [{}])


def test_the_loop_checker_validates_what_it_refuses():
    from mha_core.teaching.decoder_exercises import check_generation_loop

    for bad in (["prefill"], ("no_such_function",)):
        with pytest.raises(ValueError, match="refuse"):
            check_generation_loop(lambda ids, n, parts: [], refuse=bad)


def test_written_tells_a_three_argument_loop_to_take_the_caches(smollm2, capsys):
    parts = decoder_parts(smollm2)
    assert capstone.written(lambda ids, n_new, parts: [1] * n_new, [1, 2], 2, parts, [{} for _ in parts.layers]) == []
    assert "fourth argument, caches" in capsys.readouterr().out
