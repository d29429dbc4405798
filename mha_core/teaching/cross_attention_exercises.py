"""Checker for the cross-attention exercise: the decoder's reading of the source, in the trained
digit-reversal encoder-decoder (``mha_core.training.seq2seq``), one decoding step at a time.

    def cross_attention(x_t, t, memory, n_src, layer, cache):
        raise NotImplementedError("your code here")

    check_cross_attention(cross_attention)

At step ``t`` the function receives the decoder's new token ``x_t`` (B, d_model), the stream after
its self-attention; ``memory`` (B, P, d_model), the encoder's output; ``n_src`` (B,), how many of
the ``P`` source positions are real (the pads are on the left); ``layer`` (``CrossLayer``: the
trained cross-attention's ``project(x, name)`` for ``name`` in Q, K, V, O, and ``n_heads``,
``d_k``); and ``cache``, a dict that is empty at ``t = 0`` and is the same dict at every later step
of the same sources. It returns ``(out, weights)``: ``out`` (B, d_model), to add to the stream, and
``weights`` (B, h, P), where each head reads::

    q = project(x_t, "Q")          K = project(memory, "K")   V = project(memory, "V")
    weights = softmax(q K^T / sqrt(d_k), pads masked)        out = project(weights V, "O")

``K`` and ``V`` depend only on the source, so they belong in ``cache`` at ``t = 0`` (the
encoder-side cache) and are read again at every later step.

The checker runs the function at every step of the trained model's decoding of held-out sources
with padding (teacher-forced: the decoder reads the right answer so far, so every step gets the
same ``x_t`` whatever the function returns), and compares each step's ``out`` and ``weights`` with
the library's ``seq2seq.cross_attend``. A right answer agrees within ``CROSS_RTOL``. Otherwise it
compares ``out`` with each classic mistake (``CROSS_MISTAKES``) and names the one that matches. It
also counts the calls to ``layer.project``: an answer that projects the memory to K and V again at
a later step is right but slow, and the verdict gives the counts (a count, not a timing, so it is
the same on every machine). The verdict is a ``Feedback``, as for the other exercises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..core import decode_step, init_kv_cache, merge_heads, padding_mask, softmax, split_heads
from ..training import seq2seq
from .diagnosis import core_functions
from .exercises import Feedback, call_reader, not_attempted

__all__ = ["CROSS_MISTAKES", "CROSS_RTOL", "CrossLayer", "check_cross_attention", "cross_layer", "greedy_with",
           "library_cross_attention"]

SEED = 0
# The held-out sources of the two cases: their digit counts L (pads P - 1 - L: 6, 3, 0, 5, then 2),
# so some rows have many pads, one has none, and one case has a single source.
CASE_LENGTHS = ((2, 5, 8, 3), (6,))
# float64 throughout: a right answer agrees with the library to ~1e-15 of each row's size; every
# named mistake is off by more than 1e-3 of it (tests/test_cross_attention_exercises.py checks that).
CROSS_RTOL = 1e-8
# What the exercise must write itself: the scaled dot product, or the library's whole layer or step.
_REFUSED = ("scaled_dot_product_attention", "multi_head_attention", "multi_head_attention_per_head",
            "mha_forward", "decode_step", "decode", "prefill", "tiled_attention", "head_outputs",
            "head_contributions", "linear")


@dataclass
class CrossLayer:
    """The trained cross-attention layer as the exercise sees it (build it with ``cross_layer``).

    Attributes
    ----------
    n_heads : int
        h.
    d_k : int
        The width of one head: d_model / h.
    calls : list of (step, name, rows)
        Every call of ``project``: the decoding step it came in (set by the caller), the weight's
        name and how many rows it projected.
    step : int
        The decoding step the caller is at (``greedy_with`` sets it before each call).
    """

    n_heads: int
    d_k: int
    _weights: dict = field(repr=False)
    calls: list = field(default_factory=list, repr=False)
    step: int = field(default=0, repr=False)

    def project(self, x, name: str) -> np.ndarray:
        """``x @ W_name``, (..., d_model) -> (..., h*d_k) for Q, K, V; (..., h*d_v) -> (..., d_model) for O."""
        if name not in ("Q", "K", "V", "O"):
            raise ValueError(f"name must be one of 'Q', 'K', 'V', 'O', got {name!r}")
        x = np.asarray(x)
        W = self._weights[f"W_{name}"]  # (d_model, h*d_k), or (h*d_v, d_model) for O
        if x.shape[-1] != W.shape[0]:
            raise ValueError(f"project(x, {name!r}) needs x with {W.shape[0]} columns (..., {W.shape[0]}), "
                             f"got shape {x.shape}")
        self.calls.append((self.step, name, int(np.prod(x.shape[:-1]))))
        return x @ W  # (..., d_in) @ (d_in, d_out) -> (..., d_out)

    def counts(self, name: str, *, after_first_step: bool = False) -> tuple[int, int]:
        """(calls, rows) of ``project`` for ``name``; only the steps t >= 1 with ``after_first_step``."""
        picked = [rows for step, n, rows in self.calls if n == name and (step > 0 or not after_first_step)]
        return len(picked), sum(picked)


def cross_layer(params: dict, n_heads: int) -> CrossLayer:
    """The cross-attention layer of the seq2seq model ``params`` (``seq2seq.load_reverse()[0]``)."""
    weights = {k: np.array(params[f"cross.{k}"], np.float64) for k in ("W_Q", "W_K", "W_V", "W_O")}
    for w in weights.values():
        w.flags.writeable = False  # the reader cannot change the model
    return CrossLayer(n_heads, weights["W_Q"].shape[1] // n_heads, weights)


def library_cross_attention(x_t, t, memory, n_src, layer: CrossLayer, cache: dict):
    """The library's way, in the exercise's signature: at t = 0 the memory's K and V go into
    ``cache`` as a ``seq2seq.CrossCache``; every step projects only the new query."""
    h = layer.n_heads
    if "cross" not in cache:  # once per source: the encoder-side cache
        K = split_heads(layer.project(memory, "K"), h)  # (B, P, h*d_k) -> (B, h, P, d_k)
        V = split_heads(layer.project(memory, "V"), h)  # (B, h, P, d_v)
        cache["cross"] = seq2seq.CrossCache(K, V, seq2seq.source_mask(n_src, memory.shape[1]))
    c = cache["cross"]
    q = split_heads(layer.project(x_t[:, None, :], "Q"), h)  # (B, 1, h*d_k) -> (B, h, 1, d_k)
    w = softmax(q @ np.swapaxes(c.K, -1, -2) / np.sqrt(layer.d_k), mask=c.mask)  # (B, h, 1, P)
    out = layer.project(merge_heads(w @ c.V), "O")  # (B, 1, h*d_v) @ W_O -> (B, 1, d_model)
    return out[:, 0], w[:, :, 0]


def _stream_step(params, tokens, t, kv, n_heads) -> np.ndarray:
    """The decoder's stream at step t after its self-attention (``kv`` grows by one), (B, d_model)."""
    x = params["tgt_emb"][tokens] + params["tgt_pos"][t]  # (B, d_model)
    return x + decode_step(x, {k: params[f"self.{k}"] for k in ("W_Q", "W_K", "W_V", "W_O")}, n_heads, kv)


def greedy_with(cross_attention: Callable, params, src, n_src, n_heads: int, *, teacher=None):
    """The model's decoding with ``cross_attention`` (the exercise's signature) in place of its own.

    Parameters
    ----------
    cross_attention : callable (x_t, t, memory, n_src, layer, cache) -> (out (B, d_model), weights (B, h, P))
    params : dict of the seq2seq model's weights
    src : int ndarray of shape (B, P); n_src : int ndarray of shape (B,)
    teacher : int ndarray of shape (B, T), optional
        The tokens the decoder reads (``tgt_in``); greedy, its own choices, if None.

    Returns
    -------
    tokens (B, T), the streams x_t (B, T, d_model), weights (B, h, T, P), the ``CrossLayer`` with its
    counts. The outputs are the function's own; an exception in it propagates.
    """
    memory = seq2seq.encode(params, src, n_src, n_heads)  # (B, P, d_model)
    layer = cross_layer(params, n_heads)
    B, T = src.shape[0], params["tgt_pos"].shape[0]
    kv = init_kv_cache({k: params[f"self.{k}"] for k in ("W_Q", "W_K", "W_V", "W_O")}, n_heads, T, batch=B)
    tok, cache, tokens, streams, maps = np.full(B, seq2seq.BOS), {}, [], [], []
    for t in range(T):
        x = _stream_step(params, tok, t, kv, n_heads)  # (B, d_model)
        layer.step = t
        out, w = cross_attention(x.copy(), t, memory.copy(), np.array(n_src), layer, cache)
        logits = (x + out) @ params["W_out"] + params["b_out"]  # (B, d_model) @ (d_model, V) -> (B, V)
        tokens.append(np.argmax(logits, -1))
        streams.append(x)
        maps.append(w)
        tok = tokens[-1] if teacher is None else teacher[:, t + 1] if t + 1 < T else tokens[-1]
    return np.stack(tokens, 1), np.stack(streams, 1), np.stack(maps, 2), layer


# ------------------------------------------------------------------ the mistakes

def _cross(x_all, t, memory, n_src, layer, *, q="decoder", kv="memory", mask="source", scale=True):
    """Step t's cross-attention output with one part changed, and which rows (B,) have a key to read.

    ``x_all`` (B, T, d_model) is the decoder's stream at every step; ``memory`` (B, P, d_model).
    """
    h, W = layer.n_heads, layer._weights
    P = memory.shape[1]
    q_in = memory if q == "encoder" else x_all[:, t:t + 1]  # (B, M, d_model): M = P or 1
    kv_in = {"memory": memory, "token": x_all[:, t:t + 1], "prefix": x_all[:, :t + 1]}[kv]  # (B, S, d_model)
    Q = split_heads(q_in @ W["W_Q"], h)  # (B, M, d_model) @ (d_model, h*d_k) -> (B, h, M, d_k)
    K = split_heads(kv_in @ W["W_K"], h)  # (B, h, S, d_k)
    V = split_heads(kv_in @ W["W_V"], h)  # (B, h, S, d_v)
    keep = np.ones((len(n_src), 1, 1, kv_in.shape[1]), bool)  # (B, 1, 1, S)
    if kv == "memory" and mask in ("source", "causal"):
        keep = seq2seq.source_mask(n_src, P)  # (B, 1, 1, P): the last n_src positions
    elif kv == "memory" and mask == "left":
        keep = padding_mask(n_src, P)  # (B, 1, 1, P): the first n_src positions
    if kv == "memory" and mask in ("causal", "causal_only"):
        keep = keep & (np.arange(P) <= t)  # step t reads source positions 0..t
    scores = Q @ np.swapaxes(K, -1, -2)  # (B, h, M, d_k) @ (B, h, d_k, S) -> (B, h, M, S)
    w = softmax(scores / np.sqrt(layer.d_k) if scale else scores, mask=keep)  # (B, h, M, S)
    out = merge_heads(w @ V) @ W["W_O"]  # (B, M, h*d_v) @ (h*d_v, d_model) -> (B, M, d_model)
    return (out[:, 0] if q != "encoder" else out), keep.any(-1).reshape(len(n_src))


@dataclass(frozen=True)
class _Mistake:
    name: str
    answer: str  # what the reader's output matches
    fix: str
    options: dict = field(default_factory=dict)  # _cross's keyword arguments


CROSS_MISTAKES: tuple[_Mistake, ...] = (
    _Mistake("no_padding_mask", "attention over every source position, the pads included",
             "mask the pads out before the softmax: keep only the last n_src[b] positions of source b (the "
             "pads are on the left), with score -inf (weight 0) everywhere else", {"mask": None}),
    _Mistake("mask_wrong_side", "a mask that keeps the first n_src positions, where the pads are",
             "these sources are padded on the left: keep the last n_src[b] positions, "
             "np.arange(P) >= P - n_src[b] (padding_mask keeps the first ones)", {"mask": "left"}),
    _Mistake("kv_from_decoder", "keys and values from the decoder's new token x_t instead of the encoder's memory",
             "in cross-attention only the queries come from the decoder: K = project(memory, 'K'), "
             "V = project(memory, 'V')", {"kv": "token"}),
    _Mistake("kv_from_decoder", "keys and values from the decoder's tokens so far: self-attention, not cross",
             "in cross-attention only the queries come from the decoder: K = project(memory, 'K'), "
             "V = project(memory, 'V')", {"kv": "prefix"}),
    _Mistake("q_from_encoder", "queries from the encoder's memory: one output per source position, "
             "(B, P, d_model)", "the query is the decoder's new token: q = project(x_t, 'Q'), one row per "
             "source, so out is (B, d_model)", {"q": "encoder"}),
    _Mistake("q_from_encoder", "the two roles swapped: queries from the encoder's memory, keys and values "
             "from the decoder's token", "the query is the decoder's new token, q = project(x_t, 'Q'); the "
             "keys and values are the memory's", {"q": "encoder", "kv": "token"}),
    _Mistake("causal_mask", "a causal mask on the source as well as the padding mask: step t reads only "
             "source positions 0..t", "cross-attention has no causal mask: the whole source is known "
             "before the first step, so every step may read every real source position", {"mask": "causal"}),
    _Mistake("causal_mask", "a causal mask on the source in place of the padding mask: step t reads only "
             "source positions 0..t", "cross-attention has no causal mask: mask only the pads, and let "
             "every step read every real source position", {"mask": "causal_only"}),
    _Mistake("no_scale", "scores q K^T without the division by sqrt(d_k)",
             "divide the scores by sqrt(d_k) = sqrt(layer.d_k) before the softmax", {"scale": False}),
)
_KV_RECOMPUTED = "kv_recomputed"


def _error(got: np.ndarray, want: np.ndarray, rows: np.ndarray | None = None) -> float:
    """The largest error of any row (of the rows marked in ``rows`` (B,)), over that row's
    root-mean-square in ``want``."""
    rms = np.sqrt(np.mean(want**2, axis=-1, keepdims=True))  # (B, [P,] 1)
    err = np.abs(got - want) / np.maximum(rms, 1e-30)  # (B, ..., d_model)
    err = err.reshape(err.shape[0], -1).max(1)  # (B,): NaN where got is NaN
    err = np.where(np.isnan(err), np.inf, err)
    return float(err[rows].max()) if rows is None or rows.any() else np.inf


def _cases(params, task, n_heads):
    """(label, batch) for each case: held-out sources with the digit counts of CASE_LENGTHS."""
    pool = task.sample(np.random.default_rng(SEED), 400, "held_out")
    cases = []
    for lengths in CASE_LENGTHS:
        pick = [int(np.flatnonzero(pool["lengths"] == n)[0]) for n in lengths]
        batch = {k: v[pick] for k, v in pool.items()}
        pads = ", ".join(str(task.n - int(n)) for n in batch["n_src"])
        cases.append((f"{len(pick)} held-out source{'s' * (len(pick) > 1)} with {pads} pads", batch))
    return cases


def _check_callable(fn) -> None:
    if not callable(fn):
        raise TypeError(f"fn must be your function cross_attention(x_t, t, memory, n_src, layer, cache), got "
                        f"{type(fn).__name__} {fn!r}")


class _Stop(Exception):  # noqa: N818  (not an error: a verdict that ends the run)
    def __init__(self, feedback: Feedback):
        self.feedback = feedback


def _run_reader(fn, params, batch, n_heads, label, allowed):
    """The reader's function at every teacher-forced step, beside the library's ``cross_attend``.

    Returns the reader's outs and weights (lists over t), the library's (B, T, d_model) and
    (B, h, T, P), the streams x_t (B, T, d_model), the memory and the ``CrossLayer`` the reader used.
    """
    library = seq2seq.encoder_cache(params, batch["src"], batch["n_src"], n_heads)
    outs, maps, right = [], [], []

    def step(x_t, t, memory, n_src, layer, cache):  # the reader's step, checked; the library's answer goes on
        args = (x_t.copy(), t, memory.copy(), n_src.copy())
        outcome = call_reader(fn, (*args, layer, cache), allowed)
        where = f"at step t = {t} on {label}"
        if outcome.library is not None:
            raise _Stop(Feedback(False, f"This calls mha_core's {outcome.library}; write the attention yourself "
                                        f"(softmax, split_heads, merge_heads and the masks may help)."))
        if isinstance(outcome.error, NotImplementedError):
            raise _Stop(not_attempted("cross_attention"))
        if outcome.error is not None:
            e = outcome.error
            raise _Stop(Feedback(False, f"Your cross_attention raised {type(e).__name__}: {e} ({where})."))
        value = outcome.value
        if not (isinstance(value, tuple) and len(value) == 2):
            raise _Stop(Feedback(False, f"Your cross_attention returned {type(value).__name__}; expected the "
                                        f"pair (out, weights) ({where})."))
        if not all(isinstance(v, np.ndarray) for v in value):
            raise _Stop(Feedback(False, f"Your cross_attention returned ({type(value[0]).__name__}, "
                                        f"{type(value[1]).__name__}); expected two numpy arrays ({where})."))
        for got, want, name in zip(args, (x_t, t, memory, n_src), ("x_t", "t", "memory", "n_src"), strict=True):
            if not np.array_equal(got, want):
                raise _Stop(Feedback(False, f"Your cross_attention changed its input {name} in place ({where}); "
                                            f"work on a copy."))
        outs.append(value[0])
        maps.append(value[1])
        right.append(seq2seq.cross_attend(x_t, library, params, n_heads))  # (B, d_model), (B, h, P)
        return right[-1]

    memory = seq2seq.encode(params, batch["src"], batch["n_src"], n_heads)  # (B, P, d_model)
    _, x_all, right_maps, layer = greedy_with(step, params, batch["src"], batch["n_src"], n_heads,
                                              teacher=batch["tgt_in"])
    return outs, maps, np.stack([o for o, _ in right], 1), right_maps, x_all, memory, layer


def _diagnose(outs, x_all, memory, n_src, layer, label) -> Feedback | None:
    """The named mistake the reader's outputs match at every step (on the rows where the mistake
    leaves a key to read), or None."""
    for m in CROSS_MISTAKES:
        compared = 0
        for t, got in enumerate(outs):
            want, rows = _cross(x_all, t, memory, n_src, layer, **m.options)
            if got.shape != want.shape or rows.any() and _error(got, want, rows) > CROSS_RTOL:
                break
            compared += int(rows.sum())
        else:
            if compared:
                return Feedback(False, f"Your output matches {m.answer} (on {label}). Fix: {m.fix}.", m.name)
    return None


def check_cross_attention(fn: Callable) -> Feedback:
    """Check ``fn(x_t, t, memory, n_src, layer, cache)``: one step of the decoder's cross-attention in
    the trained digit-reversal model, against the library's ``seq2seq.cross_attend``.

    Parameters
    ----------
    fn : callable
        Takes x_t (B, d_model), the step t (int), memory (B, P, d_model), n_src (B,) int, layer
        (``CrossLayer``) and cache (dict, empty at t = 0, the same dict at the later steps of the same
        sources); returns (out (B, d_model), weights (B, h, P)).

    Every step's ``out`` must agree with the library's within 1e-8 of each row's root-mean-square,
    and ``weights`` within 1e-8. The scaled dot product is the reader's: the core's
    ``scaled_dot_product_attention`` (or a whole layer) is refused; ``softmax``, ``split_heads``,
    ``merge_heads``, ``padding_mask`` and ``causal_mask`` may be used. A right answer that calls
    ``layer.project`` for K or V at a step after the first is named ``kv_recomputed``: the counts of
    its calls, not a timing, say what it costs.
    """
    _check_callable(fn)
    params, record = seq2seq.load_reverse()
    task, config = seq2seq.task_and_config(record)
    h = config.n_heads
    allowed = tuple(sorted(set(core_functions().values()) - set(_REFUSED)))
    cases = _cases(params, task, h)
    layers = []
    for label, batch in cases:
        try:
            outs, maps, right, right_maps, x_all, memory, layer = _run_reader(fn, params, batch, h, label, allowed)
        except _Stop as stop:
            return stop.feedback
        layers.append(layer)
        for t, (got, w) in enumerate(zip(outs, maps, strict=True)):
            where = f"at step t = {t} on {label}"
            lib, lib_w = right[:, t], right_maps[:, :, t]  # (B, d_model), (B, h, P)
            err = _error(got, lib) if got.shape == lib.shape else np.inf
            if err > CROSS_RTOL:
                named = _diagnose(outs, x_all, memory, batch["n_src"], layer, label)
                if named is not None:
                    return named
                if got.shape != lib.shape:
                    return Feedback(False, f"Wrong shape of out ({where}): expected {lib.shape}, (B, d_model), "
                                           f"one row per source, got {got.shape}.")
                if not np.isfinite(got).all():
                    return Feedback(False, f"Your out holds NaN or inf ({where}): a row whose every score is "
                                           f"-inf? Every source has at least one real position to read.")
                return Feedback(False, f"Right shape, wrong values ({where}): the largest error is {err:.3g} "
                                       f"of that row's size.")
            if w.shape != lib_w.shape:
                return Feedback(False, f"out is right, but weights has shape {w.shape} ({where}); expected "
                                       f"{lib_w.shape}, (B, h, P): each head's weights over the source.")
            if not np.allclose(w, lib_w, rtol=0, atol=CROSS_RTOL):
                return Feedback(False, f"out is right, but the weights you return differ from the ones it used "
                                       f"by up to {np.nanmax(np.abs(w - lib_w)):.3g} ({where}).")
    T = len(outs)
    k_calls, k_rows = (sum(layer.counts(n)[i] for layer in layers for n in "KV") for i in (0, 1))
    if k_calls == 0:
        return Feedback(False, "Your outputs are right, but your function never called layer.project for K and V: "
                               "the checker counts those calls, so project the memory with layer.project(memory, 'K') "
                               "and layer.project(memory, 'V').")
    later_calls = sum(layer.counts(n, after_first_step=True)[0] for layer in layers for n in "KV")
    n_sources = sum(len(b["src"]) for _, b in cases)
    once_rows = sum(2 * b["src"].shape[0] * b["src"].shape[1] for _, b in cases)
    if later_calls:
        return Feedback(False, f"Your outputs are right, but slow: layer.project computed K and V {k_calls} times "
                               f"for {len(cases)} batches of {T} steps ({k_rows:,} rows projected), {later_calls} of "
                               f"them at a step after the first. With the encoder-side cache it is {2 * len(cases)} "
                               f"calls ({once_rows:,} rows): K and V once per source, at t = 0, because they depend "
                               f"only on the source. The checker counts the calls to layer.project; it does not time "
                               f"them, so the count is the same on every machine. Fix: at t = 0 put K and V in cache, "
                               f"and at every later step read them from it.", _KV_RECOMPUTED)
    _, batch = cases[0]
    try:
        tokens, _, _, layer = greedy_with(fn, params, batch["src"], batch["n_src"], h)
    except Exception as e:  # noqa: BLE001  (the reader's bug is reported, not raised)
        return Feedback(False, f"Your cross_attention passed every teacher-forced step, then raised "
                               f"{type(e).__name__}: {e} while the model wrote its own answer.")
    right = int(sum(np.array_equal(tok[: n + 1], want[: n + 1])
                    for tok, want, n in zip(tokens, batch["tgt_out"], batch["lengths"], strict=True)))
    q_calls = layer.counts("Q")[0]
    return Feedback(True, f"Your cross-attention matches the library's at all {T} steps of {n_sources} held-out "
                          f"sources (within {CROSS_RTOL:g} of each row's size), the pads masked out. It "
                          f"projects K and V once per source ({k_calls} calls to layer.project for "
                          f"{len(cases)} batches) and only the query at each step ({q_calls} calls to project Q "
                          f"in {T} steps of one batch). Writing with it, the model reverses {right} of "
                          f"{len(batch['src'])} sources exactly.")
