"""The checkers of notebooks 09_the_block and 10_a_real_layer (mha_core.teaching.block_exercises): several right
answers pass, each classic mistake is named, a blank stub is "not attempted", a crash is a
message, and calling the library's own function is refused."""

from __future__ import annotations

import numpy as np
import pytest

from mha_core import multi_head_attention
from mha_core.models.blocks import gelu, gelu_mlp, layer_norm
from mha_core.teaching.block_exercises import (
    LAYER_MISTAKES,
    RMS_NORM_MISTAKES,
    check_encoder_layer,
    check_rms_norm,
)

# ------------------------------------------------------------------ RMSNorm, written as students do

RIGHT_RMS = {
    "mean of squares": lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * w,
    "x*x and [..., None]": lambda x, w, eps: w * x / np.sqrt((x * x).mean(-1) + eps)[..., None],
    "norm / sqrt(d)": lambda x, w, eps: x * w / np.sqrt(np.linalg.norm(x, axis=-1, keepdims=True) ** 2 / x.shape[-1] + eps),
    "reciprocal sqrt": lambda x, w, eps: x * (1.0 / np.sqrt(np.square(x).mean(axis=-1, keepdims=True) + eps)) * w,
}

WRONG_RMS = {
    "centred": lambda x, w, eps: (x - x.mean(-1, keepdims=True)) / np.sqrt(
        ((x - x.mean(-1, keepdims=True)) ** 2).mean(-1, keepdims=True) + eps) * w,
    "std_not_rms": lambda x, w, eps: x / np.sqrt(x.var(-1, keepdims=True) + eps) * w,
    "no_eps": lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True)) * w,
    "no_sqrt": lambda x, w, eps: x / (np.mean(x**2, axis=-1, keepdims=True) + eps) * w,
    "eps_outside_sqrt": lambda x, w, eps: x / (np.sqrt(np.mean(x**2, axis=-1, keepdims=True)) + eps) * w,
    "sum_not_mean": lambda x, w, eps: x / np.sqrt(np.sum(x**2, axis=-1, keepdims=True) + eps) * w,
    "wrong_axis": lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=0, keepdims=True) + eps) * w,
    "whole_array": lambda x, w, eps: x / np.sqrt(np.mean(x**2) + eps) * w,
    "no_weight": lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps),
    "weight_first": lambda x, w, eps: (x * w) / np.sqrt(np.mean((x * w) ** 2, axis=-1, keepdims=True) + eps),
    "weight_added": lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) + w,
    "norm_not_rms": lambda x, w, eps: x / np.linalg.norm(x, axis=-1, keepdims=True) * w,
}


@pytest.mark.parametrize("name", list(RIGHT_RMS))
def test_right_rms_norms_pass(name):
    fb = check_rms_norm(RIGHT_RMS[name])
    assert fb.ok and fb.attempted, fb


def test_every_rms_mistake_has_a_student_version():
    assert set(WRONG_RMS) == set(RMS_NORM_MISTAKES)


@pytest.mark.parametrize("name", list(WRONG_RMS))
def test_each_rms_mistake_is_named(name):
    fb = check_rms_norm(WRONG_RMS[name])
    assert not fb.ok and fb.pitfall == name, fb
    assert "Fix:" in fb.message


def test_rms_blank_crash_nan_shape_and_library():
    def blank(x, weight, eps):
        raise NotImplementedError("your code here")

    fb = check_rms_norm(blank)
    assert not fb.ok and not fb.attempted and "NotImplementedError" in fb.message
    fb = check_rms_norm(lambda x, w, eps: x @ x)  # (5, 8) @ (5, 8)
    assert not fb.ok and "raised ValueError: matmul" in fb.message, fb
    fb = check_rms_norm(lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) - 1) * w)
    assert not fb.ok and "NaN" in fb.message, fb
    fb = check_rms_norm(lambda x, w, eps: x.sum(-1))
    assert "Wrong shape" in fb.message, fb
    fb = check_rms_norm(lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1) + eps) * w)  # no keepdims
    assert not fb.ok and fb.pitfall == "no_keepdims" and "keepdims=True" in fb.message, fb
    fb = check_rms_norm(lambda x, w, eps: (x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * w).astype(np.float32))
    assert not fb.ok and fb.pitfall == "wrong_dtype" and "float32" in fb.message, fb
    fb = check_rms_norm(lambda x, w, eps: x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * w * 1.01)
    assert not fb.ok and fb.pitfall is None and "Check, in order" in fb.message, fb

    def in_place(x, w, eps):
        x /= np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps)
        x *= w
        return x

    assert "in place" in check_rms_norm(in_place).message

    from mha_core.models.blocks import rms_norm

    def library(x, w, eps):
        return rms_norm(x, w, eps)

    fb = check_rms_norm(library)
    assert not fb.ok and "calls mha_core's rms_norm" in fb.message
    with pytest.raises(TypeError, match="fn must be your function"):
        check_rms_norm(3)


# ------------------------------------------------------------------ one real MiniLM layer


def right_layer(x, p, n_heads, eps):
    a = multi_head_attention(x, {k: p[k] for k in ("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O")}, n_heads)
    x = layer_norm(x + a, p["ln1_w"], p["ln1_b"], eps)
    return layer_norm(x + gelu_mlp(x, p["W_in"], p["b_in"], p["W_out"], p["b_out"]), p["ln2_w"], p["ln2_b"], eps)


def right_layer_by_hand(x, p, n_heads, eps):
    """Written with plain NumPy apart from multi_head_attention: its own LayerNorm and GELU."""
    def ln(z, w, b):
        mu = z.mean(-1, keepdims=True)
        return (z - mu) / np.sqrt(z.var(-1, keepdims=True) + eps) * w + b

    params = {k: v for k, v in p.items() if k[:2] in ("W_", "b_") and k[2] in "QKVO"}
    y = ln(x + multi_head_attention(x, params, n_heads), p["ln1_w"], p["ln1_b"])
    hidden = y @ p["W_in"] + p["b_in"]
    return ln(y + gelu(hidden) @ p["W_out"] + p["b_out"], p["ln2_w"], p["ln2_b"])


def _mha(x, p, h, biases=True, causal=False):
    keys = ("W_Q", "W_K", "W_V", "W_O") + (("b_Q", "b_K", "b_V", "b_O") if biases else ())
    return multi_head_attention(x, {k: p[k] for k in keys}, h, causal=causal)


def _ln(z, p, k, eps):
    return layer_norm(z, p[f"{k}_w"], p[f"{k}_b"], eps)


def _ffn(z, p):
    return gelu_mlp(z, p["W_in"], p["b_in"], p["W_out"], p["b_out"])


WRONG_LAYERS = {
    "pre_norm": lambda x, p, h, e: (lambda y: y + _ffn(_ln(y, p, "ln2", e), p))(x + _mha(_ln(x, p, "ln1", e), p, h)),
    "no_attention_residual": lambda x, p, h, e: (lambda y: _ln(y + _ffn(y, p), p, "ln2", e))(_ln(_mha(x, p, h), p, "ln1", e)),
    "no_ffn_residual": lambda x, p, h, e: _ln(_ffn(_ln(x + _mha(x, p, h), p, "ln1", e), p), p, "ln2", e),
    "no_biases": lambda x, p, h, e: (lambda y: _ln(y + _ffn(y, p), p, "ln2", e))(_ln(x + _mha(x, p, h, biases=False), p, "ln1", e)),
    "causal": lambda x, p, h, e: (lambda y: _ln(y + _ffn(y, p), p, "ln2", e))(_ln(x + _mha(x, p, h, causal=True), p, "ln1", e)),
    "rms_norm": lambda x, p, h, e: (lambda r: (lambda y: r(y + _ffn(y, p), "ln2"))(r(x + _mha(x, p, h), "ln1")))(
        lambda z, k: z / np.sqrt(np.mean(z * z, -1, keepdims=True) + e) * p[f"{k}_w"]),
    "relu": lambda x, p, h, e: (lambda y: _ln(y + np.maximum(y @ p["W_in"] + p["b_in"], 0) @ p["W_out"] + p["b_out"], p, "ln2", e))(
        _ln(x + _mha(x, p, h), p, "ln1", e)),
    "no_second_norm": lambda x, p, h, e: (lambda y: y + _ffn(y, p))(_ln(x + _mha(x, p, h), p, "ln1", e)),
    "norms_swapped": lambda x, p, h, e: (lambda y: _ln(y + _ffn(y, p), p, "ln1", e))(_ln(x + _mha(x, p, h), p, "ln2", e)),
    "no_activation": lambda x, p, h, e: (lambda y: _ln(y + (y @ p["W_in"] + p["b_in"]) @ p["W_out"] + p["b_out"], p, "ln2", e))(
        _ln(x + _mha(x, p, h), p, "ln1", e)),
    "gelu_tanh": lambda x, p, h, e: (lambda y: _ln(y + _gelu_tanh(y @ p["W_in"] + p["b_in"]) @ p["W_out"] + p["b_out"], p, "ln2", e))(
        _ln(x + _mha(x, p, h), p, "ln1", e)),
    "ffn_reads_x": lambda x, p, h, e: _ln(x + _ffn(x, p), p, "ln2", e),  # the y of the first norm computed, then lost
    "residual_before_norm": lambda x, p, h, e: (lambda a: _ln(x + a + _ffn(_ln(x + a, p, "ln1", e), p), p, "ln2", e))(
        _mha(x, p, h)),
}


def _gelu_tanh(z):
    """GELU's tanh approximation (GPT-2's), which a student may write from memory."""
    return 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))


@pytest.mark.parametrize("fn", [right_layer, right_layer_by_hand])
def test_right_layers_reproduce_the_real_model(minilm, fn):
    for layer in (0, 2, 5):
        fb = check_encoder_layer(fn, layer=layer)
        assert fb.ok, fb
        assert "reproduces layer" in fb.message


def test_every_layer_mistake_has_a_student_version():
    assert set(WRONG_LAYERS) == set(LAYER_MISTAKES)


@pytest.mark.parametrize("name", list(WRONG_LAYERS))
def test_each_layer_mistake_is_named(minilm, name):
    fb = check_encoder_layer(WRONG_LAYERS[name])
    assert not fb.ok and fb.pitfall == name, fb


def test_layer_blank_crash_and_calling_the_model(minilm):
    def blank(x, p, n_heads, eps):
        raise NotImplementedError("your code here")

    assert not check_encoder_layer(blank).attempted
    fb = check_encoder_layer(lambda x, p, n_heads, eps: x @ p["W_in"])
    assert not fb.ok and "Wrong shape" in fb.message
    fb = check_encoder_layer(lambda x, p, n_heads, eps: x + p["nope"])
    assert not fb.ok and "raised KeyError" in fb.message
    fb = check_encoder_layer(lambda x, p, n_heads, eps: right_layer(x, p, n_heads, eps) * 1.01)
    assert not fb.ok and fb.pitfall is None and "Check, in order" in fb.message, fb
    fb = check_encoder_layer(lambda x, p, n_heads, eps: right_layer(x, p, n_heads, eps).astype(np.float64))
    assert fb.ok, fb  # a float64 answer with the right values is right

    def cheat(x, p, n_heads, eps):
        return minilm.hidden_states(np.array([101, 102]))[0]

    assert "calls the model's own hidden_states" in check_encoder_layer(cheat).message
    with pytest.raises(ValueError, match="layer must be an int in"):
        check_encoder_layer(right_layer, layer=6)
