"""The layer's hyper-parameters (``MHAConfig``) and its weights (``init_params``).

Weight convention (the texts'): ``Q = X @ W_Q`` with ``W_Q`` of shape ``(d_model, h*d_k)``.
Head ``i`` owns columns ``i*d_k:(i+1)*d_k`` of ``W_Q`` and rows ``i*d_v:(i+1)*d_v`` of ``W_O``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .validate import FLOAT_DTYPES, check_positive_int


@dataclass(frozen=True)
class MHAConfig:
    """Shape of one multi-head attention layer.

    Parameters
    ----------
    d_model : int
        Width of the residual stream.
    n_heads : int
        Number of query heads ``h``; must divide ``d_model``.
    n_kv_heads : int or None, default None
        Number of key/value heads ``n_kv`` (GQA); ``None`` means ``n_kv = h`` (plain MHA),
        ``1`` means MQA. Must divide ``n_heads``.
    bias : bool, default False
        Whether the four projections carry biases.
    d_v : int or None, default None
        Per-head width of the values (and of each head's output); ``None`` means ``d_v = d_k``.
        ``W_V`` is then ``(d_model, n_kv*d_v)`` and ``W_O`` is ``(h*d_v, d_model)``.
    """

    d_model: int
    n_heads: int
    n_kv_heads: int | None = None
    bias: bool = False
    d_v: int | None = None

    def __post_init__(self):
        check_positive_int(self.d_model, "d_model")
        check_positive_int(self.n_heads, "n_heads")
        if self.d_model % self.n_heads:
            raise ValueError(f"n_heads={self.n_heads} does not divide d_model={self.d_model}")
        if self.n_kv_heads is not None:
            check_positive_int(self.n_kv_heads, "n_kv_heads")
            if self.n_heads % self.n_kv_heads:
                raise ValueError(
                    f"n_kv_heads={self.n_kv_heads} does not divide n_heads={self.n_heads}"
                )
        if not isinstance(self.bias, bool):
            raise TypeError(f"bias must be a bool, got {type(self.bias).__name__} {self.bias!r}")
        if self.d_v is None:
            object.__setattr__(self, "d_v", self.d_k)  # frozen dataclass: fill in the default once
        else:
            check_positive_int(self.d_v, "d_v")

    @property
    def h(self) -> int:
        """Alias of ``n_heads``, the texts' symbol."""
        return self.n_heads

    @property
    def d_k(self) -> int:
        """Per-head width of queries and keys, ``d_k = d_model / h``."""
        return self.d_model // self.n_heads

    @property
    def n_kv(self) -> int:
        """Number of key/value heads (``h`` unless GQA/MQA)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def group_size(self) -> int:
        """Query heads per key/value head, ``h // n_kv``."""
        return self.n_heads // self.n_kv

    @property
    def kind(self) -> str:
        """``"MHA"`` (a key/value head per query head), ``"MQA"`` (one key/value head for all) or
        ``"GQA"`` (groups of query heads in between)."""
        return "MHA" if self.n_kv == self.n_heads else ("MQA" if self.n_kv == 1 else "GQA")


def as_rng(rng) -> np.random.Generator:
    """Return a ``np.random.Generator`` from ``None``, an int seed or a Generator."""
    if rng is None or isinstance(rng, np.random.Generator):
        return np.random.default_rng(rng)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if rng < 0:
            raise ValueError(f"rng must be a non-negative int seed, got rng={rng}")
        return np.random.default_rng(int(rng))
    raise TypeError(f"rng must be None, an int seed or a numpy.random.Generator, "
                    f"got {type(rng).__name__}")


def init_params(config: MHAConfig, rng=None, dtype=np.float32) -> dict[str, np.ndarray]:
    """Random weights for one layer, scaled so activations keep unit variance.

    Parameters
    ----------
    config : MHAConfig
    rng : None, int or numpy.random.Generator
        Seed or generator; the same seed gives the same weights.
    dtype : float32 or float64, default float32

    Returns
    -------
    dict with ``W_Q (d_model, h*d_k)``, ``W_K (d_model, n_kv*d_k)``, ``W_V (d_model, n_kv*d_v)``,
    ``W_O (h*d_v, d_model)``, and when ``config.bias`` also ``b_Q (h*d_k,)``, ``b_K (n_kv*d_k,)``,
    ``b_V (n_kv*d_v,)``, ``b_O (d_model,)``.
    """
    if not isinstance(config, MHAConfig):
        raise TypeError(f"config must be an MHAConfig, got {type(config).__name__}")
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from None
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {dtype}")
    gen = as_rng(rng)
    d_model, h, n_kv, d_k, d_v = config.d_model, config.n_heads, config.n_kv, config.d_k, config.d_v
    shapes = {
        "W_Q": (d_model, h * d_k),
        "W_K": (d_model, n_kv * d_k),
        "W_V": (d_model, n_kv * d_v),
        "W_O": (h * d_v, d_model),
    }
    # Xavier-style scale 1/sqrt(fan_in): keeps each projection's output variance near its input's.
    params = {
        name: (gen.standard_normal(shape) / np.sqrt(shape[0])).astype(dtype)
        for name, shape in shapes.items()
    }
    if config.bias:
        for name, shape in shapes.items():
            params["b" + name[1:]] = (0.02 * gen.standard_normal(shape[1])).astype(dtype)
    return params
