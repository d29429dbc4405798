"""Recording what a forward pass actually did: each step's shape and each matmul's MACs.

``multi_head_attention`` takes an optional ``tracer``. The shape ledger shown in the
notebooks and the dashboard (``ledger.trace_shapes``) and the MAC counts checked against
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

