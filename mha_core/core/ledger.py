"""The shape ledger: one traced run of the layer, listed step by step.

``trace_shapes`` runs ``multi_head_attention`` with a ``Tracer`` attached and returns each
step's name and shape, from ``X`` to the output; ``trace_config`` does the same for an
``MHAConfig`` on random input and keeps the MACs too. The notebooks and the dashboard print
these lists, so the shapes they show are the shapes the code computed.
"""

from __future__ import annotations

import numpy as np

from .checks import check_positive_int
from .config import MHAConfig, init_params
from .mha import multi_head_attention
from .trace import Tracer


def trace_shapes(x, params, n_heads, **kwargs) -> list[tuple[str, tuple[int, ...]]]:
    """Run ``multi_head_attention(x, params, n_heads, **kwargs)`` and list every step's shape.

    Returns
    -------
    list of ``(step name, shape)`` in execution order, from ``X`` to the output.
    """
    tracer = Tracer()
    multi_head_attention(x, params, n_heads, tracer=tracer, **kwargs)
    return tracer.steps


def trace_config(config, n: int, *, batch: int | None = None, seed: int = 0, **kwargs) -> Tracer:
    """Trace one run of the layer described by ``config`` on random input of ``N = n`` tokens.

    ``batch=None`` gives an input of shape ``(N, d_model)``; an int gives ``(B, N, d_model)``.
    Returns the full ``Tracer`` (steps and MACs).
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
    tracer = Tracer()
    multi_head_attention(
        x, init_params(config, rng), config.n_heads, n_kv_heads=config.n_kv, tracer=tracer, **kwargs
    )
    return tracer
