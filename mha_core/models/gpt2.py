"""GPT-2: a decoder with learned positions, pre-LayerNorm and GELU (tanh approximation).

One layer (pre-norm)::

    x = x + multi_head_attention(layer_norm(x), params, h, causal=True)    # biases included
    x = x + gelu_mlp(layer_norm(x), act=gelu_tanh)

and at the end ``logits = layer_norm(x) @ wte.T`` (the output head is the embedding table).

GPT-2 stores its projections as ``Conv1D``: the weight is already ``(in, out)``, so ``Q = X @ W``
with no transpose, and Q, K and V sit side by side in one fused ``c_attn`` of shape
``(d_model, 3 d_model)``; ``W_Q``, ``W_K`` and ``W_V`` are its three column blocks (views).
"""

from __future__ import annotations

import numpy as np

from .blocks import embed, gelu, gelu_mlp, gelu_tanh, layer_norm
from .decoder import Decoder

ACTIVATIONS = {"gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh, "gelu": gelu}
# config fields whose other values this forward pass does not compute (the field's default first)
REQUIRES = {"activation_function": tuple(ACTIVATIONS), "scale_attn_weights": (True,),
            "scale_attn_by_inverse_layer_idx": (False,), "reorder_and_upcast_attn": (False,)}


class GPT2(Decoder):
    """A GPT-2 decoder (float32). Build it with ``mha_core.models.load(path)``."""

    quantised = False

    def embed(self, ids: np.ndarray, start: int = 0) -> np.ndarray:
        return embed(self.arrays["tok_embed"], ids) + self.arrays["pos_embed"][start:start + len(ids)]  # (N, d_model)

    def attention_input(self, x: np.ndarray, p: dict) -> np.ndarray:
        return layer_norm(x, p["ln1_w"], p["ln1_b"], self.eps)  # (M, d_model)

    def mlp(self, x: np.ndarray, p: dict) -> np.ndarray:
        return gelu_mlp(layer_norm(x, p["ln2_w"], p["ln2_b"], self.eps), p["W_in"], p["b_in"], p["W_out"],
                        p["b_out"], act=ACTIVATIONS[self.config["activation"]])  # (M, d_model)

    def final_norm(self, x: np.ndarray) -> np.ndarray:
        return layer_norm(x, self.arrays["lnf_w"], self.arrays["lnf_b"], self.eps)  # (M, d_model)


def shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor a GPT-2 checkpoint of ``config`` holds (torch names, ``transformer.`` prefix
    left out) and its shape (``Conv1D``: ``(in, out)``)."""
    d, d_ff = config["n_embd"], config.get("n_inner") or 4 * config["n_embd"]
    layer = {"ln_1.weight": (d,), "ln_1.bias": (d,), "attn.c_attn.weight": (d, 3 * d), "attn.c_attn.bias": (3 * d,),
             "attn.c_proj.weight": (d, d), "attn.c_proj.bias": (d,), "ln_2.weight": (d,), "ln_2.bias": (d,),
             "mlp.c_fc.weight": (d, d_ff), "mlp.c_fc.bias": (d_ff,), "mlp.c_proj.weight": (d_ff, d),
             "mlp.c_proj.bias": (d,)}
    out = {"wte.weight": (config["vocab_size"], d), "wpe.weight": (config["n_positions"], d),
           "ln_f.weight": (d,), "ln_f.bias": (d,)}
    for i in range(config["n_layer"]):
        out |= {f"h.{i}.{name}": shape for name, shape in layer.items()}
    return out


def from_checkpoint(config: dict, tensor) -> tuple[dict, dict[str, np.ndarray]]:
    """Our config and arrays from a GPT-2 checkpoint; ``tensor(name, shape)`` returns the named
    float32 tensor (or raises naming it)."""
    want = shapes(config)
    d = config["n_embd"]

    def t(name: str) -> np.ndarray:
        return tensor(name, want[name])

    arrays = {"tok_embed": t("wte.weight"), "pos_embed": t("wpe.weight"),
              "lnf_w": t("ln_f.weight"), "lnf_b": t("ln_f.bias")}
    for i in range(config["n_layer"]):
        qkv, b_qkv = t(f"h.{i}.attn.c_attn.weight"), t(f"h.{i}.attn.c_attn.bias")  # (d, 3d), (3d,)
        layer = {"ln1_w": t(f"h.{i}.ln_1.weight"), "ln1_b": t(f"h.{i}.ln_1.bias"),
                 "W_Q": qkv[:, :d], "W_K": qkv[:, d:2 * d], "W_V": qkv[:, 2 * d:],  # (d, d) each, views
                 "b_Q": b_qkv[:d], "b_K": b_qkv[d:2 * d], "b_V": b_qkv[2 * d:],
                 "W_O": t(f"h.{i}.attn.c_proj.weight"), "b_O": t(f"h.{i}.attn.c_proj.bias"),
                 "ln2_w": t(f"h.{i}.ln_2.weight"), "ln2_b": t(f"h.{i}.ln_2.bias"),
                 "W_in": t(f"h.{i}.mlp.c_fc.weight"), "b_in": t(f"h.{i}.mlp.c_fc.bias"),
                 "W_out": t(f"h.{i}.mlp.c_proj.weight"), "b_out": t(f"h.{i}.mlp.c_proj.bias")}
        arrays |= {f"layer{i}.{k}": v for k, v in layer.items()}
    eos = config.get("eos_token_id")
    ours = {"n_layers": config["n_layer"], "n_heads": config["n_head"], "n_kv_heads": config["n_head"],
            "d_model": d, "vocab_size": config["vocab_size"], "eps": config["layer_norm_epsilon"],
            "activation": config.get("activation_function", "gelu_new"), "max_tokens": config["n_positions"],
            "eos_ids": eos if isinstance(eos, list) else [eos]}
    return ours, arrays
