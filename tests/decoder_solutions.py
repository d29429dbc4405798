"""A decoder layer and a greedy loop with a KV cache, written from the definitions in plain NumPy
(float64), independent of mha_core: the right answers that tests/test_decoder_exercises.py gives
the checkers, and, with ``mistake=`` one classic slip each, the wrong ones."""

from __future__ import annotations

from functools import partial

import numpy as np


def norm(x, w, eps, mistake=None):  # RMSNorm, (N, d_model) -> (N, d_model)
    if mistake == "layer_norm":
        x = x - x.mean(-1, keepdims=True)
        return x / np.sqrt(x.var(-1, keepdims=True) + eps) * w
    if mistake == "eps_outside_sqrt":
        return x / (np.sqrt(np.mean(x**2, axis=-1, keepdims=True)) + eps) * w
    return x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + eps) * w


def rope(x, positions, base, half=False):  # (heads, N, d) -> (heads, N, d): turn the pairs (2i, 2i+1)
    d = x.shape[-1]
    ang = np.asarray(positions, float)[:, None] * base ** (-np.arange(0, d, 2) / d)  # (N, d/2)
    cos, sin = np.cos(ang), np.sin(ang)
    if half:  # transformers' rotate_half layout: the pairs (i, i + d/2)
        a, b = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def heads(m, n):  # (N, n*d) -> (n, N, d)
    return m.reshape(m.shape[0], n, -1).transpose(1, 0, 2)


def new_cache():
    return {"K": [], "V": [], "pos": []}


def layer_step(x, p, cfg, cache, positions, mistake=None):
    """Rows x (M, d_model) at ``positions`` through one layer; their keys and values are appended
    to ``cache`` (lists of (n_kv, M, d) arrays). Returns (M, d_model)."""
    h, n_kv, eps, base = cfg["n_heads"], cfg["n_kv_heads"], cfg["eps"], cfg["rope_base"]
    x = x.astype(np.float64)
    n1, n2 = ("ffn_norm", "attn_norm") if mistake == "norms_swapped" else ("attn_norm", "ffn_norm")
    xn = norm(x, p[n1], eps, mistake)
    q, k, v = heads(xn @ p["W_Q"], h), heads(xn @ p["W_K"], n_kv), heads(xn @ p["W_V"], n_kv)
    first = not cache["pos"]
    if first:
        cache["prompt"] = len(positions)
    turn = positions
    if not first and mistake == "positions_not_advanced":  # apply_rope's default: position 0
        turn = [0] * len(positions)
    if not first and mistake == "positions_fixed":  # the counter never moves past the prompt
        turn = [cache["prompt"]] * len(positions)
    if mistake not in ("no_rope", "rope_on_scores", "rope_after_attention"):
        q = rope(q, turn, base, half=mistake == "rope_rotate_half")
        k_rot = rope(k, turn, base, half=mistake == "rope_rotate_half")
    else:
        k_rot = k
    if mistake == "rope_on_v":
        v = rope(v, positions, base)
    copies = 2 if mistake == "cache_appended_twice" and not first else 1
    before = [np.concatenate(cache["K"], 1), np.concatenate(cache["V"], 1)] if cache["K"] else None
    for _ in range(copies):
        cache["K"].append(k if mistake == "keys_cached_before_rope" else k_rot)
        cache["V"].append(v)
        cache["pos"].extend(positions)
    if first:  # the prompt attends over its own rotated keys
        K, V, pos_k = k_rot, v, list(positions)
    elif mistake == "no_self_attention":
        K, V, pos_k = before[0], before[1], cache["pos"][: -len(positions)]
    else:
        K, V, pos_k = np.concatenate(cache["K"], 1), np.concatenate(cache["V"], 1), cache["pos"]
    if mistake == "kv_not_repeated":
        pass  # (h, M, d) against (n_kv, T, d): numpy cannot broadcast them
    elif mistake == "kv_tiled":
        K, V = np.tile(K, (h // n_kv, 1, 1)), np.tile(V, (h // n_kv, 1, 1))
    else:  # query heads 0..g-1 read key/value head 0, and so on
        K, V = np.repeat(K, h // n_kv, 0), np.repeat(V, h // n_kv, 0)
    s = q @ K.transpose(0, 2, 1) / q.shape[-1] ** 0.5  # (h, M, T): a Python float keeps float32
    if mistake == "rope_on_scores":
        s = rope(s, positions, base)
    if mistake != "no_causal_mask":
        s = np.where(np.asarray(pos_k)[None, :] <= np.asarray(positions)[:, None], s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    o = (w / w.sum(-1, keepdims=True)) @ V  # (h, M, d_v)
    if mistake == "rope_after_attention":
        o = rope(o, positions, base)
    attn = o.transpose(1, 0, 2).reshape(x.shape[0], -1) @ p["W_O"]
    a = attn if mistake == "no_attention_residual" else x + attn
    z = norm(a, p[n2], eps, mistake)
    g, u = z @ p["W_gate"], z @ p["W_up"]
    if mistake == "silu_gate_swapped":
        g, u = u, g
    f = (g / (1 + np.exp(-g)) * u) @ p["W_down"]
    return f if mistake == "no_ffn_residual" else a + f


def float64(p):
    return {k: np.asarray(v, np.float64) for k, v in p.items()}


def decoder_layer(x, p, cfg, mistake=None):
    """One decoder layer over a whole sequence x (N, d_model)."""
    return layer_step(x, float64(p), cfg, new_cache(), list(range(x.shape[0])), mistake)


def wrong_layer(mistake):
    return partial(decoder_layer, mistake=mistake)


def generate(ids, n_new, parts, mistake=None):
    """Greedy decoding: the prompt once through every layer, then one token per step."""
    caches = [new_cache() for _ in parts.layers]
    layers = [float64(p) for p in parts.layers]

    def run(x, positions):
        for p, c in zip(layers, caches, strict=True):
            x = layer_step(x, p, parts.config, c, positions, mistake)
        return x

    x, t = run(parts.embed(ids), list(range(len(ids)))), len(ids)
    if mistake == "last_prompt_token_twice":
        x, t = run(parts.embed(ids[-1:]), [t]), t + 1
    out = []
    for _ in range(n_new):
        out.append(int(np.argmax(parts.head(x[-1:])[0])))
        if len(out) < n_new or mistake == "last_token_run":  # the last token need not go through the layers
            x, t = run(parts.embed([out[-1]]), [t]), t + 1
    return out


def wrong_loop(mistake):
    return partial(generate, mistake=mistake)


def generate_recomputed(ids, n_new, parts):
    """Greedy decoding with no cache: the whole sequence through every layer for each new token."""
    ids, out = list(ids), []
    layers = [float64(p) for p in parts.layers]
    for _ in range(n_new):
        x = parts.embed(np.array(ids))
        for p in layers:
            x = layer_step(x, p, parts.config, new_cache(), list(range(x.shape[0])))
        out.append(int(np.argmax(parts.head(x[-1:])[0])))
        ids.append(out[-1])
    return out


# ------------------------------------------------------------------ cross-attention, one decoding step


def cross_attention(x_t, t, memory, n_src, layer, cache, mistake=None):
    """The decoder's new tokens x_t (B, d_model) read the encoder's memory (B, P, d_model): queries
    from x_t, keys and values from the memory, computed at t = 0 and kept in ``cache``; the pads
    (on the left) masked. Returns out (B, d_model) and the weights (B, h, P). With ``mistake=``,
    one classic slip."""
    h, d_k = layer.n_heads, layer.d_k
    B, P, _ = memory.shape
    new = x_t[:, None, :]  # (B, 1, d_model)
    if mistake in ("kv_from_decoder", "roles_swapped"):
        kv_in = new  # the new token's own key and value
    elif mistake == "kv_from_decoder_prefix":  # the decoder's tokens so far: self-attention
        cache["x"] = kv_in = new if t == 0 else np.concatenate([cache["x"], new], 1)  # (B, t + 1, d_model)
    else:
        kv_in = memory
    if kv_in is not memory or mistake == "kv_recomputed" or not cache:
        cache["K"] = layer.project(kv_in, "K").reshape(B, -1, h, d_k).transpose(0, 2, 1, 3)  # (B, h, S, d_k)
        cache["V"] = layer.project(kv_in, "V").reshape(B, -1, h, d_k).transpose(0, 2, 1, 3)  # (B, h, S, d_k)
    q_in = memory if mistake in ("q_from_encoder", "roles_swapped") else new  # (B, M, d_model)
    M = q_in.shape[1]
    q = layer.project(q_in, "Q").reshape(B, M, h, d_k).transpose(0, 2, 1, 3)  # (B, h, M, d_k)
    s = q @ cache["K"].transpose(0, 1, 3, 2)  # (B, h, M, S)
    if mistake != "no_scale":
        s = s / np.sqrt(d_k)
    pos = np.arange(s.shape[-1])  # the key positions
    if kv_in is not memory or mistake in ("no_padding_mask", "causal_only"):
        keep = np.ones((B, s.shape[-1]), bool)
    elif mistake == "mask_wrong_side":
        keep = pos[None, :] < n_src[:, None]  # the first n_src: where the pads are
    else:
        keep = pos[None, :] >= P - n_src[:, None]  # (B, P): the last n_src positions are the real ones
    if mistake in ("causal_mask", "causal_only"):
        keep = keep & (pos <= t)[None, :]
    s = np.where(keep[:, None, None, :], s, -1e30)  # a fully masked row becomes uniform, not NaN
    w = np.exp(s - s.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)  # (B, h, M, S)
    out = layer.project((w @ cache["V"]).transpose(0, 2, 1, 3).reshape(B, M, h * d_k), "O")  # (B, M, d_model)
    return (out[:, 0], w[:, :, 0]) if M == 1 else (out, w)


def wrong_cross(mistake):
    return partial(cross_attention, mistake=mistake)
