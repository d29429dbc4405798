"""The exercise checkers: right answers pass, each known mistake is named, user bugs are reported."""

from __future__ import annotations

import re
from itertools import combinations
from pathlib import Path

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


def _split_stack(x, h):
    if x.shape[-1] % h:  # slicing alone would drop the last columns without a word
        raise ValueError(f"n_heads={h} does not divide d_model={x.shape[-1]}")
    d = x.shape[-1] // h
    return np.stack([x[..., i * d:(i + 1) * d] for i in range(h)], axis=-3)  # (..., h, N, d_k)


def _split_transpose_axes(x, h):
    y = x.reshape(*x.shape[:-1], h, x.shape[-1] // h)  # (..., N, h, d_k)
    lead = list(range(y.ndim - 3))
    return y.transpose(*lead, y.ndim - 2, y.ndim - 3, y.ndim - 1)  # (..., h, N, d_k)


def _softmax_row_by_row(x):
    out = np.empty_like(x)
    for idx in np.ndindex(x.shape[:-1]):  # one row of keys at a time
        row = np.exp(x[idx] - max(x[idx]))
        out[idx] = row / row.sum()
    return out


def _attention_additive_mask(q, k, v, mask=None):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., N_q, N_k)
    if mask is not None:
        scores = scores + np.where(mask, 0.0, -np.inf)  # an additive -inf mask
    return _softmax_by_formula(scores) @ v


def _attention_big_negative_fill(q, k, v, mask=None):
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(0, 2, 1)  # q scaled first; 3-D inputs here
    if mask is not None:
        scores = np.where(mask, scores, -1e9)  # a large negative number instead of -inf
    weights = _softmax_by_formula(scores)
    return weights @ v, weights


def _attention_renormalised_after(q, k, v, mask=None):
    weights = _softmax_by_formula(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]))
    if mask is not None:  # zero the blocked weights, then renormalise: the same as masking first
        weights = np.where(mask, weights, 0.0)
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return weights @ v


def _attention_with_library_softmax(q, k, v, mask=None):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # what 01 suggests: mha_core's softmax
    return m.softmax(scores, axis=-1, mask=mask) @ v


def _mha_reshape_einsum(x, params, n_heads):
    *lead, n, d_model = x.shape
    d_k = d_model // n_heads
    q, k, v = (np.swapaxes((x @ params[w]).reshape(*lead, n, n_heads, d_k), -3, -2) for w in ("W_Q", "W_K", "W_V"))
    weights = m.softmax(np.einsum("...qd,...kd->...qk", q, k) / np.sqrt(d_k))  # softmax is allowed here
    heads = weights @ v  # (..., h, N, d_k)
    return np.swapaxes(heads, -3, -2).reshape(*lead, n, d_model) @ params["W_O"]


def _mha_all_einsum(x, params, n_heads):
    d_model = x.shape[-1]
    d_k = d_model // n_heads
    W = {w: params[w].reshape(d_model, n_heads, d_k) for w in ("W_Q", "W_K", "W_V")}  # (d_model, h, d_k)
    q, k, v = (np.einsum("...nd,dhk->...hnk", x, W[w]) for w in ("W_Q", "W_K", "W_V"))
    heads = _softmax_by_formula(np.einsum("...hqk,...hnk->...hqn", q, k) / np.sqrt(d_k)) @ v
    return np.einsum("...hnk,hkD->...nD", heads, params["W_O"].reshape(n_heads, d_k, d_model))


def _mha_transposed_products(x, params, n_heads):
    # (W^T X^T)^T = X W: another way to write the same projections
    proj = {w: np.swapaxes(params[w].T @ np.swapaxes(x, -1, -2), -1, -2) for w in ("W_Q", "W_K", "W_V")}
    q, k, v = (_split_moveaxis(proj[w], n_heads) for w in ("W_Q", "W_K", "W_V"))
    return _merge_concat(_attention_by_formula(q, k, v)[0]) @ params["W_O"]


def _mha_with_slices(x, params, n_heads):
    return _mha_with(_attention_out)(x, params, n_heads)


# Several right answers per exercise, each written differently (and never by mha_core itself,
# except the softmax where an exercise hands it out).
RIGHT_VARIANTS = {
    "split_heads": (ex.check_split_heads, [
        _split_moveaxis,
        lambda x, h: np.swapaxes(x.reshape(*x.shape[:-1], h, -1), -3, -2),
        _split_stack,
        _split_transpose_axes,
        lambda x, h: np.einsum("...nhd->...hnd", x.reshape(*x.shape[:-1], h, x.shape[-1] // h)),
    ]),
    "merge_heads": (ex.check_merge_heads, [
        _merge_concat,
        lambda x: np.swapaxes(x, -3, -2).reshape(*x.shape[:-3], x.shape[-2], -1),
        lambda x: np.moveaxis(x, -3, -2).reshape(*x.shape[:-3], x.shape[-2], x.shape[-3] * x.shape[-1]),
        lambda x: np.einsum("...hnd->...nhd", x).reshape(*x.shape[:-3], x.shape[-2], -1),
    ]),
    "causal_mask": (ex.check_causal_mask, [
        _causal_by_loops,
        lambda n: np.tril(np.ones((n, n), dtype=bool)),
        lambda n: np.arange(n)[:, None] >= np.arange(n),
        lambda n: ~np.triu(np.ones((n, n), dtype=bool), k=1),
        lambda n: np.tri(n, dtype=bool),
    ]),
    "softmax": (ex.check_softmax, [
        _softmax_by_formula,
        lambda x: np.exp(x - x.max()) / np.exp(x - x.max()).sum(axis=-1, keepdims=True),  # global max
        lambda x: np.exp(x - x.max(axis=-1, keepdims=True)
                         - np.log(np.exp(x - x.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True))),
        _softmax_row_by_row,
    ]),
    "attention": (ex.check_attention, [
        _attention_by_formula,
        lambda q, k, v, mask=None: _attention_by_formula(q, k, v, mask)[0],
        _attention_additive_mask,
        _attention_big_negative_fill,
        _attention_renormalised_after,
        _attention_with_library_softmax,
    ]),
    "multi_head_attention": (ex.check_multi_head_attention, [
        _mha_reference,
        _mha_with_slices,
        _mha_reshape_einsum,
        _mha_all_einsum,
        _mha_transposed_products,
    ]),
    "scale": (ex.check_scale, [
        lambda d_model, h: (d_model // h) ** -0.5,
        lambda d_model, h: 1 / np.sqrt(d_model / h),
        lambda d_model, h: round(1 / np.sqrt(d_model / h), 4),  # rounded to 4 decimals
        lambda d_model, h: np.float32(1.0) / np.float32(np.sqrt(d_model // h)),
    ]),
}


def test_several_right_answers_per_exercise():
    assert all(len(fns) >= 4 for _, fns in RIGHT_VARIANTS.values())


@pytest.mark.parametrize(
    "checker, fn",
    [pytest.param(checker, fn, id=f"{name}-{i}") for name, (checker, fns) in RIGHT_VARIANTS.items()
     for i, fn in enumerate(fns)],
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


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("doc", ["README.md", "docs/teachers_guide.md"])
def test_the_docs_quote_the_checker_as_it_speaks(doc):
    # the README and the teacher's guide quote the sqrt(d_model) message; the quote must stay true
    text = " ".join((ROOT / doc).read_text().split())
    quotes = re.findall(r'"(your output matches [^"]*)"', text)
    assert quotes, f"{doc} no longer quotes the checker"
    fb = ex.check_attention(pf.attention_scaled_by_sqrt_d_model)
    for quote in quotes:
        assert quote in fb.message


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
    assert "raised RuntimeError at `raise RuntimeError(\"boom <here>\")`" in fb.message
    assert "boom <here>" in fb.message
    assert "Traceback" not in fb.message
    assert "&lt;here&gt;" in fb._repr_html_()  # escaped in HTML


@pytest.mark.parametrize("checker", ALL_CHECKERS)
def test_wrong_signature_is_reported(checker):
    fb = checker(lambda: None)
    assert not fb.ok and "The checker calls your function as" in fb.message and "Define it as def " in fb.message


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
    assert "`n, width = x.shape`" in fb.message and "(2, 5, 12)" in fb.message
    assert "n, width = x.shape[-2:]" in fb.message and "x.shape[:-2] in front" in fb.message
    assert "The right output here has shape (2, 4, 5, 3)" in fb.message


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
    assert not fb.ok and fb.pitfall is None and "largest difference from the right output 0.1" in fb.message
    fb = ex.check_causal_mask(lambda n: np.tril(np.ones((n, n), dtype=bool)) ^ (np.arange(n)[:, None] == 3))
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
    assert "scale_missing" not in bad._repr_html_()  # the registry tag is for developers, not students


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
    assert fb.pitfall == "softmax_unstable" and "large scores near 1000" in fb.message


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


# ---------------------------------------------------------------- rounded numbers (issue 16)


@pytest.mark.parametrize("value", [0.08839, 0.0884, 0.088388, np.float32(0.08839), 1 / np.sqrt(128)])
def test_a_rounded_scale_passes(value):
    # d_k = 4096 / 32 = 128, 1/sqrt(128) = 0.0883883...: four significant figures are right
    fb = ex.check_scale(value, d_model=4096, n_heads=32)
    assert fb.ok, fb.message


def test_scale_and_answer_share_one_tolerance():
    right = 1 / np.sqrt(128)
    assert ex.check_scale(right * (1 + 0.9 * ex.ANSWER_RTOL), d_model=4096, n_heads=32).ok
    assert not ex.check_scale(right * (1 + 1.1 * ex.ANSWER_RTOL), d_model=4096, n_heads=32).ok
    assert ex.check_answer("kv_cache_gqa_mib", 1280 * (1 + 0.9 * ex.ANSWER_RTOL)).ok
    assert not ex.check_answer("kv_cache_gqa_mib", 1280 * (1 + 1.1 * ex.ANSWER_RTOL)).ok


def test_four_significant_figures_always_pass():
    # the documented rule: any right number rounded to 4 significant figures is within ANSWER_RTOL
    for d_k in range(1, 513):
        right = 1 / np.sqrt(d_k)
        rounded = float(f"{right:.4g}")
        assert abs(rounded - right) <= ex.ANSWER_RTOL * right


@pytest.mark.parametrize("value", [0.088, 0.09])
def test_a_scale_rounded_too_far_is_told_so(value):
    fb = ex.check_scale(value, d_model=4096, n_heads=32)
    assert not fb.ok and "rounded too far" in fb.message and "four significant figures" in fb.message


def test_an_answer_rounded_too_far_is_told_so():
    fb = ex.check_answer("kv_cache_gqa_mib", 1300)
    assert not fb.ok and "rounded too far" in fb.message


# ---------------------------------------------------------------- every listed mistake is named


def _scores(q, k):
    return q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])  # (..., N_q, N_k)


def _attention_mask_ignored(q, k, v, mask=None):
    return _softmax_by_formula(_scores(q, k)) @ v  # mask accepted, never used


def _attention_torch_convention(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = np.where(mask, -np.inf, s)  # True = blocked, as in nn.MultiheadAttention
    return _softmax_by_formula(s) @ v  # the last query blocks every key: NaN there


def _attention_torch_convention_big_negative(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s = np.where(mask, -1e9, s)  # a fully blocked row becomes uniform, not NaN
    return _softmax_by_formula(s) @ v


def _attention_torch_convention_library(q, k, v, mask=None):
    return m.softmax(_scores(q, k), mask=None if mask is None else ~mask) @ v


def _attention_by_d_k(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / q.shape[-1]  # / d_k, not / sqrt(d_k)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return _softmax_by_formula(s) @ v


def _attention_mask_multiplied(q, k, v, mask=None):
    s = _scores(q, k)
    return _softmax_by_formula(s if mask is None else s * mask) @ v


@pytest.mark.parametrize("fn, name, words", [
    (_attention_mask_ignored, "mask_ignored", "never uses it"),
    (_attention_torch_convention, "mask_inverted", "True as blocked"),
    (_attention_torch_convention_big_negative, "mask_inverted", "PyTorch"),
    (_attention_torch_convention_library, "mask_inverted", "True means 'may attend'"),
    (_attention_by_d_k, "scale_d_k", "sqrt(d_k)"),
    (_attention_mask_multiplied, "mask_multiplied", "-inf, not 0"),
])
def test_attention_mistakes_are_named(fn, name, words):
    fb = ex.check_attention(fn)
    assert not fb.ok and fb.pitfall == name, fb.message
    assert words in fb.message and "Right shape, wrong values" not in fb.message


def test_scale_one_over_d_k_is_named():
    fb = ex.check_scale(1 / 128, d_model=4096, n_heads=32)
    assert fb.pitfall == "scale_d_k" and "square root" in fb.message
    assert ex.check_scale(lambda d_model, h: h / d_model).pitfall == "scale_d_k"


def _split_no_transpose(x, h):
    return x.reshape(*x.shape[:-2], h, x.shape[-2], -1)  # (..., h, N, d_k), scrambled


def _merge_no_transpose(x):
    return x.reshape(*x.shape[:-3], x.shape[-2], -1)  # (..., N, h*d_v), scrambled


def _layer(x, params, h, split, merge, attention=_attention_out, t=()):
    """A hand-written layer with pluggable pieces; ``t`` names the weights used as W.T."""
    W = {w: params[w].T if w in t else params[w] for w in params}
    q, k, v = (split(x @ W[w], h) for w in ("W_Q", "W_K", "W_V"))
    return merge(attention(q, k, v)) @ W["W_O"]


@pytest.mark.parametrize("fn, name, words", [
    (lambda x, p, h: _layer(x, p, h, _split_no_transpose, _merge_concat), "layer_split_without_transpose",
     "a right merge but a split done by a single reshape"),
    (lambda x, p, h: _layer(x, p, h, _split_moveaxis, _merge_no_transpose), "layer_merge_without_transpose",
     "a right split but a merge done by a single reshape"),
    (lambda x, p, h: _layer(x, p, h, _split_no_transpose, _merge_no_transpose), "layer_without_transpose",
     "both the split and the merge done by a single reshape"),
    (lambda x, p, h: _layer(x, p, h, _split_moveaxis, _merge_concat, t=("W_Q", "W_K", "W_V", "W_O")),
     "weights_transposed", "every weight transposed"),
    (lambda x, p, h: _layer(x, p, h, _split_moveaxis, _merge_concat, t=("W_O",)), "weights_transposed",
     "with W_O transposed"),
    (lambda x, p, h: _layer(x, p, h, _split_moveaxis, _merge_concat, t=("W_Q", "W_K")), "weights_transposed",
     "with W_Q and W_K transposed"),
    (lambda x, p, h: _layer(x, p, h, _split_moveaxis, _merge_concat, lambda q, k, v: _attention_by_d_k(q, k, v)),
     "scale_d_k", "sqrt(d_k)"),
    (lambda x, p, h: _merge_concat(_attention_out(*(_split_moveaxis(x @ p[w], h) for w in ("W_Q", "W_K", "W_V")))),
     "no_output_projection", "W_O"),
])
def test_capstone_mistakes_are_named(fn, name, words):
    fb = ex.check_multi_head_attention(fn)
    assert not fb.ok and fb.pitfall == name, fb.message
    assert words in fb.message and "Right shape, wrong values" not in fb.message


# ---------------------------------------------------------------- no raw numpy error reaches the reader


def _attention_k_dot_T(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(q.shape[-1])
    return _softmax_by_formula(scores) @ v


def _merge_transpose_102(x):
    return x.transpose(1, 0, 2).reshape(x.shape[-2], -1)


def _split_transpose_102(x, h):
    n, d = x.shape[-2], x.shape[-1]
    return x.reshape(n, h, d // h).transpose(1, 0, 2)


def _split_two_names(x, h):
    n, d = x.shape
    return np.swapaxes(x.reshape(n, h, d // h), 0, 1)


def _softmax_without_keepdims(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1)


def _softmax_axis_2(x):
    e = np.exp(x[0] - x[0].max(axis=2, keepdims=True))
    return e


def _attention_bool_index(q, k, v, mask=None):
    s = _scores(q, k)
    if mask is not None:
        s[~mask] = -np.inf
    return _softmax_by_formula(s) @ v


def _merge_transpose_102_batch_only(x):
    return x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1)


@pytest.mark.parametrize("checker, fn, words", [
    (ex.check_attention, _attention_k_dot_T,
     ["`q @ k.T`", "(4, 5, 3) and (3, 5, 4)", "`k.T` reverses all 3 axes", "np.swapaxes(k, -1, -2)", "(4, 3, 5)"]),
    (ex.check_merge_heads, _merge_transpose_102,
     ["`x.transpose(1, 0, 2)` lists 3 axes", "has 4", "(2, 4, 5, 3)", "np.swapaxes(x, -3, -2)"]),
    (ex.check_merge_heads, _merge_transpose_102_batch_only,
     ["`x.transpose(0, 2, 1, 3)` lists 4 axes", "has 3", "(4, 5, 3)"]),
    (ex.check_split_heads, _split_transpose_102,
     ["asks for shape (5,4,3)", "(2, 5, 12)", "120 numbers", "x.reshape(*x.shape[:-1], h, d_k)"]),
    (ex.check_split_heads, _split_two_names, ["`n, d = x.shape`", "unpacks 2 axes", "(2, 5, 12)", "n, d = x.shape[-2:]"]),
    (ex.check_softmax, _softmax_without_keepdims, ["(4,5,6) and (4,5)", "keepdims=True"]),
    (ex.check_softmax, _softmax_axis_2, ["axis 2 is out of bounds", "Count axes from the end"]),
    (ex.check_attention, _attention_bool_index, ["np.where(mask, scores, -np.inf)"]),
    (ex.check_attention, lambda q, k, v: _attention_by_formula(q, k, v)[0],
     ["The checker calls your function as attention(q, k, v, mask)", "def attention(q, k, v, mask=None):"]),
])
def test_numpy_errors_are_explained(checker, fn, words):
    fb = checker(fn)
    assert not fb.ok and fb.attempted
    for w in words:
        assert w in fb.message, fb.message
    for raw in ("gufunc signature", "axes don't match array", "Traceback", "cannot reshape array"):
        assert raw not in fb.message


def test_an_unrecognised_error_still_names_the_line_and_case():
    def odd(x):
        return x.nonexistent()

    fb = ex.check_softmax(odd)
    assert "raised AttributeError at `return x.nonexistent()`" in fb.message
    assert "scores, shape (4, 5, 6)" in fb.message


def test_errors_in_a_notebook_cell_are_explained(tmp_path):
    # a real kernel: IPython keeps cell sources in linecache, so the failing line can be quoted
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import numpy as np\n"
        "from mha_core.teaching.exercises import check_attention\n"
        "def attention(q, k, v, mask=None):\n"
        "    scores = q @ k.T  # the 2-D habit\n"
        "    return scores @ v\n"
        "print(check_attention(attention).message)\n"
    )])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    text = nb.cells[0].outputs[0]["text"]
    assert "`scores = q @ k.T`" in text and "`k.T` reverses all 3 axes" in text


# ---------------------------------------------------------------- the library's own answer is refused


def test_the_library_softmax_is_refused_under_every_name():
    import mha_core.core
    from mha_core.core.attention import softmax as deep_softmax

    for fn in (
        m.softmax,  # passed in directly
        lambda x: m.softmax(x),  # mha_core.softmax
        lambda x: deep_softmax(x),  # mha_core.core.attention.softmax
        lambda x: mha_core.core.softmax(x),
        lambda x: m.softmax(x, axis=-1) * 1.0,
    ):
        fb = ex.check_softmax(fn)
        assert not fb.ok and fb.message.startswith("This calls mha_core's softmax; write it yourself")


def test_a_name_imported_into_the_notebook_is_refused():
    namespace = {}
    exec("from mha_core import softmax\ndef my_softmax(x):\n    return softmax(x)\n", namespace)
    fb = ex.check_softmax(namespace["my_softmax"])
    assert "calls mha_core's softmax" in fb.message


@pytest.mark.parametrize("checker, fn, name", [
    (ex.check_attention, lambda q, k, v, mask=None: m.scaled_dot_product_attention(q, k, v, mask)[0],
     "scaled_dot_product_attention"),
    (ex.check_attention, m.scaled_dot_product_attention, "scaled_dot_product_attention"),
    (ex.check_split_heads, lambda x, h: m.split_heads(x, h), "split_heads"),
    (ex.check_merge_heads, m.merge_heads, "merge_heads"),
    (ex.check_causal_mask, lambda n: m.causal_mask(n), "causal_mask"),
    (ex.check_multi_head_attention, lambda x, p, h: m.multi_head_attention(x, p, h), "multi_head_attention"),
    (ex.check_multi_head_attention, lambda x, p, h: m.merge_heads(m.head_outputs(x, p, h)) @ p["W_O"], "head_outputs"),
    (ex.check_multi_head_attention, lambda x, p, h: _layer(x, p, h, m.split_heads, _merge_concat), "split_heads"),
    (ex.check_scale, lambda d_model, h: 1 / np.sqrt(m.count_params(m.MHAConfig(d_model, h))["total"]), "count_params"),
])
def test_each_exercise_refuses_the_library(checker, fn, name):
    fb = checker(fn)
    assert not fb.ok and f"calls mha_core's {name}; write it yourself" in fb.message


def test_the_library_call_is_reported_even_when_the_result_is_wrong_or_raises():
    fb = ex.check_softmax(lambda x: m.softmax(x) + 1.0)
    assert "calls mha_core's softmax" in fb.message
    fb = ex.check_softmax(lambda x: m.softmax(x)[..., 99])
    assert "calls mha_core's softmax" in fb.message


def test_the_handed_out_softmax_is_allowed_where_the_notebook_says_so():
    assert ex.check_attention(_attention_with_library_softmax).ok  # 01 hands out softmax
    assert ex.check_multi_head_attention(_mha_reshape_einsum).ok  # so does the capstone
    assert "From mha_core you may use softmax here" in ex.check_multi_head_attention(
        lambda x, p, h: m.multi_head_attention(x, p, h)).message


def test_a_pitfall_passed_in_whole_is_named_not_refused():
    # the pitfalls call the core; that is not the reader calling it
    assert ex.check_softmax(pf.softmax_over_queries).pitfall == "softmax_over_queries"


def test_the_watch_leaves_a_running_profiler_in_place():
    import sys

    seen = []

    def profiler(frame, event, arg):
        seen.append(event)

    sys.setprofile(profiler)
    try:
        ex.check_softmax(_softmax_by_formula)
        assert sys.getprofile() is profiler and seen  # restored, and it kept receiving events
    finally:
        sys.setprofile(None)


# ---------------------------------------------------------------- unit slips in numeric answers


@pytest.mark.parametrize("qid, value, words", [
    ("attention_macs_512_8_2000", 2 * RIGHT["attention_macs_512_8_2000"], "FLOPs"),
    ("attention_macs_512_8_2000", RIGHT["attention_macs_512_8_2000"] / 1e9, "billions"),
    ("attention_macs_512_8_2000", 2 * RIGHT["attention_macs_512_8_2000"] / 1e9, "billions of FLOPs"),
    ("kv_cache_gqa_mib", GQA_BYTES, "in bytes"),
    ("kv_cache_gqa_mib", GQA_BYTES / 1024, "in KiB"),
    ("kv_cache_gqa_mib", GQA_BYTES / 2**30, "in GiB"),
    ("kv_cache_gqa_mib", GQA_BYTES / 1e6, "in MB (10**6 bytes)"),
    ("kv_cache_gqa_mib", GQA_BYTES / 1e9, "in GB (10**9 bytes)"),
    ("kv_cache_gqa_mib", 8 * GQA_BYTES, "in bits"),
    ("params_768_12", RIGHT["params_768_12"] / 1e6, "millions"),
])
def test_unit_slips_are_recognised(qid, value, words):
    fb = ex.check_answer(qid, value)
    assert not fb.ok and words in fb.message and "is not it" not in fb.message, fb.message


def test_a_unit_slip_on_top_of_a_known_mistake_names_both():
    fb = ex.check_answer("kv_cache_gqa_mib", GQA_BYTES * 8 / 2**30)  # plain MHA, in GiB
    assert "in GiB" in fb.message and "plain MHA" in fb.message
    fb = ex.check_answer("attention_macs_512_8_2000", 2 * 2 * 2000**2 * 64)  # one head, in FLOPs
    assert "FLOPs" in fb.message and "one head" in fb.message


def test_fp32_bytes_are_a_named_mistake():
    fb = ex.check_answer("kv_cache_gqa_mib", 2 * GQA_BYTES / 2**20)
    assert not fb.ok and "fp32" in fb.message


@pytest.mark.parametrize("qid, value", [
    ("params_768_12", np.int64(4 * 768**2)), ("params_768_12", 2.359e6),
    ("d_k_768_12", 64.0), ("attention_macs_512_8_2000", 4.096e9),
    ("kv_cache_gqa_mib", 1280), ("kv_cache_gqa_mib", np.float32(1280.4)),
])
def test_other_right_numbers_pass(qid, value):
    assert ex.check_answer(qid, value).ok


def test_a_lost_batch_axis_is_explained():
    fb = ex.check_split_heads(lambda x, h: x.reshape(x.shape[0], h, -1).transpose(1, 0, 2))
    assert "expected (2, 4, 5, 3), got (4, 2, 15)" in fb.message and "3 axes, the right one 4" in fb.message


@pytest.mark.parametrize("fn", [
    lambda q, k, v, mask=None: _softmax_by_formula(_scores(q, k)),  # forgot @ v
    lambda q, k, v, mask=None: (_softmax_by_formula(_scores(q, k)), None),
])
def test_returning_the_weights_is_explained(fn):
    fb = ex.check_attention(fn)
    assert "shape of the weights" in fb.message and "weights @ v" in fb.message


@pytest.mark.parametrize("subset", [s for r in range(1, 4) for s in combinations(("W_Q", "W_K", "W_V", "W_O"), r)])
def test_every_partial_transpose_says_which_weights(subset):
    fb = ex.check_multi_head_attention(
        lambda x, p, h: _layer(x, p, h, _split_moveaxis, _merge_concat, t=subset))
    assert fb.pitfall == "weights_transposed"
    assert f"the layer with {' and '.join(subset)} transposed" in fb.message


# -- the slips a cold read found answered only "Right shape, wrong values" (issue 28): each named ----

def _sm(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _att(q, k, v, mask=None, *, scale=None, axis=-1, fill=-np.inf, add=False, keys_t=False, after=False):
    s = q @ np.swapaxes(k, -1, -2)  # (h, N_q, N_k)
    s = s * (q.shape[-1] ** -0.5 if scale is None else scale) if not after else s
    if mask is not None:
        s = s + mask if add else np.where(mask.T if keys_t else mask, s, fill)
    w = _sm(s, axis)
    return (w / np.sqrt(q.shape[-1]) if after else w) @ v


SLIPS = [
    (ex.check_softmax, lambda x: (x - x.max(-1, keepdims=True)) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
     "log-softmax"),
    (ex.check_softmax, lambda x: np.exp(x - x.max(-1, keepdims=True)), "without the division by the row sum"),
    (ex.check_softmax, lambda x: x / x.sum(-1, keepdims=True), "without any exp"),
    (ex.check_softmax, lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x).sum(-1, keepdims=True),
     "divided by the sum of exp(x)"),
    (ex.check_attention, lambda q, k, v, mask=None: _att(q, k, v, mask, scale=np.sqrt(q.shape[-1])),
     "multiplied by sqrt(d_k)"),
    (ex.check_attention, lambda q, k, v, mask=None: _att(q, k, v, mask, axis=0), "a softmax over axis 0, the heads"),
    (ex.check_attention, lambda q, k, v, mask=None: _att(k, q, v) if mask is None else _att(q, k, v, mask), "k @ q^T"),
    (ex.check_attention, lambda q, k, v, mask=None: _att(q, k, v, mask, after=True), "after the softmax"),
    (ex.check_attention, lambda q, k, v, mask=None: _att(q, k, v, mask, keys_t=True), "the mask transposed"),
    (ex.check_attention, lambda q, k, v, mask=None: _att(q, k, v, mask, add=True), "the bool mask added to the scores"),
    (ex.check_attention, lambda q, k, v, mask=None: _att(q, k, v, mask, fill=-1.0), "set to -1 instead of -inf"),
    (ex.check_split_heads, lambda x, h: np.swapaxes(np.swapaxes(x.reshape(*x.shape[:-1], -1, h), -1, -2), -3, -2),
     "the width read as (d_k, h)"),
    (ex.check_split_heads, lambda x, h: np.swapaxes(x.reshape(*x.shape[:-1], h, -1), -1, -2),
     "you swapped the last two axes"),
    (ex.check_split_heads, lambda x, h: np.swapaxes(x.reshape(*x.shape[:-1], -1, h), -3, -2),
     "the heads are h columns wide"),
    (ex.check_split_heads, lambda x, h: np.swapaxes(x.reshape(*x.shape[:-1], h, -1), 0, -2) if x.ndim == 3
     else np.swapaxes(x.reshape(*x.shape[:-1], h, -1), -3, -2), "The sizes are right but in the wrong order"),
    (ex.check_split_heads, lambda x, h: np.swapaxes(x[..., :h * (x.shape[-1] // h)].reshape(*x.shape[:-1], h, -1), -3, -2),
     "cannot share d_model = 12 columns evenly"),
    (ex.check_causal_mask, lambda n: np.ones((n, n), bool), "a mask of all True, which blocks nothing"),
    (ex.check_causal_mask, lambda n: np.eye(n, dtype=bool), "the diagonal only"),
    (ex.check_causal_mask, lambda n: np.where(np.tril(np.ones((n, n), bool)), 0.0, -np.inf), "an additive mask"),
    (ex.check_scale, lambda d_model, h: h ** -0.5, "1/sqrt(h)"),
]


@pytest.mark.parametrize(("checker", "fn", "phrase"), SLIPS, ids=[s[2] for s in SLIPS])
def test_each_slip_is_named_not_just_wrong_values(checker, fn, phrase):
    fb = checker(fn)
    assert not fb.ok and fb.attempted
    assert phrase in fb.message, fb.message
    assert "Right shape, wrong values" not in fb.message


def test_a_mistake_that_matches_a_name_at_one_size_only_is_not_given_that_name():
    """1/sqrt(d_model * h) equals 1/d_k at d_model=512, h=8 (4096 = 64²), and at no other size tried."""
    fb = ex.check_scale(lambda d_model, h: (d_model * h) ** -0.5)
    assert not fb.ok and fb.pitfall is None and "1/d_k" not in fb.message
    hard_coded = ex.check_scale(lambda d_model, h: 0.125)
    assert "right at some sizes and not others" in hard_coded.message


def test_a_split_that_fails_for_an_uneven_h_passes():
    """Any error for an h that does not divide d_model is right: the core's own ValueError too."""
    from mha_core import split_heads as core_split

    def mine(x, h):
        if x.shape[-1] % h:
            return core_split.unchecked(x, h)  # the core without its checks: the reshape itself fails
        return np.swapaxes(x.reshape(*x.shape[:-1], h, -1), -3, -2)

    assert ex.check_split_heads(mine).ok
