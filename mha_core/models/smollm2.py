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

from .gguf_file import read_llama
from .llama import Llama
from .model import ModelFetchError


def convert(files: dict[str, Path]) -> dict:
    """Dequantise the GGUF into float32 arrays in our layout, and turn its tokenizer metadata
    into a `tokenizers` byte-level BPE. Returns ``{"config", "arrays", "files"}`` for the store."""
    path = files["SmolLM2-135M-Instruct.Q4_1.gguf"]
    try:
        config, arrays, tok = read_llama(path)
    except (OSError, ValueError, KeyError, IndexError) as err:
        raise ModelFetchError(f"{path} is not a readable GGUF file ({err}); fetch it again with `make models`") from None
    config["name"] = config.get("name") or "SmolLM2"
    return {"config": config, "arrays": arrays, "files": {"tokenizer.json": tok.to_str(pretty=True)}}


class SmolLM2(Llama):
    """SmolLM2-135M-Instruct (Llama decoder, 4-bit quantised). Build it with
    ``mha_core.models.load("smollm2")``."""

    name = "smollm2"
    label = "SmolLM2-135M-Instruct (Llama decoder, GQA 9/3 heads, 4-bit quantised weights: Q4_1, embeddings Q8_0)"
    quantised = True
