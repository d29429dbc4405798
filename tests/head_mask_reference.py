"""Switching heads off in the transformers references (test-only), to check ``head_mask``.

A forward pre-hook on a layer's attention output projection (Llama's ``o_proj``, BERT's
``attention.output.dense``) zeroes the input columns ``h*d_k:(h+1)*d_k`` of each head switched
off: the same as ``mha_core``'s head_mask, which zeroes the head's output before ``W_O``.
"""

from __future__ import annotations

import contextlib
import functools

import numpy as np


@contextlib.contextmanager
def zeroed_heads(projs, head_mask, width):
    """Within the block, forward pre-hooks on each layer's output projection (``projs``) zero the
    switched-off heads' columns of its input (the concatenated head outputs): the reference's
    head mask. The hooks are removed on leaving the block."""
    import torch

    def hook(_module, args, cols):
        x = args[0].clone()
        x[..., cols] = 0
        return (x,)

    hooks = []
    try:
        for i, proj in enumerate(projs):
            off = np.flatnonzero(~head_mask[i])
            if off.size:
                cols = torch.from_numpy(np.concatenate([np.arange(h * width, (h + 1) * width) for h in off]))
                hooks.append(proj.register_forward_pre_hook(functools.partial(hook, cols=cols)))
        yield
    finally:
        for hk in hooks:
            hk.remove()


def head_masks(n_layers, n_heads, heads=(), seed=0):
    """Several masks: one head off, the listed ``(layer, head)`` pairs off, and 20 random heads off."""
    masks = []
    one = np.ones((n_layers, n_heads), dtype=bool)
    one[n_layers // 2, 1] = False
    masks.append(one)
    if heads:
        listed = np.ones((n_layers, n_heads), dtype=bool)
        for layer, head in heads:
            listed[layer, head] = False
        masks.append(listed)
    rand = np.ones(n_layers * n_heads, dtype=bool)
    rand[np.random.default_rng(seed).choice(rand.size, 20, replace=False)] = False
    masks.append(rand.reshape(n_layers, n_heads))
    return masks


def whole_layer_off(n_layers, n_heads, layer=1):
    """Every head of ``layer`` off: the largest change to the stream."""
    mask = np.ones((n_layers, n_heads), dtype=bool)
    mask[layer] = False
    return mask
