"""Inside one forward pass: every intermediate (the shape ledger), each head's output, and what
each head adds.

``trace_shapes`` runs the layer once through ``mha_forward`` (the forward pass that keeps every
intermediate array for the backward pass) and lists each array's name and shape, from ``X`` to
the output, in the order the layer computes them; ``trace_config`` does the same for an
``MHAConfig`` on random input and keeps each matrix product's multiply-accumulates (MACs: one
per output element per summed index). The notebooks and the dashboard print these lists, so
the shapes they show are the shapes of arrays the code computed. ``head_outputs`` and
``head_contributions`` read the same pass: each head's output before ``W_O``, and that output
times head i's rows of ``W_O``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .backward import mha_forward
from .config import MHAConfig, init_params
from .validate import check_forward, check_positive_int, checked, finite_output


@dataclass
class Ledger:
    """``steps`` as ``(name, shape)`` in the layer's order; ``macs`` as ``(name, MACs)`` for the
    matrix products."""

    steps: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    macs: list[tuple[str, int]] = field(default_factory=list)

    def total_macs(self, prefix: str = "") -> int:
        """Sum of the MACs whose step name starts with ``prefix``."""
        return sum(m for name, m in self.macs if name.startswith(prefix))


def ledger(x, params, n_heads, **kwargs) -> Ledger:
    """Run the layer on ``x`` (arguments as for ``mha_forward``) and note every step."""
    _, s = mha_forward(x, params, n_heads, **kwargs)
    h, n_kv = s["h"], s["n_kv"]
    d_k, d_model_kv = s["q"].shape[-1], s["x_kv"].shape[-1]
    book = Ledger()

    def note(name, a, summed=None):  # a product's MACs: one per output element per summed index
        book.steps.append((name, tuple(a.shape)))
        if summed is not None:
            book.macs.append((name, int(a.size) * summed))

    src = "X_kv" if s["cross"] else "X"  # cross-attention reads K and V from the other sequence
    note("X", s["x"])
    if src == "X_kv":
        note("X_kv", s["x_kv"])
    note("Q = X @ W_Q", s["Q"], s["x"].shape[-1])
    note(f"K = {src} @ W_K", s["K"], d_model_kv)
    note(f"V = {src} @ W_V", s["V"], d_model_kv)
    # (..., N_q, h, d_k), a view
    book.steps.append(("Q as heads: reshape", (*s["Q"].shape[:-1], h, d_k)))
    note("Q heads: transpose", s["q"])
    # (..., n_kv, N_k, d_k) and (..., n_kv, N_k, d_v): n_kv heads, before any GQA repeat
    book.steps.append(("K heads", (*s["k"].shape[:-3], n_kv, *s["k"].shape[-2:])))
    book.steps.append(("V heads", (*s["v"].shape[:-3], n_kv, *s["v"].shape[-2:])))
    if s["rope_base"] is not None:
        note("Q rotated: RoPE", s["q"])
        book.steps.append(("K rotated: RoPE", (*s["k"].shape[:-3], n_kv, *s["k"].shape[-2:])))
    if n_kv != h:
        note("K, V heads repeated (GQA)", s["k"])
    note("scores = Q K^T / sqrt(d_k)", s["weights"], d_k)
    note("weights = softmax(scores)", s["weights"])
    note("head outputs = weights V", s["kept"], s["weights"].shape[-1])
    book.steps.append(("heads back: transpose",  # (..., N_q, h, d_v)
                       (*s["heads"].shape[:-3], s["heads"].shape[-2], h, s["heads"].shape[-1])))
    note("concat: reshape", s["concat"])
    note("out = concat @ W_O", s["out"], s["concat"].shape[-1])
    return book


def trace_shapes(x, params, n_heads, **kwargs) -> list[tuple[str, tuple[int, ...]]]:
    """Every step's ``(name, shape)`` of one run of the layer on ``x``, from ``X`` to the output.
    Arguments as for ``multi_head_attention`` (without ``tiled`` and ``return_weights``)."""
    return ledger(x, params, n_heads, **kwargs).steps


def trace_config(config, n: int, *, batch: int | None = None, seed: int = 0, **kwargs) -> Ledger:
    """The ledger of one run of the layer ``config`` on random input of ``N = n`` tokens.

    ``batch=None`` gives an input of shape ``(N, d_model)``; an int gives ``(B, N, d_model)``.
    Returns the whole ``Ledger`` (steps and MACs).
    """
    if not isinstance(config, MHAConfig):
        raise TypeError(f"config must be an MHAConfig, got {type(config).__name__}")
    n = check_positive_int(n, "n")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be a non-negative int, got {type(seed).__name__} {seed!r}")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative int, got seed={seed}")
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (check_positive_int(batch, "batch"),)
    x = rng.standard_normal((*lead, n, config.d_model)).astype(np.float32)  # (B?, N, d_model)
    return ledger(x, init_params(config, rng), config.n_heads, n_kv_heads=config.n_kv, **kwargs)


@checked(check_forward, after=finite_output)
def head_outputs(x, params, n_heads, **kwargs):  # -> (..., h, N_q, d_v)
    """Each head's output before ``W_O`` (after ``head_mask``), shape (..., h, N_q, d_v).
    Arguments as for ``multi_head_attention``, without ``tiled`` and ``return_weights``."""
    return mha_forward.unchecked(x, params, n_heads, **kwargs)[1]["heads"]


@checked(check_forward, after=finite_output)
def head_contributions(x, params, n_heads, **kwargs):  # -> (..., h, N_q, d_model)
    """What each head adds to the output, (..., h, N_q, d_model): ``head_i @ W_O[i*d_v:(i+1)*d_v]``.

    Summed over heads (plus ``b_O``) this is ``multi_head_attention``: concat then ``W_O`` is the
    same as a sum of per-head projections.
    """
    heads = head_outputs.unchecked(x, params, n_heads, **kwargs)  # (..., h, N_q, d_v)
    # row block i of W_O is head i's W_O^i
    W_O_heads = params["W_O"].reshape(n_heads, heads.shape[-1], -1)  # (h, d_v, d_model)
    return heads @ W_O_heads  # (..., h, N_q, d_v) @ (h, d_v, d_model) -> (..., h, N_q, d_model)
