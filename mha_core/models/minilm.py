"""all-MiniLM-L6-v2: a small BERT encoder, run through the core's attention.

6 layers x 12 heads, d_model 384, d_k 32, learned positions, post-LayerNorm, GELU, uncased
WordPiece (30,522 tokens). The sentence-transformers release, Apache-2.0; weights in float32.

One layer (post-LayerNorm, as in the original BERT)::

    a = multi_head_attention(x, params, 12)        # the core's fused layer, biases included
    x = layer_norm(x + a)
    x = layer_norm(x + gelu_mlp(x))

Every token sees every other token (no mask): a single sentence has no padding.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core import multi_head_attention
from ..core.validate import BIAS_NAMES, WEIGHT_NAMES
from .blocks import embed, gelu_mlp, layer_norm
from .model import Forward, Model, ModelFetchError

# torch name (inside "encoder.layer.{i}.") -> (our name, transpose?) ; torch's nn.Linear stores
# W of shape (out, in) and computes x @ W.T: we store W.T once, so that Q = X @ W_Q.
_LAYER_NAMES = {
    "attention.self.query.weight": ("W_Q", True),
    "attention.self.query.bias": ("b_Q", False),
    "attention.self.key.weight": ("W_K", True),
    "attention.self.key.bias": ("b_K", False),
    "attention.self.value.weight": ("W_V", True),
    "attention.self.value.bias": ("b_V", False),
    "attention.output.dense.weight": ("W_O", True),
    "attention.output.dense.bias": ("b_O", False),
    "attention.output.LayerNorm.weight": ("ln1_w", False),
    "attention.output.LayerNorm.bias": ("ln1_b", False),
    "intermediate.dense.weight": ("W_in", True),
    "intermediate.dense.bias": ("b_in", False),
    "output.dense.weight": ("W_out", True),
    "output.dense.bias": ("b_out", False),
    "output.LayerNorm.weight": ("ln2_w", False),
    "output.LayerNorm.bias": ("ln2_b", False),
}
_EMBED_NAMES = {
    "embeddings.word_embeddings.weight": "tok_embed",
    "embeddings.position_embeddings.weight": "pos_embed",
    "embeddings.token_type_embeddings.weight": "type_embed",
    "embeddings.LayerNorm.weight": "ln0_w",
    "embeddings.LayerNorm.bias": "ln0_b",
}


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
    arrays = {ours: tensors[theirs].astype(np.float32) for theirs, ours in _EMBED_NAMES.items()}
    for i in range(config["num_hidden_layers"]):
        for theirs, (ours, transpose) in _LAYER_NAMES.items():
            w = tensors[f"encoder.layer.{i}.{theirs}"].astype(np.float32)
            arrays[f"layer{i}.{ours}"] = w.T if transpose else w  # (in, out) for weights
    tokenizer = _tokenizer_from(files["tokenizer.json"])
    cfg = {k: config[k] for k in ("num_hidden_layers", "num_attention_heads", "hidden_size",
                                  "intermediate_size", "layer_norm_eps", "vocab_size",
                                  "max_position_embeddings")}
    return {"config": cfg, "arrays": arrays, "files": {"tokenizer.json": tokenizer.to_str(pretty=True)}}


def _tokenizer_from(path: Path):
    """The release's WordPiece tokenizer, without its fixed padding to 128 and truncation."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.no_truncation()
    return tok


class MiniLM(Model):
    """all-MiniLM-L6-v2 (BERT encoder, float32). Build it with ``mha_core.models.load("minilm")``."""

    attention_params = WEIGHT_NAMES + BIAS_NAMES

    name = "minilm"
    label = "all-MiniLM-L6-v2 (BERT encoder, 22.7M parameters, float32 weights)"
    causal = False
    quantised = False
    config_keys = {"n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
                   "n_kv_heads": "num_attention_heads", "d_model": "hidden_size",
                   "vocab_size": "vocab_size", "eps": "layer_norm_eps"}

    def forward(self, ids, logits: bool = False, head_mask=None) -> Forward:
        """Hidden states (layers + 1, N, d_model) and attention (layers, h, N, N) of one sentence.

        ``head_mask``: bool (layers, h); False zeroes that head's output before ``W_O``."""
        ids = self.check_ids(ids)
        head_mask = self.check_head_mask(head_mask)
        a = self.arrays
        n = ids.size
        x = embed(a["tok_embed"], ids) + a["pos_embed"][:n] + a["type_embed"][0]  # (N, d_model)
        x = layer_norm(x, a["ln0_w"], a["ln0_b"], self.eps)  # (N, d_model)
        hidden = [x]
        maps = []
        for i, (p, attention) in enumerate(zip(self.layers, self.layer_attention, strict=True)):
            attn, w = multi_head_attention(x, attention, self.n_heads, return_weights=True,
                                           head_mask=None if head_mask is None else head_mask[i])  # (N, d_model), (h, N, N)
            x = layer_norm(x + attn, p["ln1_w"], p["ln1_b"], self.eps)  # (N, d_model)
            x = layer_norm(x + gelu_mlp(x, p["W_in"], p["b_in"], p["W_out"], p["b_out"]),
                           p["ln2_w"], p["ln2_b"], self.eps)  # (N, d_model)
            hidden.append(x)
            maps.append(w)
        return Forward(hidden=np.stack(hidden), attention=np.stack(maps), logits=None)  # (L+1, N, d), (L, h, N, N)
