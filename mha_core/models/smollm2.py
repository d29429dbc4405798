"""SmolLM2-135M-Instruct: a small Llama-style decoder, run through the core's attention.

30 layers, 9 query heads sharing 3 key/value heads (GQA), d_model 576, d_k 64, RoPE (base 1e5),
RMSNorm, SwiGLU, tied input/output embeddings, byte-level BPE (49,152 tokens). Apache-2.0.
The weights come from a GGUF file quantised to **4 bits** (Q4_1, embeddings Q8_0), dequantised
once to float32: the maps and logits are those of the quantised model, not of the bf16 release.

One layer (pre-norm)::

    x = x + multi_head_attention(rms_norm(x), params, 9, n_kv_heads=3, causal=True, rope_base=1e5)
    x = x + swiglu(rms_norm(x))

GGUF stores ``W_Q`` and ``W_K`` with their columns permuted so that RoPE turns *adjacent*
pairs, which is what ``mha_core.core.rope.apply_rope`` does; we keep that layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..core import decode_step, head_contributions, init_kv_cache, multi_head_attention, prefill
from ..core.validate import WEIGHT_NAMES
from .blocks import embed, rms_norm, swiglu
from .model import Forward, Model, ModelFetchError

# GGUF tensor name (inside "blk.{i}.") -> our name; matrices are transposed to (in, out).
_LAYER_NAMES = {
    "attn_q.weight": "W_Q", "attn_k.weight": "W_K", "attn_v.weight": "W_V", "attn_output.weight": "W_O",
    "attn_norm.weight": "attn_norm", "ffn_norm.weight": "ffn_norm",
    "ffn_gate.weight": "W_gate", "ffn_up.weight": "W_up", "ffn_down.weight": "W_down",
}
_CONFIG_KEYS = {  # GGUF metadata key -> our config key
    "llama.block_count": "n_layers", "llama.embedding_length": "d_model",
    "llama.feed_forward_length": "d_ff", "llama.attention.head_count": "n_heads",
    "llama.attention.head_count_kv": "n_kv_heads", "llama.rope.freq_base": "rope_base",
    "llama.attention.layer_norm_rms_epsilon": "eps", "llama.context_length": "context_length",
}
TOKEN_TYPE_CONTROL = 3  # llama.cpp's token type for special tokens such as <|im_start|>


def convert(files: dict[str, Path]) -> dict:
    """Dequantise the GGUF into float32 arrays in our layout, and turn its tokenizer metadata
    into a `tokenizers` byte-level BPE. Returns ``{"config", "arrays", "files"}`` for the store."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    path = files["SmolLM2-135M-Instruct.Q4_1.gguf"]
    try:
        reader = GGUFReader(path)
        fields = {k: f.contents() for k, f in reader.fields.items()}
        tensors = {t.name: t for t in reader.tensors}
    except (OSError, ValueError, KeyError, IndexError) as err:
        raise ModelFetchError(f"{path} is not a readable GGUF file ({err}); fetch it again with `make models`") from None
    config = {ours: fields[key] for key, ours in _CONFIG_KEYS.items()}
    quant_types = sorted({t.tensor_type.name for t in reader.tensors})

    def weight(name: str) -> np.ndarray:
        t = tensors[name]
        w = dequantize(t.data, t.tensor_type).astype(np.float32)  # (out, in) as stored (ggml's ne reversed)
        return w.T if w.ndim == 2 else w  # (in, out), so that y = x @ W

    arrays = {"tok_embed": weight("token_embd.weight").T,  # (vocab, d_model): embedding rows
              "out_norm": weight("output_norm.weight")}
    if "output.weight" in tensors:  # untied output head (not in SmolLM2, which ties them)
        arrays["lm_head"] = weight("output.weight")  # (d_model, vocab)
    for i in range(config["n_layers"]):
        for theirs, ours in _LAYER_NAMES.items():
            arrays[f"layer{i}.{ours}"] = weight(f"blk.{i}.{theirs}")
    tok = tokenizer_from_gguf(fields)
    config.update(vocab_size=len(fields["tokenizer.ggml.tokens"]), quantisation=quant_types,
                  name=fields.get("general.name", "SmolLM2"))
    return {"config": config, "arrays": arrays, "files": {"tokenizer.json": tok.to_str(pretty=True)}}


def tokenizer_from_gguf(fields: dict):
    """A `tokenizers` byte-level BPE built from a GGUF's ``tokenizer.ggml.*`` metadata.

    ``tokenizer.ggml.pre == "smollm"`` is llama.cpp's name for SmolLM's pre-tokenizer: digits
    split one by one, then GPT-2's byte-level split (no prefix space).
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    if fields.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"expected a byte-level BPE ('gpt2') tokenizer, got {fields.get('tokenizer.ggml.model')!r}")
    tokens = list(fields["tokenizer.ggml.tokens"])
    merges = [tuple(m.split(" ", 1)) for m in fields["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False))
    splits = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    if fields.get("tokenizer.ggml.pre") == "smollm":
        splits.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(splits)
    tok.decoder = decoders.ByteLevel()
    types = fields["tokenizer.ggml.token_type"]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types, strict=True) if kind == TOKEN_TYPE_CONTROL])
    if fields.get("tokenizer.ggml.add_bos_token"):
        from tokenizers import processors

        bos = tokens[fields["tokenizer.ggml.bos_token_id"]]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, fields["tokenizer.ggml.bos_token_id"])])
    return tok


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's map from the printable stand-in characters back to the bytes 0..255."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


@dataclass(frozen=True)
class Step:
    """One token written by ``SmolLM2.write``.

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


class SmolLM2(Model):
    """SmolLM2-135M-Instruct (Llama decoder, 4-bit quantised). Build it with
    ``mha_core.models.load("smollm2")``."""

    attention_params = WEIGHT_NAMES

    name = "smollm2"
    label = "SmolLM2-135M-Instruct (Llama decoder, GQA 9/3 heads, 4-bit quantised weights: Q4_1, embeddings Q8_0)"
    causal = True
    quantised = True
    config_keys = {**Model.config_keys, "rope_base": "rope_base"}

    def _display(self, i: int) -> str:
        token = self._tokenizer.id_to_token(i)
        decoder = _byte_decoder()
        if any(ch not in decoder for ch in token):  # a special token such as <|im_start|>
            return token
        return bytes(decoder[ch] for ch in token).decode("utf-8", errors="backslashreplace")

    def forward(self, ids, logits: bool = True, head_mask=None) -> Forward:
        """Residual stream (layers + 1, N, d_model), attention (layers, h, N, N) and, if
        ``logits``, the next-token logits (N, vocab). Token ``t`` sees tokens ``0..t`` only.
        ``head_mask``: bool (layers, h); False zeroes that head's output before ``W_O``."""
        ids = self.check_ids(ids)
        head_mask = self.check_head_mask(head_mask)
        a = self.arrays
        x = embed(a["tok_embed"], ids)  # (N, d_model)
        hidden, maps = [x], []
        for i in range(self.n_layers):
            x, w = self.layer(x, i, head_mask=None if head_mask is None else head_mask[i])  # (N, d_model), (h, N, N)
            hidden.append(x)
            maps.append(w)
        out = self._head(x) if logits else None  # (N, vocab)
        return Forward(hidden=np.stack(hidden), attention=np.stack(maps), logits=out)

    def layer(self, x: np.ndarray, i: int, head_mask=None) -> tuple[np.ndarray, np.ndarray]:
        """Decoder layer ``i`` on the residual stream ``x`` (N, d_model): returns the stream after it
        (N, d_model) and the layer's attention weights (h, N, N). ``head_mask``: bool (h,)."""
        p = self.layers[i]
        attn, w = multi_head_attention(
            rms_norm(x, p["attn_norm"], self.eps), self.layer_attention[i], self.n_heads,
            n_kv_heads=self.n_kv_heads, causal=True, rope_base=self.rope_base, return_weights=True,
            head_mask=head_mask,
        )  # (N, d_model), (h, N, N)
        x = x + attn  # (N, d_model)
        return x + self._ffn(x, p), w  # (N, d_model)

    def _ffn(self, x: np.ndarray, p: dict) -> np.ndarray:
        """The layer's pre-norm SwiGLU feed-forward: (M, d_model) -> (M, d_model)."""
        return swiglu(rms_norm(x, p["ffn_norm"], self.eps), p["W_gate"], p["W_up"], p["W_down"])

    def head_logit_effects(self, ids, heads) -> np.ndarray:
        """What each head in ``heads`` writes straight into the logits: shape (k, N, vocab).

        ``heads`` is a list of k ``(layer, head)`` pairs. A head's output (its weighted values)
        goes through its own rows of ``W_O`` (its contribution to the residual stream, as in
        ``head_contributions``), then the final RMSNorm, with each position's scale taken from
        the real final residual stream, then the unembedding. Later layers may add to or undo
        this: it is the direct path only.
        """
        ids = self.check_ids(ids)
        pairs = list(heads) if not isinstance(heads, (str, bytes)) else None
        if not pairs:
            raise ValueError(f"heads must be a non-empty list of (layer, head) pairs, got {heads!r}")
        for pair in pairs:
            ok = isinstance(pair, (tuple, list)) and len(pair) == 2 and all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in pair)
            if not ok or not (0 <= pair[0] < self.n_layers and 0 <= pair[1] < self.n_heads):
                raise ValueError(f"each of heads must be a (layer, head) pair with layer in [0, {self.n_layers}) "
                                 f"and head in [0, {self.n_heads}), got {pair!r}")
        hidden = self.forward(ids, logits=False).hidden  # (layers + 1, N, d_model)
        last = hidden[-1]  # (N, d_model)
        scale = 1.0 / np.sqrt(np.mean(last * last, axis=-1, keepdims=True) + np.float32(self.eps))  # (N, 1)
        out = []
        for layer, head in pairs:
            p = self.layers[layer]
            xn = rms_norm(hidden[layer], p["attn_norm"], self.eps)  # (N, d_model): the layer's attention input
            contrib = head_contributions(xn, self.layer_attention[layer], self.n_heads,
                                         n_kv_heads=self.n_kv_heads, causal=True,
                                         rope_base=self.rope_base)[head]  # (N, d_model)
            out.append(self._unembed(contrib * scale * self.arrays["out_norm"]))  # (N, vocab)
        return np.stack(out)  # (k, N, vocab)

    def _unembed(self, x: np.ndarray) -> np.ndarray:
        """The output projection, after the final norm: (M, d_model) -> (M, vocab)."""
        if "lm_head" in self.arrays:
            return x @ self.arrays["lm_head"]  # (M, d_model) @ (d_model, vocab)
        return x @ self.arrays["tok_embed"].T  # (M, d_model) @ (d_model, vocab): tied embeddings

    def _head(self, x: np.ndarray) -> np.ndarray:
        """Final RMSNorm, then the (tied) output projection: (M, d_model) -> (M, vocab)."""
        return self._unembed(rms_norm(x, self.arrays["out_norm"], self.eps))  # (M, vocab)

    def generate(self, text: str, max_new_tokens: int = 8, use_cache: bool = True) -> tuple[np.ndarray, str]:
        """Greedy decoding: append the most likely next token ``max_new_tokens`` times (or until
        the end-of-text token). Returns all ids and the text of the new tokens only.

        ``use_cache=True`` runs the prompt once (``prefill``) and then one ``decode_step`` per
        layer for each new token, with a KV cache of ``n_kv`` = 3 heads per layer;
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
        the end-of-text token. ``use_cache=False`` recomputes the whole sequence per token.
        """
        if not isinstance(use_cache, bool):
            raise TypeError(f"use_cache must be True or False, got {use_cache!r}")
        ids = self.check_ids(ids)
        self._check_new_tokens(ids, max_new_tokens)
        return self._cached(ids, max_new_tokens) if use_cache else self._recomputed(ids, max_new_tokens)

    def _recomputed(self, ids: np.ndarray, max_new_tokens: int):
        """Greedy decoding without a cache: a whole forward pass per new token."""
        eos = self._tokenizer.token_to_id("<|endoftext|>")
        for _ in range(max_new_tokens):
            f = self.forward(ids, logits=False)  # hidden (layers + 1, N, d_model), attention (layers, h, N, N)
            nxt = int(np.argmax(self._head(f.hidden[-1][-1:])[0]))  # (1, vocab) -> the greedy choice
            yield Step(nxt, f.attention[:, :, -1, :], 0)  # the last query's row, (layers, h, N)
            ids = np.append(ids, nxt)
            if nxt == eos:
                return

    def _cached(self, ids: np.ndarray, max_new_tokens: int):
        """Greedy decoding with a KV cache: ``prefill``, then one ``decode_step`` per layer per token."""
        n = ids.size
        caches = [init_kv_cache(attention, self.n_heads, n + max_new_tokens, n_kv_heads=self.n_kv_heads)
                  for attention in self.layer_attention]  # (n_kv, max, d_k) each
        eos = self._tokenizer.token_to_id("<|endoftext|>")
        # prefill: the prompt in one pass per layer; its keys and values go into the caches
        x = embed(self.arrays["tok_embed"], ids)  # (N, d_model)
        rows = []
        for p, params, cache in zip(self.layers, self.layer_attention, caches, strict=True):
            xn = rms_norm(x, p["attn_norm"], self.eps)  # (N, d_model)
            attn, w = multi_head_attention(xn, params, self.n_heads, n_kv_heads=self.n_kv_heads, causal=True,
                                           rope_base=self.rope_base, return_weights=True)  # (N, d_model), (h, N, N)
            prefill(xn, params, self.n_heads, cache, n_kv_heads=self.n_kv_heads, rope_base=self.rope_base)
            x = x + attn  # (N, d_model)
            x = x + self._ffn(x, p)  # (N, d_model)
            rows.append(w[:, -1, :])  # (h, N): the last prompt token's row
        x_t = x[-1]  # (d_model,)
        for step in range(max_new_tokens):
            nxt = int(np.argmax(self._head(x_t[None])[0]))  # (1, vocab) -> the greedy choice
            yield Step(nxt, np.stack(rows), sum(c.nbytes for c in caches))  # weights (layers, h, t)
            if nxt == eos or step == max_new_tokens - 1:
                return
            # decode: one token through every layer; RoPE at its absolute position cache.length
            x_t = embed(self.arrays["tok_embed"], [nxt])[0]  # (d_model,)
            rows = []
            for p, params, cache in zip(self.layers, self.layer_attention, caches, strict=True):
                attn, w = decode_step(rms_norm(x_t, p["attn_norm"], self.eps), params,
                                      self.n_heads, cache, n_kv_heads=self.n_kv_heads, rope_base=self.rope_base,
                                      return_weights=True)  # (d_model,), (h, t+1)
                x_t = x_t + attn  # (d_model,)
                x_t = x_t + self._ffn(x_t[None], p)[0]  # (d_model,)
                rows.append(w)
