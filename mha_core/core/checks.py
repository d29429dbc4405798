"""Argument checks shared by every public function.

Each check raises ``TypeError`` (wrong kind of thing) or ``ValueError`` (right kind,
wrong value) with a message that names the argument, what was expected and what
was received. Nothing here computes attention.
"""

from __future__ import annotations

import numbers

import numpy as np

FLOAT_DTYPES = (np.float32, np.float64)

# The score tensor (..., h, N_q, N_k) is the one array in attention that grows as N^2.
# 2 GiB is far above anything a notebook or the dashboard needs and well below this
# machine's memory, so a typo such as N=1_000_000 fails fast instead of swapping.
DEFAULT_MAX_SCORE_BYTES = 2 * 2**30


class MemoryBudgetError(ValueError):
    """A call would allocate more than the allowed bytes for its score tensor."""


def check_positive_int(value, name: str) -> int:
    """Return ``value`` as an int if it is a positive integer (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {name}={value}")
    return int(value)


def check_float_array(x, name: str, ndims: tuple[int, ...] | None = None) -> np.ndarray:
    """Check that ``x`` is a float32/float64 ndarray of one of the allowed ranks, with no empty axis."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must have dtype float32 or float64, got {x.dtype}")
    if ndims is not None and x.ndim not in ndims:
        want = " or ".join(str(d) for d in ndims)
        raise ValueError(f"{name} must have {want} dimensions, got shape {x.shape} ({x.ndim} dims)")
    if 0 in x.shape:
        raise ValueError(f"{name} must not have an empty axis, got shape {x.shape}")
    return x


def check_mask(mask, name: str, target_shape: tuple[int, ...]) -> np.ndarray:
    """Check that ``mask`` is a bool array broadcastable to ``target_shape``."""
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"{name} must be a bool numpy.ndarray (True = may attend), got {type(mask).__name__}")
    if mask.dtype != np.bool_:
        raise TypeError(f"{name} must have dtype bool (True = may attend), got {mask.dtype}")
    try:
        np.broadcast_shapes(mask.shape, target_shape)
    except ValueError:
        raise ValueError(
            f"{name} of shape {mask.shape} does not broadcast to the scores' shape {target_shape}"
        ) from None
    if np.broadcast_shapes(mask.shape, target_shape) != tuple(target_shape):
        raise ValueError(
            f"{name} of shape {mask.shape} would enlarge the scores' shape {target_shape}"
        )
    return mask


def check_memory(shape: tuple[int, ...], dtype, max_bytes: int | None, what: str, hint: str = "") -> None:
    """Refuse, before allocating, an array of ``shape`` that would exceed ``max_bytes``.

    ``hint`` is appended to the message: another way to make the call fit."""
    limit = DEFAULT_MAX_SCORE_BYTES if max_bytes is None else check_positive_int(max_bytes, "max_bytes")
    need = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if need > limit:
        raise MemoryBudgetError(
            f"{what} of shape {tuple(shape)} ({np.dtype(dtype).name}) would need {need:,} bytes "
            f"({need / 2**30:.2f} GiB), over the limit of {limit:,} bytes ({limit / 2**30:.2f} GiB); "
            f"reduce B, h or N, or pass a larger max_bytes{hint}"
        )


def check_finite(x: np.ndarray, name: str) -> None:
    """Raise if ``x`` holds NaN or inf."""
    if not np.isfinite(x).all():
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise ValueError(f"{name} must be finite, but {bad:,} of its {x.size:,} values are NaN or inf")
