"""The BERT family: an encoder with learned positions, post-LayerNorm and GELU (BERT, MiniLM).

One layer (post-LayerNorm, as in the original BERT)::

    a = multi_head_attention(x, params, h)         # the core's fused layer, biases included
    x = layer_norm(x + a)
    x = layer_norm(x + gelu_mlp(x))

Every token sees every other token (no mask): a single sentence has no padding. ``Bert`` runs
a Hugging Face ``BertModel`` folder (``model_type: bert``); ``minilm.MiniLM`` is one of them.
"""

from __future__ import annotations

import numpy as np

from ..core import multi_head_attention
from .blocks import embed, gelu_mlp, layer_norm
from .model import Forward, Model

# torch name (inside "encoder.layer.{i}.") -> (our name, transpose?) ; torch's nn.Linear stores
# W of shape (out, in) and computes x @ W.T: we take W.T (a view), so that Q = X @ W_Q.
LAYER_NAMES = {
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
EMBED_NAMES = {
    "embeddings.word_embeddings.weight": "tok_embed",
    "embeddings.position_embeddings.weight": "pos_embed",
    "embeddings.token_type_embeddings.weight": "type_embed",
    "embeddings.LayerNorm.weight": "ln0_w",
    "embeddings.LayerNorm.bias": "ln0_b",
}
# config fields whose other values this forward pass does not compute (the field's default first)
REQUIRES = {"hidden_act": ("gelu",), "position_embedding_type": ("absolute",)}
CONFIG_KEYS = {"n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
               "n_kv_heads": "num_attention_heads", "d_model": "hidden_size",
               "vocab_size": "vocab_size", "eps": "layer_norm_eps"}


class Bert(Model):
    """A BERT encoder (float32). Build it with ``mha_core.models.load(path)``."""

    causal = False
    quantised = False
    config_keys = CONFIG_KEYS

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


def shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor a BERT checkpoint of ``config`` holds (torch names and layout) and its shape."""
    d, d_ff = config["hidden_size"], config["intermediate_size"]
    out = {"embeddings.word_embeddings.weight": (config["vocab_size"], d),
           "embeddings.position_embeddings.weight": (config["max_position_embeddings"], d),
           "embeddings.token_type_embeddings.weight": (config["type_vocab_size"], d),
           "embeddings.LayerNorm.weight": (d,), "embeddings.LayerNorm.bias": (d,)}
    layer = {name: (d,) if name.endswith("bias") or "LayerNorm" in name else (d, d) for name in LAYER_NAMES}
    layer |= {"intermediate.dense.weight": (d_ff, d), "intermediate.dense.bias": (d_ff,),
              "output.dense.weight": (d, d_ff)}  # the feed-forward: d -> d_ff -> d
    for i in range(config["num_hidden_layers"]):
        out |= {f"encoder.layer.{i}.{name}": shape for name, shape in layer.items()}
    return out


def from_checkpoint(config: dict, tensor) -> tuple[dict, dict[str, np.ndarray]]:
    """Our config and arrays from a ``BertModel`` checkpoint; ``tensor(name, shape)`` returns
    the named float32 tensor (or raises naming it) with the shape the config gives it."""
    want = shapes(config)
    arrays = {ours: tensor(theirs, want[theirs]) for theirs, ours in EMBED_NAMES.items()}
    for i in range(config["num_hidden_layers"]):
        for theirs, (ours, transpose) in LAYER_NAMES.items():
            name = f"encoder.layer.{i}.{theirs}"
            w = tensor(name, want[name])
            arrays[f"layer{i}.{ours}"] = w.T if transpose else w  # (in, out) for weights
    ours = {key: config[key] for key in CONFIG_KEYS.values()}
    ours["max_tokens"] = config["max_position_embeddings"]
    return ours, arrays
