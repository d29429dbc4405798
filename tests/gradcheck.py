"""Finite-difference gradient checking, shared by test_backward and test_trainer."""

from __future__ import annotations

import numpy as np

# Fourth-order central differences in float64, (f(-2e) - 8 f(-e) + 8 f(+e) - f(+2e)) / 12e:
# truncation error ~ EPS^4 ~ 1e-12 and rounding ~ 1e-16 / EPS ~ 1e-13, so about 1e-12 in all.
# (The two-point formula's ~1e-10 is too coarse for a 1e-6 bar on small gradients.)
EPS = 1e-3
# The bar for "the gradient is right".
MAX_REL_ERR = 1e-6
# Relative error is measured against at least this gradient size: below it, a 1e-12 difference
# is already 1e-8 of the scale, and "relative" would only measure the difference formula's noise.
GRAD_FLOOR = 1e-4


def numeric_grad(f, arr: np.ndarray) -> np.ndarray:
    """d f / d arr by fourth-order central differences, perturbing ``arr`` in place one entry at a time."""
    grad = np.zeros_like(arr)
    for i in np.ndindex(arr.shape):
        old = arr[i]
        values = []
        for step in (-2, -1, 1, 2):
            arr[i] = old + step * EPS
            values.append(f())
        arr[i] = old
        grad[i] = (values[0] - 8 * values[1] + 8 * values[2] - values[3]) / (12 * EPS)
    return grad


def relative_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    """Largest difference over the larger of the two gradients' sizes (at least GRAD_FLOOR)."""
    scale = max(np.abs(numeric).max(), np.abs(analytic).max(), GRAD_FLOOR)
    return float(np.abs(analytic - numeric).max() / scale)
