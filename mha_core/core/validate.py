"""Checking arguments at the door, so that the maths behind it can trust them.

Every public function of the core is decorated with ``@checked(check_...)``: a call first runs
the check, which raises ``TypeError`` (the wrong kind of thing) or ``ValueError`` (the right kind,
a wrong value) naming the argument, what was expected and what came; then the maths runs. The
maths itself is the function's body, and ``f.unchecked`` is that body alone: the core's own
functions call each other through ``.unchecked`` once the outermost call has checked everything.
Nothing here computes attention.
"""

from __future__ import annotations

import functools
import numbers

import numpy as np

FLOAT_DTYPES = (np.float32, np.float64)
WEIGHT_NAMES = ("W_Q", "W_K", "W_V", "W_O")  # Q = X @ W_Q, ..., out = concat @ W_O
BIAS_NAMES = ("b_Q", "b_K", "b_V", "b_O")  # optional biases, one per weight
RANKS = dict.fromkeys(WEIGHT_NAMES, (2,)) | dict.fromkeys(BIAS_NAMES, (1,))  # ndims of each array

# The score tensor (..., h, N_q, N_k) is the one array of attention that grows as N^2. 2 GiB is far
# above what a lesson or the dashboard builds, so a typo such as N=1_000_000 fails before it swaps.
DEFAULT_MAX_SCORE_BYTES = 2 * 2**30
TILED_HINT = "; or pass tiled=True: tiled_attention never builds the scores, its memory grows as N"


class MemoryBudgetError(ValueError):
    """A call would allocate more than the allowed bytes."""


def checked(check, after=None):
    """Decorate a maths function ``fn``: a call runs ``check(*args, **kwargs)``, then ``fn``, then
    ``after(result, *args, **kwargs)`` if given. ``wrapper.unchecked`` is ``fn`` itself."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            check(*args, **kwargs)
            return after(fn(*args, **kwargs), *args, **kwargs) if after else fn(*args, **kwargs)

        wrapper.unchecked = fn
        return wrapper

    return decorate


# -- the pieces every check is made of ---------------------------------------------------------


def check_positive_int(value, name: str) -> int:
    """Return ``value`` as an int if it is a positive integer (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        wrong_type = isinstance(value, bool) or not isinstance(value, numbers.Integral)
        got = f"{type(value).__name__} {value!r}" if wrong_type else f"{name}={value}"
        raise (TypeError if wrong_type else ValueError)(f"{name} must be a positive int, got {got}")
    return int(value)


def check_float_array(x, name: str, ndims: tuple[int, ...] | None = None, dtype=None) -> None:
    """Check that ``x`` is a float32/float64 ndarray (of ``dtype``, if given) of one of the ranks
    ``ndims``, with no empty axis. One test when all is well; the reason only when it is not."""
    if not (isinstance(x, np.ndarray) and x.dtype in FLOAT_DTYPES and 0 not in x.shape
            and (dtype is None or x.dtype == dtype) and (ndims is None or x.ndim in ndims)):
        raise _array_error(x, name, ndims, dtype)


def _array_error(x, name: str, ndims, dtype) -> Exception:
    """What is wrong with ``x``, for ``check_float_array``."""
    if not isinstance(x, np.ndarray):
        return TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        return TypeError(f"{name} must have dtype float32 or float64, got {x.dtype}")
    if ndims is not None and x.ndim not in ndims:
        want = " or ".join(str(d) for d in ndims)
        return ValueError(f"{name} must have {want} dimensions, "
                          f"got shape {x.shape} ({x.ndim} dims)")
    if 0 in x.shape:
        return ValueError(f"{name} must not have an empty axis, got shape {x.shape}")
    return TypeError(f"{name} has dtype {x.dtype} but x has {dtype}; "
                     f"use init_params(..., dtype=np.{dtype}) or x.astype(np.{x.dtype})")


def check_bool(value, name: str) -> None:
    """Raise unless ``value`` is a bool (numpy's included)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")


def check_mask(mask, name: str, target_shape: tuple[int, ...]) -> np.ndarray:
    """``mask`` must be a bool array that broadcasts to ``target_shape`` without enlarging it."""
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"{name} must be a bool numpy.ndarray (True = may attend), "
                        f"got {type(mask).__name__}")
    if mask.dtype != np.bool_:
        raise TypeError(f"{name} must have dtype bool (True = may attend), got {mask.dtype}")
    try:
        shape = np.broadcast_shapes(mask.shape, target_shape)
    except ValueError:
        raise ValueError(f"{name} of shape {mask.shape} does not broadcast "
                         f"to the scores' shape {target_shape}") from None
    if shape != tuple(target_shape):
        raise ValueError(f"{name} of shape {mask.shape} would enlarge "
                         f"the scores' shape {target_shape}")
    return mask


def check_memory(shape: tuple[int, ...], dtype, budget, what: str, hint: str = "") -> None:
    """Refuse, before allocating, an array of ``shape`` that would exceed ``budget`` bytes, the
    caller's ``max_bytes`` (None: ``DEFAULT_MAX_SCORE_BYTES``). ``hint`` ends the message:
    another way to fit."""
    limit = DEFAULT_MAX_SCORE_BYTES if budget is None else check_positive_int(budget, "max_bytes")
    need = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    if need > limit:
        raise MemoryBudgetError(
            f"{what} of shape {tuple(shape)} ({np.dtype(dtype).name}) would need {need:,} bytes "
            f"({need / 2**30:.2f} GiB), over the limit of {limit:,} bytes "
            f"({limit / 2**30:.2f} GiB); reduce B, h or N, or pass a larger max_bytes{hint}"
        )


def check_finite(x: np.ndarray, name: str) -> None:
    """Raise if ``x`` holds NaN or inf."""
    if not np.isfinite(x).all():
        bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
        raise ValueError(f"{name} must be finite, "
                         f"but {bad:,} of its {x.size:,} values are NaN or inf")


# -- attention of one head (or many, batched) --------------------------------------------------


def check_attention(q, k, v, mask=None, scale=None, *, max_bytes=None) -> None:
    """The arguments of ``scaled_dot_product_attention`` (see there)."""
    for name, a in (("q", q), ("k", k), ("v", v)):
        check_float_array(a, name)
        if a.ndim < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (..., N, d), "
                             f"got shape {a.shape}")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same d_k, got q {q.shape} and k {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same N_k, got k {k.shape} and v {v.shape}")
    try:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(f"the leading axes of q {q.shape}, k {k.shape} and v {v.shape} "
                         f"do not broadcast") from None
    scores = (*lead, q.shape[-2], k.shape[-2])  # (..., N_q, N_k)
    if mask is not None:
        check_mask(mask, "mask", scores)
    if scale is not None:
        check_scale(scale)
    check_memory(scores, q.dtype, max_bytes, "the attention scores")


def check_scale(scale) -> None:
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"scale must be a float, got {type(scale).__name__} {scale!r}")
    if not np.isfinite(scale):
        raise ValueError(f"scale must be finite, got scale={scale}")


def check_softmax(x, axis=-1, mask=None, *, out=None) -> None:
    check_float_array(x, "x")
    if out is not None and not (isinstance(out, np.ndarray) and out.shape == x.shape
                                and out.dtype == x.dtype):
        raise ValueError(f"out must be an ndarray of x's shape {x.shape} and dtype {x.dtype}, "
                         f"got {out!r:.60}")
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int, got {type(axis).__name__}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of range for x with {x.ndim} dimensions")
    if mask is not None:
        check_mask(mask, "mask", x.shape)


def check_tiled(q, k, v, mask=None, scale=None, *, causal=False, block_q=128, block_k=256,
                threads=None, max_bytes=None) -> None:
    """The arguments of ``tiled_attention`` (see there)."""
    check_attention(q, k, v, mask, scale, max_bytes=2**62)  # the scores are never built, a tile is
    check_bool(causal, "causal")
    check_positive_int(block_q, "block_q")
    check_positive_int(block_k, "block_k")
    if threads is not None:
        check_positive_int(threads, "threads")
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    check_memory((*lead, min(block_q, q.shape[-2]), min(block_k, k.shape[-2])), q.dtype, max_bytes,
                 "one tile of attention scores")


# -- heads ---------------------------------------------------------------------------------------


def check_split(x, n_heads) -> None:
    check_array_rank(x, "x", 2, "(..., N, h*d)")
    h = check_positive_int(n_heads, "n_heads")
    if x.shape[-1] % h:
        raise ValueError(f"n_heads={h} does not divide the last axis of x (width {x.shape[-1]})")


def check_merge(x) -> None:
    check_array_rank(x, "x", 3, "(..., h, N, d)")


def check_array_rank(x, name: str, min_ndim: int, shape: str) -> None:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions {shape}, "
                         f"got shape {x.shape}")
    if 0 in x.shape:
        raise ValueError(f"{name} must not have an empty axis, got shape {x.shape}")


def check_head_index(i, d) -> None:
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
        raise TypeError(f"i must be a head index (an int >= 0), got {type(i).__name__} {i!r}")
    if i < 0:
        raise ValueError(f"i must be a head index >= 0, got i={i}")
    check_positive_int(d, "d")


# -- masks and positions -----------------------------------------------------------------------


def check_causal(n_q, n_k=None) -> None:
    check_positive_int(n_q, "n_q")
    if n_k is not None:
        check_positive_int(n_k, "n_k")


def check_padding(lengths, n_k) -> None:
    check_positive_int(n_k, "n_k")
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise TypeError(f"lengths must be a 1-D sequence of ints, "
                        f"got {lengths.dtype} of shape {lengths.shape}")
    if lengths.size == 0 or (lengths < 1).any() or (lengths > n_k).any():
        raise ValueError(f"lengths must each be in [1, n_k={n_k}], got {lengths.tolist()}")


def check_angles(positions, d_k, base=None) -> None:
    check_rope(10_000.0 if base is None else base, d_k)  # None: the default base
    positions = np.asarray(positions)
    if positions.ndim != 1 or not np.issubdtype(positions.dtype, np.integer):
        raise ValueError(f"positions must be a 1-D int array, "
                         f"got dtype {positions.dtype} and shape {positions.shape}")


def check_apply(x, positions=None, base=None) -> None:
    check_float_array(x, "x")
    if x.ndim < 2:
        raise ValueError(f"x must have shape (..., N, d_k), got shape {x.shape}")
    if positions is not None and np.shape(positions) != (x.shape[-2],):
        raise ValueError(f"positions must have shape (N,) = ({x.shape[-2]},), "
                         f"got {np.shape(positions)}")
    check_angles(np.arange(x.shape[-2]) if positions is None else positions, x.shape[-1], base)


# -- the multi-head layer ----------------------------------------------------------------------


def check_layer(x, params, n_heads, *, x_kv=None, mask=None, causal=False, n_kv_heads=None,
                head_mask=None, rope_base=None, tiled=False, return_weights=False,
                max_bytes=None) -> None:
    """The arguments of ``multi_head_attention`` (see there for each one)."""
    check_float_array(x, "x", ndims=(2, 3))
    h = check_positive_int(n_heads, "n_heads")
    n_kv = h if n_kv_heads is None else check_positive_int(n_kv_heads, "n_kv_heads")
    x_kv = x if x_kv is None else check_x_kv(x_kv, x)
    if not all(isinstance(flag, (bool, np.bool_)) for flag in (causal, tiled, return_weights)):
        for name, flag in dict(causal=causal, tiled=tiled, return_weights=return_weights).items():
            check_bool(flag, name)  # raises for the first flag that is not a bool
    d_k = check_params(params, x, x_kv, h, n_kv)
    scores = (*x.shape[:-2], h, x.shape[-2], x_kv.shape[-2])  # (..., h, N_q, N_k)
    if mask is not None:
        check_mask(mask, "mask", scores)
    if head_mask is not None:
        check_head_mask(head_mask, h)
    if rope_base is not None:
        check_rope(rope_base, d_k)
    if not tiled:  # the tiled path never holds all the scores, only a tile of them
        check_memory(scores, x.dtype, max_bytes, "the attention scores", hint=TILED_HINT)
    elif return_weights:
        raise ValueError("tiled=True keeps no attention weights: "
                         "pass return_weights=False, or tiled=False")
    elif max_bytes is not None:
        check_positive_int(max_bytes, "max_bytes")


def check_x_kv(x_kv, x: np.ndarray) -> np.ndarray:
    check_float_array(x_kv, "x_kv", ndims=(x.ndim,))
    if x_kv.shape[:-2] != x.shape[:-2]:
        raise ValueError(f"x_kv must have the same batch size as x, got {x_kv.shape} and {x.shape}")
    if x_kv.dtype != x.dtype:
        raise TypeError(f"x_kv must have the same dtype as x ({x.dtype}), got {x_kv.dtype}")
    return x_kv


def check_params(params, x: np.ndarray, x_kv: np.ndarray, h: int, n_kv: int) -> int:
    """Check the weights' names, dtypes and shapes against ``x``, ``x_kv``, ``h`` and ``n_kv``;
    return d_k. One test of every shape when all is well; the reason only when it is not."""
    if not isinstance(params, dict) or any(name not in params for name in WEIGHT_NAMES):
        raise _missing_error(params)
    for name in (n for n in RANKS if n in params):
        check_float_array(params[name], f"params['{name}']", ndims=RANKS[name], dtype=x.dtype)
    d_k, d_v = params["W_Q"].shape[1] // h, params["W_V"].shape[1] // n_kv  # one head's widths
    # the shape each weight must have; x.shape[-1] is d_model, x_kv.shape[-1] is d_kv
    want = {"W_Q": (x.shape[-1], h * d_k), "W_K": (x_kv.shape[-1], n_kv * d_k),
            "W_V": (x_kv.shape[-1], n_kv * d_v), "W_O": (h * d_v, x.shape[-1])}
    want |= {"b" + name[1:]: (shape[1],) for name, shape in want.items()}  # a bias per column
    if h % n_kv or any(params[name].shape != want[name] for name in want if name in params):
        raise _shape_error(params, want, x.shape[-1], x_kv.shape[-1], h, n_kv)
    return d_k


def _missing_error(params) -> Exception:
    if not isinstance(params, dict):
        return TypeError(f"params must be a dict of arrays (see init_params), "
                         f"got {type(params).__name__}")
    missing = [name for name in WEIGHT_NAMES if name not in params]
    return ValueError(f"params is missing {missing}; "
                      f"expected keys {list(WEIGHT_NAMES)} (+ optional biases)")


def _shape_error(params, want: dict, d_model: int, d_kv: int, h: int, n_kv: int) -> Exception:
    """Which weight has the wrong shape, and why, for ``check_params``."""
    (rows_q, width_q), (rows_v, width_v) = params["W_Q"].shape, params["W_V"].shape
    if h % n_kv:
        return ValueError(f"n_kv_heads={n_kv} does not divide n_heads={h}")
    if rows_q != d_model:
        return ValueError(f"params['W_Q'] has shape {params['W_Q'].shape}; "
                          f"its rows must equal x's d_model={d_model}")
    if width_q % h:
        return ValueError(f"n_heads={h} does not divide params['W_Q'].shape[1]={width_q} (= h*d_k)")
    if params["W_K"].shape != want["W_K"]:
        return ValueError(f"params['W_K'] has shape {params['W_K'].shape}, "
                          f"expected (d_model, n_kv*d_k) = {want['W_K']} "
                          f"for n_kv_heads={n_kv}, d_k={width_q // h}")
    if rows_v != d_kv or width_v % n_kv:
        return ValueError(f"params['W_V'] has shape {params['W_V'].shape}, "
                          f"expected ({d_kv}, n_kv*d_v) with n_kv={n_kv}")
    name = next(n for n, shape in want.items() if n in params and params[n].shape != shape)
    return ValueError(f"params['{name}'] has shape {params[name].shape}, expected {want[name]} "
                      f"(n_kv_heads={n_kv}, d_k={width_q // h}, d_v={width_v // n_kv})")


def check_head_mask(head_mask, h: int) -> None:
    head_mask = np.asarray(head_mask)
    if head_mask.shape != (h,):
        raise ValueError(f"head_mask must have shape (h,) = ({h},), got {head_mask.shape}")
    if not (head_mask.dtype == bool or np.issubdtype(head_mask.dtype, np.number)):
        raise TypeError(f"head_mask must be bool or numeric, got {head_mask.dtype}")
    check_finite(head_mask.astype(float), "head_mask")


def check_rope(base, d_k) -> float:
    """``base`` as a float if RoPE can use it with width ``d_k``: a number > 1 and an even d_k."""
    if isinstance(d_k, bool) or not isinstance(d_k, (int, np.integer)) or d_k < 2 or d_k % 2:
        raise ValueError(f"RoPE rotates pairs of dimensions: d_k must be a positive even int, "
                         f"got d_k={d_k!r}")
    if isinstance(base, bool) or not isinstance(base, (int, float, np.integer, np.floating)):
        raise TypeError(f"the RoPE base must be a number, got {type(base).__name__} {base!r}")
    if not (np.isfinite(base) and base > 1):
        raise ValueError(f"the RoPE base must be a finite number > 1, got {base}")
    return float(base)


def check_forward(x, params, n_heads, *, x_kv=None, mask=None, causal=False, n_kv_heads=None,
                  head_mask=None, rope_base=None, max_bytes=None) -> None:
    """The arguments of the layer's views that build the weights (``mha_forward``,
    ``head_outputs``, ``head_contributions``): those of ``multi_head_attention`` but ``tiled`` and
    ``return_weights``."""
    check_layer(x, params, n_heads, x_kv=x_kv, mask=mask, causal=causal, n_kv_heads=n_kv_heads,
                head_mask=head_mask, rope_base=rope_base, max_bytes=max_bytes)


# -- decoding with a KV cache --------------------------------------------------------------------


def check_kv_cache_init(params, n_heads, max_tokens, *, n_kv_heads=None, batch=None,
                        max_bytes=None) -> None:
    check_positive_int(max_tokens, "max_tokens")
    W_Q = params.get("W_Q") if isinstance(params, dict) else None
    if not isinstance(W_Q, np.ndarray) or W_Q.ndim != 2:
        raise TypeError("params must be a dict of arrays with a 2-D 'W_Q' (see init_params)")
    check_layer(np.zeros((1, W_Q.shape[0]), W_Q.dtype), params, n_heads, n_kv_heads=n_kv_heads)
    lead = () if batch is None else (check_positive_int(batch, "batch"),)
    n_kv = n_kv_heads or n_heads
    width = (params["W_K"].shape[1] + params["W_V"].shape[1]) // n_kv  # d_k + d_v
    check_memory((*lead, n_kv, max_tokens, width), W_Q.dtype, max_bytes,
                 "the KV cache (K and V side by side)")


def check_cache(cache, x: np.ndarray, params, n_heads, n_kv_heads, n_new: int) -> None:
    """``cache`` fits the layer and ``x`` (..., N, d_model), with room for ``n_new`` tokens."""
    if not (isinstance(getattr(cache, "K", None), np.ndarray) and hasattr(cache, "length")):
        raise TypeError(f"cache must be a KVCache (see init_kv_cache), got {type(cache).__name__}")
    n_kv = n_kv_heads or n_heads
    want = (*x.shape[:-2], n_kv, cache.K.shape[-2], params["W_K"].shape[1] // n_kv)
    if cache.K.shape != want or cache.K.dtype != x.dtype:
        raise ValueError(f"cache.K has shape {cache.K.shape} ({cache.K.dtype}), expected {want} "
                         f"({x.dtype}) for n_kv_heads={n_kv}, d_k={want[-1]} and this input")
    if cache.length + n_new > cache.K.shape[-2]:
        raise ValueError(f"the cache is full: {cache.length} + {n_new} tokens > max_tokens="
                         f"{cache.K.shape[-2]}; allocate a larger one with init_kv_cache")


def check_prefill(x, params, n_heads, cache, *, n_kv_heads=None, rope_base=None) -> None:
    # tiled=True: prefilling builds no scores, so no score budget applies
    check_layer(x, params, n_heads, n_kv_heads=n_kv_heads, rope_base=rope_base, tiled=True)
    check_cache(cache, x, params, n_heads, n_kv_heads, x.shape[-2])
    if cache.length:
        raise ValueError(f"prefill needs an empty cache, got one holding {cache.length} tokens")


def check_decode_step(x_t, params, n_heads, cache, *, n_kv_heads=None, rope_base=None,
                      return_weights=False) -> None:
    check_float_array(x_t, "x_t", ndims=(1, 2))
    check_layer(x_t[..., None, :], params, n_heads, n_kv_heads=n_kv_heads, rope_base=rope_base)
    check_bool(return_weights, "return_weights")
    check_cache(cache, x_t[..., None, :], params, n_heads, n_kv_heads, 1)


def check_decode(x, params, n_heads, *, n_kv_heads=None, rope_base=None) -> None:
    # tiled=True: decoding never builds the (N, N) scores, so no score budget applies
    check_layer(x, params, n_heads, n_kv_heads=n_kv_heads, rope_base=rope_base, tiled=True)


def finite_output(out, x, params, *args, x_kv=None, **kwargs):
    """``after`` of the layer: return ``out`` if it is finite; else name the input that was not."""
    if np.isfinite(out[0] if isinstance(out, tuple) else out).all():
        return out
    check_finite(x, "x")
    if x_kv is not None:
        check_finite(x_kv, "x_kv")
    for name, a in params.items():
        check_finite(a, f"params['{name}']")
    raise ValueError("the output overflowed to inf/NaN although every input is finite; "
                     "inputs are too large for the dtype")
