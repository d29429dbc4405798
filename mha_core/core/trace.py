"""Recording what a forward pass actually did: each step's shape and each matmul's MACs.

``multi_head_attention`` takes an optional ``tracer``. The shape ledger shown in the
notebooks and the dashboard (``trace_shapes``) and the MAC counts checked against
``count_macs`` both come from such a recording, not from a table typed by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Tracer:
    """Collects ``steps`` as ``(name, shape)`` and ``macs`` as ``(name, multiply-accumulates)``."""

    steps: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    macs: list[tuple[str, int]] = field(default_factory=list)

    def record(self, name: str, a: np.ndarray) -> np.ndarray:
        """Note ``a``'s shape under ``name`` and return ``a`` unchanged."""
        self.steps.append((name, tuple(a.shape)))
        return a

    def matmul(self, name: str, a: np.ndarray, b: np.ndarray, *, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """Return ``a @ b`` and note its MACs: one per output element per summed index.

        ``shape`` is the shape to note instead of the product's own, for a matmul run on
        flattened tokens ``(B*N, d)`` whose result the caller reshapes back to ``(B, N, d)``.
        """
        out = a @ b  # (..., M, K) @ (..., K, P) -> (..., M, P)
        self.macs.append((name, int(out.size) * int(a.shape[-1])))
        self.steps.append((name, tuple(out.shape if shape is None else shape)))
        return out

    def total_macs(self, prefix: str = "") -> int:
        """Sum of recorded MACs whose step name starts with ``prefix``."""
        return sum(m for name, m in self.macs if name.startswith(prefix))


class _NoTracer:
    """Stand-in when nothing is recorded: same interface, no bookkeeping."""

    @staticmethod
    def record(name: str, a: np.ndarray) -> np.ndarray:
        return a

    @staticmethod
    def matmul(name: str, a: np.ndarray, b: np.ndarray, *, shape=None) -> np.ndarray:
        return a @ b  # (..., M, K) @ (..., K, P) -> (..., M, P)


NO_TRACER = _NoTracer()


def trace_shapes(x, params, n_heads, **kwargs) -> list[tuple[str, tuple[int, ...]]]:
    """Run ``multi_head_attention(x, params, n_heads, **kwargs)`` and list every step's shape.

    Returns
    -------
    list of ``(step name, shape)`` in execution order, from ``X`` to the output.
    """
    from .mha import multi_head_attention  # local import: mha imports this module

    tracer = Tracer()
    multi_head_attention(x, params, n_heads, tracer=tracer, **kwargs)
    return tracer.steps


def trace_config(config, n: int, *, batch: int | None = None, seed: int = 0, **kwargs) -> Tracer:
    """Trace one run of the layer described by ``config`` on random input of ``N = n`` tokens.

    ``batch=None`` gives an input of shape ``(N, d_model)``; an int gives ``(B, N, d_model)``.
    Returns the full ``Tracer`` (steps and MACs).
    """
    from .checks import check_positive_int
    from .config import MHAConfig, init_params
    from .mha import multi_head_attention

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
