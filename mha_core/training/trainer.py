"""A tiny attention model and its trainer, in NumPy, using the hand-written backward pass.

The model (one attention layer, nothing else that mixes positions)::

    e      = tok_emb[x] + pos_emb                      (B, N, d_model)
    r      = e + multi_head_attention(e, causal=True)  (B, N, d_model)   residual stream
    logits = r @ W_out + b_out                         (B, N, 2, V)      linear readout

The readout is linear and factorised: ``logits[..., 0, :]`` scores the token ``a`` places back,
``logits[..., 1, :]`` the token ``b`` places back (a softmax over the ``V^2`` ordered pairs whose
logit is the sum of the two is the same model). Trained with cross-entropy (summed over the two
slots, averaged over the positions that have a target) and Adam. Everything is
a pure function of its arguments; ``train`` is deterministic for a given ``TrainConfig.seed``
(the same seed gives the same initial weights, the same batches and the same result).

Changing ``n_heads`` at a fixed ``d_model`` changes how the attention width is carved into
heads, not how many parameters there are: ``count_model_params`` is the same for every ``h``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from ..core.backward import mha_backward, mha_forward
from ..core.config import MHAConfig, as_rng, init_params
from ..core.validate import WEIGHT_NAMES, check_positive_int
from .tasks import IGNORE, OffsetPairTask

PARAM_NAMES = ("tok_emb", "pos_emb", *WEIGHT_NAMES, "W_out", "b_out")
Params = dict[str, np.ndarray]
# Adam's usual moment decay rates and its epsilon (Kingma & Ba, 2015); nothing here is tuned.
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8
# Embedding entries start with std EMB_STD / sqrt(d_model), so each embedding vector has norm ~1
# whatever d_model is (the scale a LayerNorm'd input would have).
EMB_STD = 1.0

Progress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of the tiny model.

    Parameters
    ----------
    n_heads : int
        ``h``; must divide ``d_model``.
    d_model : int, default 16
    """

    n_heads: int
    d_model: int = 16

    def __post_init__(self):
        MHAConfig(self.d_model, self.n_heads)  # validates d_model, n_heads and h | d_model


@dataclass(frozen=True)
class TrainConfig:
    """The training budget: identical for every ``h`` in a fair comparison.

    Parameters
    ----------
    steps : int, default 1500
        Adam updates; each sees a fresh batch (the task has unlimited data).
    batch : int, default 64
        ``B`` sequences per step.
    lr : float, default 3e-3
        Adam's learning rate.
    seed : int, default 0
        Seeds the initial weights and the stream of batches.
    """

    steps: int = 1500
    batch: int = 64
    lr: float = 3e-3
    seed: int = 0

    def __post_init__(self):
        check_positive_int(self.steps, "steps")
        check_positive_int(self.batch, "batch")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if not isinstance(self.lr, (int, float)) or not 0 < self.lr < 1:
            raise ValueError(f"lr must be a float in (0, 1), got {self.lr!r}")


@dataclass
class TrainResult:
    """What ``train`` returns: the weights and how the loss went."""

    params: dict[str, np.ndarray]
    model: ModelConfig
    train: TrainConfig
    losses: np.ndarray  # (steps,), the training loss of every step
    seconds: float
    meta: dict = field(default_factory=dict)


def _check_task(task) -> OffsetPairTask:
    if not isinstance(task, OffsetPairTask):
        raise TypeError(f"task must be an OffsetPairTask, got {type(task).__name__}")
    return task


def _check_params(params) -> Params:
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of arrays (see init_model), got {type(params).__name__}")
    missing = [k for k in PARAM_NAMES if k not in params]
    if missing:
        raise ValueError(f"params is missing {missing}; expected keys {list(PARAM_NAMES)}")
    return params


def _check_xy(x, y) -> None:
    if not isinstance(y, np.ndarray) or not np.issubdtype(y.dtype, np.integer):
        raise TypeError(f"y must be an int ndarray of answers, got {type(y).__name__}")
    if y.shape != x.shape:
        raise ValueError(f"y must have the shape of x {x.shape}, got {y.shape}")


def init_model(task: OffsetPairTask, model: ModelConfig, rng) -> dict[str, np.ndarray]:
    """Initial float64 weights.

    Returns
    -------
    dict with ``tok_emb (V, d_model)``, ``pos_emb (N, d_model)``, the attention weights
    ``W_Q, W_K, W_V (d_model, d_model)``, ``W_O (d_model, d_model)`` (from ``init_params``),
    ``W_out (d_model, 2*V)``, ``b_out (2*V,)``.
    """
    task = _check_task(task)
    if not isinstance(model, ModelConfig):
        raise TypeError(f"model must be a ModelConfig, got {type(model).__name__}")
    gen = as_rng(rng)
    d, V, N = model.d_model, task.vocab, task.n
    params = {
        "tok_emb": EMB_STD * gen.standard_normal((V, d)) / np.sqrt(d),
        "pos_emb": EMB_STD * gen.standard_normal((N, d)) / np.sqrt(d),
    }
    params.update(init_params(MHAConfig(d, model.n_heads), gen, np.float64))
    params["W_out"] = gen.standard_normal((d, 2 * V)) / np.sqrt(d)
    params["b_out"] = np.zeros(2 * V)
    return params


def count_model_params(task: OffsetPairTask, model: ModelConfig) -> dict[str, int]:
    """Parameters per array and ``total``; the attention part is ``4 * d_model^2`` for every ``h``."""
    task = _check_task(task)
    d, V, N = model.d_model, task.vocab, task.n
    counts = {
        "embeddings": V * d + N * d,
        "attention": 4 * d * d,  # W_Q, W_K, W_V, W_O: (d_model, h*d_k) with h*d_k = d_model
        "readout": d * 2 * V + 2 * V,
    }
    counts["total"] = sum(counts.values())
    return counts


def forward(
    params: dict[str, np.ndarray], x: np.ndarray, n_heads: int, head_mask: np.ndarray | None = None
) -> tuple[np.ndarray, dict]:
    """Logits for token sequences ``x``.

    Parameters
    ----------
    params : dict from ``init_model`` (or a trained one)
    x : int ndarray of shape (B, N)
    n_heads : int
    head_mask : array of shape (h,), optional
        0 removes a head (ablation), 1 keeps it.

    Returns
    -------
    logits : ndarray of shape (B, N, 2, V)
        Scores for the token ``a`` back (``[..., 0, :]``) and the token ``b`` back (``[..., 1, :]``).
    cache : dict for ``backward``; ``cache["mha"]["weights"]`` are the attention weights
        (B, h, N, N).
    """
    params = _check_params(params)
    if not isinstance(x, np.ndarray) or x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
        raise TypeError(f"x must be an int ndarray of shape (B, N), got {getattr(x, 'shape', type(x).__name__)}")
    N = x.shape[1]
    if N > params["pos_emb"].shape[0]:
        raise ValueError(f"x has N={N} positions but the model knows {params['pos_emb'].shape[0]}")
    e = params["tok_emb"][x] + params["pos_emb"][:N]  # (B, N, d_model)
    attn = {k: params[k] for k in WEIGHT_NAMES}
    a, mha_cache = mha_forward(e, attn, n_heads, causal=True, head_mask=head_mask)  # (B, N, d_model)
    r = e + a  # (B, N, d_model)
    logits = r @ params["W_out"] + params["b_out"]  # (B, N, d_model) @ (d_model, 2V) -> (B, N, 2V)
    logits = logits.reshape(*x.shape, 2, -1)  # (B, N, 2, V)
    return logits, {"x": x, "r": r, "mha": mha_cache}


def pair_targets(y: np.ndarray, vocab: int) -> np.ndarray:
    """Answers ``y = V * x_{t-a} + x_{t-b}`` (B, N) as the two slots' targets (B, N, 2)."""
    keep = y != IGNORE  # (B, N)
    slots = np.stack([y // vocab, y % vocab], axis=-1)  # (B, N, 2)
    return np.where(keep[..., None], slots, IGNORE)  # (B, N, 2)


def cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy over the entries with ``y != IGNORE``, and its gradient.

    Parameters
    ----------
    logits : ndarray of shape (..., V)
    y : int ndarray of shape (...), class indices or ``IGNORE``

    Returns
    -------
    loss : float
    dlogits : ndarray of shape (..., V)
    """
    keep = y != IGNORE  # (...)
    n = int(keep.sum())
    if n == 0:
        raise ValueError("y has no entry with a target (all are IGNORE)")
    z = logits - logits.max(-1, keepdims=True)  # (..., V), stable
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))  # (..., V)
    yk = np.where(keep, y, 0)[..., None]  # (..., 1), any valid index where ignored
    loss = -float(np.take_along_axis(logp, yk, -1)[..., 0][keep].sum()) / n
    dlogits = np.exp(logp)  # (..., V): the softmax
    np.put_along_axis(dlogits, yk, np.take_along_axis(dlogits, yk, -1) - 1, -1)  # softmax - onehot
    dlogits *= keep[..., None] / n  # ignored entries contribute nothing
    return loss, dlogits


def backward(dlogits: np.ndarray, params: Params, cache: dict) -> Params:
    """Gradients of the loss for every array in ``params``, given d loss / d logits (B, N, 2, V)."""
    x, r = cache["x"], cache["r"]  # (B, N), (B, N, d_model)
    d, two_v = params["W_out"].shape
    dlogits = dlogits.reshape(-1, two_v)  # (B*N, 2V)
    g = {}
    g["W_out"] = r.reshape(-1, d).T @ dlogits  # (d_model, B*N) @ (B*N, 2V)
    g["b_out"] = dlogits.sum(0)  # (2V,)
    dr = (dlogits @ params["W_out"].T).reshape(r.shape)  # (B*N, 2V) @ (2V, d_model) -> (B, N, d_model)
    ga = mha_backward(dr, cache["mha"])  # the residual: dr flows into the attention output ...
    de = dr + ga.pop("x")  # ... and straight into e; (B, N, d_model)
    g.update({k: ga[k] for k in WEIGHT_NAMES})
    g["pos_emb"] = np.zeros_like(params["pos_emb"])
    g["pos_emb"][: x.shape[1]] = de.sum(0)  # (N, d_model)
    g["tok_emb"] = np.zeros_like(params["tok_emb"])
    np.add.at(g["tok_emb"], x, de)  # scatter-add each position's gradient to its token's row
    return g


def loss_and_grads(params: Params, x: np.ndarray, y: np.ndarray, n_heads: int) -> tuple[float, dict[str, np.ndarray]]:
    """Cross-entropy on a batch (``x``, ``y`` of shape (B, N)) and its gradient for every parameter."""
    _check_xy(x, y)
    logits, cache = forward(params, x, n_heads)  # (B, N, 2, V)
    loss, dlogits = cross_entropy(logits, pair_targets(y, logits.shape[-1]))
    return loss, backward(dlogits, params, cache)


def accuracy(params: Params, x: np.ndarray, y: np.ndarray, n_heads: int, head_mask: np.ndarray | None = None) -> float:
    """Fraction of target positions (``y != IGNORE``) where both tokens of the pair are right.

    Parameters
    ----------
    params : dict of the model's weights
    x, y : int ndarrays of shape (B, N), tokens and answers (``OffsetPairTask.sample``)
    n_heads : int
    head_mask : array of shape (h,), optional; 0 removes a head
    """
    _check_xy(x, y)
    logits, _ = forward(params, x, n_heads, head_mask)  # (B, N, 2, V)
    keep = y != IGNORE  # (B, N)
    right = (logits.argmax(-1) == pair_targets(y, logits.shape[-1])).all(-1)  # (B, N)
    return float(right[keep].mean())


def slot_accuracy(params: Params, x: np.ndarray, y: np.ndarray, n_heads: int, head_mask: np.ndarray | None = None) -> tuple[float, float]:
    """Accuracy of each slot on its own: ``(token a back, token b back)``; arguments as ``accuracy``."""
    _check_xy(x, y)
    logits, _ = forward(params, x, n_heads, head_mask)  # (B, N, 2, V)
    keep = y != IGNORE  # (B, N)
    right = logits.argmax(-1) == pair_targets(y, logits.shape[-1])  # (B, N, 2)
    return float(right[keep][:, 0].mean()), float(right[keep][:, 1].mean())


def attention_by_offset(params: Params, x: np.ndarray, n_heads: int, min_query: int = 0) -> np.ndarray:
    """How much attention each head pays ``k`` positions back, for ``k = 0 .. N-1``.

    Parameters
    ----------
    params : dict of the model's weights
    x : int ndarray of shape (B, N)
    n_heads : int
    min_query : int, default 0
        Average only over queries ``t >= min_query`` (e.g. the first position with a target).

    Returns
    -------
    ndarray of shape (h, N): entry ``[i, k]`` is head ``i``'s weight on key ``t - k``, averaged
    over the batch and over the queries ``t >= max(k, min_query)``; ``NaN`` where no query has
    such a key.
    """
    _, cache = forward(params, x, n_heads)
    w = cache["mha"]["weights"].mean(0)  # (h, N, N), averaged over the batch
    h, n = w.shape[0], w.shape[-1]
    if isinstance(min_query, bool) or not isinstance(min_query, (int, np.integer)) or not 0 <= min_query < n:
        raise ValueError(f"min_query must be an int in [0, N={n}), got {min_query!r}")
    out = np.full((h, n), np.nan)
    for k in range(n):
        t = np.arange(max(k, min_query), n)  # queries that have a key k places back
        if t.size:
            out[:, k] = w[:, t, t - k].mean(-1)  # (h,)
    return out


def head_ablation(params: Params, x: np.ndarray, y: np.ndarray, n_heads: int) -> np.ndarray:
    """Accuracy with each head removed in turn (its output zeroed before ``W_O``).

    Returns
    -------
    ndarray of shape (h,): entry ``i`` is the pair accuracy without head ``i``.
    """
    h = check_positive_int(n_heads, "n_heads")
    return np.array([accuracy(params, x, y, h, head_mask=np.arange(h) != i) for i in range(h)])


def prune_curve(params: Params, x: np.ndarray, y: np.ndarray, n_heads: int) -> tuple[np.ndarray, np.ndarray]:
    """Accuracy after pruning the ``k`` least important heads, for ``k = 0 .. h``.

    A head's importance is the accuracy lost when it alone is removed (``head_ablation``);
    heads are pruned least important first (ties broken by head index).

    Returns
    -------
    order : int ndarray of shape (h,), the heads in pruning order
    acc : ndarray of shape (h + 1,), ``acc[k]`` with the first ``k`` heads of ``order`` removed
    """
    h = check_positive_int(n_heads, "n_heads")
    full = accuracy(params, x, y, h)
    drop = full - head_ablation(params, x, y, h)  # (h,), accuracy each head is worth on its own
    order = np.argsort(drop, kind="stable")  # least important first
    acc = [full]
    keep = np.ones(h)
    for i in order:
        keep[i] = 0.0
        acc.append(accuracy(params, x, y, h, head_mask=keep))
    return order, np.array(acc)


def adam_step(params: Params, grads: Params, state: dict, lr: float) -> None:
    """One Adam update, in place on ``params`` and ``state`` (``m``, ``v`` and step ``t``)."""
    b1, b2 = ADAM_BETAS
    state["t"] += 1
    t = state["t"]
    for k, g in grads.items():
        m = state["m"].setdefault(k, np.zeros_like(g))
        v = state["v"].setdefault(k, np.zeros_like(g))
        m *= b1
        m += (1 - b1) * g
        v *= b2
        v += (1 - b2) * g * g
        step = lr * np.sqrt(1 - b2**t) / (1 - b1**t)  # bias-corrected step size
        params[k] -= step * m / (np.sqrt(v) + ADAM_EPS)


def train(
    task: OffsetPairTask,
    model: ModelConfig,
    config: TrainConfig | None = None,
    progress: Progress | None = None,
) -> TrainResult:
    """Train a fresh model on ``task``.

    Parameters
    ----------
    task : OffsetPairTask
    model : ModelConfig
    config : TrainConfig, optional
        Default ``TrainConfig()``.
    progress : callable ``(step, steps, loss) -> None``, optional
        Called after every step; see ``text_progress`` and ``widget_progress``.

    Returns
    -------
    TrainResult
    """
    task = _check_task(task)
    config = TrainConfig() if config is None else config
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable (step, steps, loss), got {type(progress).__name__}")
    # Two independent streams from one seed: the weights, and the batches.
    init_seq, data_seq = np.random.SeedSequence(config.seed).spawn(2)
    params = init_model(task, model, np.random.default_rng(init_seq))
    data = np.random.default_rng(data_seq)
    losses, seconds = run_adam(params, lambda: loss_and_grads(params, *task.sample(data, config.batch), model.n_heads),
                               config.steps, config.lr, progress)
    return TrainResult(params, model, config, losses, seconds, {"task": asdict(task)})


def run_adam(params: Params, step_loss: Callable[[], tuple[float, Params]], steps: int, lr: float,
             progress: Progress | None = None) -> tuple[np.ndarray, float]:
    """``steps`` Adam updates of ``params`` in place; ``step_loss()`` draws a fresh batch and returns
    its loss and the gradients. Returns the losses (steps,) and the seconds it took."""
    state = {"t": 0, "m": {}, "v": {}}
    losses = np.empty(steps)
    start = time.perf_counter()
    for step in range(steps):
        loss, grads = step_loss()
        adam_step(params, grads, state, lr)
        losses[step] = loss
        if progress is not None:
            progress(step + 1, steps, loss)
    return losses, time.perf_counter() - start


def converged_step(losses: np.ndarray, threshold: float = 0.01, window: int = 20) -> int | None:
    """The first step at which the mean training loss over the last ``window`` steps is below
    ``threshold``, or ``None`` if it never is.

    Parameters
    ----------
    losses : ndarray of shape (steps,), e.g. ``TrainResult.losses``
    threshold : float, default 0.01
        A loss of 0.01 per token means the right token gets ~99% probability.
    window : int, default 20
        Steps averaged, so a single lucky batch does not count.

    Returns
    -------
    int (1-based step count) or None
    """
    losses = np.asarray(losses, dtype=float)
    if losses.ndim != 1:
        raise ValueError(f"losses must be 1-D (one loss per step), got shape {losses.shape}")
    window = check_positive_int(window, "window")
    if losses.size < window:
        return None
    means = np.convolve(losses, np.ones(window) / window, mode="valid")  # (steps - window + 1,)
    below = np.flatnonzero(means < threshold)
    return int(below[0]) + window if below.size else None


def text_progress(every: int = 500, print_fn: Callable[[str], None] = print) -> Progress:
    """A compact log: one line every ``every`` steps, ``step 500/1500  loss 1.234``."""
    every = check_positive_int(every, "every")

    def report(step: int, steps: int, loss: float) -> None:
        if step % every == 0 or step == steps:
            print_fn(f"step {step:>5,}/{steps:,}  loss {loss:.3f}")

    return report


def widget_progress(description: str = "training"):
    """A progress bar for notebooks: returns ``(widget, progress)``; display the widget, pass
    ``progress`` to ``train``. The bar and its label update every 1% of the steps."""
    import ipywidgets as widgets

    bar = widgets.IntProgress(value=0, min=0, max=1, description=description)
    label = widgets.Label("")
    box = widgets.HBox([bar, label])

    def report(step: int, steps: int, loss: float) -> None:
        if step == 1 or step % max(1, steps // 100) == 0 or step == steps:
            bar.max, bar.value = steps, step
            label.value = f"{step:,}/{steps:,}  loss {loss:.3f}"

    return box, report
