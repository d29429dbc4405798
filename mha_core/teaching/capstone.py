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
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.config import MHAConfig
from ..core.counts import count_macs, count_params, kv_cache_bytes
from .decoder_exercises import DecoderParts

__all__ = ["CacheTiming", "ModelNumbers", "attention_config", "model_numbers", "recompute_loop", "time_the_cache"]

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
