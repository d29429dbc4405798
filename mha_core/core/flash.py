"""Attention without the whole N_q x N_k score matrix at once: in blocks of query rows, or tiled.

``scaled_dot_product_attention`` computes ``softmax(Q K^T / sqrt(d_k)) V`` with the whole score
matrix in memory: ``h * N^2`` numbers, 16 GiB at h=8, N=32,768 in float32. This module computes
the same numbers a piece at a time, in two steps of increasing cleverness.

**Blocks of query rows** (``blocked_attention``). Each query row's softmax needs only that row's
scores, so the formula can run on a block of query rows at a time: scores, mask, softmax and
``weights @ V`` for rows ``r0:r1``, then the next block. Each block is still in the CPU's cache
when the softmax and the second matmul read it. The weights are still written out in full, so
this is the path when they are asked for.

**Tiles with an online softmax** (``flash_attention``). Each output row is only a weighted
average of V's rows, and a weighted average can be accumulated one group of keys at a time if we
remember three things per query row (Milakov & Gimelshein 2018):

    m  the largest score seen so far                  (..., rows, 1)
    l  the sum of exp(score - m) seen so far           (..., rows, 1)
    o  the sum of exp(score - m) * v seen so far       (..., rows, d_v)

A new tile of keys with scores ``s`` (..., rows, cols) updates them as

    m_new = max(m, max_j s_j)
    alpha = exp(m - m_new)                    # <= 1: rescales what was summed against the old max
    p     = exp(s - m_new)                    # (..., rows, cols), every entry in [0, 1]
    l     = alpha * l + sum_j p_j
    o     = alpha * o + p @ v_tile

and at the end ``out = o / l``. The result is exactly the softmax-weighted sum, in any tile order,
and the largest array alive is one tile of scores. Queries are tiled too, so the running
statistics also stay small: this is the loop of FlashAttention (Dao et al. 2022); Rabe & Staats
(2021) showed the same O(N) memory for attention by chunking queries and keys.

**A stale max** (FlashAttention-4 rescales only when the max has moved far enough to matter).
``m`` need not be the true running max: any value works as long as no ``exp(score - m)``
overflows, and an old max cannot make a row vanish (its own score gave exp(0) = 1). So after a
row's first tile, each new tile is tried against ``m`` as it stands: subtract, exp and row sums,
but no max pass and no rescaling of ``l`` and ``o``. If every row's sum over the tile is at most
``STALE_MAX_LIMIT`` (so every ``exp(score - m) <= 2^16``, far from float32's overflow), the tile
is added as it is. Otherwise (some row's sum above 2^16, which a score more than ln 2^16 = 11.1
above ``m`` always gives, or a NaN) the whole tile is redone the full way above, which moves ``m``.
The shortcut starts once every row of the query block has a max.

Extra memory: the output (..., N_q, d_v) and one tile (..., block_q, block_k) of scores per
worker thread. Never N_q x N_k.

Two more choices made for speed (benchmarks/RESULTS_long_context.md):

- Causal tiles above the diagonal (keys after every query of the tile) are skipped, not masked,
  so causal attention does about half the work.
- Query blocks are independent, so worker threads share them (as GPU thread blocks do in
  FlashAttention), each with its BLAS kept to one thread: the exp runs on every core, and a
  machine busy with other work does not stall a multi-threaded BLAS call on every tile.
"""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import ThreadpoolController

from .attention import check_attention_args
from .checks import check_memory, check_positive_int
from .softmax import softmax_

# Tile sizes. One tile of scores for the 8 heads numpy processes at once, 128 x 256 float32, is
# 1 MiB (128 KiB per head): the max, subtract, exp and sum passes and the P V matmul re-read it
# while it is still in the core's L2 cache (512 KiB here) or close to it. Measured at one thread,
# interleaved, in CPU time, on a busy machine (load average 3-12): against the earlier 256 x 512
# tiles, 2-18% less time at N=2048 and 4096 without a mask, and 15-31% less causal, where smaller
# tiles also follow the diagonal more closely (fewer entries above it computed and masked).
# 128 x 128 was slower again without a mask: more tiles, more Python per tile.
BLOCK_Q = 128
BLOCK_K = 256

# A tile is added against the running max as it stands (no rescale) when each of its rows' sums
# of exp(score - m) is at most this: every weight then stays <= 2^16, far below float32's 3.4e38,
# and float32 keeps the same relative precision at any scale.
STALE_MAX_LIMIT = 2.0**16

# Blocks of query rows: scores of at most this many bytes per block. A block this size stays in
# the last-level cache from the Q K^T matmul through the softmax's passes to the weighted sum.
SCORE_BLOCK_BYTES = 16 * 2**20
# ... but never more blocks than this: every block costs B*h small BLAS calls per matmul, and on
# a busy machine each multi-threaded call can wait for a free core (benchmarks/RESULTS.md).
MAX_SCORE_BLOCKS = 8


def blocked_attention(q, k, v, mask=None, scale=None, *, max_bytes=None) -> tuple[np.ndarray, np.ndarray]:
    """``scaled_dot_product_attention`` run on blocks of query rows; the same outputs and weights.

    Parameters and returns as ``scaled_dot_product_attention`` (the weights are still built in
    full: ``max_bytes`` limits them).
    """
    lead, scale = check_attention_args(q, k, v, mask, scale)
    check_memory((*lead, q.shape[-2], k.shape[-2]), q.dtype, max_bytes, "the attention weights")
    return _blocked(q, k, v, mask, scale)


def _blocked(q, k, v, mask, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """``blocked_attention`` on arguments already checked. Each block's scores are computed
    straight into its rows of the (..., N_q, N_k) weights, and turned into weights there."""
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n_q, n_k = q.shape[-2], k.shape[-2]
    out = np.empty((*lead, n_q, v.shape[-1]), dtype=q.dtype)  # (..., N_q, d_v)
    weights = np.empty((*lead, n_q, n_k), dtype=q.dtype)  # (..., N_q, N_k)
    rows_by_size = SCORE_BLOCK_BYTES // (int(np.prod(lead, dtype=np.int64)) * n_k * q.itemsize)
    rows_by_count = -(-n_q // MAX_SCORE_BLOCKS)  # ceil(N_q / MAX_SCORE_BLOCKS)
    rows = min(n_q, max(1, rows_by_size, rows_by_count))  # query rows per block
    q = q * q.dtype.type(scale)  # (..., N_q, d_k)
    k_t = np.swapaxes(k, -1, -2)  # (..., d_k, N_k), a view
    per_row_mask = mask is not None and mask.ndim >= 2 and mask.shape[-2] != 1
    for r0 in range(0, n_q, rows):
        blk = slice(r0, r0 + rows)  # a block of query rows (the last may be shorter)
        scores = weights[..., blk, :]  # (..., rows, N_k), a view into the result
        np.matmul(q[..., blk, :], k_t, out=scores)  # (..., rows, d_k) @ (..., d_k, N_k)
        if mask is not None:
            np.copyto(scores, -np.inf, where=~(mask[..., blk, :] if per_row_mask else mask))  # -> weight 0
        softmax_(scores, axis=-1)  # (..., rows, N_k), in place
        np.matmul(scores, v, out=out[..., blk, :])  # (..., rows, N_k) @ (..., N_k, d_v) -> (..., rows, d_v)
    return out, weights


def flash_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    scale: float | None = None,
    *,
    causal: bool = False,
    block_q: int = BLOCK_Q,
    block_k: int = BLOCK_K,
    threads: int | None = None,
    max_bytes: int | None = None,
) -> np.ndarray:
    """``softmax(q k^T * scale) v`` computed tile by tile; equal to ``scaled_dot_product_attention``.

    Parameters
    ----------
    q : ndarray of shape (..., N_q, d_k)
    k : ndarray of shape (..., N_k, d_k)
    v : ndarray of shape (..., N_k, d_v)
    mask : bool ndarray broadcastable to (..., N_q, N_k), optional
        True = may attend. A query row with no allowed key outputs zeros.
    scale : float, optional
        Multiplies the logits; default ``1 / sqrt(d_k)``.
    causal : bool, default False
        Query ``i`` may attend key ``j`` only when ``j <= i + (N_k - N_q)`` (see ``causal_mask``),
        ANDed with ``mask``. Tiles wholly above the diagonal are skipped, and no N_q x N_k mask
        is ever built.
    block_q : int, default 128
        Query rows per tile (``BLOCK_Q``).
    block_k : int, default 256
        Keys per tile (``BLOCK_K``).
    threads : int, optional
        Worker threads sharing the query blocks; default as many as numpy's BLAS would use
        (so ``OPENBLAS_NUM_THREADS=1`` means one).
    max_bytes : int, optional
        Refuse (``MemoryBudgetError``) a tile of scores larger than this; default 2 GiB.

    Returns
    -------
    out : ndarray of shape (..., N_q, d_v)
        No weights: they are never stored. Use ``scaled_dot_product_attention`` to see them.
    """
    lead, scale = check_attention_args(q, k, v, mask, scale)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
    block_q = check_positive_int(block_q, "block_q")
    block_k = check_positive_int(block_k, "block_k")
    threads = None if threads is None else check_positive_int(threads, "threads")
    tile = (*lead, min(block_q, q.shape[-2]), min(block_k, k.shape[-2]))  # (..., block_q, block_k)
    check_memory(tile, q.dtype, max_bytes, "one tile of attention scores")
    return _flash(q, k, v, mask, scale, causal=bool(causal), block_q=block_q, block_k=block_k, threads=threads)


def _flash(
    q, k, v, mask, scale: float, *, causal: bool, block_q: int = BLOCK_Q, block_k: int = BLOCK_K,
    threads: int | None = None,
):
    """``flash_attention`` on arguments already checked.

    Query blocks are independent (each has its own m, l and o), so ``threads`` workers share
    them out (``_share``), as FlashAttention gives each query block its own thread block on a GPU.
    """
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    n_q, d_v = q.shape[-2], v.shape[-1]
    out = np.empty((*lead, n_q, d_v), dtype=q.dtype)  # (..., N_q, d_v)
    starts = list(range(0, n_q, block_q))
    n_workers = min(blas_threads() if threads is None else threads, len(starts))

    def work(my_starts: list[int]) -> None:
        s_buf = np.empty((*lead, min(block_q, n_q), min(block_k, k.shape[-2])), dtype=q.dtype)  # one tile, reused
        for r0 in my_starts:
            r1 = min(r0 + block_q, n_q)
            out[..., r0:r1, :] = _rows(q, k, v, mask, scale, causal, r0, r1, block_k, s_buf)  # (..., rows, d_v)

    _share(work, [starts[i::n_workers] for i in range(n_workers)])
    return out


def _shared_matmul(x: np.ndarray, w: np.ndarray, threads: int | None = None) -> np.ndarray:
    """``x @ w``, (M, d_in) @ (d_in, d_out) -> (M, d_out), its rows shared by worker threads as
    ``_flash`` shares query blocks: the tiled layer's projections.

    For a multi-threaded call OpenBLAS wakes threads of its own, and once the call returns they
    keep spinning for a while (0.1-0.2 s here) and take a core from the next thing that wants
    one. Before the tiled attention that is its workers: measured at N=512, 25 ms right after a
    two-thread matmul against 15 ms after a pause. Doing the projections on the same workers,
    BLAS one thread each, never wakes OpenBLAS's threads (benchmarks/RESULTS_long_context.md).
    """
    n_rows = x.shape[0]
    n_workers = max(1, min(blas_threads() if threads is None else threads, n_rows))
    y = np.empty((n_rows, w.shape[1]), dtype=np.result_type(x, w))  # (M, d_out)
    bounds = np.linspace(0, n_rows, n_workers + 1).astype(int)  # n_workers nearly equal blocks of rows
    _share(lambda rows: np.matmul(x[rows], w, out=y[rows]),  # (rows, d_in) @ (d_in, d_out) -> (rows, d_out)
           [slice(r0, r1) for r0, r1 in zip(bounds[:-1], bounds[1:], strict=True)])
    return y


def _share(fn, parts: list) -> None:
    """``fn(part)`` for every part, one worker thread per part, each with its BLAS held to one
    thread so that two workers do not each ask for every core (with one part: in this thread).
    numpy releases the GIL inside its matmuls and ufuncs, so the workers really run in parallel."""
    with _blas_controller().limit(limits=1, user_api="blas"):
        if len(parts) == 1:
            fn(parts[0])
        else:
            with ThreadPoolExecutor(len(parts)) as pool:
                list(pool.map(fn, parts))  # re-raises errors


def _rows(q, k, v, mask, scale: float, causal: bool, r0: int, r1: int, block_k: int, s_buf) -> np.ndarray:
    """Attention output of query rows r0:r1 (..., rows, d_v): the online-softmax loop over key tiles.

    ``s_buf`` holds one tile of scores, (..., block_q, block_k).
    """
    n_q, n_k, rows = q.shape[-2], k.shape[-2], r1 - r0
    offset = n_k - n_q  # causal: query i sees keys j <= i + offset
    lead = s_buf.shape[:-2]
    q_blk = q[..., r0:r1, :] * q.dtype.type(scale)  # (..., rows, d_k)
    m = np.full((*lead, rows, 1), -np.inf, dtype=q.dtype)  # (..., rows, 1) running max
    row_sum = np.zeros((*lead, rows, 1), dtype=q.dtype)  # (..., rows, 1) running sum l
    o = np.zeros((*lead, rows, v.shape[-1]), dtype=q.dtype)  # (..., rows, d_v) running weighted sum
    every_row_has_max = False  # until then every tile goes the full way
    # causal: the block's last row sees keys up to r1 - 1 + offset; the tiles after it are skipped
    k_end = min(n_k, r1 + offset) if causal else n_k
    for c0 in range(0, max(k_end, 0), block_k):
        c1 = min(c0 + block_k, n_k)
        s = _tile_scores(q_blk, k, mask, causal, offset, r0, r1, c0, c1, s_buf)  # (..., rows, cols)
        if every_row_has_max:  # try the tile against the max as it stands: no max pass, no rescale
            with np.errstate(over="ignore", invalid="ignore"):  # an overflow is caught just below
                s -= m  # (..., rows, cols)
                p = np.exp(s, out=s)  # (..., rows, cols)
                tile_sum = p.sum(axis=-1, keepdims=True)  # (..., rows, 1)
            if (tile_sum <= STALE_MAX_LIMIT).all():
                row_sum += tile_sum
                o += p @ v[..., c0:c1, :]  # (..., rows, cols) @ (..., cols, d_v)
                continue
            s = _tile_scores(q_blk, k, mask, causal, offset, r0, r1, c0, c1, s_buf)  # a score outgrew m: redo
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., rows, 1), -inf: no key yet
        shift = np.where(np.isneginf(m_new), 0, m_new)  # (..., rows, 1); finite, avoids inf - inf
        s -= shift  # (..., rows, cols), every entry <= 0
        p = np.exp(s, out=s)  # (..., rows, cols), in [0, 1]
        alpha = np.exp(m - shift)  # (..., rows, 1), <= 1; 0 on a row's first allowed tile (m = -inf)
        row_sum *= alpha  # (..., rows, 1): l rescaled to the new max ...
        row_sum += p.sum(axis=-1, keepdims=True)  # ... plus this tile's terms
        o *= alpha  # (..., rows, d_v): o rescaled to the new max ...
        o += p @ v[..., c0:c1, :]  # ... plus (..., rows, cols) @ (..., cols, d_v)
        m = m_new
        every_row_has_max = not np.isneginf(m).any()
    # out = o / l; a row with no allowed key has l = 0 and o = 0 and gets zeros, not NaN
    return o * np.divide(1, row_sum, out=np.zeros_like(row_sum), where=row_sum > 0)  # (..., rows, d_v)


def _tile_scores(q_blk, k, mask, causal: bool, offset: int, r0: int, r1: int, c0: int, c1: int, s_buf) -> np.ndarray:
    """The scaled scores of the tile (rows r0:r1, keys c0:c1), written into ``s_buf``:
    (..., rows, cols), -inf where a key is not allowed."""
    s = s_buf[..., : r1 - r0, : c1 - c0]  # (..., rows, cols)
    np.matmul(q_blk, np.swapaxes(k[..., c0:c1, :], -1, -2), out=s)  # (..., rows, d_k) @ (..., d_k, cols)
    allowed = _tile_mask(mask, causal, offset, r0, r1, c0, c1)  # (..., rows, cols) or None
    if allowed is not None:
        np.copyto(s, -np.inf, where=~allowed)  # not allowed -> -inf -> p exactly 0
    return s


def blas_threads() -> int:
    """The threads numpy's BLAS would use now (``OPENBLAS_NUM_THREADS``, ``threadpool_limits``):
    the tiled path runs that many workers, so a one-thread setting means one thread."""
    counts = [lib.num_threads for lib in _blas_controller().lib_controllers
              if lib.user_api == "blas" and "numpy" in lib.filepath]  # read from the library, now
    return max(1, min(counts)) if counts else os.cpu_count() or 1


@functools.cache
def _blas_controller() -> ThreadpoolController:
    """threadpoolctl's handles on the loaded BLAS libraries, found once. Finding them (a scan of
    every loaded library) took about 1 ms per call, twice per tiled call; reading or setting a
    thread count through a handle takes microseconds (benchmarks/profile_tiled.py)."""
    return ThreadpoolController()


def _tile_mask(mask, causal: bool, offset: int, r0: int, r1: int, c0: int, c1: int):
    """The allowed entries of the tile (rows r0:r1, keys c0:c1), or None if all are allowed.

    Returns a bool array broadcastable to (..., rows, cols); the causal part is built for this
    tile only, from two ``arange``s.
    """
    allowed = None
    if mask is not None:
        rows = slice(r0, r1) if mask.ndim >= 2 and mask.shape[-2] != 1 else slice(None)
        cols = slice(c0, c1) if mask.shape[-1] != 1 else slice(None)
        allowed = mask[..., rows, cols]  # (..., rows or 1, cols or 1)
    if causal and c1 - 1 > r0 + offset:  # some key of the tile comes after some query
        tri = np.arange(c0, c1)[None, :] <= np.arange(r0, r1)[:, None] + offset  # (rows, cols)
        allowed = tri if allowed is None else allowed & tri
    return allowed
