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

from functools import lru_cache
from pathlib import Path

import numpy as np

from ..core import multi_head_attention
from .blocks import embed, rms_norm, swiglu
from .model import Forward, Model, ModelFetchError

# GGUF tensor name (inside "blk.{i}.") -> our name; matrices are transposed to (in, out).
_LAYER_NAMES = {
    "attn_q.weight": "W_Q", "attn_k.weight": "W_K", "attn_v.weight": "W_V", "attn_output.weight": "W_O",
    "attn_norm.weight": "attn_norm", "ffn_norm.weight": "ffn_norm",
    "ffn_gate.weight": "W_gate", "ffn_up.weight": "W_up", "ffn_down.weight": "W_down",
}
ATTENTION_PARAMS = ("W_Q", "W_K", "W_V", "W_O")
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


class SmolLM2(Model):
    """SmolLM2-135M-Instruct (Llama decoder, 4-bit quantised). Build it with
    ``mha_core.models.load("smollm2")``."""

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

    def forward(self, ids, logits: bool = True) -> Forward:
        """Residual stream (layers + 1, N, d_model), attention (layers, h, N, N) and, if
        ``logits``, the next-token logits (N, vocab). Token ``t`` sees tokens ``0..t`` only."""
        ids = self.check_ids(ids)
        a = self.arrays
        x = embed(a["tok_embed"], ids)  # (N, d_model)
        hidden, maps = [x], []
        for p in self.layers:
            attn, w = multi_head_attention(
                rms_norm(x, p["attn_norm"], self.eps), {k: p[k] for k in ATTENTION_PARAMS}, self.n_heads,
                n_kv_heads=self.n_kv_heads, causal=True, rope_base=self.rope_base, return_weights=True,
            )  # (N, d_model), (h, N, N)
            x = x + attn  # (N, d_model)
            x = x + swiglu(rms_norm(x, p["ffn_norm"], self.eps), p["W_gate"], p["W_up"], p["W_down"])  # (N, d_model)
            hidden.append(x)
            maps.append(w)
        out = self._head(x) if logits else None  # (N, vocab)
        return Forward(hidden=np.stack(hidden), attention=np.stack(maps), logits=out)

    def _head(self, x: np.ndarray) -> np.ndarray:
        """Final RMSNorm, then the (tied) output projection: (M, d_model) -> (M, vocab)."""
        x = rms_norm(x, self.arrays["out_norm"], self.eps)  # (M, d_model)
        if "lm_head" in self.arrays:
            return x @ self.arrays["lm_head"]  # (M, d_model) @ (d_model, vocab)
        return x @ self.arrays["tok_embed"].T  # (M, d_model) @ (d_model, vocab): tied embeddings

    def generate(self, text: str, max_new_tokens: int = 8) -> tuple[np.ndarray, str]:
        """Greedy decoding: append the most likely next token ``max_new_tokens`` times (or until
        the end-of-text token). Returns all ids and the text of the new tokens only."""
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {max_new_tokens!r}")
        ids = self.encode(text)
        if ids.size + max_new_tokens > self.max_tokens:
            raise ValueError(f"{ids.size} tokens + {max_new_tokens} new ones is over the cap of {self.max_tokens}")
        start = ids.size
        eos = self._tokenizer.token_to_id("<|endoftext|>")
        for _ in range(max_new_tokens):
            last = self.forward(ids, logits=False).hidden[-1][-1:]  # (1, d_model)
            nxt = int(np.argmax(self._head(last)[0]))
            ids = np.append(ids, nxt)
            if nxt == eos:
                break
        return ids, self._tokenizer.decode([int(i) for i in ids[start:]])
