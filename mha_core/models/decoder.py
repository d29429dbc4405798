"""A decoder: pre-norm layers under a causal mask, logits, and greedy writing with a KV cache.

GPT-2 and the Llama family (Llama, Mistral, Qwen2, SmolLM2) share this forward pass; each family
module says only what its pieces are (``embed``, ``attention_input``, ``mlp``, ``final_norm``)::

    x = embed(ids)                                               # (N, d_model)
    for every layer:
        x = x + multi_head_attention(attention_input(x), ..., causal=True, n_kv_heads, rope_base)
        x = x + mlp(x)                                           # the feed-forward, its norm inside
    logits = final_norm(x) @ W_unembed                           # (N, vocab)

``write`` decodes greedily, one token at a time: with the core's KV cache (``prefill``, then one
``decode_step`` per layer per token) or by recomputing the whole sequence; the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import decode_step, init_kv_cache, multi_head_attention, prefill
from .model import Forward, Model


@dataclass(frozen=True)
class Step:
    """One token written by ``Decoder.write``.

    id : int
        The new token (the greedy choice).
    weights : ndarray of shape (layers, h, t)
        The attention of the query that chose it (the token just before it, at position t - 1)
        over the t tokens before the new one, in every head.
    cache_bytes : int
        Bytes held by the KV caches of all layers when it was chosen (t tokens, ``n_kv`` heads);
        0 without a cache.
    """

    id: int
    weights: np.ndarray | None
    cache_bytes: int


class Decoder(Model):
    """A causal, pre-norm transformer with a language-model head. Subclasses define ``embed``,
    ``attention_input``, ``mlp`` and ``final_norm``, and set ``rope_base`` (None: no RoPE)."""

    causal = True
    rope_base: float | None = None

    def __init__(self, tokenizer, arrays: dict[str, np.ndarray], config: dict):
        super().__init__(tokenizer, arrays, config)
        eos = config.get("eos_ids") or [tokenizer.token_to_id("<|endoftext|>")]
        self.eos_ids = frozenset(int(i) for i in eos if i is not None)  # writing stops at these

    # the family's pieces ------------------------------------------------------------------------
    def embed(self, ids: np.ndarray, start: int = 0) -> np.ndarray:  # pragma: no cover - abstract
        """Token ids at positions ``start, start+1, ...`` -> (N, d_model)."""
        raise NotImplementedError

    def attention_input(self, x: np.ndarray, p: dict) -> np.ndarray:  # pragma: no cover - abstract
        """The layer's norm before attention: (M, d_model) -> (M, d_model)."""
        raise NotImplementedError

    def mlp(self, x: np.ndarray, p: dict) -> np.ndarray:  # pragma: no cover - abstract
        """The layer's feed-forward, its own norm first: (M, d_model) -> (M, d_model)."""
        raise NotImplementedError

    def final_norm(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """The norm before the unembedding: (M, d_model) -> (M, d_model)."""
        raise NotImplementedError

    # the forward pass -----------------------------------------------------------------------------
    def forward(self, ids, logits: bool = True, head_mask=None) -> Forward:
        """Residual stream (layers + 1, N, d_model), attention (layers, h, N, N) and, if
        ``logits``, the next-token logits (N, vocab). Token ``t`` sees tokens ``0..t`` only.
        ``head_mask``: bool (layers, h); False zeroes that head's output before ``W_O``."""
        ids = self.check_ids(ids)
        head_mask = self.check_head_mask(head_mask)
        x = self.embed(ids)  # (N, d_model)
        hidden, maps = [x], []
        for i, (p, attention) in enumerate(zip(self.layers, self.layer_attention, strict=True)):
            attn, w = multi_head_attention(
                self.attention_input(x, p), attention, self.n_heads, n_kv_heads=self.n_kv_heads,
                causal=True, rope_base=self.rope_base, return_weights=True,
                head_mask=None if head_mask is None else head_mask[i],
            )  # (N, d_model), (h, N, N)
            x = x + attn  # (N, d_model)
            x = x + self.mlp(x, p)  # (N, d_model)
            hidden.append(x)
            maps.append(w)
        out = self._head(x) if logits else None  # (N, vocab)
        return Forward(hidden=np.stack(hidden), attention=np.stack(maps), logits=out)

    def _unembed(self, x: np.ndarray) -> np.ndarray:
        """The output projection, after the final norm: (M, d_model) -> (M, vocab)."""
        if "lm_head" in self.arrays:
            return x @ self.arrays["lm_head"]  # (M, d_model) @ (d_model, vocab)
        return x @ self.arrays["tok_embed"].T  # (M, d_model) @ (d_model, vocab): tied embeddings

    def _head(self, x: np.ndarray) -> np.ndarray:
        """Final norm, then the output projection: (M, d_model) -> (M, vocab)."""
        return self._unembed(self.final_norm(x))  # (M, vocab)

    # writing ----------------------------------------------------------------------------------------
    def generate(self, text: str, max_new_tokens: int = 8, use_cache: bool = True) -> tuple[np.ndarray, str]:
        """Greedy decoding: append the most likely next token ``max_new_tokens`` times (or until
        an end-of-text token). Returns all ids and the text of the new tokens only.

        ``use_cache=True`` runs the prompt once (``prefill``) and then one ``decode_step`` per
        layer for each new token, with a KV cache of ``n_kv`` heads per layer;
        ``use_cache=False`` recomputes the whole sequence for every new token. Same tokens.
        """
        ids = self.encode(text)
        start = ids.size
        new = [step.id for step in self.write(ids, max_new_tokens, use_cache=use_cache)]
        ids = np.append(ids, np.asarray(new, dtype=np.int64))
        return ids, self._tokenizer.decode([int(i) for i in ids[start:]])

    def _check_new_tokens(self, ids: np.ndarray, max_new_tokens) -> None:
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        if ids.size + max_new_tokens > self.max_tokens:
            raise ValueError(f"{ids.size} tokens + {max_new_tokens} new ones is over the cap of {self.max_tokens}")

    def write(self, ids, max_new_tokens: int = 8, use_cache: bool = True):
        """Greedy decoding, one new token at a time (a generator of ``Step``s).

        ``ids``: the prompt's token ids (from ``encode``). Stops after ``max_new_tokens`` or at
        an end-of-text token. ``use_cache=False`` recomputes the whole sequence per token.
        """
        if not isinstance(use_cache, bool):
            raise TypeError(f"use_cache must be True or False, got {use_cache!r}")
        ids = self.check_ids(ids)
        self._check_new_tokens(ids, max_new_tokens)
        return self._cached(ids, max_new_tokens) if use_cache else self._recomputed(ids, max_new_tokens)

    def _recomputed(self, ids: np.ndarray, max_new_tokens: int):
        """Greedy decoding without a cache: a whole forward pass per new token."""
        for _ in range(max_new_tokens):
            f = self.forward(ids, logits=False)  # hidden (layers + 1, N, d_model), attention (layers, h, N, N)
            nxt = int(np.argmax(self._head(f.hidden[-1][-1:])[0]))  # (1, vocab) -> the greedy choice
            yield Step(nxt, f.attention[:, :, -1, :], 0)  # the last query's row, (layers, h, N)
            ids = np.append(ids, nxt)
            if nxt in self.eos_ids:
                return

    def _cached(self, ids: np.ndarray, max_new_tokens: int):
        """Greedy decoding with a KV cache: ``prefill``, then one ``decode_step`` per layer per token."""
        n = ids.size
        caches = [init_kv_cache(attention, self.n_heads, n + max_new_tokens, n_kv_heads=self.n_kv_heads)
                  for attention in self.layer_attention]  # (n_kv, max, d_k) each
        # prefill: the prompt in one pass per layer; its keys and values go into the caches
        x = self.embed(ids)  # (N, d_model)
        rows = []
        for p, params, cache in zip(self.layers, self.layer_attention, caches, strict=True):
            xn = self.attention_input(x, p)  # (N, d_model)
            attn, w = multi_head_attention(xn, params, self.n_heads, n_kv_heads=self.n_kv_heads, causal=True,
                                           rope_base=self.rope_base, return_weights=True)  # (N, d_model), (h, N, N)
            prefill(xn, params, self.n_heads, cache, n_kv_heads=self.n_kv_heads, rope_base=self.rope_base)
            x = x + attn  # (N, d_model)
            x = x + self.mlp(x, p)  # (N, d_model)
            rows.append(w[:, -1, :])  # (h, N): the last prompt token's row
        x_t = x[-1]  # (d_model,)
        for step in range(max_new_tokens):
            nxt = int(np.argmax(self._head(x_t[None])[0]))  # (1, vocab) -> the greedy choice
            yield Step(nxt, np.stack(rows), sum(c.nbytes for c in caches))  # weights (layers, h, t)
            if nxt in self.eos_ids or step == max_new_tokens - 1:
                return
            # decode: one token through every layer, at its absolute position n + step
            x_t = self.embed(np.asarray([nxt]), start=n + step)[0]  # (d_model,)
            rows = []
            for p, params, cache in zip(self.layers, self.layer_attention, caches, strict=True):
                attn, w = decode_step(self.attention_input(x_t, p), params, self.n_heads, cache,
                                      n_kv_heads=self.n_kv_heads, rope_base=self.rope_base,
                                      return_weights=True)  # (d_model,), (h, t+1)
                x_t = x_t + attn  # (d_model,)
                x_t = x_t + self.mlp(x_t[None], p)[0]  # (d_model,)
                rows.append(w)
