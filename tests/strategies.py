"""Hypothesis strategies shared by the core tests (one place, as in minitorch).

Sizes stay small (d_model <= 24, N <= 6, B <= 3) so hundreds of examples run in seconds.
Arrays are drawn from a seeded NumPy generator rather than element by element: the shapes and
options are what hypothesis should explore, the values only need to be generic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from mha_core import MHAConfig, init_params, padding_mask

DTYPES = (np.float32, np.float64)

# Tolerances per dtype for two float paths that compute the same sums in a different order.
# float32 carries ~7 significant digits; a few roundings of O(1) values stay well under 1e-5.
TOL = {
    np.dtype(np.float32): {"rtol": 2e-5, "atol": 2e-5},
    np.dtype(np.float64): {"rtol": 1e-11, "atol": 1e-11},
}

MAX_HEADS = 6  # 6 has divisors 1, 2, 3, 6: MQA, two GQA groupings and plain MHA
MAX_D_K = 4
MAX_N = 6
MAX_B = 3


def tol(dtype) -> dict:
    """``assert_allclose`` keyword arguments for arrays of ``dtype``."""
    return TOL[np.dtype(dtype)]


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def configs(draw, gqa: bool = True, bias: bool | None = None, same_d_v: bool = False) -> MHAConfig:
    """An ``MHAConfig`` with ``h`` dividing ``d_model``, ``n_kv`` dividing ``h``, and a value width
    ``d_v`` drawn independently of ``d_k`` (unless ``same_d_v``: ``torch.nn.MultiheadAttention``
    has a single head width)."""
    h = draw(st.integers(1, MAX_HEADS))
    d_k = draw(st.integers(1, MAX_D_K))
    d_v = d_k if same_d_v else draw(st.integers(1, MAX_D_K))
    n_kv = draw(st.sampled_from(divisors(h))) if gqa else h
    n_kv_heads = draw(st.sampled_from([None, h])) if n_kv == h else n_kv
    with_bias = draw(st.booleans()) if bias is None else bias
    return MHAConfig(h * d_k, h, n_kv_heads=n_kv_heads, bias=with_bias, d_v=d_v)


batches = st.one_of(st.none(), st.integers(1, MAX_B))
lengths = st.integers(1, MAX_N)
dtypes = st.sampled_from(DTYPES)
seeds = st.integers(0, 2**32 - 1)


@dataclass
class Case:
    """One multi-head attention call: the arguments and the config they came from."""

    config: MHAConfig
    x: np.ndarray  # (N_q, d_model) or (B, N_q, d_model)
    params: dict
    x_kv: np.ndarray | None  # (.., N_k, d_model) for cross-attention
    mask: np.ndarray | None  # bool, broadcastable to (.., h, N_q, N_k)
    causal: bool

    @property
    def kwargs(self) -> dict:
        """Keyword arguments for ``multi_head_attention`` and friends."""
        return {
            "x_kv": self.x_kv,
            "mask": self.mask,
            "causal": self.causal,
            "n_kv_heads": self.config.n_kv_heads,
        }

    @property
    def n_q(self) -> int:
        return self.x.shape[-2]

    @property
    def n_k(self) -> int:
        return self.x.shape[-2] if self.x_kv is None else self.x_kv.shape[-2]

    @property
    def lead(self) -> tuple[int, ...]:
        return self.x.shape[:-2]


MASK_KINDS = ("none", "qk", "per_head", "full", "padding")


@st.composite
def mha_cases(
    draw, gqa: bool = True, cross: bool | None = None, masks: bool = True, same_d_v: bool = False,
    max_n: int = MAX_N,
) -> Case:
    """A random ``multi_head_attention`` call: config, batch, lengths, dtype, mask and causal."""
    config = draw(configs(gqa=gqa, same_d_v=same_d_v))
    batch = draw(batches)
    dtype = draw(dtypes)
    rng = np.random.default_rng(draw(seeds))
    lead = () if batch is None else (batch,)
    n_q = draw(st.integers(1, max_n))
    is_cross = draw(st.booleans()) if cross is None else cross
    n_k = draw(st.integers(1, max_n)) if is_cross else n_q
    x = rng.standard_normal((*lead, n_q, config.d_model)).astype(dtype)  # (B?, N_q, d_model)
    x_kv = rng.standard_normal((*lead, n_k, config.d_model)).astype(dtype) if is_cross else None
    params = init_params(config, rng, dtype=dtype)
    h = config.n_heads
    kinds = [k for k in MASK_KINDS if batch is not None or k != "padding"] if masks else ["none"]
    kind = draw(st.sampled_from(kinds))
    if kind == "qk":  # one (N_q, N_k) mask for every batch item and head
        mask = rng.random((n_q, n_k)) < 0.7
    elif kind == "per_head":  # (h, 1, N_k): a different key set per head
        mask = rng.random((h, 1, n_k)) < 0.7
    elif kind == "full":  # (B?, h, N_q, N_k): every entry independent
        mask = rng.random((*lead, h, n_q, n_k)) < 0.7
    elif kind == "padding":  # (B, 1, 1, N_k): item b keeps its first lengths[b] keys
        mask = padding_mask(rng.integers(1, n_k + 1, size=batch), n_k)
    else:
        mask = None
    causal = draw(st.booleans()) if masks else False
    return Case(config, x, params, x_kv, mask, causal)


@st.composite
def logits(draw, max_magnitude: float = 1e4) -> np.ndarray:
    """A float array of rank 1..3 with entries up to ``max_magnitude`` in absolute value."""
    dtype = draw(dtypes)
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    rng = np.random.default_rng(draw(seeds))
    scale = draw(st.sampled_from([1.0, 30.0, 1e4, max_magnitude]))
    return (scale * rng.uniform(-1, 1, size=shape)).astype(dtype)


@dataclass
class TiledCase:
    """One ``tiled_attention`` call: q, k, v with broadcasting leading axes, a mask, tiles."""

    q: np.ndarray  # (..., N_q, d_k)
    k: np.ndarray  # (..., N_k, d_k)
    v: np.ndarray  # (..., N_k, d_v)
    mask: np.ndarray | None  # bool, broadcastable to (..., N_q, N_k)
    causal: bool
    scale: float | None
    block_q: int
    block_k: int


@st.composite
def tiled_cases(draw) -> TiledCase:
    """Inputs for tiled attention: leading axes that broadcast as GQA's do ((g, 1) against (1, N)
    shapes), N_q != N_k (cross-attention, decoding), every mask shape, causal or not, and tile
    sizes from 1 to past the sequence length (so one tile, ragged last tiles and one-row tiles)."""
    rng = np.random.default_rng(draw(seeds))
    dtype = draw(dtypes)
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    # k and v may drop to size 1 on any leading axis and broadcast, like GQA's shared K/V head
    kv_lead = tuple(draw(st.sampled_from([n, 1])) for n in lead)
    n_q, n_k = draw(st.integers(1, 2 * MAX_N)), draw(st.integers(1, 2 * MAX_N))
    d_k, d_v = draw(st.integers(1, MAX_D_K)), draw(st.integers(1, MAX_D_K))
    q = rng.standard_normal((*lead, n_q, d_k)).astype(dtype)
    k = rng.standard_normal((*kv_lead, n_k, d_k)).astype(dtype)
    v = rng.standard_normal((*kv_lead, n_k, d_v)).astype(dtype)
    kind = draw(st.sampled_from(["none", "qk", "keys", "full", "sparse"]))
    if kind == "qk":
        mask = rng.random((n_q, n_k)) < 0.7  # (N_q, N_k)
    elif kind == "keys":
        mask = rng.random((*lead, 1, n_k)) < 0.7  # (..., 1, N_k): padding-like
    elif kind == "full":
        mask = rng.random((*lead, n_q, n_k)) < 0.7  # (..., N_q, N_k)
    elif kind == "sparse":
        mask = rng.random((*lead, n_q, n_k)) < 0.15  # many rows with no allowed key at all
    else:
        mask = None
    scale = draw(st.one_of(st.none(), st.floats(0.05, 4.0)))
    block_q = draw(st.integers(1, n_q + 2))
    block_k = draw(st.integers(1, n_k + 2))
    return TiledCase(q, k, v, mask, draw(st.booleans()), scale, block_q, block_k)


__all__ = [
    "DTYPES",
    "Case",
    "TiledCase",
    "batches",
    "configs",
    "dtypes",
    "tiled_cases",
    "lengths",
    "logits",
    "mha_cases",
    "seeds",
    "tol",
]
