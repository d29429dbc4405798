"""Attention without the N_q x N_k score matrix: tiles of keys and an online softmax (lesson 11).

``scaled_dot_product_attention`` holds every score at once: ``h * N^2`` numbers, 32 GiB at h=8,
N=32,768 in float32. Each output row is only a weighted average of V's rows, and a weighted
average can be accumulated one tile of keys at a time if each query row keeps three running
numbers (the running max and sum of Milakov & Gimelshein 2018, plus the running weighted sum of
the values of Rabe & Staats 2021 and Dao et al. 2022):

    m  the largest score so far                   (..., rows, 1)
    ell  the sum of exp(score - m) so far         (..., rows, 1)
    o  the sum of exp(score - m) * v so far       (..., rows, d_v)

A tile with scores ``s`` raises the max to ``m_new``; ``alpha = exp(m - m_new)`` rescales what was
summed against the old max, and at the end ``out = o / ell``. Queries are taken a block at a time,
so the largest array alive is one (block_q, block_k) tile of scores: this is the loop order of
FlashAttention-2 (Dao 2023; FlashAttention-1, Dao et al. 2022, put the key tiles outside). With
``causal``, tiles whose keys all come after the block's last query are skipped, not masked.

Two speed choices beyond the loop, both in lesson 11 and measured in benchmarks/README.md:
- a frozen max: once every row of a block has a max, each new tile is first added against that
  max as it stands (no max pass, no rescaling), which is exact as long as nothing overflows; a
  tile with a score far above it is computed again the full way (``add_with_frozen_max``);
- query blocks are independent, so worker threads share them (as GPU thread blocks do), each
  with its BLAS on one thread (``share``); the tiled layer's projections are shared out the same
  way (``shared_matmul``). One tile buffer per block is reused by every tile.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import ThreadpoolController

from .validate import check_tiled, checked

BLOCK_Q = 128  # query rows per block; a (8 heads, 128, 256) float32 tile of scores is 1 MiB,
BLOCK_K = 256  # keys per tile: small enough to stay in a core's cache (benchmarks/README.md)
# A frozen max holds while every row's sum of exp(score - m) over a tile is at most this: every
# weight then stays <= 2^16, far from float32's limit (3.4e38), with the same relative precision.
FROZEN_MAX_LIMIT = 2.0**16


@checked(check_tiled)
def tiled_attention(q, k, v, mask=None, scale=None, *, causal=False, block_q=BLOCK_Q,
                    block_k=BLOCK_K, threads=None, max_bytes=None):
    """``softmax(q k^T * scale) v``, tile by tile; equal to ``scaled_dot_product_attention``.

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional
        True = may attend. A query with no allowed key outputs zeros.
    scale : float, optional
        Multiplies the logits; default ``1 / sqrt(d_k)``.
    causal : bool, default False
        Query ``i`` may attend key ``j`` only when ``j <= i + (N_k - N_q)`` (``causal_mask``),
        ANDed with ``mask``; no N_q x N_k mask is ever built.
    block_q, block_k : int, default 128, 256
        Query rows per block and keys per tile.
    threads : int, optional
        Worker threads sharing the query blocks; default as many as numpy's BLAS would use (so
        ``OPENBLAS_NUM_THREADS=1`` means one).
    max_bytes : int, optional
        Refuse (``MemoryBudgetError``) a tile of scores larger than this; default 2 GiB.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v). No weights: they are never stored.
    """
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = np.empty((*lead, q.shape[-2], v.shape[-1]), q.dtype)  # (..., N_q, d_v)
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)  # 1/sqrt(d_k), a Python float

    def one_block(r0):  # query rows r0 : r0 + block_q
        out[..., r0:r0 + block_q, :] = query_block(q, k, v, mask, scale, causal, r0,
                                                   block_q, block_k)

    share(one_block, range(0, q.shape[-2], block_q), threads)
    return out


def query_block(q, k, v, mask, scale, causal, r0, block_q, block_k):  # -> (..., rows, d_v)
    """The online softmax for query rows ``r0 : r0 + block_q``, over tiles of ``block_k`` keys."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    q_blk = q[..., r0:r0 + block_q, :] * scale  # (..., rows, d_k), scaled once
    m = np.full((*q_blk.shape[:-1], 1), -np.inf, q.dtype)  # (..., rows, 1) running max
    ell = np.zeros_like(m)  # (..., rows, 1) running sum, lesson 11's l
    o = np.zeros((*q_blk.shape[:-1], v.shape[-1]), q.dtype)  # (..., rows, d_v) running weighted sum
    tile_buffer = np.empty((*q_blk.shape[:-1], min(block_k, n_k)), q.dtype)  # reused by every tile
    last_key = min(n_k, r0 + q_blk.shape[-2] + n_k - n_q) if causal else n_k  # causal: fewer keys
    for c0 in range(0, last_key, block_k):
        tile = slice(c0, c0 + block_k)
        s = scores(q_blk, k, mask, causal, n_k - n_q, r0, c0, tile_buffer)  # (..., rows, cols)
        if not np.isneginf(m).any():  # every row has a max: try this tile against it, frozen
            if add_with_frozen_max(s, m, ell, o, v[..., tile, :]):
                continue
            s = scores(q_blk, k, mask, causal, n_k - n_q, r0, c0, tile_buffer)  # outgrew m: again
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., rows, 1); -inf: no key yet
        shift = np.where(np.isfinite(m_new), m_new, 0)  # (..., rows, 1); avoids inf - inf
        alpha = np.exp(m - shift)  # (..., rows, 1), <= 1: rescales the old sums (0 at first)
        p = np.exp(np.subtract(s, shift, out=s), out=s)  # (..., rows, cols) in [0, 1], over s
        ell *= alpha  # (..., rows, 1): ell = alpha * ell + row sums of p
        ell += p.sum(axis=-1, keepdims=True)
        o *= alpha  # (..., rows, d_v): o = alpha * o + p @ v_tile
        o += p @ v[..., tile, :]  # (..., rows, cols) @ (..., cols, d_v)
        m = m_new
    return o / np.where(ell > 0, ell, 1)  # (..., rows, d_v); a row with no allowed key stays 0


def scores(q_blk, k, mask, causal, offset, r0, c0, tile_buffer):  # -> (..., rows, cols)
    """One tile's scores ``q_blk @ k_tile^T`` (q already scaled), written into ``tile_buffer``,
    with -inf where the mask or causality forbids a key."""
    k_tile = k[..., c0:c0 + tile_buffer.shape[-1], :]  # (..., cols, d_k)
    buffer = tile_buffer[..., :k_tile.shape[-2]]  # (..., rows, cols): the last tile may be narrower
    s = np.matmul(q_blk, np.swapaxes(k_tile, -1, -2), out=buffer)  # (..., rows, cols)
    allowed = tile_mask(mask, causal, offset, r0, s.shape[-2], c0, s.shape[-1])  # None: all allowed
    if allowed is not None:
        np.copyto(s, -np.inf, where=~allowed)  # not allowed -> -inf -> weight 0
    return s


def add_with_frozen_max(s, m, ell, o, v_tile) -> bool:
    """Lesson 11's frozen maximum: add the tile to ``ell`` and ``o`` against ``m`` as it stands (no
    max pass, no rescaling) and return True, if no row's sum of ``exp(s - m)`` tops
    ``FROZEN_MAX_LIMIT``. Else (a score far above ``m``, or a NaN) add nothing and return False,
    with ``s`` overwritten: the caller computes the tile's scores again."""
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is what the test below catches
        p = np.exp(np.subtract(s, m, out=s), out=s)  # (..., rows, cols), over the scores
        tile_sum = p.sum(axis=-1, keepdims=True)  # (..., rows, 1)
    if not (tile_sum <= FROZEN_MAX_LIMIT).all():
        return False
    ell += tile_sum
    o += p @ v_tile  # (..., rows, cols) @ (..., cols, d_v)
    return True


def tile_mask(mask, causal, offset, r0, rows, c0, cols):  # -> bool (..., rows, cols) or None
    """The allowed entries of the tile (query rows ``r0 : r0+rows``, keys ``c0 : c0+cols``), or None
    if all are allowed. The causal part (key ``j`` <= query ``i`` + ``offset``) is built for this
    tile only."""
    allowed = None
    if mask is not None:  # slice only the axes the mask really has (it may broadcast)
        r = slice(r0, r0 + rows) if mask.ndim >= 2 and mask.shape[-2] != 1 else slice(None)
        c = slice(c0, c0 + cols) if mask.shape[-1] != 1 else slice(None)
        allowed = mask[..., r, c]  # (..., rows or 1, cols or 1)
    if causal and c0 + cols - 1 > r0 + offset:  # some key of the tile comes after some query
        keys, queries = np.arange(c0, c0 + cols), np.arange(r0, r0 + rows)  # (cols,), (rows,)
        tri = keys[None, :] <= queries[:, None] + offset  # (rows, cols)
        allowed = tri if allowed is None else allowed & tri
    return allowed


def shared_matmul(x, w):  # (..., N, d_in) @ (d_in, d_out) -> (..., N, d_out)
    """``x @ w`` with the rows of ``x`` shared out to the worker threads, BLAS one thread each, as
    the query blocks are. The tiled layer does its projections here: after a multi-threaded
    product numpy's BLAS threads keep spinning for a while, and would take the cores from the
    workers of the attention that follows (benchmarks/README.md)."""
    rows = x.reshape(-1, x.shape[-1])  # (B*N, d_in)
    y = np.empty((rows.shape[0], w.shape[1]), np.result_type(x, w))  # (B*N, d_out)
    bounds = np.linspace(0, rows.shape[0], blas_threads() + 1).astype(int)  # a block per worker
    blocks = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    share(lambda r: np.matmul(rows[r], w, out=y[r]), blocks)
    return y.reshape(*x.shape[:-1], w.shape[1])  # (..., N, d_out)


def share(work, items, threads=None) -> None:
    """``work(item)`` for every item, on ``threads`` worker threads (default ``blas_threads()``),
    each with its BLAS held to one thread so two workers never both ask for every core. numpy
    releases the GIL in its matmuls and ufuncs, so the workers really run side by side."""
    items = list(items)
    n = min(len(items), blas_threads() if threads is None else threads)
    with _blas().limit(limits=1, user_api="blas"):
        if n == 1:
            for item in items:
                work(item)
        else:
            with ThreadPoolExecutor(n) as pool:
                list(pool.map(work, items))  # list(): re-raises a worker's error here


def blas_threads() -> int:
    """The threads numpy's BLAS would use now (``OPENBLAS_NUM_THREADS``, ``threadpool_limits``)."""
    counts = [lib.num_threads for lib in _blas().lib_controllers
              if lib.user_api == "blas" and "numpy" in lib.filepath]
    return max(1, min(counts)) if counts else os.cpu_count() or 1


@functools.cache
def _blas() -> ThreadpoolController:
    """threadpoolctl's handles on the loaded BLAS libraries, found once (a scan of every loaded
    library, about 1 ms; reading or setting a thread count through them takes microseconds)."""
    return ThreadpoolController()
