"""A toy task that needs two relationships at once: ``y_t = (x_{t-a}, x_{t-b})``.

The model reads a sequence of random tokens ``x`` from a vocabulary of ``V`` symbols. At every
position ``t >= max(a, b)`` it must name the ordered pair of tokens ``a`` and ``b`` places back.
Two things make this a test of "one view vs several":

* it needs *two* positions, neither of them the current one (which the residual stream gives
  for free), so a layer must gather two tokens from two different places at once;
* the answer is order-sensitive: the pair ``(p, q)`` is not ``(q, p)``. One softmax that
  attends to both positions returns a single blend ``w v(p) + (1 - w) v(q)``; a linear
  readout cannot recover both tokens *and* their order from such blends (see
  ``notebooks/08_why_several_heads``). Two heads can each fetch one token into their own
  subspace, and the readout reads each off its own slice.

The answer is encoded as one class index ``y = V * x_{t-a} + x_{t-b}`` in ``[0, V^2)``;
``split_pair`` turns it back into the two tokens.

Positions before ``max(a, b)`` have no target; they carry ``IGNORE`` and are left out of the loss
and the accuracy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.config import as_rng
from ..core.validate import check_positive_int

# Target value of a position the task leaves undefined (nothing to read that far back).
IGNORE = -1


@dataclass(frozen=True)
class OffsetPairTask:
    """``y_t = (x_{t-a}, x_{t-b})`` on uniformly random tokens, as the index ``V * x_{t-a} + x_{t-b}``.

    Parameters
    ----------
    vocab : int, default 8
        ``V``, the number of token symbols (and of answer classes).
    n : int, default 12
        ``N``, the sequence length.
    offsets : tuple of two ints, default (1, 3)
        ``(a, b)``, distinct, each in ``[1, N - 1]``: how far back the two tokens are.
    """

    vocab: int = 8
    n: int = 12  # N
    offsets: tuple[int, int] = (1, 3)

    def __post_init__(self):
        check_positive_int(self.vocab, "vocab")
        check_positive_int(self.n, "n")
        if self.vocab < 2:
            raise ValueError(f"vocab must be at least 2, got vocab={self.vocab}")
        if not isinstance(self.offsets, tuple) or len(self.offsets) != 2:
            raise TypeError(f"offsets must be a tuple of two ints (a, b), got {self.offsets!r}")
        a, b = (check_positive_int(o, "offsets[i]") for o in self.offsets)
        if a == b:
            raise ValueError(f"offsets must be two different distances, got a = b = {a}")
        if max(a, b) >= self.n:
            raise ValueError(f"offsets must be < n={self.n} (the sequence length), got {self.offsets}")

    @property
    def first_target(self) -> int:
        """The first position with a target, ``max(a, b)``."""
        return max(self.offsets)

    @property
    def n_targets(self) -> int:
        """Positions with a target per sequence, ``N - max(a, b)``."""
        return self.n - self.first_target

    def targets(self, x: np.ndarray) -> np.ndarray:
        """The answers for token sequences ``x``.

        Parameters
        ----------
        x : int ndarray of shape (..., N) with values in ``[0, V)``

        Returns
        -------
        y : int64 ndarray of shape (..., N); ``V * x_{t-a} + x_{t-b}`` in ``[0, V^2)``, and
            ``IGNORE`` before position ``max(a, b)``.
        """
        if not isinstance(x, np.ndarray) or not np.issubdtype(x.dtype, np.integer):
            raise TypeError(f"x must be an integer numpy.ndarray of tokens, got {type(x).__name__}")
        if x.ndim < 1 or x.shape[-1] != self.n:
            raise ValueError(f"x must have shape (..., N) with N = n = {self.n}, got {x.shape}")
        if x.size and (x.min() < 0 or x.max() >= self.vocab):
            raise ValueError(f"x must hold tokens in [0, vocab={self.vocab}), got range [{x.min()}, {x.max()}]")
        a, b = self.offsets
        t0 = self.first_target
        y = np.full(x.shape, IGNORE, dtype=np.int64)  # (..., N)
        y[..., t0:] = self.vocab * x[..., t0 - a : self.n - a] + x[..., t0 - b : self.n - b]
        return y

    def sample(self, rng, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """``batch`` random sequences and their answers.

        Parameters
        ----------
        rng : None, int seed or numpy.random.Generator
        batch : int
            ``B``.

        Returns
        -------
        x : int64 ndarray of shape (B, N), uniform tokens
        y : int64 ndarray of shape (B, N), ``IGNORE`` where there is no target
        """
        gen = as_rng(rng)
        b = check_positive_int(batch, "batch")
        x = gen.integers(0, self.vocab, size=(b, self.n))  # (B, N)
        return x, self.targets(x)

    def split_pair(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(x_{t-a}, x_{t-b})`` from answers ``y`` (any shape); ``IGNORE`` stays ``IGNORE`` in both."""
        y = np.asarray(y)
        if not np.issubdtype(y.dtype, np.integer):
            raise TypeError(f"y must hold integer answers, got dtype {y.dtype}")
        if ((y < IGNORE) | (y >= self.vocab**2)).any():
            raise ValueError(f"y must be in [0, V^2={self.vocab**2}) or IGNORE={IGNORE}")
        keep = y != IGNORE
        return np.where(keep, y // self.vocab, IGNORE), np.where(keep, y % self.vocab, IGNORE)

    def token_labels(self, x: np.ndarray) -> list[str]:
        """Labels for one sequence ``x`` of shape (N,): ``"t:token"``, e.g. ``"3:5"``."""
        if not isinstance(x, np.ndarray) or x.shape != (self.n,):
            raise ValueError(f"x must be one sequence of shape ({self.n},), got {getattr(x, 'shape', x)!r}")
        return [f"{t}:{int(tok)}" for t, tok in enumerate(x)]
