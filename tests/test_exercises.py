"""The exercise checkers: right answers pass, each known mistake is named, user bugs are reported."""

from __future__ import annotations

import numpy as np
import pytest
from references import reference_mha

import mha_core as m
from mha_core.teaching import exercises as ex
from mha_core.teaching import pitfalls as pf
from mha_core.teaching.exercises import Feedback

# pitfall name -> the checker that must recognise it
CHECKER_FOR = {
    "scale_sqrt_d_model": ex.check_attention,
    "scale_missing": ex.check_attention,
    "attention_softmax_over_queries": ex.check_attention,
    "mask_after_softmax": ex.check_attention,
    "softmax_over_queries": ex.check_softmax,
    "softmax_unstable": ex.check_softmax,
    "causal_mask_upper": ex.check_causal_mask,
    "causal_mask_without_diagonal": ex.check_causal_mask,
    "causal_mask_inverted": ex.check_causal_mask,
    "split_without_transpose": ex.check_split_heads,
    "merge_without_transpose": ex.check_merge_heads,
    "no_output_projection": ex.check_multi_head_attention,
    "scale_d_k": ex.check_attention,
    "mask_ignored": ex.check_attention,
    "mask_inverted": ex.check_attention,
    "mask_multiplied": ex.check_attention,
    "layer_without_transpose": ex.check_multi_head_attention,
    "layer_split_without_transpose": ex.check_multi_head_attention,
    "layer_merge_without_transpose": ex.check_multi_head_attention,
    "weights_transposed": ex.check_multi_head_attention,
}


def test_every_pitfall_has_a_checker():
    assert set(CHECKER_FOR) == set(pf.PITFALLS)


# ---------------------------------------------------------------- right answers pass


# Right answers written here, independently of mha_core: the checkers compare with mha_core, so
# feeding them mha_core's own functions would only show that a function equals itself.


def _split_moveaxis(x, h):
    *lead, n, width = x.shape
    return np.moveaxis(x.reshape(*lead, n, h, width // h), -2, -3)  # (..., h, N, d_k)


def _merge_concat(x):
    return np.concatenate([x[..., i, :, :] for i in range(x.shape[-3])], axis=-1)  # (..., N, h*d_v)


def _causal_by_loops(n):
    return np.array([[j <= i for j in range(n)] for i in range(n)], dtype=bool).reshape(n, n)


def _softmax_by_formula(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _attention_by_formula(q, k, v, mask=None):
    scores = np.einsum("...qd,...kd->...qk", q, k) / np.sqrt(q.shape[-1])  # (..., N_q, N_k)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    return _softmax_by_formula(scores) @ v, None  # (out, weights): the checker reads out


def _mha_reference(x, params, h):
    if x.ndim == 3:  # (B, N, d_model): the capstone's batch case, one sequence at a time
        return np.stack([reference_mha(xb, params, h) for xb in x])
    return reference_mha(x, params, h)  # float64, per-head slices, from tests/references.py


@pytest.mark.parametrize(
    "checker, fn",
    [
        (ex.check_split_heads, _split_moveaxis),
        (ex.check_merge_heads, _merge_concat),
        (ex.check_causal_mask, _causal_by_loops),
        (ex.check_causal_mask, lambda n: np.tril(np.ones((n, n), dtype=bool))),
        (ex.check_softmax, _softmax_by_formula),
        (ex.check_attention, _attention_by_formula),
        (ex.check_attention, lambda q, k, v, mask=None: _attention_by_formula(q, k, v, mask)[0]),
        (ex.check_multi_head_attention, _mha_reference),
        (ex.check_scale, lambda d_model, h: (d_model // h) ** -0.5),
    ],
)
def test_right_answers_pass(checker, fn):
    fb = checker(fn)
    assert isinstance(fb, Feedback)
    assert fb.ok, fb.message
    assert fb.pitfall is None
    assert "correct" in repr(fb)


# ---------------------------------------------------------------- each pitfall is named


@pytest.mark.parametrize("name", sorted(CHECKER_FOR))
def test_each_pitfall_is_named(name):
    fb = CHECKER_FOR[name](pf.PITFALLS[name].fn)
    assert not fb.ok
    assert fb.pitfall == name, fb.message
    assert pf.PITFALLS[name].answer in fb.message
    assert name in repr(fb)


def test_sqrt_d_model_message_reads_as_promised():
    fb = ex.check_attention(pf.attention_scaled_by_sqrt_d_model)
    assert "your output matches the sqrt(d_model)-scaled answer" in fb.message.lower()


def test_mask_after_softmax_is_only_visible_with_a_mask():
    assert ex.check_attention(pf.attention_mask_after_softmax, with_mask=False).ok
    assert ex.check_attention(pf.attention_mask_after_softmax).pitfall == "mask_after_softmax"


# ---------------------------------------------------------------- the scale


@pytest.mark.parametrize(
    "value, ok, pitfall, words",
    [
        (1 / 8, True, None, "1/sqrt(d_k)"),
        (np.float32(0.125), True, None, "1/sqrt(d_k)"),
        (1 / np.sqrt(512), False, "scale_sqrt_d_model", "1/sqrt(d_model)"),
        (1.0, False, "scale_missing", "is 1"),
        (8.0, False, None, "divisor"),
        (1 / 64, False, "scale_d_k", "square root"),
        (np.sqrt(512), False, None, "sqrt(d_model)"),
        (0.3, False, None, "expected 1/sqrt(d_k)"),
    ],
)
def test_scale_values(value, ok, pitfall, words):
    fb = ex.check_scale(value)
    assert fb.ok is ok
    assert fb.pitfall == pitfall
    assert words in fb.message


def test_scale_for_another_layer():
    assert ex.check_scale(0.25, d_model=64, n_heads=4).ok
    assert not ex.check_scale(0.125, d_model=64, n_heads=4).ok


def test_scale_function_hard_coded_number_is_caught():
    fb = ex.check_scale(lambda d_model, h: 0.125)  # right for 512/8 only
    assert not fb.ok and "d_model=4096" in fb.message


def test_scale_function_with_sqrt_d_model():
    fb = ex.check_scale(lambda d_model, h: 1 / np.sqrt(d_model))
    assert fb.pitfall == "scale_sqrt_d_model"


def test_scale_function_returning_a_non_number_or_raising():
    assert "returned a str" in ex.check_scale(lambda d, h: "0.125").message
    assert "returned a bool" in ex.check_scale(lambda d, h: True).message
    fb = ex.check_scale(lambda d, h: d / 0)
    assert not fb.ok and "ZeroDivisionError" in fb.message


@pytest.mark.parametrize("bad", [True, "0.125", None, [0.125]])
def test_scale_argument_validation(bad):
    with pytest.raises(TypeError, match="fn_or_value"):
        ex.check_scale(bad)


def test_scale_layer_validation():
    with pytest.raises(ValueError, match="does not divide"):
        ex.check_scale(0.1, d_model=10, n_heads=3)


# ---------------------------------------------------------------- the reader's bugs


ALL_CHECKERS = [
    ex.check_split_heads,
    ex.check_merge_heads,
    ex.check_causal_mask,
    ex.check_softmax,
    ex.check_attention,
    ex.check_multi_head_attention,
]


@pytest.mark.parametrize("checker", ALL_CHECKERS)
def test_exceptions_in_user_code_are_reported_not_raised(checker):
    def broken(*args):
        raise RuntimeError("boom <here>")

    fb = checker(broken)
    assert not fb.ok and fb.pitfall is None
    assert "RuntimeError: boom <here>" in fb.message
    assert "Traceback" not in fb.message
    assert "&lt;here&gt;" in fb._repr_html_()  # escaped in HTML


@pytest.mark.parametrize("checker", ALL_CHECKERS)
def test_wrong_signature_is_reported(checker):
    fb = checker(lambda: None)
    assert not fb.ok and "The checker calls" in fb.message and "does not accept" in fb.message


@pytest.mark.parametrize("checker", [*ALL_CHECKERS, ex.check_scale])
@pytest.mark.parametrize("bad", [None, "split_heads", np.zeros(3)])
def test_non_callables_are_refused(checker, bad):
    with pytest.raises(TypeError, match="fn"):
        checker(bad)


@pytest.mark.parametrize("checker", ALL_CHECKERS)
def test_a_number_is_not_a_function(checker):
    with pytest.raises(TypeError, match="fn must be a callable"):
        checker(3)


@pytest.mark.parametrize("checker", ALL_CHECKERS)
def test_non_array_results_are_reported(checker):
    fb = checker(lambda *args: [[0.0]])
    assert not fb.ok and "returned a list" in fb.message


def test_wrong_shape_is_reported_with_a_hint():
    fb = ex.check_split_heads(lambda x, h: x.reshape(*x.shape[:-1], h, -1))  # (N, h, d_k)
    assert not fb.ok and "Wrong shape" in fb.message
    assert "did not move the head axis" in fb.message
    fb = ex.check_merge_heads(lambda x: np.swapaxes(x, -3, -2))  # (N, h, d_v): forgot the reshape
    assert "Wrong shape" in fb.message and "reshape the last two axes" in fb.message
    fb = ex.check_softmax(lambda x: x[..., 0])
    assert "Wrong shape" in fb.message and fb.pitfall is None


def test_split_that_ignores_the_batch_axis_fails_on_the_batch_case():
    def split_2d_only(x, h):
        n, width = x.shape  # breaks on (B, N, d_model)
        return x.reshape(n, h, width // h).transpose(1, 0, 2)

    fb = ex.check_split_heads(split_2d_only)
    assert not fb.ok and "(B, N, d_model)" in fb.message
    assert "`n, width = x.shape`" in fb.message and "(2, 5, 12)" in fb.message and "*lead, n, d = x.shape" in fb.message


def test_wrong_dtype_is_reported():
    fb = ex.check_split_heads(lambda x, h: _split_moveaxis(x.astype(np.float32), h))
    assert not fb.ok and "dtype" in fb.message and "float32" in fb.message
    fb = ex.check_causal_mask(lambda n: np.tril(np.ones((n, n))))
    assert "must be bool" in fb.message and "pattern is right" in fb.message
    fb = ex.check_causal_mask(lambda n: np.triu(np.ones((n, n), dtype=int)))
    assert "must be bool" in fb.message and "pattern is right" not in fb.message


def test_in_place_modification_is_reported():
    def softmax_in_place(x):
        x -= x.max(axis=-1, keepdims=True)
        np.exp(x, out=x)
        x /= x.sum(axis=-1, keepdims=True)
        return x

    fb = ex.check_softmax(softmax_in_place)
    assert not fb.ok and "in place" in fb.message

    def mha_mutating_params(x, params, h):
        params["W_O"][:] = 0.0
        return _mha_reference(x, params, h)

    assert "in place" in ex.check_multi_head_attention(mha_mutating_params).message


def test_nan_output_is_reported():
    fb = ex.check_softmax(lambda x: np.full_like(x, np.nan))
    assert not fb.ok and "NaN" in fb.message


def test_unknown_wrong_values_get_a_generic_diagnosis():
    fb = ex.check_attention(lambda q, k, v, mask=None: _attention_by_formula(q, k, v, mask)[0] + 0.1)
    assert not fb.ok and fb.pitfall is None and "largest error 0.1" in fb.message
    fb = ex.check_causal_mask(lambda n: np.ones((n, n), dtype=bool))
    assert not fb.ok and "entries differ" in fb.message


def test_softmax_on_another_axis_is_explained():
    fb = ex.check_softmax(lambda x: np.exp(x - x.max(axis=0)) / np.exp(x - x.max(axis=0)).sum(axis=0))
    assert not fb.ok and "along axis 0" in fb.message


def test_with_mask_must_be_bool():
    with pytest.raises(TypeError, match="with_mask"):
        ex.check_attention(m.scaled_dot_product_attention, with_mask=1)


def test_checkers_are_deterministic():
    a = ex.check_attention(pf.attention_without_scale)
    b = ex.check_attention(pf.attention_without_scale)
    assert a == b and repr(a) == repr(b)


def test_feedback_reprs():
    good, bad = Feedback(True, "fine"), Feedback(False, "x < y", "scale_missing")
    assert repr(good) == "Feedback (correct): fine"
    assert repr(bad) == "Feedback (not yet, pitfall scale_missing): x < y"
    assert "&#10003;" in good._repr_html_() and "&#10007;" in bad._repr_html_()
    assert "x &lt; y" in bad._repr_html_()


# ---------------------------------------------------------------- blank exercises


def _stub(*args, **kwargs):
    raise NotImplementedError("your code here")


@pytest.mark.parametrize("checker", [*ALL_CHECKERS, ex.check_scale])
def test_a_blank_stub_is_not_attempted_yet_and_does_not_raise(checker):
    fb = checker(_stub)
    assert fb.attempted is False and fb.ok is False and fb.pitfall is None
    assert repr(fb).startswith("Feedback (not attempted yet): ")
    assert "NotImplementedError" in fb.message and "run this cell again" in fb.message
    assert "&#9675;" in fb._repr_html_() and "not attempted yet" in fb._repr_html_()


def test_ellipsis_is_a_blank_number():
    fb = ex.check_scale(...)
    assert fb.attempted is False and not fb.ok
    for qid in ex.QUESTIONS:
        fb = ex.check_answer(qid, ...)
        assert fb.attempted is False and not fb.ok and "Replace ..." in fb.message


def test_an_attempt_is_attempted():
    assert ex.check_softmax(pf.softmax_without_max_subtraction).attempted
    assert ex.check_softmax(m.softmax).attempted


# ---------------------------------------------------------------- the capstone


def _mha_with(attention):
    """A right layer (per-head slices, concat, W_O) around the given ``attention(q, k, v) -> out``."""

    def mha(x, params, n_heads):
        d_k = x.shape[-1] // n_heads
        heads = []
        for i in range(n_heads):  # head i owns columns i*d_k:(i+1)*d_k
            cols = slice(i * d_k, (i + 1) * d_k)
            heads.append(attention(*(x @ params[w][:, cols] for w in ("W_Q", "W_K", "W_V"))))
        return np.concatenate(heads, axis=-1) @ params["W_O"]  # (..., N, d_model)

    return mha


def _attention_out(q, k, v):
    return _attention_by_formula(q, k, v)[0]


def test_capstone_from_hand_written_pieces_passes():
    assert ex.check_multi_head_attention(_mha_with(_attention_out)).ok


def test_the_softmax_pitfall_is_the_overflow():
    fb = ex.check_softmax(lambda x: np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True))
    assert fb.pitfall == "softmax_unstable" and "logits near 1000" in fb.message


def test_capstone_handles_the_batch_axis():
    def mha_2d_only(x, params, n_heads):
        if x.ndim != 2:
            raise ValueError("only (N, d_model)")
        return _mha_reference(x, params, n_heads)

    fb = ex.check_multi_head_attention(mha_2d_only)
    assert not fb.ok and "(B, N, d_model)" in fb.message


@pytest.mark.parametrize(
    "name, wrong_layer",
    [
        # q rescaled so that the right attention divides by sqrt(d_model) = sqrt(12), or by 1
        ("scale_sqrt_d_model", lambda q, k, v: _attention_out(q * np.sqrt(q.shape[-1] / 12), k, v)),
        ("scale_missing", lambda q, k, v: _attention_out(q * np.sqrt(q.shape[-1]), k, v)),
    ],
)
def test_capstone_names_layer_level_scale_mistakes(name, wrong_layer):
    # the student's layer calls a wrongly scaled attention inside an otherwise right layer
    assert ex.check_multi_head_attention(_mha_with(wrong_layer)).pitfall == name


def test_capstone_names_the_missing_transpose():
    fb = ex.check_multi_head_attention(pf.multi_head_attention_without_transpose)
    assert fb.pitfall == "layer_without_transpose"


# ---------------------------------------------------------------- numeric questions
# Expected answers computed here from the formulas, not by the counting functions.

GQA_BYTES = 2 * 80 * 4096 * 8 * 128 * 2  # K and V, layers, tokens, n_kv, d_k, fp16 bytes
RIGHT = {
    "params_768_12": 4 * 768 * 768,
    "d_k_768_12": 768 // 12,
    "attention_macs_512_8_2000": 2 * 2000**2 * 512,
    "kv_cache_gqa_mib": GQA_BYTES / 2**20,
}
WRONG = {
    "params_768_12": [(12 * 4 * 768 * 768, "multiplied by the number of heads"),
                      (4 * 768 * 768 + 4 * 768, "biases"), (3 * 768 * 768, "W_O")],
    "d_k_768_12": [(768, "d_model / h")],
    "attention_macs_512_8_2000": [(2000**2 * 512, "weighted sum"), (2 * 2000**2 * 64, "one head"),
                                  (4 * 2000 * 512**2, "projections")],
    "kv_cache_gqa_mib": [(GQA_BYTES * 8 / 2**20, "plain MHA"), (GQA_BYTES / 2 / 2**20, "AND the values"),
                         (GQA_BYTES / 80 / 2**20, "one layer"), (GQA_BYTES / 8 / 2**20, "MQA")],
}


def test_every_question_is_covered():
    assert set(RIGHT) == set(WRONG) == set(ex.QUESTIONS)


@pytest.mark.parametrize("qid", sorted(RIGHT))
def test_right_numbers_pass(qid):
    assert ex.check_answer(qid, RIGHT[qid]).ok
    assert ex.check_answer(qid, float(RIGHT[qid]) * (1 + 1e-4)).ok  # a rounded answer is fine


@pytest.mark.parametrize("qid, value, words", [(q, v, w) for q in sorted(WRONG) for v, w in WRONG[q]])
def test_known_wrong_numbers_are_explained(qid, value, words):
    fb = ex.check_answer(qid, value)
    assert not fb.ok and fb.attempted and words in fb.message


def test_an_unknown_wrong_number_gets_a_generic_answer():
    fb = ex.check_answer("params_768_12", 1234)
    assert not fb.ok and "is not it" in fb.message


def test_the_gqa_answer_is_1280_mib():
    assert RIGHT["kv_cache_gqa_mib"] == 1280


@pytest.mark.parametrize("bad", ["2,359,296", None, True, [1]])
def test_answer_must_be_a_number(bad):
    with pytest.raises(TypeError, match="value must be a number"):
        ex.check_answer("params_768_12", bad)


@pytest.mark.parametrize("bad", ["nope", 3, None])
def test_unknown_question_is_refused(bad):
    with pytest.raises(ValueError, match="question_id must be one of"):
        ex.check_answer(bad, 1)
