"""Checkers for the exercises of notebooks 09_the_block (RMSNorm) and 10_a_real_layer (one real encoder layer).

    def rms_norm(x, weight, eps):
        raise NotImplementedError("your code here")

    check_rms_norm(rms_norm)

    def encoder_layer(x, p, n_heads, eps):
        raise NotImplementedError("your code here")

    check_encoder_layer(encoder_layer)

Each checker runs the reader's function on fixed inputs, compares it with ``mha_core``'s answer,
and when they differ compares it with each classic mistake (``RMS_NORM_MISTAKES``,
``LAYER_MISTAKES``) and names the one that matches; an output that matches none gets a list of what to check
(``RMS_HINT``, ``LAYER_HINT``). A wrong dtype and a broadcasting error from a mean without
``keepdims`` are named too. A blank stub (``NotImplementedError``) is
"not attempted yet"; an exception in the reader's code comes back as a message, never a
traceback. The verdict is a ``Feedback``, as for the other exercises. ``check_encoder_layer``
compares with the real model: ``load("minilm").hidden_states(ids)`` after that layer.
The worked solutions are in ``notebooks/solutions/block_solutions.ipynb``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from ..core.mha import multi_head_attention
from ..core.validate import BIAS_NAMES, WEIGHT_NAMES
from ..models import blocks
from .exercises import Feedback, call_reader, copy_args, not_attempted

__all__ = ["LAYER_MISTAKES", "RMS_NORM_MISTAKES", "check_encoder_layer", "check_rms_norm"]

RMS_EPS = 1e-5  # SmolLM2's epsilon
RMS_RTOL, RMS_ATOL = 1e-7, 1e-9  # float64 inputs: a right answer agrees to ~1e-15
LAYER_ATOL = 2e-4  # float32 through one real layer: a right answer agrees to ~1e-5
LAYER_TEXT = "The animal didn't cross the street because it was too tired."


def _rms_cases() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, x, weight): tokens with a non-zero mean, a batch, and one tiny row where eps counts."""
    rng = np.random.default_rng(0)
    x1 = rng.standard_normal((5, 8)) + 0.7  # (N, d_model), mean far from 0
    w1 = rng.uniform(0.5, 2.0, 8)  # (d_model,)
    x2 = rng.standard_normal((2, 3, 6)) * 3.0  # (B, N, d_model)
    w2 = rng.uniform(0.5, 2.0, 6)
    x3 = np.array([[1e-3, -2e-3, 3e-3, 5e-4], [0.0, 0.0, 0.0, 0.0]])  # a tiny row and a zero row
    w3 = np.ones(4)
    return [("x of shape (5, 8), mean about 0.7", x1, w1),
            ("a batch x of shape (2, 3, 6)", x2, w2),
            ("a tiny row and a row of zeros", x3, w3)]


def _rms(x, w, eps, *, centre=False, sqrt=True, eps_inside=True, axis=-1, agg="mean", weight=True,
         weight_first=False, add_weight=False):
    if weight_first:
        x = x * w
    if centre:
        x = x - x.mean(axis=axis, keepdims=True)
    if axis is None:
        ms = np.mean(x * x) if agg == "mean" else np.sum(x * x)
    else:
        ms = np.mean(x * x, axis=axis, keepdims=True) if agg == "mean" else np.sum(x * x, axis=axis, keepdims=True)
    denom = (np.sqrt(ms + eps) if eps_inside else np.sqrt(ms) + eps) if sqrt else ms + eps
    if add_weight:
        return x / denom + w
    return x / denom * (w if weight and not weight_first else 1.0)


# name -> (what the output matches, the fix, how to compute it)
RMS_NORM_MISTAKES: dict[str, tuple[str, str, Callable]] = {
    "centred": ("x minus its mean, then scaled: that is LayerNorm without its bias",
                "RMSNorm does not subtract the mean; divide x itself by sqrt(mean(x**2) + eps)",
                partial(_rms, centre=True)),
    "std_not_rms": ("x divided by its standard deviation",
                    "x.std() subtracts the mean first; RMSNorm uses the root of the mean of x**2",
                    lambda x, w, e: x / np.sqrt(x.var(axis=-1, keepdims=True) + e) * w),
    "no_eps": ("x / sqrt(mean(x**2)) with no eps",
               "add eps inside the square root, sqrt(mean(x**2) + eps): it keeps a row of zeros from "
               "dividing by zero",
               lambda x, w, e: _rms(x, w, 0.0)),
    "no_sqrt": ("x divided by mean(x**2) + eps, without the square root",
                "take the square root: divide by sqrt(mean(x**2) + eps)",
                partial(_rms, sqrt=False)),
    "eps_outside_sqrt": ("x / (sqrt(mean(x**2)) + eps)",
                         "eps goes inside the square root: sqrt(mean(x**2) + eps)",
                         partial(_rms, eps_inside=False)),
    "sum_not_mean": ("x divided by sqrt(sum(x**2) + eps)",
                     "use the mean of x**2 over the features, not their sum",
                     partial(_rms, agg="sum")),
    "wrong_axis": ("a root-mean-square over the tokens (axis 0) instead of over each token's features",
                   "normalise each token on its own: mean over the last axis, keepdims=True",
                   partial(_rms, axis=0)),
    "whole_array": ("one root-mean-square of the whole array",
                    "normalise each token on its own: np.mean(x**2, axis=-1, keepdims=True)",
                    partial(_rms, axis=None)),
    "no_weight": ("the normalised x without the learned weight",
                  "multiply by weight at the end (one learned scale per feature)",
                  partial(_rms, weight=False)),
    "weight_first": ("x multiplied by weight first, then normalised",
                     "normalise x first, then multiply by weight: the weight rescales the normalised token",
                     partial(_rms, weight_first=True)),
    "weight_added": ("the normalised x plus weight",
                     "weight is a scale: multiply by it, do not add it (RMSNorm has no bias)",
                     partial(_rms, add_weight=True)),
    "norm_not_rms": ("x divided by its length, np.linalg.norm(x, axis=-1)",
                     "the length is sqrt(sum(x**2)); RMSNorm divides by sqrt(mean(x**2) + eps), the length "
                     "divided by sqrt(d_model), with eps inside",
                     lambda x, w, e: x / np.linalg.norm(x, axis=-1, keepdims=True) * w),
}

# What to check when a reader's output matches none of the mistakes above.
RMS_HINT = ("Check, in order: the mean of x**2 over the last axis with keepdims=True, eps inside the square "
            "root, x divided by that root, then multiplied by weight.")


def _calls_library(fn: Callable, names: tuple[str, ...]) -> str | None:
    """The name of a library function or model method that the reader's code calls instead of
    writing it (``rms_norm(...)``, ``blocks.rms_norm(...)``, ``model.hidden_states(...)``), if any."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    glb = dict(getattr(fn, "__globals__", {}))
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in fn.__closure__ or ()), strict=False))
    for name in names:
        if name not in code.co_names and name not in cells:
            continue
        target = cells.get(name, glb.get(name))
        if target is None or (target is not fn and getattr(target, "__module__", "").startswith("mha_core")):
            return name  # an attribute (module.rms_norm, model.forward) or mha_core's own function
    return None


def _compare(fn, args, expected, mistakes, label, rtol, atol, what, hint, *,
             same_dtype=False) -> tuple[Feedback | None, np.ndarray | None]:
    """``(None, output)`` when ``fn(*args)`` is right; otherwise ``(Feedback saying why not, None)``.
    ``hint`` is what to check when the output is of the right shape but matches no mistake;
    ``same_dtype`` asks for the dtype of ``expected`` too."""
    copies = copy_args(args)
    outcome = call_reader(fn, copies)  # numpy warnings silenced, an exception returned
    if isinstance(outcome.error, NotImplementedError):
        return not_attempted(what), None
    if outcome.error is not None:  # the reader's bug is reported, not raised
        e = outcome.error
        tip = (" A mean or sum over the last axis drops that axis: keep it with keepdims=True (or [..., None]) "
               "so that it divides each token's row." if "broadcast" in str(e) else "")
        return Feedback(False, f"Your {what} raised {type(e).__name__}: {e} (on {label}).{tip}",
                        "no_keepdims" if tip else None), None
    got = outcome.value
    if not isinstance(got, np.ndarray):
        return Feedback(False, f"Your {what} returned a {type(got).__name__}; expected a numpy array "
                               f"(on {label})."), None
    if got.shape != expected.shape:
        return Feedback(False, f"Wrong shape (on {label}): expected {expected.shape}, got {got.shape}. The "
                               f"output has one row per token and d_model columns, like the input."), None
    if not np.array_equal(copies[0], args[0]):
        return Feedback(False, f"Your {what} changed its input x in place (on {label}); work on a copy."), None
    if same_dtype and got.dtype != expected.dtype:
        return Feedback(False, f"Your output has dtype {got.dtype}; expected {expected.dtype}, the dtype of x "
                               f"(on {label}). Do not cast: NumPy keeps x's dtype if you compute with x.",
                        "wrong_dtype"), None
    if np.allclose(got, expected, rtol=rtol, atol=atol):
        return None, got
    for name, (answer, fix, compute) in mistakes.items():
        wrong = compute(*args)
        if wrong.shape == got.shape and np.allclose(got, wrong, rtol=rtol, atol=atol):
            return Feedback(False, f"Your output matches {answer} (on {label}). Fix: {fix}.", name), None
    if not np.isfinite(got).all():
        return Feedback(False, f"Your output holds NaN or inf (on {label}). A row of zeros must not divide "
                               "by zero: that is what eps is for."), None
    return Feedback(False, f"Right shape, wrong values (on {label}): largest error "
                           f"{float(np.max(np.abs(got - expected))):.3g}, and no mistake we know of matches. "
                           f"{hint}"), None


def check_rms_norm(fn: Callable) -> Feedback:
    """Check ``fn(x, weight, eps)``: RMSNorm over the last axis, ``x / sqrt(mean(x**2) + eps) * weight``.

    Parameters
    ----------
    fn : callable taking x of shape (..., d_model), weight of shape (d_model,) and eps (float)
    """
    if not callable(fn):
        raise TypeError(f"fn must be your function, got {type(fn).__name__} {fn!r}")
    used = _calls_library(fn, ("rms_norm", "layer_norm"))
    if used:
        return Feedback(False, f"This calls mha_core's {used}; write it yourself with NumPy (np.mean, np.sqrt).")
    cases = _rms_cases()
    for label, x, w in cases:
        bad, _ = _compare(fn, (x, w, RMS_EPS), blocks.rms_norm(x, w, RMS_EPS), RMS_NORM_MISTAKES,
                          label, RMS_RTOL, RMS_ATOL, "rms_norm", RMS_HINT, same_dtype=True)
        if bad is not None:
            return bad
    return Feedback(True, f"rms_norm matches mha_core on {len(cases)} cases, a batch and a row of zeros included.")


# ------------------------------------------------------------------ one real MiniLM layer

def _attn(x, p, n_heads, *, biases=True, causal=False):
    keys = WEIGHT_NAMES + (BIAS_NAMES if biases else ())
    return multi_head_attention(x, {k: p[k] for k in keys}, n_heads, causal=causal)  # (N, d_model)


def _ffn(x, p, act=blocks.gelu):
    return act(x @ p["W_in"] + p["b_in"]) @ p["W_out"] + p["b_out"]  # (N, d_ff) @ (d_ff, d_model)


def _ln(x, p, k, eps, norm="layer"):
    if norm == "rms":
        return blocks.rms_norm(x, p[f"{k}_w"], eps)
    return blocks.layer_norm(x, p[f"{k}_w"], p[f"{k}_b"], eps)


def _post(x, p, h, eps, *, biases=True, causal=False, norm="layer", res1=True, res2=True, act=blocks.gelu,
          ln2=True, swap=False, ffn_input="y", residual="y"):
    k1, k2 = ("ln2", "ln1") if swap else ("ln1", "ln2")
    a = _attn(x, p, h, biases=biases, causal=causal)
    y = _ln(x + a if res1 else a, p, k1, eps, norm)
    f = _ffn(x if ffn_input == "x" else y, p, act)
    base = {"y": y, "x": x, "x + a": x + a}[residual]  # what the feed-forward's output is added to
    z = base + f if res2 else f
    return _ln(z, p, k2, eps, norm) if ln2 else z


def _pre(x, p, h, eps):
    y = x + _attn(_ln(x, p, "ln1", eps), p, h)
    return y + _ffn(_ln(y, p, "ln2", eps), p)


LAYER_MISTAKES: dict[str, tuple[str, str, Callable]] = {
    "pre_norm": ("a pre-norm layer, x + attention(norm(x)), as in SmolLM2",
                 "MiniLM (like the original BERT) is post-norm: x = layer_norm(x + attention(x)), then "
                 "x = layer_norm(x + ffn(x))",
                 _pre),
    "no_attention_residual": ("layer_norm(attention(x)) without adding x back",
                              "keep the residual stream: layer_norm(x + attention(x))",
                              partial(_post, res1=False)),
    "no_ffn_residual": ("layer_norm(ffn(y)) without adding y back",
                        "keep the residual stream: layer_norm(y + ffn(y))",
                        partial(_post, res2=False)),
    "no_biases": ("attention without its biases b_Q, b_K, b_V, b_O",
                  "pass the biases to multi_head_attention too: BERT's projections have them",
                  partial(_post, biases=False)),
    "causal": ("attention with a causal mask",
               "an encoder is bidirectional: every token sees every token, so no mask",
               partial(_post, causal=True)),
    "rms_norm": ("RMSNorm in place of LayerNorm",
                 "BERT uses LayerNorm, which subtracts the mean and adds a bias (ln1_b, ln2_b)",
                 partial(_post, norm="rms")),
    "relu": ("a ReLU feed-forward block",
             "BERT's feed-forward uses GELU: blocks.gelu, or blocks.gelu_mlp for the whole block",
             partial(_post, act=lambda z: np.maximum(z, 0))),
    "no_second_norm": ("the layer without its second LayerNorm",
                       "normalise after the feed-forward too: layer_norm(y + ffn(y), ln2_w, ln2_b)",
                       partial(_post, ln2=False)),
    "norms_swapped": ("the two LayerNorms' weights swapped",
                      "ln1_w, ln1_b follow the attention; ln2_w, ln2_b follow the feed-forward",
                      partial(_post, swap=True)),
    "no_activation": ("a feed-forward block with no GELU between its two matrices",
                      "apply gelu to x @ W_in + b_in before W_out: without it the two matrices are one",
                      partial(_post, act=lambda z: z)),
    "gelu_tanh": ("the tanh approximation of GELU",
                  "MiniLM uses the exact GELU, x * Phi(x) with the erf: blocks.gelu",
                  partial(_post, act=lambda z: 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3))))),
    "ffn_reads_x": ("the feed-forward block applied to the layer's input x",
                    "feed it y, the output of the first LayerNorm: y = layer_norm(x + attention(x)), then "
                    "layer_norm(y + ffn(y))",
                    partial(_post, ffn_input="x", residual="x")),
    "residual_before_norm": ("the feed-forward output added to x + attention(x), before the first norm",
                             "add it to y, the normalised stream: layer_norm(y + ffn(y)) with "
                             "y = layer_norm(x + attention(x))",
                             partial(_post, residual="x + a")),
}

# What to check when a reader's layer matches none of the mistakes above.
LAYER_HINT = ("Check, in order: the eight W_* and b_* entries passed to multi_head_attention, no mask, "
              "y = layer_norm(x + attention, ln1_w, ln1_b, eps), then gelu(y @ W_in + b_in) @ W_out + b_out, "
              "then layer_norm(y + that, ln2_w, ln2_b, eps).")


def check_encoder_layer(fn: Callable, *, layer: int = 2, text: str = LAYER_TEXT) -> Feedback:
    """Check ``fn(x, p, n_heads, eps)``: one MiniLM encoder layer, against the real model.

    ``x`` is the real residual stream entering layer ``layer`` (``hidden_states(ids)[layer]``),
    ``p`` that layer's arrays (``model.layers[layer]``); the answer must equal
    ``hidden_states(ids)[layer + 1]``, within 2e-4 (float32).
    """
    if not callable(fn):
        raise TypeError(f"fn must be your function, got {type(fn).__name__} {fn!r}")
    from ..models import ModelCacheError, load

    try:
        model = load("minilm")
    except ModelCacheError as err:
        return Feedback(False, f"The real model is not on this machine yet: {err}", attempted=False)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < model.n_layers:
        raise ValueError(f"layer must be an int in [0, {model.n_layers}), got {layer!r}")
    used = _calls_library(fn, ("hidden_states", "forward", "attention"))
    if used:
        return Feedback(False, f"This calls the model's own {used}; build the layer from multi_head_attention "
                               f"and the blocks instead.")
    ids = model.encode(text)
    hidden = model.hidden_states(ids)  # (layers + 1, N, d_model)
    p = model.layers[layer]
    x = np.array(hidden[layer])  # (N, d_model): the stream entering the layer
    bad, got = _compare(fn, (x, p, model.n_heads, model.eps), hidden[layer + 1], LAYER_MISTAKES,
                        f"layer {layer} of MiniLM on {len(ids)} tokens", 0.0, LAYER_ATOL, "encoder_layer", LAYER_HINT)
    if bad is not None:
        return bad
    err = float(np.max(np.abs(got - hidden[layer + 1])))
    return Feedback(True, f"Your layer reproduces layer {layer} of the real all-MiniLM-L6-v2 on {len(ids)} "
                          f"tokens: largest difference {err:.1e}.")
