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
