"""Checkers for the notebooks' exercises: run the reader's code, say what is right or wrong.

An exercise cell in a notebook holds a blank stub and its checker::

    def softmax(x):
        raise NotImplementedError("your code here")

    check_softmax(softmax)

Until the reader writes the body, the checker answers "not attempted yet" (``ok=False,
attempted=False``) instead of raising, so a notebook with blank exercises runs top to bottom.
The worked solutions live in ``notebooks/solutions/``. Numeric questions work the same way:
``check_answer("params_768_12", ...)`` with the literal ``...`` is "not attempted yet".

Each ``check_*`` function takes the reader's function (or, for the scale, a number), runs it on
seeded inputs and compares the result with ``mha_core``'s answer. Any correct variant passes
(another axis convention, a global maximum in the softmax, an additive ``-inf`` mask): only the
numbers are compared. When they differ it compares the result with each known mistake from
``mha_core.teaching.pitfalls`` and names the one that matches. It also reports, in plain words:

* a call to ``mha_core``'s own answer (``this calls mha_core's softmax; write it yourself``),
  however it was imported: while the reader's code runs, every call into ``mha_core.core`` is
  watched, and only the functions an exercise hands out (``softmax`` for attention) may be used;
* an exception raised by the reader's code, as the shapes involved and the likely cause
  (``k.T`` on a 3-D array, ``transpose(1, 0, 2)`` on a batch, a ``reshape`` with fixed sizes,
  a reduction without ``keepdims``), never as a traceback;
* a wrong shape, a wrong dtype, a NaN, or an input modified in place.

Numbers (``check_scale``, ``check_answer``) are right within a relative ``ANSWER_RTOL`` = 1e-3:
a rounded answer passes when it is within 0.1 % of the exact one, which four significant
figures always are (0.08839 for 1/sqrt(128)). A known mistake, or the right number in another
unit (FLOPs for MACs, GiB or bytes for MiB), is named. The result is a ``Feedback``:

    >>> from mha_core.teaching.exercises import check_split_heads
    >>> check_split_heads(lambda x, h: x.reshape(*x.shape[:-2], h, x.shape[-2], -1))
    Feedback (not yet, pitfall split_without_transpose): On x of shape (N, d_model) = (5, 12), h=4: your
    output matches a single reshape to (..., h, N, d_k) without the transpose. Fix: ...

Checkers are pure: the same function gives the same ``Feedback`` every time.
"""

from __future__ import annotations

import html
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from ..core.attention import scaled_dot_product_attention, softmax
from ..core.config import MHAConfig, init_params
from ..core.counts import count_macs, count_params, kv_cache_bytes
from ..core.masks import causal_mask
from ..core.mha import merge_heads, multi_head_attention, split_heads
from ..core.validate import WEIGHT_NAMES
from . import pitfalls
from .diagnosis import LibraryWatch, explain_error
from .pitfalls import PITFALLS

__all__ = [
    "ANSWER_RTOL",
    "Feedback",
    "QUESTIONS",
    "check_answer",
    "check_attention",
    "check_causal_mask",
    "check_merge_heads",
    "check_multi_head_attention",
    "check_scale",
    "check_softmax",
    "check_split_heads",
]

# Every checker draws its inputs from this seed, so a verdict never depends on luck and the
# notebooks' stored outputs are reproducible.
SEED = 0
# float64 inputs and a tight tolerance: a correct float64 answer agrees to ~1e-15, while every
# pitfall's answer is far outside it on these inputs (test_each_pitfall_is_named checks that each
# one is told apart from the right answer and from the other pitfalls).
RTOL, ATOL = 1e-7, 1e-9
# Sizes chosen pairwise different (N=5, h=4, d_k=3, B=2) so that a swapped axis always
# changes the shape or the values, never both by coincidence.
N, H, D_K, BATCH = 5, 4, 3, 2
# A number typed by the reader is right within this relative tolerance: 0.1 %, which four
# significant figures always meet (and three do unless the number starts with a 1).
ANSWER_RTOL = 1e-3
# Within this relative distance (but outside ANSWER_RTOL) a number is "rounded too far".
_CLOSE_RTOL = 0.05


@dataclass(frozen=True)
class Feedback:
    """A checker's verdict.

    Attributes
    ----------
    ok : bool
        True when the reader's answer matches ``mha_core``'s on every test case.
    message : str
        One readable paragraph: what was checked, and what is wrong if anything.
    pitfall : str or None
        The name of the recognised mistake (a key of ``mha_core.teaching.pitfalls.PITFALLS``), if any.
    attempted : bool, default True
        False while the exercise is still blank: the reader's stub raised ``NotImplementedError``
        (or the answer is the literal ``...``). ``ok`` is then False too.
    """

    ok: bool
    message: str
    pitfall: str | None = None
    attempted: bool = True

    def _headline(self, *, tag: bool = True) -> str:
        if not self.attempted:
            return "not attempted yet"
        if self.ok:
            return "correct"
        return "not yet" + (f", pitfall {self.pitfall}" if self.pitfall and tag else "")

    def __repr__(self) -> str:
        return f"Feedback ({self._headline()}): {self.message}"

    def _repr_html_(self) -> str:
        # Blue for right, orange for wrong (readable with red-green colour blindness), plus a symbol.
        # Grey with an open circle for a blank exercise: nothing is wrong yet. The pitfall's registry
        # name (a developer's tag) stays in the text repr; the student reads the message.
        if not self.attempted:
            colour, symbol = ("#595959", "&#9675;")
        elif self.ok:
            colour, symbol = ("#2166ac", "&#10003;")
        else:
            colour, symbol = ("#b35806", "&#10007;")
        return (
            f'<div style="border-left:5px solid {colour};padding:4px 10px;margin:4px 0">'
            f'<b style="color:{colour}">{symbol} {html.escape(self._headline(tag=False))}:</b> '
            f"{html.escape(self.message)}</div>"
        )


def not_attempted(what: str) -> Feedback:
    return Feedback(
        False,
        f"Your {what} still raises NotImplementedError: replace that line with your code, "
        f"then run this cell again.",
        attempted=False,
    )


# --------------------------------------------------------------------------- engine


@dataclass(frozen=True)
class _Wrong:
    """A known mistake's answer on one case. ``value`` may be a masked array: masked entries are not compared."""

    pitfall: str | None
    value: np.ndarray
    answer: str | None = None  # how to describe a match; default PITFALLS[pitfall].answer
    fix: str | None = None  # for a mistake without an entry in PITFALLS (pitfall=None): what to do instead


@dataclass(frozen=True)
class _Case:
    """One seeded test input: the arguments, the right answer and each candidate mistake's answer."""

    label: str
    args: tuple
    expected: np.ndarray
    wrong: tuple[_Wrong, ...] = field(default_factory=tuple)


def _check_callable(fn, name: str = "fn") -> None:
    if not callable(fn):
        raise TypeError(f"{name} must be a callable (your function), got {type(fn).__name__} {fn!r}")


def copy_args(args: tuple) -> tuple:
    """Fresh copies of the arrays (and of dicts of arrays) so the reader's code can't touch the originals."""

    def copy(a):
        if isinstance(a, np.ndarray):
            return a.copy()
        if isinstance(a, dict):
            return {k: copy(v) for k, v in a.items()}
        return a

    return tuple(copy(a) for a in args)


def _unchanged(a, b) -> bool:
    """True if the reader's copy ``a`` still equals the original ``b``."""
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(_unchanged(a[k], b[k]) for k in b)
    return True


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    if np.ma.isMaskedArray(b):  # compare only where b is not masked
        keep = ~np.ma.getmaskarray(b)
        return _same(a[keep], np.ma.getdata(b)[keep])
    if a.dtype == np.bool_ or b.dtype == np.bool_:
        return a.dtype == b.dtype and bool(np.array_equal(a, b))
    return bool(np.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True))


@dataclass(frozen=True)
class _Outcome:
    value: object = None
    error: Exception | None = None
    library: str | None = None  # the mha_core function the reader's code called, if any


def _library_feedback(name: str, allowed: tuple[str, ...]) -> Feedback:
    given = (f" From mha_core you may use {' and '.join(allowed)} here, nothing else; your own functions "
             f"are fine." if allowed else " This exercise is NumPy only.")
    return Feedback(False, f"This calls mha_core's {name}; write it yourself.{given}")


def call_reader(fn: Callable, args: tuple, allowed: tuple[str, ...] = ()) -> _Outcome:
    """Run the reader's code quietly, watching for calls into mha_core.

    Numpy warnings are silenced (a NaN is reported instead); an exception is returned, not raised.
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"), LibraryWatch(allowed) as watch:
        warnings.simplefilter("ignore")
        try:
            value = fn(*args)
        except Exception as e:  # noqa: BLE001  (the reader's bug is reported, not raised)
            return _Outcome(error=e, library=watch.called)
    return _Outcome(value, library=watch.called)


def _match_pitfall(got: np.ndarray, case: _Case) -> Feedback | None:
    for w in case.wrong:
        if _same(got, w.value):
            if w.pitfall is None:  # a slip described here, not one of the named pitfalls
                return Feedback(False, f"On {case.label}: your output matches {w.answer}. Fix: {w.fix}.")
            p = PITFALLS[w.pitfall]
            answer = w.answer or p.answer
            return Feedback(False, f"On {case.label}: your output matches {answer}. Fix: {p.explanation}.", w.pitfall)
    return None


def _slip(value: np.ndarray, answer: str, fix: str) -> _Wrong:
    """A known wrong answer that is not one of ``PITFALLS``: how it reads, and the fix."""
    return _Wrong(None, value, answer, fix)


def _run(
    fn: Callable,
    cases: Sequence[_Case],
    what: str,
    *,
    signature: str,
    allowed: tuple[str, ...] = (),
    unpack_first: bool = False,
    shape_hint: Callable[[tuple, _Case], str | None] | None = None,
    value_hint: Callable[[np.ndarray, _Case], str | None] | None = None,
) -> Feedback:
    """Run ``fn`` on every case and return the first problem found, or a success.

    ``signature`` is how the checker calls ``fn`` (for a message); ``allowed`` names the
    ``mha_core`` functions the exercise lets the reader use.
    """
    for case in cases:
        args = copy_args(case.args)
        outcome = call_reader(fn, args, allowed)
        if outcome.library is not None:
            return _library_feedback(outcome.library, allowed)
        if isinstance(outcome.error, NotImplementedError):  # the blank stub: nothing to judge yet
            return not_attempted(f"{what} function")
        if outcome.error is not None:
            return Feedback(False, explain_error(outcome.error, case.label, signature, case.expected.shape))
        got = outcome.value
        if unpack_first and isinstance(got, tuple) and got:
            got = got[0]  # (out, weights) -> out
        if not isinstance(got, np.ndarray):
            return Feedback(
                False, f"Your function returned a {type(got).__name__}; expected a numpy ndarray ({case.label})."
            )
        if not all(_unchanged(a, b) for a, b in zip(args, case.args, strict=True)):
            return Feedback(
                False, f"Your function modified its input in place ({case.label}); work on a copy."
            )
        exp = case.expected
        if got.shape != exp.shape:
            hint = (shape_hint(got.shape, case) if shape_hint else None) or _axes_hint(got, exp)
            return Feedback(
                False,
                f"Wrong shape ({case.label}): expected {exp.shape}, got {got.shape}." + (f" {hint}" if hint else ""),
            )
        if got.dtype != exp.dtype:
            if exp.dtype == np.bool_:
                same_pattern = np.array_equal(got.astype(bool), exp) if got.dtype.kind in "biuf" else False
                additive = got.dtype.kind == "f" and np.array_equal(got == 0, exp) and bool(np.isneginf(got[~exp]).all())
                extra = (" The True/False pattern is right; return it as bool." if same_pattern else
                         " That is an additive mask (0 where allowed, -inf where blocked), which is added to the "
                         "scores; here the mask is the bool table itself, True = may attend." if additive else "")
                return Feedback(
                    False, f"Wrong dtype ({case.label}): a mask must be bool (True = may attend), got {got.dtype}.{extra}"
                )
            return Feedback(
                False,
                f"Wrong dtype ({case.label}): the input was {exp.dtype} and the answer must be too, got {got.dtype}.",
            )
        if _same(got, exp):
            continue
        named = _match_pitfall(got, case)
        if named is not None:
            return named
        if got.dtype.kind == "f" and not np.isfinite(got).all():
            bad = int(got.size - np.count_nonzero(np.isfinite(got)))
            return Feedback(False, f"Your output holds {bad:,} NaN or inf values ({case.label}).")
        hint = value_hint(got, case) if value_hint else None
        if exp.dtype == np.bool_:
            wrong = int(np.count_nonzero(got != exp))
            detail = f"{wrong:,} of {exp.size:,} entries differ"
        else:
            detail = f"largest difference from the right output {float(np.max(np.abs(got - exp))):.3g}"
        return Feedback(
            False, f"Right shape, wrong values ({case.label}): {detail}." + (f" {hint}" if hint else "")
        )
    plural = "s" if len(cases) > 1 else ""
    return Feedback(True, f"{what} matches mha_core on {len(cases)} seeded case{plural}.")


def _axes_hint(got: np.ndarray, exp: np.ndarray) -> str | None:
    """For a result with a different number of axes: most often a batch axis lost or merged."""
    if got.ndim == exp.ndim:
        return None
    return (f"Your result has {got.ndim} axes, the right one {exp.ndim}: any leading (batch) axes must stay "
            f"in front. Read the sizes from the end (x.shape[-2:]), keep x.shape[:-2] in front in every "
            f"reshape, and swap axes counted from the end (np.swapaxes(x, -3, -2)).")


def _rows_hint(got: np.ndarray, case: _Case) -> str | None:
    """For weights: say along which axis they do sum to 1, if not the last."""
    if np.allclose(got.sum(axis=-1), 1.0):
        return None
    for axis in range(got.ndim - 1):
        if np.allclose(got.sum(axis=axis), 1.0):
            return (f"Your values sum to 1 along axis {axis}, not along the last axis: "
                    f"the softmax ran over the wrong axis.")
    if np.isclose(got.sum(), 1.0):
        return ("Your values sum to 1 over the whole array, not row by row: sum over the last axis "
                "with keepdims=True.")
    return None


def _rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


# --------------------------------------------------------------------------- heads


def check_split_heads(fn: Callable) -> Feedback:
    """Check the reader's ``split_heads(x, n_heads)``: ``(..., N, h*d_k) -> (..., h, N, d_k)``.

    Cases: ``x`` of shape (N, h*d_k) = (5, 12) with h=4, then with a batch axis (2, 5, 12).
    No ``mha_core`` function may be called.

    Parameters
    ----------
    fn : callable ``fn(x, n_heads) -> ndarray``

    Returns
    -------
    Feedback
    """
    _check_callable(fn)
    rng, cases = _rng(), []
    for label, shape in (("x of shape (N, d_model)", (N, H * D_K)), ("x of shape (B, N, d_model)", (BATCH, N, H * D_K))):
        x = rng.standard_normal(shape)  # (B?, N, h*d_k)
        wrong = (_Wrong("split_without_transpose", PITFALLS["split_without_transpose"].fn(x, H)),
                 _slip(np.swapaxes(np.swapaxes(x.reshape(*x.shape[:-1], D_K, H), -1, -2), -3, -2),
                       "the width read as (d_k, h): head i takes every h-th column",
                       "reshape to (..., N, h, d_k), so that head i is the contiguous columns i*d_k:(i+1)*d_k"))
        cases.append(_Case(f"{label} = {shape}, h={H}", (x, H), split_heads(x, H), wrong))

    def shape_hint(got, case):
        x = case.args[0]
        lead = x.shape[:-2]
        if got == (*x.shape[:-1], H, D_K):
            return "That is (..., N, h, d_k): you reshaped but did not move the head axis in front of N."
        if got == (*lead, N, D_K, H):
            return ("That is (..., N, d_k, h): you swapped the last two axes; swap the head axis with N instead, "
                    "np.swapaxes(x, -3, -2).")
        if got == (*lead, D_K, N, H):
            return ("That is (..., d_k, N, h): the heads are h columns wide; reshape to (..., N, h, d_k) "
                    "(x.reshape(*x.shape[:-1], n_heads, -1)), not (..., N, -1, n_heads).")
        if sorted(got) == sorted(case.expected.shape):
            return ("The sizes are right but in the wrong order: a transpose with fixed axis numbers "
                    "(transpose(1, 0, 2)) moves the batch axis too; count the axes from the end, np.swapaxes(x, -3, -2).")
        return None

    verdict = _run(fn, cases, "split_heads", signature="split_heads(x, n_heads)", shape_hint=shape_hint)
    if not verdict.ok:
        return verdict
    return _refuses_uneven_heads(fn) or verdict


def _refuses_uneven_heads(fn: Callable) -> Feedback | None:
    """None if ``fn(x, h)`` raises for an h that does not divide d_model; otherwise what it should do."""
    x = _rng().standard_normal((N, H * D_K))  # (N, d_model) = (5, 12)
    uneven = 5  # does not divide d_model = 12
    outcome = call_reader(fn, (x, uneven))
    if outcome.error is not None or outcome.library is not None:
        return None  # any error (a failing reshape, or a ValueError of the reader's own) is right
    got = getattr(outcome.value, "shape", type(outcome.value).__name__)
    return Feedback(False, f"With x of shape (N, d_model) = {x.shape} and h={uneven}, your split_heads returned "
                           f"{got} instead of failing: {uneven} heads cannot share d_model = {x.shape[-1]} "
                           f"columns evenly (d_k = d_model / h must be a whole number). A reshape to "
                           f"(..., N, h, d_model // h) fails by itself; or raise a ValueError that says so.")


def check_merge_heads(fn: Callable) -> Feedback:
    """Check the reader's ``merge_heads(x)``: ``(..., h, N, d_v) -> (..., N, h*d_v)``.

    Cases: ``x`` of shape (h, N, d_v) = (4, 5, 3), then with a batch axis (2, 4, 5, 3).
    No ``mha_core`` function may be called.

    Parameters
    ----------
    fn : callable ``fn(x) -> ndarray``

    Returns
    -------
    Feedback
    """
    _check_callable(fn)
    rng, cases = _rng(), []
    for label, shape in (("input of shape (h, N, d_v)", (H, N, D_K)), ("input of shape (B, h, N, d_v)", (BATCH, H, N, D_K))):
        x = rng.standard_normal(shape)  # (B?, h, N, d_v)
        wrong = (_Wrong("merge_without_transpose", PITFALLS["merge_without_transpose"].fn(x)),)
        cases.append(_Case(f"{label} = {shape}", (x,), merge_heads(x), wrong))

    def shape_hint(got, case):
        x = case.args[0]
        if got == (*x.shape[:-3], N, H, D_K):
            return "That is (..., N, h, d_v): after the transpose, reshape the last two axes into one."
        return None

    return _run(fn, cases, "merge_heads", signature="merge_heads(x)", shape_hint=shape_hint)


# --------------------------------------------------------------------------- numbers


def _close(value, target: float, rtol: float = ANSWER_RTOL) -> bool:
    return bool(np.isclose(float(value), target, rtol=rtol, atol=0.0))


def _fmt(x: float) -> str:
    """A number as a reader writes it: 28,311,552 or 1,280 or 0.125."""
    x = float(x)
    return f"{int(x):,}" if x.is_integer() and abs(x) < 1e18 else f"{x:,.6g}"


def _rounded_too_far(value, right: float) -> bool:
    return _close(value, right, _CLOSE_RTOL) and not _close(value, right)


# --------------------------------------------------------------------------- scale

# (d_model, h) pairs: the texts' worked example, their large model, and a small one.
_SCALE_CONFIGS = ((512, 8), (4096, 32), (64, 2))


def _scale_verdict(value, d_model: int, h: int, where: str) -> Feedback | None:
    """None if ``value`` is the right multiplier ``1/sqrt(d_k)`` within ``ANSWER_RTOL``, else a diagnosis."""
    d_k = d_model // h
    right = 1.0 / np.sqrt(d_k)
    if _close(value, right):
        return None
    known = (
        (1.0 / np.sqrt(d_model), "scale_sqrt_d_model",
         f"Your scale matches 1/sqrt(d_model) = {1 / np.sqrt(d_model):.4g} ({where}): "
         f"{PITFALLS['scale_sqrt_d_model'].explanation}."),
        (1.0, "scale_missing",
         f"Your scale is 1 ({where}): {PITFALLS['scale_missing'].explanation}."),
        (1.0 / d_k, "scale_d_k",
         f"Your scale is 1/d_k = {1 / d_k:.5g} ({where}): take the square root, 1/sqrt(d_k); the "
         f"logits' standard deviation grows like sqrt(d_k), not d_k."),
        (np.sqrt(d_k), None,
         f"Your scale is sqrt(d_k) = {np.sqrt(d_k):.4g} ({where}): that is the divisor; the scale "
         f"multiplies the logits, so it is 1/sqrt(d_k)."),
        (1.0 / np.sqrt(h), None,
         f"Your scale is 1/sqrt(h) = {1 / np.sqrt(h):.4g} ({where}): h is the number of heads; the scale uses "
         f"their width, 1/sqrt(d_k) with d_k = d_model / h."),
        (np.sqrt(d_model), None,
         f"Your scale is sqrt(d_model) = {np.sqrt(d_model):.4g} ({where}): wrong width and "
         f"multiplied instead of divided; the scale is 1/sqrt(d_k)."),
    )
    for index, (wrong, name, message) in enumerate(known):
        if _close(value, wrong):
            return Feedback(False, message, name or f"scale slip {index}")
    if _rounded_too_far(value, right):
        return Feedback(False, f"Your scale {float(value):.4g} is close to 1/sqrt(d_k) but rounded too far "
                               f"({where}): give four significant figures.")
    return Feedback(False, f"Your scale is {float(value):.4g} ({where}); expected 1/sqrt(d_k) = {right:.4g}.")


def _named_scale(verdict: Feedback) -> Feedback:
    """The verdict as the reader sees it: only the names of PITFALLS are reported as pitfalls."""
    if verdict.pitfall is not None and verdict.pitfall.startswith("scale slip"):
        return Feedback(False, verdict.message)
    return verdict


def check_scale(fn_or_value, *, d_model: int = 512, n_heads: int = 8) -> Feedback:
    """Check the softmax temperature: the number the logits ``Q K^T`` are MULTIPLIED by.

    A number is right within a relative ``ANSWER_RTOL`` (0.1 %), as in ``check_answer``: a
    rounded 0.08839 for 1/sqrt(128) passes.

    Parameters
    ----------
    fn_or_value : float or callable ``fn(d_model, n_heads) -> float``
        A number is checked for ``d_model`` and ``n_heads`` below. A function is called for
        several (d_model, h) pairs, so a hard-coded number is caught. The literal ``...`` (or a
        function raising ``NotImplementedError``) is a blank exercise: "not attempted yet".
    d_model, n_heads : int, default 512 and 8
        The layer a plain number refers to (the texts' worked example: d_k = 64).

    Returns
    -------
    Feedback; the right answer is ``1 / sqrt(d_k)`` with ``d_k = d_model / h``.
    """
    config = MHAConfig(d_model, n_heads)  # validates d_model and n_heads
    if fn_or_value is ...:
        return Feedback(False, "Replace ... with your number, then run this cell again.", attempted=False)
    if callable(fn_or_value):
        verdicts = []
        for dm, h in _SCALE_CONFIGS:
            where = f"d_model={dm}, h={h}"
            outcome = call_reader(fn_or_value, (dm, h))
            if outcome.library is not None:
                return _library_feedback(outcome.library, ())
            if isinstance(outcome.error, NotImplementedError):
                return not_attempted("scale function")
            if outcome.error is not None:
                return Feedback(False, explain_error(outcome.error, where, "fn(d_model, n_heads)"))
            value = outcome.value
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                return Feedback(False, f"Your function returned a {type(value).__name__}; expected a number ({where}).")
            verdicts.append((_scale_verdict(value, dm, h, where), value, dm, h, where))
        wrong = [v for v in verdicts if v[0] is not None]
        if not wrong:
            return Feedback(True, f"1/sqrt(d_k) for all {len(_SCALE_CONFIGS)} layer sizes tried.")
        first, value, dm, h, where = wrong[0]
        if len(wrong) < len(verdicts):
            return Feedback(False, f"Your scale is {float(value):.4g} ({where}); expected 1/sqrt(d_k) = "
                                   f"{1 / np.sqrt(dm // h):.4g}. It is right at some sizes and not others: compute "
                                   f"d_k = d_model / h from the arguments.")
        if first.pitfall is not None and any(v.pitfall != first.pitfall for v, *_ in wrong):
            # a known mistake at one size only (1/sqrt(d_model*h) is 1/d_k at d_model=512, h=8): not that mistake
            return Feedback(False, f"Your scale is {float(value):.4g} ({where}); expected 1/sqrt(d_k) = "
                                   f"{1 / np.sqrt(dm // h):.4g}.")
        return _named_scale(first)
    if isinstance(fn_or_value, bool) or not isinstance(fn_or_value, numbers.Real):
        raise TypeError(
            f"fn_or_value must be a number or a callable fn(d_model, n_heads), got {type(fn_or_value).__name__}"
        )
    where = f"d_model={config.d_model}, h={config.h}, d_k={config.d_k}"
    verdict = _scale_verdict(fn_or_value, config.d_model, config.h, where)
    if verdict is not None:
        return _named_scale(verdict)
    return Feedback(True, f"1/sqrt(d_k) = {1 / np.sqrt(config.d_k):.4g} for {where}.")


# --------------------------------------------------------------------------- masks and softmax


def check_causal_mask(fn: Callable) -> Feedback:
    """Check the reader's ``causal_mask(n)``: bool ``(N, N)``, True where key j <= query i.

    Cases: N = 5 and N = 1. No ``mha_core`` function may be called.

    Parameters
    ----------
    fn : callable ``fn(n) -> bool ndarray of shape (N, N)``

    Returns
    -------
    Feedback
    """
    _check_callable(fn)
    names = ("causal_mask_upper", "causal_mask_without_diagonal", "causal_mask_inverted")
    cases = [
        _Case(f"n={n}", (n,), causal_mask(n), tuple(_Wrong(name, PITFALLS[name].fn(n)) for name in names) + (
            _slip(np.ones((n, n), bool), "a mask of all True, which blocks nothing",
                  "block the future: True only where key j <= query i, np.tril(np.ones((n, n), dtype=bool))"),
            _slip(np.eye(n, dtype=bool), "the diagonal only, where each token sees only itself",
                  "keep everything below the diagonal too: np.tril, not np.eye"),
        ))
        for n in (N, 1)
    ]
    return _run(fn, cases, "causal_mask", signature="causal_mask(n)")


def check_softmax(fn: Callable) -> Feedback:
    """Check the reader's ``softmax(x)`` over the last axis (the keys) of scores ``(..., N_q, N_k)``.

    Cases: moderate logits of shape (h, N_q, N_k) = (4, 5, 6), then logits near 1000 where a
    naive ``exp`` overflows. Subtracting the global maximum instead of each row's is right too
    (no row underflows on these inputs). No ``mha_core`` function may be called.

    Parameters
    ----------
    fn : callable ``fn(x) -> ndarray`` of the same shape

    Returns
    -------
    Feedback
    """
    _check_callable(fn)
    rng = _rng()
    small = 2.0 * rng.standard_normal((H, N, N + 1))  # (h, N_q, N_k)
    large = 1000.0 + 5.0 * rng.standard_normal((H, N, N + 1))  # (h, N_q, N_k), exp overflows
    cases = []
    for label, x in (("scores", small), ("large scores near 1000", large)):
        wrong = tuple(_Wrong(name, PITFALLS[name].fn(x)) for name in ("softmax_over_queries", "softmax_unstable"))
        cases.append(_Case(f"{label}, shape {x.shape}", (x,), softmax(x, axis=-1), wrong + _softmax_slips(x)))
    return _run(fn, cases, "softmax", signature="softmax(x)", value_hint=_rows_hint)


def _softmax_slips(x: np.ndarray) -> tuple[_Wrong, ...]:
    """Softmax slips seen in readers' code, on scores ``x`` (..., N_k)."""
    with np.errstate(over="ignore", invalid="ignore"):  # exp(x) of the large case overflows, as the reader's does
        return _softmax_slip_values(x)


def _softmax_slip_values(x: np.ndarray) -> tuple[_Wrong, ...]:
    shifted = x - x.max(axis=-1, keepdims=True)  # (..., N_k)
    e = np.exp(shifted)
    return (
        _slip(shifted - np.log(e.sum(axis=-1, keepdims=True)), "the log of the softmax (a log-softmax)",
              "take the exponential of that, or divide exp(x - max) by its row sum instead of subtracting logs"),
        _slip(e, "exp(x - max) without the division by the row sum",
              "divide each row by its sum, e / e.sum(axis=-1, keepdims=True), so that it sums to 1"),
        _slip(x / x.sum(axis=-1, keepdims=True), "the scores divided by their row sum, without any exp",
              "take exp(x - max) first: the exponential makes every weight positive"),
        _slip(e / np.exp(x).sum(axis=-1, keepdims=True), "exp(x - max) divided by the sum of exp(x)",
              "subtract the same maximum in the numerator and the denominator, e / e.sum(axis=-1, keepdims=True)"),
    )


# --------------------------------------------------------------------------- attention


def _inverted_mask_answer(q, k, v, mask) -> np.ma.MaskedArray:
    """The True = blocked answer, with the rows that block every key left out of the comparison.

    Such a row has no right value: it is NaN with a plain ``-inf`` fill, uniform with ``-1e9``,
    zeros in ``mha_core``. The other rows tell the mistake apart.
    """
    out, _ = PITFALLS["mask_inverted"].fn(q, k, v, mask)  # (h, N_q, d_v)
    nothing_allowed = ~(~mask).any(axis=-1)  # (N_q,): the inverted mask blocks the whole row
    dont_compare = np.broadcast_to(nothing_allowed[:, None], out.shape)  # (h, N_q, d_v)
    return np.ma.masked_array(out, mask=dont_compare)


def check_attention(fn: Callable, *, with_mask: bool = True) -> Feedback:
    """Check the reader's ``attention(q, k, v, mask=None)`` (scaled dot-product attention).

    Inputs have a heads axis: q, k, v of shape (h, N, d_k) = (4, 5, 3), so d_model = 12 and a
    sqrt(d_model) scale can be told apart from sqrt(d_k). The function may return ``out`` or
    ``(out, weights)``; ``out`` is compared. It may use ``mha_core``'s ``softmax`` (and
    ``causal_mask``), and no other ``mha_core`` function. Recognised: the scale mistakes
    (sqrt(d_model), none, d_k), the softmax over the queries, and with the mask, the mask ignored,
    read as True = blocked, multiplied into the scores, or applied after the softmax.

    Parameters
    ----------
    fn : callable ``fn(q, k, v, mask=None) -> out`` or ``-> (out, weights)``
        ``mask`` is a bool (N_q, N_k) array, True = may attend.
    with_mask : bool, default True
        Also check a call with a causal mask. Pass False for an attempt without mask support.

    Returns
    -------
    Feedback
    """
    _check_callable(fn)
    if not isinstance(with_mask, bool):
        raise TypeError(f"with_mask must be a bool, got {type(with_mask).__name__}")
    rng = _rng()
    q, k, v = (rng.standard_normal((H, N, D_K)) for _ in range(3))  # (h, N, d_k) each
    names = ("scale_sqrt_d_model", "scale_missing", "scale_d_k", "attention_softmax_over_queries")
    cases = []
    masks = ((None, "no mask"), (causal_mask(N), "causal mask")) if with_mask else ((None, "no mask"),)
    for mask, label in masks:
        args = (q, k, v) if mask is None else (q, k, v, mask)
        expected, _ = scaled_dot_product_attention(q, k, v, mask)  # (h, N, d_v)
        wrong = [_Wrong(name, PITFALLS[name].fn(q, k, v, mask)[0]) for name in names]
        if mask is not None:
            wrong += [_Wrong(name, PITFALLS[name].fn(q, k, v, mask)[0])
                      for name in ("mask_ignored", "mask_multiplied", "mask_after_softmax")]
            wrong.append(_Wrong("mask_inverted", _inverted_mask_answer(q, k, v, mask)))
        wrong += _attention_slips(q, k, v, mask)
        cases.append(_Case(f"q, k, v of shape {q.shape}, {label}", args, expected, tuple(wrong)))
    def shape_hint(got, case):
        if got == (H, N, N):
            return ("That is the shape of the weights (h, N_q, N_k): return the weighted sum of the values, "
                    "weights @ v, (h, N_q, d_v).")
        return None

    signature = "attention(q, k, v, mask=None)" if with_mask else "attention(q, k, v)"
    return _run(fn, cases, "attention", signature=signature, allowed=("softmax", "causal_mask"),
                unpack_first=True, shape_hint=shape_hint)


def _attention_slips(q, k, v, mask) -> list[_Wrong]:
    """Attention slips seen in readers' code, on q, k, v (h, N, d_k) and a bool mask or None."""
    d_k = q.shape[-1]

    def attend(scores, axis=-1, fill=-np.inf, keys=mask):  # (h, N_q, N_k) -> (h, N_q, d_v)
        if keys is not None:
            scores = np.where(keys, scores, fill)
        return softmax(scores, axis=axis) @ v

    scores = q @ np.swapaxes(k, -1, -2)  # (h, N_q, N_k)
    slips = [
        _slip(attend(scores * np.sqrt(d_k)), "the scores multiplied by sqrt(d_k)",
              "divide the scores by sqrt(d_k) (multiply by 1/sqrt(d_k)): the scale makes them smaller"),
        _slip(attend(scores / np.sqrt(d_k), axis=0), "a softmax over axis 0, the heads",
              "take the softmax over the last axis, the keys: each query's weights sum to 1"),
        _slip(attend(k @ np.swapaxes(q, -1, -2) / np.sqrt(d_k)), "scores computed as k @ q^T, keys down and queries across",
              "compute q @ k^T (np.swapaxes(k, -1, -2)): row i holds query i's score for every key"),
    ]
    weights = softmax(scores if mask is None else np.where(mask, scores, -np.inf), axis=-1)  # (h, N_q, N_k)
    slips.append(_slip((weights / np.sqrt(d_k)) @ v, "the weights divided by sqrt(d_k) after the softmax",
                       "scale the scores before the softmax: softmax(q @ k^T / sqrt(d_k))"))
    if mask is not None:
        slips += [
            _slip(attend(scores / np.sqrt(d_k), keys=mask.T), "the mask transposed (the upper triangle)",
                  "use the mask as given: row i is query i, True where key j may be attended"),
            _slip(softmax(scores / np.sqrt(d_k) + mask, axis=-1) @ v, "the bool mask added to the scores (True counts as 1)",
                  "fill the blocked scores with -inf, np.where(mask, scores, -np.inf), before the softmax"),
        ] + [_slip(attend(scores / np.sqrt(d_k), fill=fill), f"the blocked scores set to {fill:g} instead of -inf",
                   f"set them to -np.inf: a blocked score of {fill:g} still gets a weight above 0")
             for fill in (-1.0, -10.0, -100.0)]
    return slips


def _transposed_weights(x: np.ndarray, params: dict) -> list[_Wrong]:
    """The layer with every non-empty subset of the weights used as ``W.T``; all four first."""
    subsets = [s for r in range(len(WEIGHT_NAMES), 0, -1) for s in combinations(WEIGHT_NAMES, r)]
    wrong = []
    for subset in subsets:
        value = pitfalls.multi_head_attention_transposed_weights(x, params, H, transposed=subset)
        answer = None if len(subset) == len(WEIGHT_NAMES) else (
            f"the layer with {' and '.join(subset)} transposed, x @ W.T")
        wrong.append(_Wrong("weights_transposed", value, answer))
    return wrong


def check_multi_head_attention(fn: Callable) -> Feedback:
    """Check the reader's ``mha(x, params, n_heads)`` (the capstone) against ``multi_head_attention``.

    Cases: x of shape (N, d_model) = (5, 12), then (B, N, d_model) = (2, 5, 12); h = 4; weights
    from ``init_params`` (float64, seeded, no biases, no mask). Only ``mha_core``'s ``softmax``
    may be used. Recognised at layer level: no ``W_O``; the split, the merge, or both without
    their transpose; weights used as ``W.T`` (all, or which ones); and the scale or softmax-axis
    mistakes of ``attention``.

    Parameters
    ----------
    fn : callable ``fn(x, params, n_heads) -> ndarray of shape (..., N, d_model)``
        ``params`` holds ``W_Q, W_K, W_V, W_O``, each of shape (d_model, d_model).

    Returns
    -------
    Feedback
    """
    _check_callable(fn)
    rng = _rng()
    params = init_params(MHAConfig(H * D_K, H), rng, dtype=np.float64)
    cases = []
    for label, shape in (("x of shape (N, d_model)", (N, H * D_K)), ("x of shape (B, N, d_model)", (BATCH, N, H * D_K))):
        x = rng.standard_normal(shape)  # (B?, N, d_model)
        wrong = [_Wrong(name, PITFALLS[name].fn(x, params, H)) for name in (
            "no_output_projection", "layer_without_transpose", "layer_split_without_transpose",
            "layer_merge_without_transpose")]
        wrong += _transposed_weights(x, params)
        wrong += [_Wrong(name, pitfalls.layer_with(x, params, H, attention=PITFALLS[name].fn))
                  for name in ("scale_sqrt_d_model", "scale_missing", "scale_d_k", "attention_softmax_over_queries")]
        cases.append(_Case(f"{label} = {shape}, h={H}", (x, params, H), multi_head_attention(x, params, H), tuple(wrong)))
    return _run(fn, cases, "multi_head_attention", signature="my_multi_head_attention(x, params, n_heads)",
                allowed=("softmax",), unpack_first=True)


# --------------------------------------------------------------------------- numeric questions


@dataclass(frozen=True)
class Question:
    """A short numeric question whose answer ``mha_core`` computes.

    Attributes
    ----------
    prompt : str
        The question as the notebook asks it.
    unit : str
        What the number counts ("parameters", "MiB", ...); ``_UNIT_SLIPS`` lists its slips.
    answer : callable ``() -> float``
        Computes the right answer from the core's counting functions (never typed).
    mistakes : callable ``() -> dict[str, float]``
        Known wrong answers: description of the mistake -> the number it gives.
    """

    prompt: str
    unit: str
    answer: Callable[[], float]
    mistakes: Callable[[], dict[str, float]]


_MIB = 2**20
# The right number written in another unit: unit -> ((factor, what the reader did), ...); the
# slipped answer is the right one times the factor.
_UNIT_SLIPS: dict[str, tuple[tuple[float, str], ...]] = {
    "MACs": (
        (2.0, "that is in FLOPs: each multiply-accumulate is 2 operations, so FLOPs = 2 x MACs, and "
              "the question asks for MACs"),
        (1e-9, "that looks like billions (GMACs): write the whole count, not billions"),
        (2e-9, "that looks like billions of FLOPs: write the whole count of MACs (one MAC is 2 FLOPs)"),
    ),
    "MiB": (
        (_MIB, "that is in bytes; the question asks for MiB: divide by 2**20 = 1,048,576"),
        (1024.0, "that is in KiB; the question asks for MiB: divide by 1,024"),
        (1 / 1024, "that is in GiB; the question asks for MiB: multiply by 1,024"),
        (_MIB / 1e6, "that is in MB (10**6 bytes); the question asks for MiB, 2**20 = 1,048,576 bytes each"),
        (_MIB / 1e9, "that is in GB (10**9 bytes); the question asks for MiB, 2**20 = 1,048,576 bytes each"),
        (8.0 * _MIB, "that is in bits; the question asks for MiB: a byte is 8 bits, a MiB 2**20 bytes"),
    ),
    "parameters": (
        (1e-6, "that looks like millions: write the whole count, not millions"),
    ),
}


# The GQA question's model: the shape of a Llama-2-70B-style layer stack (h = 64 query heads,
# n_kv = 8 key/value heads, d_k = 128, 80 layers), a 4,096-token context, fp16 cache.
_GQA = {"d_model": 8192, "h": 64, "n_kv": 8, "layers": 80, "tokens": 4096}


def _gqa_cache_mib(n_kv: int, *, layers: int = _GQA["layers"], dtype=np.float16) -> float:
    """The question's KV cache in MiB, keys and values, with ``n_kv`` key/value heads."""
    c = MHAConfig(_GQA["d_model"], _GQA["h"], n_kv)
    return kv_cache_bytes(c, _GQA["tokens"], n_layers=layers, dtype=dtype) / _MIB

QUESTIONS: dict[str, Question] = {
    "params_768_12": Question(
        "How many weights does one multi-head attention layer hold at d_model = 768 and h = 12 "
        "(GPT-2 small's width), without biases?",
        "parameters",
        lambda: count_params(MHAConfig(768, 12))["total"],
        lambda: {
            "you multiplied by the number of heads: the heads split d_model, they do not copy it":
                12 * count_params(MHAConfig(768, 12))["total"],
            "you counted the biases too; the question asks for the weights alone":
                count_params(MHAConfig(768, 12, bias=True))["total"],
            "that is W_Q, W_K and W_V only; W_O is a fourth d_model x d_model matrix":
                3 * count_params(MHAConfig(768, 12))["W_Q"],
            "that is one head's W_Q, W_K, W_V and W_O slices; the layer has h of them":
                count_params(MHAConfig(768, 12))["total"] // 12,
        },
    ),
    "d_k_768_12": Question(
        "What is the per-head width d_k at d_model = 768 and h = 12?",
        "dimensions",
        lambda: MHAConfig(768, 12).d_k,
        lambda: {"that is d_model itself; each head works in d_model / h dimensions": 768},
    ),
    "attention_macs_512_8_2000": Question(
        "The worked example (d_model = 512, h = 8) at N = 2,000 tokens: how many multiply-"
        "accumulates do the scores Q K^T and the weighted sum of V take together, over all heads?",
        "MACs",
        lambda: count_macs(MHAConfig(512, 8), 2000)["attention"],
        lambda: {
            "that is one head; the h heads each do N^2 * d_k, and h * d_k = d_model":
                count_macs(MHAConfig(512, 8), 2000)["attention"] // 8,
            "that is the scores alone; the weighted sum of V costs as much again":
                count_macs(MHAConfig(512, 8), 2000)["scores"],
            "that is the projections (4 N d_model^2); the question asks for the attention core":
                count_macs(MHAConfig(512, 8), 2000)["projections"],
        },
    ),
    "kv_cache_gqa_mib": Question(
        f"A GQA model: d_model = {_GQA['d_model']:,}, h = {_GQA['h']} query heads, "
        f"n_kv = {_GQA['n_kv']} key/value heads, {_GQA['layers']} layers. How many MiB does its "
        f"KV cache take for one sequence of {_GQA['tokens']:,} tokens in fp16 (2 bytes a number)?",
        "MiB",
        lambda: _gqa_cache_mib(_GQA["n_kv"]),
        lambda: {
            "that is the cache of plain MHA (n_kv = h); GQA caches n_kv heads, not h":
                _gqa_cache_mib(_GQA["h"]),
            "you cached K or V, not both: the cache holds the keys AND the values":
                _gqa_cache_mib(_GQA["n_kv"]) / 2,
            "that is one layer; every layer keeps its own cache":
                _gqa_cache_mib(_GQA["n_kv"], layers=1),
            "that is MQA (n_kv = 1); this model keeps n_kv key/value heads":
                _gqa_cache_mib(1),
            "that counts 4 bytes a number (fp32); the question's cache is fp16, 2 bytes a number":
                _gqa_cache_mib(_GQA["n_kv"], dtype=np.float32),
        },
    ),
}
"""Question id -> ``Question``; ``check_answer(question_id, value)`` checks a reader's number."""


def _slips(q: Question, value, right: float, mistakes: dict) -> str | None:
    """What the reader did if ``value`` is the right answer, or a known mistake, in another unit.

    ``right`` and ``mistakes`` are ``q.answer()`` and ``q.mistakes()``, as ``check_answer`` computed them."""
    slips = _UNIT_SLIPS.get(q.unit, ())
    for factor, slip in slips:
        if _close(value, right * factor):
            return slip
    for mistake, wrong in mistakes.items():
        for factor, slip in slips:
            if _close(value, float(wrong) * factor):
                return f"{slip}; and even in {q.unit}, {mistake}"
    return None


def check_answer(question_id: str, value) -> Feedback:
    """Check the reader's number for ``QUESTIONS[question_id]``; ``...`` means "not attempted yet".

    Parameters
    ----------
    question_id : str
        A key of ``QUESTIONS``.
    value : int or float, or ``...``
        The reader's answer, in the question's unit. Right within a relative ``ANSWER_RTOL``
        (0.1 %: four significant figures always are).

    Returns
    -------
    Feedback; a known wrong answer, the right answer in another unit (FLOPs for MACs, bytes,
    KiB, GiB, MB or GB for MiB, millions for a count) and a number rounded too far are each
    explained in ``message``.
    """
    if not isinstance(question_id, str) or question_id not in QUESTIONS:
        raise ValueError(f"question_id must be one of {sorted(QUESTIONS)}, got {question_id!r}")
    q = QUESTIONS[question_id]
    if value is ...:
        return Feedback(False, f"{q.prompt} Replace ... with your number, then run this cell again.", attempted=False)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"value must be a number (in {q.unit}), got {type(value).__name__} {value!r}")
    right = float(q.answer())
    if _close(value, right):
        return Feedback(True, f"{_fmt(right)} {q.unit}.")
    mistakes = q.mistakes()
    for mistake, wrong in mistakes.items():
        if _close(value, wrong):
            return Feedback(False, f"{_fmt(value)} {q.unit}: {mistake}.")
    slip = _slips(q, value, right, mistakes)
    if slip is not None:
        return Feedback(False, f"{_fmt(value)}: {slip}.")
    if _rounded_too_far(value, right):
        return Feedback(False, f"{_fmt(value)} {q.unit} is close but rounded too far: give four significant "
                               f"figures (or the exact number).")
    return Feedback(False, f"{_fmt(value)} {q.unit} is not it; check the formula in the notebook and try again.")
