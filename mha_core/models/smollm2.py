"""SmolLM2-135M-Instruct: a small Llama-style decoder, run through the core's attention.

30 layers, 9 query heads sharing 3 key/value heads (GQA), d_model 576, d_k 64, RoPE (base 1e5),
RMSNorm, SwiGLU, tied input/output embeddings, byte-level BPE (49,152 tokens). Apache-2.0.
The weights come from a GGUF file quantised to **4 bits** (Q4_1, embeddings Q8_0), dequantised
once to float32: the maps and logits are those of the quantised model, not of the bf16 release.

Its forward pass, its writing with the KV cache and its heads' direct logit effects are the
Llama family's (``llama.Llama``, ``decoder.Decoder``); this module converts the GGUF release once
into the store's ``.npy`` cache (``store.fetch``). GGUF stores ``W_Q`` and ``W_K`` with their columns permuted so that RoPE turns *adjacent*
pairs, which is what ``mha_core.core.rope.apply_rope`` does; we keep that layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .llama import Llama
from .model import ModelFetchError

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


class SmolLM2(Llama):
    """SmolLM2-135M-Instruct (Llama decoder, 4-bit quantised). Build it with
    ``mha_core.models.load("smollm2")``."""

    name = "smollm2"
    label = "SmolLM2-135M-Instruct (Llama decoder, GQA 9/3 heads, 4-bit quantised weights: Q4_1, embeddings Q8_0)"
    quantised = True
