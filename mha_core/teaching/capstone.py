"""The capstone's four numbers for the reader's own model: its parameters, its MACs per new token,
its KV-cache bytes, and what the cache buys on the clock.

    numbers = model_numbers(smol, n_tokens)                       # counted, from mha_core.core.counts
    timing = time_the_cache(generate, decoder_layer, ids, n_new, parts)

The reader's model is their own code (``decoder_layer`` and ``generate`` of the decoder exercises)
run on SmolLM2's weights, so its size and its cost are those of SmolLM2's arrays: the counts come
from ``count_params``, ``count_macs`` and ``kv_cache_bytes`` of one attention layer (an ``MHAConfig``
with SmolLM2's h and n_kv), plus the SwiGLU feed-forward, the norms, the embedding table and the head.
``time_the_cache`` times the reader's loop with its cache against the reader's layer recomputing the
whole text for every token, alternately in the same run, and says which is faster only when the
runs of the two sides do not overlap.

The reader counts three of the numbers first, from their own pieces, and the checkers compare with
``model_numbers`` and name the usual slips:

    tokens = written(generate, ids, n_new, parts, caches)     # the reader's loop, keeping its caches
    check_param_count(my_param_count, smol)                   # fn(layers, vocab, d_model) -> int
    check_macs_per_token(my_macs_per_token, smol, n_tokens)   # fn(T, layers, config, vocab) -> int
    check_kv_bytes(my_kv_bytes, caches, smol, n_tokens)       # fn(caches) -> int
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.config import MHAConfig
from ..core.counts import count_macs, count_params, kv_cache_bytes
from .decoder_exercises import DecoderParts
from .exercises import Feedback, call_reader, not_attempted

__all__ = ["CacheTiming", "ModelNumbers", "attention_config", "cache_nbytes", "check_kv_bytes",
           "check_macs_per_token", "check_param_count", "model_numbers", "recompute_loop", "time_the_cache",
           "written"]

ROUNDS = 3  # runs of each side, alternated: cache, recompute, cache, recompute, ...


def _check_model(model) -> None:
    needed = ("arrays", "n_layers", "n_heads", "n_kv_heads", "d_model")
    if not all(hasattr(model, a) for a in needed) or "tok_embed" not in getattr(model, "arrays", {}):
        raise TypeError(f"model must be a loaded decoder such as load('smollm2'), got {type(model).__name__}")


def attention_config(model) -> MHAConfig:
    """The ``MHAConfig`` of one of the model's attention layers: d_model, h, n_kv (no biases)."""
    _check_model(model)
    return MHAConfig(model.d_model, model.n_heads, n_kv_heads=model.n_kv_heads)


@dataclass(frozen=True)
class ModelNumbers:
    """The size and cost of a decoder model, counted two ways where that is possible.

    Attributes
    ----------
    counted : int
        The numbers held in the model's arrays (``sum(a.size)``).
    params : dict[str, int]
        The same from the formulas: ``embedding`` (vocab x d_model, shared with the head),
        ``attention`` (``count_params`` x layers), ``ffn`` (3 x d_model x d_ff x layers), ``norms``
        (2 x d_model per layer and the final one), ``total``.
    n_tokens : int
        The length of the text the costs below are for.
    macs_per_token : dict[str, int]
        MACs of one step of a loop with a KV cache, for token ``n_tokens`` of the text: its row
        through every layer (``projections``: its q, k, v and output, ``count_macs(cfg, 1)``;
        ``attention``: its query against all ``n_tokens`` keys, ``count_macs(cfg, 1, n_k=n_tokens)``;
        ``ffn``), then the ``head`` (d_model x vocab), and the ``total``.
    kv_bytes : int
        The KV cache of ``n_tokens`` tokens in float32, all layers (``kv_cache_bytes``).
    kv_bytes_mha : int
        The same if every query head kept its own keys and values (n_kv = h).
    """

    counted: int
    params: dict
    n_tokens: int
    macs_per_token: dict
    kv_bytes: int
    kv_bytes_mha: int

    @property
    def largest_cost(self) -> str:
        """The part of ``macs_per_token`` that costs most."""
        return max((k for k in self.macs_per_token if k != "total"), key=self.macs_per_token.get)


def model_numbers(model, n_tokens: int) -> ModelNumbers:
    """Parameters, MACs per new token and KV-cache bytes of ``model`` for a text of ``n_tokens`` tokens."""
    _check_model(model)
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, (int, np.integer)) or n_tokens < 1:
        raise ValueError(f"n_tokens must be a positive int, got {n_tokens!r}")
    n_tokens = int(n_tokens)
    cfg, layers = attention_config(model), model.n_layers
    vocab, d = model.arrays["tok_embed"].shape  # (vocab, d_model)
    d_ff = model.arrays["layer0.W_up"].shape[1]  # (d_model, d_ff)
    params = {
        "embedding": vocab * d,
        "attention": count_params(cfg)["total"] * layers,
        "ffn": 3 * d * d_ff * layers,  # W_gate, W_up (d_model, d_ff) and W_down (d_ff, d_model)
        "norms": 2 * d * layers + d,  # attn_norm and ffn_norm per layer, then the final norm
    }
    params["total"] = sum(params.values())
    new = count_macs(cfg, 1)  # one layer's projections of the one new row: its q, k, v and output
    scan = count_macs(cfg, 1, n_k=n_tokens)  # one layer: the new query against all n_tokens keys
    macs = {
        "projections": new["projections"] * layers,
        "attention": scan["attention"] * layers,
        "ffn": 3 * d * d_ff * layers,  # one row through three (d_model, d_ff)-sized matrices
        "head": d * vocab,  # (1, d_model) @ (d_model, vocab)
    }
    macs["total"] = sum(macs.values())
    mha = MHAConfig(d, model.n_heads)
    return ModelNumbers(
        counted=int(sum(a.size for a in model.arrays.values())),
        params=params,
        n_tokens=n_tokens,
        macs_per_token=macs,
        kv_bytes=kv_cache_bytes(cfg, n_tokens, n_layers=layers, dtype=np.float32),
        kv_bytes_mha=kv_cache_bytes(mha, n_tokens, n_layers=layers, dtype=np.float32),
    )


def _check_parts(parts) -> None:
    if not isinstance(parts, DecoderParts):
        raise TypeError(f"parts must be a DecoderParts (decoder_parts(smol)), got {type(parts).__name__}")


def recompute_loop(layer: Callable, ids, n_new: int, parts: DecoderParts) -> list[int]:
    """Greedy decoding without a cache: the whole text through ``layer(x, p, config)`` of every
    layer for each new token. The same tokens as a loop with a KV cache, with more work."""
    if not callable(layer):
        raise TypeError(f"layer must be a function layer(x, p, config), got {type(layer).__name__}")
    _check_parts(parts)
    text = [int(t) for t in np.asarray(ids).reshape(-1)]
    out = []
    for _ in range(n_new):
        x = parts.embed(text + out)  # (N + len(out), d_model): the whole text again
        for p in parts.layers:
            x = layer(x, p, parts.config)  # (M, d_model) -> (M, d_model)
        out.append(int(np.argmax(parts.head(x[-1:])[0])))  # (1, vocab) -> the greedy choice
    return out


@dataclass(frozen=True)
class CacheTiming:
    """Seconds of each run of the two sides, the tokens each wrote, and the verdict.

    ``cached`` and ``recomputed`` are empty when the reader's code is not written yet (or failed)."""

    cached: tuple
    recomputed: tuple
    same_tokens: bool
    verdict: str

    @property
    def speedup(self) -> float | None:
        """Best recomputed time over best cached time (None when nothing was measured)."""
        if not self.cached or not self.recomputed:
            return None
        return min(self.recomputed) / min(self.cached)


def _verdict(cached, recomputed, same: bool) -> str:
    if not same:
        return "not measured: the two loops wrote different tokens, so they are not the same model."
    best = min(recomputed) / min(cached)
    runs = f"{len(cached)} runs each, alternated"
    if max(cached) < min(recomputed):
        return f"the cache is faster: every run with it beat every run without it ({runs}); best of each: {best:.1f}x."
    if max(recomputed) < min(cached):
        return f"the cache is slower: every run without it beat every run with it ({runs})."
    return f"the two cannot be told apart on this machine: their runs overlap ({runs})."


def time_the_cache(generate: Callable, layer: Callable, ids, n_new: int, parts: DecoderParts, *,
                   rounds: int = ROUNDS) -> CacheTiming:
    """Time ``generate(ids, n_new, parts)`` (the reader's loop with its KV cache) against
    ``recompute_loop(layer, ...)`` (the reader's layer, the whole text for every token), alternately,
    ``rounds`` times each, in this run. The verdict names the faster side only when every run of
    one side beat every run of the other."""
    if not callable(generate):
        raise TypeError(f"generate must be a function generate(ids, n_new, parts), got {type(generate).__name__}")
    _check_parts(parts)
    if isinstance(n_new, bool) or not isinstance(n_new, int) or n_new < 1:
        raise ValueError(f"n_new must be a positive int, got {n_new!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive int, got {rounds!r}")
    ids = np.asarray(ids)
    cached, recomputed, tokens = [], [], {}
    for _ in range(rounds):
        for name, run, times in (("cached", lambda: generate(ids.copy(), n_new, parts), cached),
                                 ("recomputed", lambda: recompute_loop(layer, ids, n_new, parts), recomputed)):
            start = time.perf_counter()
            try:
                got = run()
            except NotImplementedError:
                return CacheTiming((), (), False, "not measured yet: write decoder_layer (section 2) and "
                                                  "generate (section 3) first, then run this cell again.")
            except Exception as e:  # noqa: BLE001  (the reader's bug is reported, not raised)
                return CacheTiming((), (), False, f"not measured: the {name} side raised {type(e).__name__}: {e}")
            times.append(time.perf_counter() - start)
            tokens[name] = [int(t) for t in np.asarray(got).reshape(-1)]
    same = tokens["cached"] == tokens["recomputed"]
    return CacheTiming(tuple(cached), tuple(recomputed), same, _verdict(cached, recomputed, same))


# ------------------------------------------------------------------ the reader's own counts


def written(generate: Callable, ids, n_new: int, parts: DecoderParts, caches: list) -> list[int]:
    """Run the reader's ``generate(ids, n_new, parts, caches)`` and return the tokens it wrote
    (``[]`` while it is not written yet or raises: the message is printed). ``caches`` is one dict
    per layer, filled by the reader's layers."""
    if not callable(generate):
        raise TypeError(f"generate must be a function generate(ids, n_new, parts, caches), got {type(generate).__name__}")
    _check_parts(parts)
    if not isinstance(caches, list) or len(caches) != len(parts.layers) or not all(isinstance(c, dict) for c in caches):
        raise TypeError(f"caches must be a list of {len(parts.layers)} dicts, one per layer, got {caches!r:.60}")
    outcome = call_reader(generate, (np.asarray(ids).copy(), n_new, parts, caches))
    if isinstance(outcome.error, NotImplementedError):
        print("generate is not written yet (section 3): no tokens, and the caches stay empty.")
        return []
    if outcome.error is not None:
        hint = ""
        if isinstance(outcome.error, TypeError) and "argument" in str(outcome.error):
            hint = " (give generate a fourth argument, caches, as section 3 says)"
        print(f"generate raised {type(outcome.error).__name__}: {outcome.error}{hint}")
        return []
    return [int(t) for t in np.asarray(outcome.value).reshape(-1)]


def _arrays(caches):
    """Every array held in ``caches`` (dicts, lists and tuples, searched through)."""
    if isinstance(caches, np.ndarray):
        yield caches
    elif isinstance(caches, dict):
        for v in caches.values():
            yield from _arrays(v)
    elif isinstance(caches, (list, tuple)):
        for v in caches:
            yield from _arrays(v)


def cache_nbytes(caches) -> int:
    """The bytes of every array held in ``caches`` (dicts, lists and tuples, searched through)."""
    return sum(int(a.nbytes) for a in _arrays(caches))


def _as_int(value):
    """The reader's count as an int, or None when it is not a whole number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return int(value)
    return None


def _judge(what: str, got, want: int, slips: list[tuple[int, str, str]], done: str,
           source: str = "model_numbers counts") -> Feedback:
    """Compare the reader's count with ``want`` (what ``source`` gives); ``slips`` are
    (value, name, what it forgot)."""
    n = _as_int(got)
    if n is None:
        return Feedback(False, f"Your {what} returned {got!r}; expected a whole number (an int).")
    if n == want:
        return Feedback(True, f"Your {what} is {n:,}, as {source} it. {done}".rstrip())
    for value, name, why in slips:
        if n == value:
            return Feedback(False, f"Your {what} is {n:,}, not {want:,}: {why}.", name)
    return Feedback(False, f"Your {what} is {n:,}; {source} {want:,} (yours is {n / want:.3g} times that).")


def check_param_count(fn: Callable, model) -> Feedback:
    """Check ``fn(layers, vocab, d_model)``: the parameters of the reader's model, from the arrays
    its layers read (``layers``: ``decoder_parts(model).layers``), the embedding table of
    ``vocab`` x ``d_model`` (tied to the output head) and the final norm of ``d_model``."""
    _check_model(model)
    if not callable(fn):
        raise TypeError(f"fn must be a function fn(layers, vocab, d_model), got {type(fn).__name__}")
    from .decoder_exercises import decoder_parts

    parts = decoder_parts(model)
    vocab, d = model.arrays["tok_embed"].shape  # (vocab, d_model)
    outcome = call_reader(fn, (parts.layers, vocab, d))
    if isinstance(outcome.error, NotImplementedError):
        return not_attempted("my_param_count")
    if outcome.error is not None:
        return Feedback(False, f"Your my_param_count raised {type(outcome.error).__name__}: {outcome.error}")
    p = model_numbers(model, 1).params
    want, one_layer = p["total"], sum(a.size for a in parts.layers[0].values())
    slips = [
        (want + vocab * d, "head_counted_twice", "the output head (unembedding) is the embedding table "
         "itself (tied weights), so its numbers are counted once"),
        (want - vocab * d, "no_embedding", "the embedding table (vocab x d_model) is missing"),
        (want - d, "no_final_norm", "the final norm before the output head (d_model numbers) is missing"),
        (want - p["norms"], "no_norms", "the norms are missing (two per layer and the final one, d_model each)"),
        (vocab * d + one_layer + d, "one_layer", f"this counts one layer; the model has {len(parts.layers)}"),
    ]
    return _judge("parameter count", outcome.value, want, slips,
                  "The feed-forward, the attention projections, the norms and the embedding table, shared "
                  "with the output head.")


def check_macs_per_token(fn: Callable, model, n_tokens: int) -> Feedback:
    """Check ``fn(T, layers, config, vocab)``: the MACs of one step of a loop with a KV cache, for
    the token whose query reads ``T`` keys, against ``model_numbers(model, T)``, at ``n_tokens``
    and at twice that (so a count that does not grow right with T is caught)."""
    _check_model(model)
    if not callable(fn):
        raise TypeError(f"fn must be a function fn(T, layers, config, vocab), got {type(fn).__name__}")
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, (int, np.integer)) or n_tokens < 1:
        raise ValueError(f"n_tokens must be a positive int, got {n_tokens!r}")
    from .decoder_exercises import decoder_parts

    parts = decoder_parts(model)
    vocab = model.arrays["tok_embed"].shape[0]
    h, n_kv, d_k, layers = model.n_heads, model.n_kv_heads, model.d_k, model.n_layers
    right = []
    for t in (int(n_tokens), 2 * int(n_tokens)):
        outcome = call_reader(fn, (t, parts.layers, dict(parts.config), vocab))
        if isinstance(outcome.error, NotImplementedError):
            return not_attempted("my_macs_per_token")
        if outcome.error is not None:
            return Feedback(False, f"Your my_macs_per_token raised {type(outcome.error).__name__}: {outcome.error}")
        m = model_numbers(model, t).macs_per_token
        want, core = m["total"], m["attention"]
        slips = [
            (want - core + core * t, "attention_over_all_rows", "this is the attention of the whole text "
             "(T queries against T keys, as without a cache); a cached step has one query row: 2 h T d_k per layer"),
            (want - core // 2, "scores_only", "the weighted sum of V costs as much as the scores (h T d_k "
             "each per layer); count both"),
            (want - core + core * n_kv // h, "attention_with_n_kv_heads", f"every one of the h = {h} query "
             f"heads reads the keys, not only the n_kv = {n_kv} key/value heads"),
            (want - m["head"], "no_head", "the output head (d_model x vocab for the one new row) is missing"),
            (want + m["head"], "head_counted_twice", "the output head is one product, counted once"),
            (want - m["projections"] + 4 * (h * d_k) ** 2 * layers, "kv_projections_as_mha",
             f"W_K and W_V are (d_model, n_kv d_k), {n_kv} heads wide, not d_model x d_model"),
        ]
        fb = _judge(f"MAC count at T = {t:,}", outcome.value, want, slips, "")
        if not fb.ok:
            return fb
        right.append((t, want, core))
    (t0, w0, c0), (t1, w1, c1) = right
    return Feedback(True, f"Your MAC counts are model_numbers' at T = {t0:,} ({w0:,}) and at T = {t1:,} ({w1:,}): "
                          f"only the scores and weighted sums grow, from {c0:,} to {c1:,}.")


def check_kv_bytes(fn: Callable, caches, model, n_tokens: int) -> Feedback:
    """Check ``fn(caches)``: the bytes of the keys and values the reader's loop kept (``caches``,
    one dict per layer, filled by ``written``), first against the arrays themselves, then against
    ``model_numbers(model, n_tokens).kv_bytes`` (n_kv heads, float32)."""
    _check_model(model)
    if not callable(fn):
        raise TypeError(f"fn must be a function fn(caches), got {type(fn).__name__}")
    if isinstance(n_tokens, bool) or not isinstance(n_tokens, (int, np.integer)) or n_tokens < 1:
        raise ValueError(f"n_tokens must be a positive int, got {n_tokens!r}")
    outcome = call_reader(fn, (caches,))
    if isinstance(outcome.error, NotImplementedError):
        return not_attempted("my_kv_bytes")
    held = cache_nbytes(caches)
    if held == 0:
        return Feedback(False, "Your caches are empty: write generate (section 3) so that it keeps each "
                               "layer's keys and values in the dict of caches it is given, then run the cells "
                               "of this section again.", attempted=False)
    if outcome.error is not None:
        return Feedback(False, f"Your my_kv_bytes raised {type(outcome.error).__name__}: {outcome.error}")
    layers = len(caches) if isinstance(caches, list) else 1
    fb = _judge("byte count", outcome.value, held, [
        (held // 2, "keys_only", "that is half of what the caches hold: count the keys and the values"),
        (held // layers, "one_layer", f"that is one layer's cache; count all {layers}"),
        (held // 4, "numbers_not_bytes", "that counts numbers; a float32 number takes 4 bytes (nbytes counts "
         "bytes)"),
    ], "", source="the nbytes of your caches give")
    if not fb.ok:
        return fb
    want, ratio = model_numbers(model, int(n_tokens)).kv_bytes, model.n_heads // model.n_kv_heads
    if held == want:
        return Feedback(True, f"Your caches hold {held:,} bytes ({held / 2**20:.2f} MiB), as model_numbers "
                              f"counts them: {int(n_tokens):,} tokens x {model.n_layers} layers x keys and values "
                              f"x {model.n_kv_heads} key/value heads x d_k = {model.d_k} x 4 bytes.")
    if held == want * ratio:
        return Feedback(False, f"You count your caches right ({held:,} bytes), but they hold {ratio} times "
                               f"model_numbers' {want:,}: your loop keeps the keys and values after np.repeat, "
                               f"h = {model.n_heads} heads instead of n_kv = {model.n_kv_heads}. Fix: cache the "
                               f"n_kv heads, and repeat them when you read the cache.", "cache_after_repeat")
    wide = sorted({str(a.dtype) for a in _arrays(caches) if a.dtype.itemsize > 4})
    if wide:
        return Feedback(False, f"You count your caches right ({held:,} bytes), but model_numbers counts {want:,}: "
                               f"some of your cached keys or values are {', '.join(wide)} (8 bytes a number), not "
                               f"the float32 of the weights. In NumPy 2 a float32 array divided by np.sqrt(d_k), a "
                               f"float64 scalar, becomes float64, and so does every layer after it. Fix: divide by "
                               f"d_k ** 0.5 (a Python float), or cast the layer's output to float32.", "float64_cache")
    return Feedback(False, f"You count your caches right ({held:,} bytes), but model_numbers counts {want:,} "
                           f"for {int(n_tokens):,} tokens: does your loop keep each token's keys and values "
                           f"once, and only those?")
