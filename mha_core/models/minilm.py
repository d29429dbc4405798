"""all-MiniLM-L6-v2: a small BERT encoder, run through the core's attention.

6 layers x 12 heads, d_model 384, d_k 32, learned positions, post-LayerNorm, GELU, uncased
WordPiece (30,522 tokens). The sentence-transformers release, Apache-2.0; weights in float32.
Its forward pass is the BERT family's (``bert.Bert``); this module converts the release once
into the store's ``.npy`` cache (``store.fetch``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .bert import Bert, from_checkpoint
from .checkpoint import read_tokenizer
from .model import ModelFetchError


def convert(files: dict[str, Path]) -> dict:
    """Convert the safetensors release for the store: ``{"config": ..., "arrays": {name: array
    in our layout}, "files": {"tokenizer.json": ...}}`` (the tokenizer with padding and
    truncation off)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = files["model.safetensors"]
    try:
        tensors = load_file(path)
        config = json.loads(files["config.json"].read_text())
    except (SafetensorError, OSError, ValueError) as err:
        raise ModelFetchError(f"{path} could not be read ({err}); fetch it again with `make models`") from None
    tensors = {k.removeprefix("bert."): v for k, v in tensors.items()}
    _, arrays = from_checkpoint(config, lambda name, _shape: tensors[name].astype(np.float32))
    tokenizer = read_tokenizer(files["tokenizer.json"])
    cfg = {k: config[k] for k in ("num_hidden_layers", "num_attention_heads", "hidden_size",
                                  "intermediate_size", "layer_norm_eps", "vocab_size",
                                  "max_position_embeddings")}  # the release's sizes, for the manifest
    return {"config": cfg, "arrays": arrays, "files": {"tokenizer.json": tokenizer.to_str(pretty=True)}}


class MiniLM(Bert):
    """all-MiniLM-L6-v2 (BERT encoder, float32). Build it with ``mha_core.models.load("minilm")``."""

    name = "minilm"
    label = "all-MiniLM-L6-v2 (BERT encoder, 22.7M parameters, float32 weights)"
