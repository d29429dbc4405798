"""The Llama family: a decoder with RMSNorm, RoPE, GQA and SwiGLU (Llama, Mistral, Qwen2, SmolLM2).

One layer (pre-norm)::

    x = x + multi_head_attention(rms_norm(x), params, h, n_kv_heads=n_kv, causal=True, rope_base)
    x = x + swiglu(rms_norm(x))

and at the end ``logits = rms_norm(x) @ W_unembed`` (the embedding table, transposed, when tied).
Qwen2 adds biases to Q, K and V (``b_Q, b_K, b_V``): the core's layer takes them as they are.

RoPE layout: the core turns *adjacent* pairs (``rope.py``); a Hugging Face checkpoint pairs
dimension ``i`` with ``i + d_k/2`` (``rotate_half``). ``from_checkpoint`` reorders the columns of
``W_Q``, ``W_K`` (and their biases) once, head by head; the scores are the same.
"""

from __future__ import annotations

import numpy as np

from ..core import head_contributions
from .blocks import embed, rms_norm, swiglu
from .decoder import Decoder
from .model import MODEL_MAX_TOKENS

# torch name (inside "model.layers.{i}.") -> our name; matrices are transposed to (in, out)
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "ffn_norm",
    "self_attn.q_proj.weight": "W_Q", "self_attn.k_proj.weight": "W_K",
    "self_attn.v_proj.weight": "W_V", "self_attn.o_proj.weight": "W_O",
    "mlp.gate_proj.weight": "W_gate", "mlp.up_proj.weight": "W_up", "mlp.down_proj.weight": "W_down",
}
BIAS_NAMES = {"self_attn.q_proj.bias": "b_Q", "self_attn.k_proj.bias": "b_K", "self_attn.v_proj.bias": "b_V"}
# config fields whose other values this forward pass does not compute (the field's default first)
REQUIRES = {"hidden_act": ("silu",), "rope_scaling": (None,), "mlp_bias": (False,), "attention_bias": (False,)}


class Llama(Decoder):
    """A Llama-family decoder (float32). Build it with ``mha_core.models.load(path)``."""

    quantised = False
    config_keys = {**Decoder.config_keys, "rope_base": "rope_base"}

    def embed(self, ids: np.ndarray, start: int = 0) -> np.ndarray:
        return embed(self.arrays["tok_embed"], ids)  # (N, d_model): positions enter through RoPE

    def attention_input(self, x: np.ndarray, p: dict) -> np.ndarray:
        return rms_norm(x, p["attn_norm"], self.eps)  # (M, d_model)

    def mlp(self, x: np.ndarray, p: dict) -> np.ndarray:
        return swiglu(rms_norm(x, p["ffn_norm"], self.eps), p["W_gate"], p["W_up"], p["W_down"])  # (M, d_model)

    def final_norm(self, x: np.ndarray) -> np.ndarray:
        return rms_norm(x, self.arrays["out_norm"], self.eps)  # (M, d_model)

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
            xn = self.attention_input(hidden[layer], self.layers[layer])  # (N, d_model): the layer's attention input
            contrib = head_contributions(xn, self.layer_attention[layer], self.n_heads,
                                         n_kv_heads=self.n_kv_heads, causal=True,
                                         rope_base=self.rope_base)[head]  # (N, d_model)
            out.append(self._unembed(contrib * scale * self.arrays["out_norm"]))  # (N, vocab)
        return np.stack(out)  # (k, N, vocab)


def _sizes(config: dict) -> tuple[int, int, int, int, int]:
    """d_model, h, n_kv, d_k and d_ff of a Hugging Face Llama-family config."""
    h = config["num_attention_heads"]
    d = config["hidden_size"]
    return (d, h, config.get("num_key_value_heads") or h, config.get("head_dim") or d // h,
            config["intermediate_size"])


def rope_base(config: dict) -> float:
    """RoPE's base: ``rope_theta``, or ``rope_parameters["rope_theta"]`` (newer configs)."""
    params = config.get("rope_parameters") or {}
    if params.get("rope_type", "default") != "default":
        raise ValueError(f"config.json: rope_parameters.rope_type={params['rope_type']!r} is not supported "
                         f"(only 'default' RoPE is)")
    return float(params.get("rope_theta", config.get("rope_theta", 10_000.0)))


def shapes(config: dict, biases: bool) -> dict[str, tuple[int, ...]]:
    """Every tensor a Llama-family checkpoint of ``config`` holds (torch names, ``model.``
    prefix left out) and its shape; ``biases``: Q, K and V have biases (Qwen2)."""
    d, h, n_kv, d_k, d_ff = _sizes(config)
    layer = {"input_layernorm.weight": (d,), "post_attention_layernorm.weight": (d,),
             "self_attn.q_proj.weight": (h * d_k, d), "self_attn.k_proj.weight": (n_kv * d_k, d),
             "self_attn.v_proj.weight": (n_kv * d_k, d), "self_attn.o_proj.weight": (d, h * d_k),
             "mlp.gate_proj.weight": (d_ff, d), "mlp.up_proj.weight": (d_ff, d), "mlp.down_proj.weight": (d, d_ff)}
    if biases:
        layer |= {"self_attn.q_proj.bias": (h * d_k,), "self_attn.k_proj.bias": (n_kv * d_k,),
                  "self_attn.v_proj.bias": (n_kv * d_k,)}
    out = {"embed_tokens.weight": (config["vocab_size"], d), "norm.weight": (d,)}
    for i in range(config["num_hidden_layers"]):
        out |= {f"layers.{i}.{name}": shape for name, shape in layer.items()}
    return out


def _adjacent_pairs(w: np.ndarray, n: int, d_k: int) -> np.ndarray:
    """Columns of ``w`` (..., n*d_k) from ``rotate_half``'s order (i with i + d_k/2) to adjacent pairs."""
    perm = np.arange(d_k).reshape(2, d_k // 2).T.ravel()  # 0, d_k/2, 1, d_k/2 + 1, ...
    return w[..., (np.arange(n)[:, None] * d_k + perm).ravel()]  # (..., n*d_k), a copy


def from_checkpoint(config: dict, tensor, biases: bool = False) -> tuple[dict, dict[str, np.ndarray]]:
    """Our config and arrays from a Llama-family checkpoint; ``tensor(name, shape)`` returns the
    named float32 tensor (or raises naming it). ``biases``: Q, K and V have biases (Qwen2)."""
    d, h, n_kv, d_k, _ = _sizes(config)
    want = shapes(config, biases)
    arrays = {"tok_embed": tensor("embed_tokens.weight", want["embed_tokens.weight"]),
              "out_norm": tensor("norm.weight", (d,))}
    if not config.get("tie_word_embeddings", True):
        arrays["lm_head"] = tensor("lm_head.weight", (config["vocab_size"], d)).T  # (d_model, vocab)
    names = {**LAYER_NAMES, **(BIAS_NAMES if biases else {})}
    for i in range(config["num_hidden_layers"]):
        for theirs, ours in names.items():
            w = tensor(f"layers.{i}.{theirs}", want[f"layers.{i}.{theirs}"])
            w = w.T if w.ndim == 2 else w  # (in, out) for matrices
            if ours[-1] in "QK":  # W_Q, b_Q, W_K, b_K: RoPE's pairs side by side
                w = _adjacent_pairs(w, h if ours[-1] == "Q" else n_kv, d_k)
            arrays[f"layer{i}.{ours}"] = w
    eos = config.get("eos_token_id")
    ours = {"n_layers": config["num_hidden_layers"], "n_heads": h, "n_kv_heads": n_kv, "d_model": d,
            "d_k": d_k, "vocab_size": config["vocab_size"], "eps": config["rms_norm_eps"],
            "rope_base": rope_base(config), "eos_ids": eos if isinstance(eos, list) else [eos],
            "max_tokens": _window(config)}
    return ours, arrays


def _window(config: dict) -> int:
    """The longest input computed exactly: the context length, or the sliding window (Mistral)
    when one is in use, if shorter."""
    limits = [config.get("max_position_embeddings")]
    if config.get("use_sliding_window", True):  # Qwen2 says whether its window is in use
        limits.append(config.get("sliding_window"))
    return min([w for w in limits if w] or [MODEL_MAX_TOKENS])
