"""The cross-attention checker (mha_core.teaching.cross_attention_exercises) on the trained
digit-reversal model: a step written from the definitions (tests/decoder_solutions.py, plain NumPy)
passes, each classic mistake is named, K and V recomputed at every step are caught by counting
the calls to layer.project, a blank stub is "not attempted", and bad arguments fail at the door."""

from __future__ import annotations

import re

import decoder_solutions as solution
import numpy as np
import pytest

from mha_core import scaled_dot_product_attention, split_heads
from mha_core.teaching import cross_attention_exercises as cx
from mha_core.teaching.cross_attention_exercises import CROSS_MISTAKES, check_cross_attention
from mha_core.training import seq2seq

# The mistake each wrong answer of decoder_solutions makes, and the name the checker must give it.
NAMED = {"no_padding_mask": "no_padding_mask", "mask_wrong_side": "mask_wrong_side",
         "kv_from_decoder": "kv_from_decoder", "kv_from_decoder_prefix": "kv_from_decoder",
         "q_from_encoder": "q_from_encoder", "roles_swapped": "q_from_encoder",
         "causal_mask": "causal_mask", "causal_only": "causal_mask", "no_scale": "no_scale",
         "kv_recomputed": "kv_recomputed"}


def stub(x_t, t, memory, n_src, layer, cache):
    raise NotImplementedError("your code here")


@pytest.fixture(scope="module")
def model():
    params, record = seq2seq.load_reverse()
    task, config = seq2seq.task_and_config(record)
    return params, task, config.n_heads


def test_a_step_written_from_the_definitions_passes(model):
    fb = check_cross_attention(solution.cross_attention)
    assert fb.ok, fb.message
    assert "at all 9 steps of 5 held-out sources" in fb.message
    assert "reverses 4 of 4 sources exactly" in fb.message
    assert "4 calls to layer.project for 2 batches" in fb.message


def test_the_library_step_in_the_exercises_signature_matches_cross_attend(model):
    params, task, h = model
    b = task.sample(np.random.default_rng(1), 6, "held_out")
    tokens, x_all, maps, layer = cx.greedy_with(cx.library_cross_attention, params, b["src"], b["n_src"], h)
    want_tokens, want_maps = seq2seq.greedy_decode(params, b["src"], b["n_src"], h)
    np.testing.assert_array_equal(tokens, want_tokens)
    np.testing.assert_allclose(maps, want_maps, rtol=0, atol=1e-12)
    P, T = task.n, params["tgt_pos"].shape[0]
    assert layer.counts("K") == layer.counts("V") == (1, 6 * P)  # once per source: the encoder-side cache
    assert layer.counts("Q") == layer.counts("O") == (T, 6 * T)  # one row per source per step
    assert layer.counts("K", after_first_step=True) == (0, 0)


@pytest.mark.parametrize("mistake", list(NAMED))
def test_each_mistake_is_named(model, mistake):
    fb = check_cross_attention(solution.wrong_cross(mistake))
    assert not fb.ok and fb.attempted
    assert fb.pitfall == NAMED[mistake], fb.message
    assert "Fix:" in fb.message


def test_the_checker_names_every_mistake_the_issue_lists():
    issue = {"no_padding_mask", "kv_from_decoder", "q_from_encoder", "causal_mask", "no_scale"}
    assert issue <= {m.name for m in CROSS_MISTAKES}
    assert all(NAMED[k] in {m.name for m in CROSS_MISTAKES} | {"kv_recomputed"} for k in NAMED)


def test_recomputing_k_and_v_is_counted_not_timed(model):
    fb = check_cross_attention(solution.wrong_cross("kv_recomputed"))
    assert fb.pitfall == "kv_recomputed" and "Your outputs are right, but slow" in fb.message
    # 2 batches of 9 steps, K and V at each step: 36 calls; 32 after the first step; 4 with the cache
    assert "computed K and V 36 times for 2 batches of 9 steps" in fb.message
    assert "32 of them at a step after the first" in fb.message and "it is 4 calls" in fb.message
    assert "counts the calls to layer.project; it does not time them" in fb.message
    assert not re.search(r"\d s\b|seconds", fb.message)


def test_every_mistake_is_far_outside_the_tolerance(model):
    """The right answer is within CROSS_RTOL of the library at every step; each named mistake's
    output is off by more than 1e5 x CROSS_RTOL at some step of the first case, so no mistake passes."""
    params, task, h = model
    label, batch = cx._cases(params, task, h)[0]
    outs, _, right, _, x_all, memory, layer = cx._run_reader(solution.cross_attention, params, batch, h, label, ())
    assert max(cx._error(o, right[:, t]) for t, o in enumerate(outs)) <= cx.CROSS_RTOL
    for m in CROSS_MISTAKES:
        gaps = []
        for t in range(len(outs)):
            want, rows = cx._cross(x_all, t, memory, batch["n_src"], layer, **m.options)
            gaps.append(np.inf if want.shape != right[:, t].shape else cx._error(want, right[:, t]))
        assert max(gaps) > 1e5 * cx.CROSS_RTOL, m.name


def test_the_cases_are_held_out_and_padded(model):
    params, task, h = model
    cases = cx._cases(params, task, h)
    pads = [task.n - b["n_src"] for _, b in cases]
    assert pads[0].tolist() == [6, 3, 0, 5] and pads[1].tolist() == [2]
    for _, b in cases:
        P = task.n
        digits = np.array([np.pad(row[P - n:], (0, task.max_len - n)) for row, n in zip(b["src"], b["lengths"],
                                                                                        strict=True)])
        assert seq2seq._held_out(digits, b["lengths"]).all()


def test_blank_crash_library_shape_and_input(model):
    fb = check_cross_attention(stub)
    assert not fb.attempted and not fb.ok and "not attempted yet" in repr(fb)

    fb = check_cross_attention(lambda x_t, t, memory, n_src, layer, cache: layer.project(x_t, "K") @ memory)
    assert fb.attempted and not fb.ok and "raised ValueError" in fb.message

    def library(x_t, t, memory, n_src, layer, cache):
        q = split_heads(layer.project(x_t[:, None], "Q"), layer.n_heads)
        k = split_heads(layer.project(memory, "K"), layer.n_heads)
        v = split_heads(layer.project(memory, "V"), layer.n_heads)
        out, w = scaled_dot_product_attention(q, k, v, seq2seq.source_mask(n_src, memory.shape[1]))
        return layer.project(out, "O"), w

    fb = check_cross_attention(library)
    assert not fb.ok and "calls mha_core's scaled_dot_product_attention" in fb.message

    fb = check_cross_attention(lambda x_t, t, memory, n_src, layer, cache: solution.cross_attention(
        x_t, t, memory, n_src, layer, cache)[0])
    assert not fb.ok and "expected the pair (out, weights)" in fb.message

    def in_place(x_t, t, memory, n_src, layer, cache):
        out = solution.cross_attention(x_t, t, memory, n_src, layer, cache)
        memory[:] = 0
        return out

    fb = check_cross_attention(in_place)
    assert not fb.ok and "changed its input memory in place" in fb.message

    def bad_weights(x_t, t, memory, n_src, layer, cache):
        out, w = solution.cross_attention(x_t, t, memory, n_src, layer, cache)
        return out, w[:, 0]

    fb = check_cross_attention(bad_weights)
    assert not fb.ok and "out is right, but weights has shape" in fb.message


def test_the_layer_counts_its_projections_and_is_read_only(model):
    params, _, h = model
    layer = cx.cross_layer(params, h)
    assert (layer.n_heads, layer.d_k) == (2, 16)
    layer.project(np.zeros((3, 9, 32)), "K")
    layer.step = 1
    layer.project(np.zeros((3, 32)), "K")
    assert layer.counts("K") == (2, 30) and layer.counts("K", after_first_step=True) == (1, 3)
    with pytest.raises(ValueError, match="name must be one of 'Q', 'K', 'V', 'O', got 'W_K'"):
        layer.project(np.zeros((3, 32)), "W_K")
    with pytest.raises(ValueError, match=r"needs x with 32 columns"):
        layer.project(np.zeros((3, 16)), "Q")
    with pytest.raises(ValueError, match="read-only"):
        layer._weights["W_Q"][0, 0] = 1.0


def test_the_checker_refuses_a_non_callable():
    for bad in (None, "cross_attention", 3):
        with pytest.raises(TypeError, match=r"fn must be your function cross_attention\(x_t, t, memory"):
            check_cross_attention(bad)
