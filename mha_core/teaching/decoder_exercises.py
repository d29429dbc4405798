"""Checkers for the decoder exercises: one real SmolLM2 decoder layer, and greedy decoding with a KV cache.

    def decoder_layer(x, p, config):
        raise NotImplementedError("your code here")

    check_decoder_layer(decoder_layer)

    def generate(ids, n_new, parts):
        raise NotImplementedError("your code here")

    check_generation_loop(generate)

``decoder_layer`` receives the residual stream ``x`` entering a layer, (N, d_model) float32; the
layer's weights ``p`` (``layer_weights``: ``W_Q (d_model, h*d_k)``, ``W_K, W_V (d_model, n_kv*d_k)``,
``W_O (h*d_k, d_model)``, ``attn_norm, ffn_norm (d_model,)``, ``W_gate, W_up (d_model, d_ff)``,
``W_down (d_ff, d_model)``); and ``config`` (``layer_config``: ``n_heads`` h, ``n_kv_heads`` n_kv,
``d_k``, ``eps``, ``rope_base``). It returns the stream after the layer, (N, d_model)::

    a = x + W_O(attention(rms_norm(x, attn_norm)))       RoPE on q and k, GQA, causal mask
    y = a + swiglu(rms_norm(a, ffn_norm))                 silu(z W_gate) * (z W_up), then W_down

RoPE turns the *adjacent* pairs ``(2i, 2i+1)`` of each query and key head (the layout of these
weights, and of ``mha_core.apply_rope``). ``generate`` receives the prompt's token ids (N,), the
number of tokens to write and a ``DecoderParts`` (``decoder_parts``: ``embed``, ``layers``,
``config``, ``head``), and returns the ``n_new`` greedy token ids: the prompt through every layer
once (prefill, keeping each layer's keys and values), then one token per step, appending its key
and value to each layer's cache.

Each checker runs the reader's function on the real model, compares it with the model's own
computation, and when they differ compares it with each classic mistake (``DECODER_MISTAKES``,
``LOOP_MISTAKES``) and names the one that matches. A blank stub (``NotImplementedError``) is "not
attempted yet"; an exception in the reader's code comes back as a message. The verdict is a
``Feedback``, as for the other exercises.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core import (
    apply_rope,
    causal_mask,
    merge_heads,
    rope_angles,
    scaled_dot_product_attention,
    softmax,
    split_heads,
)
from ..models.blocks import embed, rms_norm, silu, swiglu
from .diagnosis import core_functions
from .exercises import Feedback, call_reader, copy_args, not_attempted

__all__ = [
    "DECODER_MISTAKES", "LOOP_MISTAKES", "DecoderParts", "check_decoder_layer", "check_generation_loop",
    "decoder_parts", "layer_config", "layer_weights",
]

DECODER_TEXT = "The animal didn't cross the street because it was tired."  # 12 tokens: N even
DECODER_LAYER = 3
# The stream scaled down so far that mean(x**2) is below eps: there eps inside or outside the
# square root give different answers (on the real stream they agree to float32 rounding).
SMALL_SCALE = 1e-3
# A right answer agrees with the float32 model to ~1e-5 of each token's size; every named mistake
# is off by more than 1e-2 of it on one of the two cases (tests/test_decoder_exercises.py checks both).
LAYER_RTOL = 1e-4
GEN_PROMPT = "The capital of France is"
GEN_NEW = 8
MAX_NEW = 32
FINAL_RTOL = 1e-3  # the last layer's output, per token, relative to its root-mean-square
# What the layer exercise must write itself: the whole attention layer, or a cached step of it.
_WHOLE_LAYERS = ("multi_head_attention", "multi_head_attention_per_head", "decode", "decode_step",
                 "prefill", "head_contributions", "head_outputs", "tiled_attention")


def layer_config(model) -> dict:
    """``{"n_heads", "n_kv_heads", "d_k", "eps", "rope_base"}`` of a SmolLM2 model (``load("smollm2")``)."""
    return {"n_heads": model.n_heads, "n_kv_heads": model.n_kv_heads, "d_k": model.d_k,
            "eps": model.eps, "rope_base": model.rope_base}


def layer_weights(model, layer: int) -> dict[str, np.ndarray]:
    """Layer ``layer``'s arrays (the ``p`` of ``decoder_layer``): float32, read-only views of the model's."""
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not 0 <= layer < model.n_layers:
        raise ValueError(f"layer must be an int in [0, {model.n_layers}), got {layer!r}")
    return dict(model.layers[int(layer)])


def _smollm2():
    """The cached SmolLM2, or a Feedback saying it is not on this machine."""
    from ..models import ModelCacheError, load

    try:
        return load("smollm2")
    except ModelCacheError as err:
        return Feedback(False, f"The real model is not on this machine yet: {err}", attempted=False)


def _relative_error(got: np.ndarray, expected: np.ndarray) -> float:
    """The largest error of any token, over that token's root-mean-square in ``expected``."""
    rms = np.sqrt(np.mean(expected.astype(np.float64) ** 2, axis=-1, keepdims=True))  # (N, 1)
    return float(np.max(np.abs(got - expected) / np.maximum(rms, 1e-30)))


# ------------------------------------------------------------------ one decoder layer, and its mistakes

def _norm(x, w, eps, kind="rms"):
    if kind == "layer":  # LayerNorm: centred, then scaled (SmolLM2 has no bias to add)
        c = x - x.mean(-1, keepdims=True)  # (N, d_model)
        return c / np.sqrt(np.mean(c * c, -1, keepdims=True) + eps) * w
    if kind == "eps_outside":
        return x / (np.sqrt(np.mean(x * x, -1, keepdims=True)) + eps) * w  # (N, d_model)
    return rms_norm(x, w, eps)


def _rotate_half(x, base):  # (..., N, d_k) -> (..., N, d_k): RoPE on the pairs (i, i + d_k/2)
    half = x.shape[-1] // 2
    angles = rope_angles(np.arange(x.shape[-2]), x.shape[-1], base)  # (N, d_k/2)
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    a, b = x[..., :half], x[..., half:]  # (..., N, d_k/2) each
    return np.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)


def _attention(xn, p, cfg, *, rope="qk", group="repeat", causal=True):
    """The layer's attention on the normed stream ``xn`` (N, d_model), with one part changed."""
    h, n_kv, base = cfg["n_heads"], cfg["n_kv_heads"], cfg["rope_base"]
    q = split_heads(xn @ p["W_Q"], h)  # (N, d_model) @ (d_model, h*d_k) -> (h, N, d_k)
    k = split_heads(xn @ p["W_K"], n_kv)  # (n_kv, N, d_k)
    v = split_heads(xn @ p["W_V"], n_kv)  # (n_kv, N, d_v)
    if rope in ("qk", "qkv"):
        q, k = apply_rope(q, base=base), apply_rope(k, base=base)
    if rope == "qkv":
        v = apply_rope(v, base=base)
    if rope == "half":
        q, k = _rotate_half(q, base), _rotate_half(k, base)
    if group == "repeat":  # query head i reads key/value head i // (h/n_kv)
        k, v = np.repeat(k, h // n_kv, axis=0), np.repeat(v, h // n_kv, axis=0)  # (h, N, d_k)
    else:  # tiled: query head i reads key/value head i % n_kv
        k, v = np.tile(k, (h // n_kv, 1, 1)), np.tile(v, (h // n_kv, 1, 1))  # (h, N, d_k)
    mask = causal_mask(xn.shape[0]) if causal else None  # (N, N)
    if rope == "scores":  # the rotation applied to the score rows instead of to q and k
        scores = apply_rope(q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1]), base=base)  # (h, N, N)
        heads = softmax(scores, mask=mask) @ v  # (h, N, N) @ (h, N, d_v) -> (h, N, d_v)
    else:
        heads, _ = scaled_dot_product_attention(q, k, v, mask)  # (h, N, d_v)
    if rope == "output":
        heads = apply_rope(heads, base=base)  # (h, N, d_v)
    return merge_heads(heads) @ p["W_O"]  # (N, h*d_v) @ (h*d_v, d_model) -> (N, d_model)


def _layer(x, p, cfg, *, norm="rms", rope="qk", group="repeat", causal=True, res1=True, res2=True,
           gate_swapped=False, norms_swapped=False):
    """One SmolLM2 layer, (N, d_model) -> (N, d_model), with the named part changed."""
    n1, n2 = ("ffn_norm", "attn_norm") if norms_swapped else ("attn_norm", "ffn_norm")
    a = _attention(_norm(x, p[n1], cfg["eps"], norm), p, cfg, rope=rope, group=group, causal=causal)
    y = x + a if res1 else a  # (N, d_model)
    z = _norm(y, p[n2], cfg["eps"], norm)  # (N, d_model)
    if gate_swapped:  # silu on the up projection, the gate projection left linear
        f = (silu(z @ p["W_up"]) * (z @ p["W_gate"])) @ p["W_down"]  # (N, d_ff) @ (d_ff, d_model)
    else:
        f = swiglu(z, p["W_gate"], p["W_up"], p["W_down"])  # (N, d_model)
    return y + f if res2 else f


@dataclass(frozen=True)
class _Mistake:
    name: str
    answer: str  # what the reader's output matches
    fix: str
    options: dict = field(default_factory=dict)  # _layer's (or _loop's) keyword arguments


DECODER_MISTAKES: tuple[_Mistake, ...] = (
    _Mistake("rope_on_v", "RoPE applied to the values as well as to the queries and keys",
             "rotate q and k only: positions enter through the scores q . k; v is what is read, unrotated",
             {"rope": "qkv"}),
    _Mistake("rope_on_scores", "RoPE applied to the score matrix q k^T instead of to q and k",
             "rotate each query and key head first (apply_rope(q), apply_rope(k)), then take the scores",
             {"rope": "scores"}),
    _Mistake("rope_after_attention", "RoPE applied after the attention, to the heads' outputs",
             "rotate q and k before the scores, not the weighted values after them", {"rope": "output"}),
    _Mistake("no_rope", "the layer without RoPE",
             "rotate every query and key head by its position: apply_rope(q, base=config['rope_base'])",
             {"rope": None}),
    _Mistake("rope_rotate_half", "RoPE on the pairs (i, i + d_k/2), the layout of transformers' rotate_half",
             "these weights (GGUF) pair adjacent dimensions (2i, 2i+1): rotate those, as apply_rope does",
             {"rope": "half"}),
    _Mistake("kv_tiled", "key/value heads repeated with np.tile, so query head i reads key/value head i % n_kv",
             "query heads 0, 1, 2 share key/value head 0, heads 3, 4, 5 head 1, ...: np.repeat(k, h // n_kv, "
             "axis=0), not np.tile", {"group": "tile"}),
    _Mistake("layer_norm", "LayerNorm (the mean subtracted) in place of RMSNorm",
             "RMSNorm does not centre: x / sqrt(mean(x**2) + eps) * weight", {"norm": "layer"}),
    _Mistake("eps_outside_sqrt", "x / (sqrt(mean(x**2)) + eps) in both norms",
             "eps goes inside the square root: sqrt(mean(x**2) + eps)", {"norm": "eps_outside"}),
    _Mistake("no_attention_residual", "the layer without adding x back after the attention",
             "keep the residual stream: a = x + attention(rms_norm(x))", {"res1": False}),
    _Mistake("no_ffn_residual", "the layer without adding the stream back after the feed-forward",
             "keep the residual stream: y = a + swiglu(rms_norm(a))", {"res2": False}),
    _Mistake("no_causal_mask", "attention without the causal mask",
             "a decoder's token sees only itself and the tokens before it: mask the scores with "
             "causal_mask(N) (True = may attend)", {"causal": False}),
    _Mistake("silu_gate_swapped", "silu(z W_up) * (z W_gate): SiLU on the wrong projection",
             "the gate is the one through SiLU: silu(z @ W_gate) * (z @ W_up)", {"gate_swapped": True}),
    _Mistake("norms_swapped", "the two norms' weights swapped",
             "attn_norm comes before the attention, ffn_norm before the feed-forward", {"norms_swapped": True}),
)
_KV_NOT_REPEATED = _Mistake(
    "kv_not_repeated", "", "repeat each key/value head for its group of h / n_kv query heads before the scores: "
    "k = np.repeat(k, h // n_kv, axis=0), the same for v")


def _check_callable(fn) -> None:
    if not callable(fn):
        raise TypeError(f"fn must be your function, got {type(fn).__name__} {fn!r}")


def _layer_cases(model, layer: int, text: str) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(label, x, expected): the real stream entering ``layer``, and the same scaled down."""
    ids = model.encode(text)
    hidden = model.hidden_states(ids)  # (layers + 1, N, d_model)
    x = np.array(hidden[layer])  # (N, d_model)
    small = x * np.float32(SMALL_SCALE)  # (N, d_model)
    return [(f"layer {layer} of SmolLM2 on {len(ids)} tokens", x, np.array(hidden[layer + 1])),
            (f"the same stream times {SMALL_SCALE:g}, where eps counts", small, model.layer(small, layer)[0])]


def _kv_not_repeated(err: Exception, cfg: dict) -> bool:
    """True if ``err`` is numpy failing to broadcast h query heads against n_kv key/value heads."""
    text = str(err)
    return isinstance(err, ValueError) and "broadcast" in text and (
        f"({cfg['n_heads']}," in text and f"({cfg['n_kv_heads']}," in text)


def check_decoder_layer(fn: Callable, *, layer: int = DECODER_LAYER, text: str = DECODER_TEXT) -> Feedback:
    """Check ``fn(x, p, config)``: one SmolLM2 decoder layer, against the real model.

    Parameters
    ----------
    fn : callable taking x (N, d_model) float32, p (``layer_weights``) and config (``layer_config``),
        returning the stream after the layer, (N, d_model)
    layer : int, default 3
        Which of the 30 layers.
    text : str
        The sentence whose real residual stream enters the layer.

    The answer must equal ``hidden_states(ids)[layer + 1]`` within 1e-4 of each token's
    root-mean-square, and the model's layer on the same stream scaled by 1e-3 (where eps counts).
    The attention is the reader's: the core's ``multi_head_attention`` (or a decode step) is refused;
    ``apply_rope``, ``causal_mask``, ``softmax``, ``split_heads`` and the blocks may be used.
    """
    _check_callable(fn)
    if not isinstance(text, str) or not text.strip():
        raise TypeError(f"text must be a non-empty str, got {text!r}")
    model = _smollm2()
    if isinstance(model, Feedback):
        return model
    p, cfg = layer_weights(model, layer), layer_config(model)
    allowed = tuple(sorted(set(core_functions().values()) - set(_WHOLE_LAYERS)))
    worst = 0.0
    for label, x, expected in _layer_cases(model, layer, text):
        args = (x, p, cfg)
        copies = copy_args(args)
        outcome = call_reader(fn, copies, allowed)
        if outcome.library is not None:
            return Feedback(False, f"This calls mha_core's {outcome.library}; write the attention yourself "
                                   f"(apply_rope, causal_mask, softmax and split_heads may help).")
        if isinstance(outcome.error, NotImplementedError):
            return not_attempted("decoder_layer")
        if outcome.error is not None:
            e = outcome.error
            if _kv_not_repeated(e, cfg):
                return Feedback(False, f"Your layer raised {type(e).__name__}: {e} (on {label}). The "
                                       f"{cfg['n_heads']} query heads met {cfg['n_kv_heads']} key/value heads "
                                       f"unrepeated. Fix: {_KV_NOT_REPEATED.fix}.", _KV_NOT_REPEATED.name)
            return Feedback(False, f"Your decoder_layer raised {type(e).__name__}: {e} (on {label}).")
        got = outcome.value
        if not isinstance(got, np.ndarray):
            return Feedback(False, f"Your decoder_layer returned a {type(got).__name__}; expected a numpy "
                                   f"array (on {label}).")
        if got.shape != expected.shape:
            return Feedback(False, f"Wrong shape (on {label}): expected {expected.shape}, got {got.shape}: one "
                                   f"row per token and d_model = {expected.shape[-1]} columns, like x.")
        if not np.array_equal(copies[0], x):
            return Feedback(False, f"Your decoder_layer changed its input x in place (on {label}); work on a copy.")
        err = _relative_error(got, expected)
        if err <= LAYER_RTOL:
            worst = max(worst, err)
            continue
        for m in DECODER_MISTAKES:
            if m.options.get("rope") == "scores" and x.shape[0] % 2:
                continue  # the score rows have N entries: turned in pairs only when N is even
            if _relative_error(got, _layer(x, p, cfg, **m.options)) <= LAYER_RTOL:
                return Feedback(False, f"Your output matches {m.answer} (on {label}). Fix: {m.fix}.", m.name)
        if not np.isfinite(got).all():
            return Feedback(False, f"Your output holds NaN or inf (on {label}).")
        return Feedback(False, f"Right shape, wrong values (on {label}): the largest error is {err:.3g} of "
                               f"that token's size.")
    return Feedback(True, f"Your layer reproduces layer {layer} of the real SmolLM2 (RMSNorm, RoPE, "
                          f"{cfg['n_heads']} query heads on {cfg['n_kv_heads']} key/value heads, the causal mask, "
                          f"SwiGLU, two residuals): largest difference {worst:.1e} of a token's size.")


# ------------------------------------------------------------------ the generation loop

@dataclass(frozen=True)
class DecoderParts:
    """What a generation loop needs from SmolLM2 (build it with ``decoder_parts``).

    Attributes
    ----------
    embed : callable, ids (M,) -> ndarray of shape (M, d_model)
        The token embeddings (a copy).
    layers : list of dict
        One ``layer_weights`` dict per layer, in order (read-only arrays).
    config : dict
        ``layer_config``: n_heads, n_kv_heads, d_k, eps, rope_base.
    head : callable, x (M, d_model) -> ndarray of shape (M, vocab)
        The final RMSNorm and the unembedding: the next-token logits of each row.
    """

    embed: Callable[[np.ndarray], np.ndarray]
    layers: list
    config: dict
    head: Callable[[np.ndarray], np.ndarray]


@dataclass
class _Record:
    """What a loop asked of its parts: tokens embedded (in all, and per call), and the last row of
    every ``head`` call."""

    embedded: int = 0
    calls: list = field(default_factory=list)  # tokens per parts.embed call, in order
    finals: list = field(default_factory=list)


def _parts(model, record: _Record | None = None) -> DecoderParts:
    table = model.arrays["tok_embed"]  # (vocab, d_model)

    def embed_ids(ids) -> np.ndarray:
        rows = embed(table, np.asarray(ids).reshape(-1))  # (M, d_model)
        if record is not None:
            record.embedded += rows.shape[0]
            record.calls.append(rows.shape[0])
        return rows

    def head(x) -> np.ndarray:
        x = np.asarray(x, np.float32)
        x2 = x.reshape(-1, x.shape[-1])  # (M, d_model)
        if record is not None:
            record.finals.append(np.array(x2[-1]))
        return model._head(x2)  # (M, vocab)

    return DecoderParts(embed_ids, [layer_weights(model, i) for i in range(model.n_layers)], layer_config(model), head)


def decoder_parts(model=None) -> DecoderParts:
    """The parts of SmolLM2 a generation loop uses (``model``: ``load("smollm2")``, loaded if None)."""
    if model is None:
        model = _smollm2()
        if isinstance(model, Feedback):
            raise RuntimeError(model.message)
    if getattr(model, "name", None) != "smollm2":
        raise TypeError(f"model must be SmolLM2 (load('smollm2')), got {type(model).__name__}")
    return _parts(model)


def _cached_layer(x, p, cfg, cache, positions, *, rotate_cache=True, appends=1, self_attend=True):
    """New rows ``x`` (M, d_model) at ``positions`` (M,) through one layer, with ``cache`` = [K, V]
    (n_kv, t, d_k) of the earlier tokens; the rows' keys and values are appended to it."""
    h, n_kv, base, m = cfg["n_heads"], cfg["n_kv_heads"], cfg["rope_base"], x.shape[0]
    xn = rms_norm(x, p["attn_norm"], cfg["eps"])  # (M, d_model)
    q = apply_rope(split_heads(xn @ p["W_Q"], h), positions, base)  # (h, M, d_k)
    k_raw = split_heads(xn @ p["W_K"], n_kv)  # (n_kv, M, d_k)
    k = apply_rope(k_raw, positions, base)  # (n_kv, M, d_k)
    v = split_heads(xn @ p["W_V"], n_kv)  # (n_kv, M, d_v)
    stored = k if rotate_cache else k_raw
    past_K, past_V = cache
    if past_K.shape[1] == 0:  # the prompt: its own rotated keys, stored once, whatever the cache keeps
        K, V, appends = k, v, 1  # (n_kv, M, d_k)
    elif self_attend:
        K, V = (np.concatenate([past_K, *[stored] * appends], 1),
                np.concatenate([past_V, *[v] * appends], 1))  # (n_kv, t + appends*M, d_k)
    else:  # the scores before the append: the new token misses itself
        K, V = past_K, past_V
    cache[0] = np.concatenate([past_K, *[stored] * appends], 1)  # (n_kv, t + appends*M, d_k)
    cache[1] = np.concatenate([past_V, *[v] * appends], 1)
    mask = causal_mask(m, K.shape[1])  # (M, T): bottom-right aligned, all True for one new token
    K, V = np.repeat(K, h // n_kv, axis=0), np.repeat(V, h // n_kv, axis=0)  # (h, T, d_k)
    heads, _ = scaled_dot_product_attention(q, K, V, mask)  # (h, M, d_v)
    a = x + merge_heads(heads) @ p["W_O"]  # (M, h*d_v) @ (h*d_v, d_model) -> (M, d_model)
    return a + swiglu(rms_norm(a, p["ffn_norm"], cfg["eps"]), p["W_gate"], p["W_up"], p["W_down"])


def _loop(parts: DecoderParts, ids: np.ndarray, n_new: int, *, positions="advance", refeed_last=False,
          **layer_options) -> tuple[list[int], np.ndarray]:
    """Greedy decoding with a KV cache, with one part changed: the tokens and, for each, the last
    layer's output row that chose it, (n_new, d_model)."""
    cfg = parts.config
    n_kv, d_k = cfg["n_kv_heads"], cfg["d_k"]
    caches = [[np.zeros((n_kv, 0, d_k), np.float32), np.zeros((n_kv, 0, d_k), np.float32)] for _ in parts.layers]

    def run(x, start):  # (M, d_model) at positions start.. -> (M, d_model)
        if positions == "zero" and start > 0:
            pos = np.arange(x.shape[0])  # apply_rope's default: every new token at position 0
        elif positions == "fixed" and start > 0:
            pos = np.full(x.shape[0], ids.size)  # the counter never moves past the prompt
        else:
            pos = np.arange(start, start + x.shape[0])
        for p, cache in zip(parts.layers, caches, strict=True):
            x = _cached_layer(x, p, cfg, cache, pos, **layer_options)
        return x

    x, t = run(parts.embed(ids), 0), ids.size  # the prompt in one pass per layer
    if refeed_last:  # the last prompt token sent again as the first "new" one
        x, t = run(parts.embed(ids[-1:]), t), t + 1
    tokens, finals = [], []
    for step in range(n_new):
        finals.append(x[-1])
        tokens.append(int(np.argmax(parts.head(x[-1:])[0])))
        if step < n_new - 1:
            x, t = run(parts.embed([tokens[-1]]), t), t + 1
    return tokens, np.stack(finals)


LOOP_MISTAKES: tuple[_Mistake, ...] = (
    _Mistake("positions_not_advanced", "every new token rotated as if it stood at position 0",
             "rotate the new query and key by the token's own position, t = the number of tokens before it: "
             "apply_rope(q, [t], base)", {"positions": "zero"}),
    _Mistake("positions_not_advanced", "every new token rotated at the prompt's length: the position never moves",
             "add 1 to the position after each new token", {"positions": "fixed"}),
    _Mistake("cache_appended_twice", "each new key and value appended to the cache twice",
             "append each token's key and value once per layer", {"appends": 2}),
    _Mistake("no_self_attention", "the new token attending over the cache before its own key and value are in it",
             "append the new key and value first, then take the scores: a token attends to itself too",
             {"self_attend": False}),
    _Mistake("keys_cached_before_rope", "keys put in the cache before RoPE turned them",
             "cache the rotated keys (each turned once, at its own position); the values are not rotated",
             {"rotate_cache": False}),
    _Mistake("last_prompt_token_twice", "the last prompt token sent through the layers again after the prefill",
             "the prefill already gives the next token: take the argmax of parts.head(x[-1:]) before the first step",
             {"refeed_last": True}),
)


def _same_run(tokens, finals, want_tokens, want_finals) -> bool:
    if list(tokens) != list(want_tokens):
        return False
    return finals is None or _relative_error(finals, want_finals) <= FINAL_RTOL


def check_generation_loop(fn: Callable, *, prompt: str = GEN_PROMPT, max_new_tokens: int = GEN_NEW,
                          refuse: tuple[str, ...] = ()) -> Feedback:
    """Check ``fn(ids, n_new, parts)``: greedy decoding with a KV cache, against SmolLM2's own ``write``.

    Parameters
    ----------
    fn : callable taking ids (N,) int64 (the prompt), n_new (int) and parts (``DecoderParts``),
        returning the n_new greedy token ids
    prompt : str
    max_new_tokens : int in [1, 32], default 8
        Fewer if the model writes its end-of-text token first.
    refuse : tuple of str, default ()
        Functions of ``mha_core.core`` the loop may not call (the capstone refuses the library's
        cached step, ``prefill`` and ``decode_step``); by default every one is allowed.

    The tokens must be the model's; the last layer's row that chose each token (what ``parts.head``
    receives) must match it within 1e-3 of its size. With a KV cache the layers see the prompt once
    and then one token per step, the last token written excepted: ``n_new - 1`` after the prompt
    (``parts.embed`` counts them). A loop whose embed calls are the prompt and then ``n_new`` single
    tokens keeps the cache but also runs the last token (``last_token_run``: harmless, wasted). Any
    other loop that sends more tokens recomputes the prefix: its tokens are right, and the verdict
    gives its time and those of the model's own loop with its cache and recomputing.
    """
    _check_callable(fn)
    if not isinstance(prompt, str) or not prompt.strip():
        raise TypeError(f"prompt must be a non-empty str, got {prompt!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= MAX_NEW:
        raise ValueError(f"max_new_tokens must be an int in [1, {MAX_NEW}], got {max_new_tokens!r}")
    known = set(core_functions().values())
    if not isinstance(refuse, tuple) or not set(refuse) <= known:
        raise ValueError(f"refuse must be a tuple of names of mha_core.core functions, got {refuse!r}")
    model = _smollm2()
    if isinstance(model, Feedback):
        return model
    ids = model.encode(prompt)
    start = time.perf_counter()
    want = [s.id for s in model.write(ids, max_new_tokens)]
    cached_seconds = time.perf_counter() - start
    n = len(want)
    record = _Record()
    parts = _parts(model, record)
    start = time.perf_counter()
    outcome = call_reader(fn, (ids.copy(), n, parts), tuple(sorted(known - set(refuse))))
    seconds = time.perf_counter() - start
    if outcome.library is not None:
        return Feedback(False, f"This calls mha_core's {outcome.library}; here the loop must run your own "
                               f"decoder_layer, one cache per layer.", "library_step")
    if isinstance(outcome.error, NotImplementedError):
        return not_attempted("generate")
    if outcome.error is not None:
        e = outcome.error
        return Feedback(False, f"Your generate raised {type(e).__name__}: {e} (prompt {prompt!r}, {n} new tokens).")
    try:
        got = [int(t) for t in np.asarray(outcome.value).reshape(-1)]
    except (TypeError, ValueError):
        return Feedback(False, f"Your generate returned {type(outcome.value).__name__}; expected {n} token ids.")
    if len(got) != n:
        return Feedback(False, f"Your generate returned {len(got)} token ids; expected n_new = {n}.")
    if not record.finals or not record.embedded:
        return Feedback(False, "Your loop never called parts.embed and parts.head: run the tokens through "
                               "parts.embed, the layers, and parts.head for the logits.")
    finals = np.stack(record.finals) if len(record.finals) == n else None  # (n, d_model), one per new token
    parts = _parts(model)  # the checker's own loops are not counted
    _, right_finals = _loop(parts, ids, n)
    if _same_run(got, finals, want, right_finals):
        cached = ids.size + n - 1  # the prompt once, then one token per step
        if record.calls == [ids.size] + [1] * n:  # the cache is used, and the last token run as well
            return Feedback(False, f"Your tokens are right ({model.decode(got)!r}) and your loop keeps a KV "
                                   f"cache, but it sent the last token it wrote through the layers too: "
                                   f"{record.embedded:,} tokens where {cached:,} do (the prompt once, then one "
                                   f"per step). That last pass is harmless but wasted: its keys and values go "
                                   f"into a cache nothing reads again, and its output would choose token "
                                   f"{n + 1}, which is not asked for. Fix: after the argmax of the last step, "
                                   f"stop; embed and run a new token only when another one is still to be "
                                   f"written.", "last_token_run")
        if record.embedded > cached:
            start = time.perf_counter()
            list(model.write(ids, n, use_cache=False))
            recomputed_seconds = time.perf_counter() - start
            return Feedback(False, f"Your tokens are right ({model.decode(got)!r}), but your loop sent "
                                   f"{record.embedded:,} tokens through the layers to write {n}; with a KV cache "
                                   f"it is {cached:,} (the prompt once, then one per step). Your loop took "
                                   f"{seconds:.2f} s; SmolLM2's own write takes {cached_seconds:.2f} s with its "
                                   f"cache and {recomputed_seconds:.2f} s recomputing, on this machine (the gap "
                                   f"grows with the length of the text). Fix: keep each layer's K and V and run "
                                   f"only the new token.", "recomputes_prefix")
        return Feedback(True, f"Your loop writes SmolLM2's {n} greedy tokens after {prompt!r}: "
                              f"{model.decode(got)!r}, with a KV cache ({ids.size} prompt tokens in one pass, "
                              f"then one token per step).")
    for m in LOOP_MISTAKES:
        if _same_run(got, finals, *_loop(parts, ids, n, **m.options)):
            return Feedback(False, f"Your loop matches {m.answer} (prompt {prompt!r}). Fix: {m.fix}.", m.name)
    k = next((i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b), None)
    if k is None:
        return Feedback(False, f"Your tokens are right, but the rows your loop gives parts.head differ from "
                               f"the model's by {_relative_error(finals, right_finals):.3g} of their size.")
    return Feedback(False, f"Token {k + 1} of {n} differs: the model writes {model.decode(want[:k + 1])!r}, your "
                           f"loop {model.decode(got[:k + 1])!r}.")
