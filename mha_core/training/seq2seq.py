"""A small encoder-decoder that learns to reverse digits, trained in NumPy with the hand-written
backward pass: cross-attention that has to find the aligned source position.

The task (``ReverseTask``): a source of ``L`` digits (``L`` from 1 to ``max_len``) is answered by
the same digits reversed, then ``EOS``. The source is left-padded, ``PAD ... PAD BOS d_1 ... d_L``,
so its last digit always sits at the last position ``P - 1``; the padding is masked out of every
attention that reads the source (``padding_mask`` mirrored: the pads are on the left). Output
token ``t`` is source digit ``L - 1 - t``, found at position ``P - 1 - t``; at ``t = L`` that
position holds ``BOS``, and the answer is ``EOS``. Reading the right token is an alignment: the
cross-attention map of output position against source position should be an anti-diagonal.

The model (one attention layer per part, residual adds, a linear readout; no norm, no FFN)::

    e      = src_emb[src] + src_pos                                 (B, P, d_model)
    memory = e + MHA_enc(e, mask=source)                            (B, P, d_model)  encoder
    d0     = tgt_emb[tgt_in] + tgt_pos                              (B, T, d_model)
    d1     = d0 + MHA_self(d0, causal=True)                         (B, T, d_model)  decoder
    d2     = d1 + MHA_cross(d1, x_kv=memory, mask=source)           (B, T, d_model)
    logits = d2 @ W_out + b_out                                     (B, T, V)

Generation (``greedy_decode``) computes the cross-attention's keys and values of the memory once
per source (``encoder_cache``: the encoder-side cache) and reuses them at every step
(``cross_attend``), while the decoder's own self-attention keeps a KV cache that grows by one
token per step (``mha_core.core.decode``). Everything is float64; ``train`` is deterministic for a
given seed. The shipped weights (``weights/reverse.npz``, ``weights/reverse.json``) come from
``scripts/train_seq2seq.py`` (``make weights``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ..core import (
    decode_step,
    init_kv_cache,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    split_heads,
)
from ..core.backward import mha_backward, mha_forward
from ..core.config import MHAConfig, as_rng, init_params
from ..core.mha import linear
from ..core.validate import WEIGHT_NAMES, check_positive_int
from .tasks import IGNORE
from .trainer import EMB_STD, cross_entropy, run_adam

DIGITS = 10
BOS, EOS, PAD = 10, 11, 12
VOCAB = 13
PARTS = ("enc", "self", "cross")  # the three attention layers' weight prefixes
WEIGHTS_DIR = Path(__file__).parent / "weights"
WEIGHTS_FILE, RECORD_FILE = WEIGHTS_DIR / "reverse.npz", WEIGHTS_DIR / "reverse.json"
HELD_OUT_MOD = 5  # a digit sequence whose hash is 0 mod 5 is never trained on: the held-out fifth


def _held_out(digits: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(B,) bool: True for the held-out sequences (a fixed fifth of all, by a hash of the digits)."""
    weights = 31 ** np.arange(digits.shape[1], dtype=np.int64)  # (L_max,)
    keep = np.arange(digits.shape[1]) < lengths[:, None]  # (B, L_max)
    code = ((digits + 1) * keep * weights).sum(1) + 7 * lengths  # (B,)
    return code % 97 % HELD_OUT_MOD == 0


@dataclass(frozen=True)
class ReverseTask:
    """Reverse ``L`` digits, ``L`` uniform in ``[min_len, max_len]``.

    Parameters
    ----------
    max_len : int, default 8
    min_len : int, default 1

    Sizes: source positions ``P = max_len + 1`` (BOS and the digits, left-padded), target positions
    ``T = max_len + 1`` (the reversed digits and EOS).
    """

    max_len: int = 8
    min_len: int = 1

    def __post_init__(self):
        check_positive_int(self.max_len, "max_len")
        check_positive_int(self.min_len, "min_len")
        if self.min_len > self.max_len:
            raise ValueError(f"min_len must be at most max_len={self.max_len}, got {self.min_len}")

    @property
    def n(self) -> int:
        """``P = T = max_len + 1``."""
        return self.max_len + 1

    def sample(self, rng, batch: int, split: str = "train") -> dict[str, np.ndarray]:
        """A batch of ``batch`` problems from the ``"train"`` or the ``"held_out"`` sequences.

        Returns
        -------
        dict with ``src (B, P)``, ``n_src (B,)`` (real source tokens, BOS included: L + 1),
        ``tgt_in (B, T)`` (``BOS`` then the answer, shifted: what the decoder reads),
        ``tgt_out (B, T)`` (the answer and ``EOS``, ``IGNORE`` after it), ``lengths (B,)`` (L).
        """
        check_positive_int(batch, "batch")
        if split not in ("train", "held_out"):
            raise ValueError(f"split must be 'train' or 'held_out', got {split!r}")
        gen = as_rng(rng)
        L_max, P = self.max_len, self.n
        digits, lengths = np.zeros((0, L_max), np.int64), np.zeros(0, np.int64)
        while len(lengths) < batch:  # rejection: keep only the sequences of the split
            d = gen.integers(0, DIGITS, (batch, L_max))  # (B, L_max)
            n = gen.integers(self.min_len, L_max + 1, batch)  # (B,)
            ok = _held_out(d, n) == (split == "held_out")
            digits, lengths = np.concatenate([digits, d[ok]]), np.concatenate([lengths, n[ok]])
        digits, lengths = digits[:batch], lengths[:batch]
        src = np.full((batch, P), PAD)  # (B, P)
        tgt_out = np.full((batch, P), IGNORE)  # (B, T)
        tgt_in = np.full((batch, P), PAD)  # (B, T)
        for b, (d, n) in enumerate(zip(digits, lengths, strict=True)):
            src[b, P - 1 - n:] = [BOS, *d[:n]]
            tgt_out[b, : n + 1] = [*d[:n][::-1], EOS]
            tgt_in[b, : n + 1] = [BOS, *d[:n][::-1]]
        return {"src": src, "n_src": lengths + 1, "tgt_in": tgt_in, "tgt_out": tgt_out, "lengths": lengths}


def source_mask(n_src: np.ndarray, P: int) -> np.ndarray:
    """(B, 1, 1, P) bool, True = may attend: the last ``n_src[b]`` positions (the pads are on the left).

    The core's ``padding_mask`` keeps the first ``n_src`` keys; mirrored, it keeps the last ones.
    """
    return padding_mask(np.asarray(n_src), P)[..., ::-1]  # (B, 1, 1, P)


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Sizes and training budget. ``n_heads`` must divide ``d_model``."""

    d_model: int = 32
    n_heads: int = 2
    steps: int = 800
    batch: int = 64
    lr: float = 3e-3
    seed: int = 0

    def __post_init__(self):
        MHAConfig(self.d_model, self.n_heads)  # validates d_model, n_heads and h | d_model
        check_positive_int(self.steps, "steps")
        check_positive_int(self.batch, "batch")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        if not isinstance(self.lr, (int, float)) or not 0 < self.lr < 1:
            raise ValueError(f"lr must be a float in (0, 1), got {self.lr!r}")


def init_seq2seq(task: ReverseTask, config: Seq2SeqConfig, rng) -> dict[str, np.ndarray]:
    """Initial float64 weights: ``src_emb, tgt_emb (V, d_model)``, ``src_pos, tgt_pos (P, d_model)``,
    ``{enc,self,cross}.W_Q`` etc. (each ``(d_model, d_model)``), ``W_out (d_model, V)``, ``b_out (V,)``."""
    gen = as_rng(rng)
    d, n = config.d_model, task.n
    params = {name: EMB_STD * gen.standard_normal(shape) / np.sqrt(d)
              for name, shape in (("src_emb", (VOCAB, d)), ("tgt_emb", (VOCAB, d)),
                                  ("src_pos", (n, d)), ("tgt_pos", (n, d)))}
    for part in PARTS:
        for k, v in init_params(MHAConfig(d, config.n_heads), gen, np.float64).items():
            params[f"{part}.{k}"] = v
    params["W_out"] = gen.standard_normal((d, VOCAB)) / np.sqrt(d)
    params["b_out"] = np.zeros(VOCAB)
    return params


def _layer(params, part: str) -> dict[str, np.ndarray]:
    return {k: params[f"{part}.{k}"] for k in WEIGHT_NAMES}


def _check_params(params) -> dict:
    if not isinstance(params, dict):
        raise TypeError(f"params must be a dict of arrays (see init_seq2seq), got {type(params).__name__}")
    need = ["src_emb", "tgt_emb", "src_pos", "tgt_pos", "W_out", "b_out",
            *(f"{p}.{k}" for p in PARTS for k in WEIGHT_NAMES)]
    missing = [k for k in need if k not in params]
    if missing:
        raise ValueError(f"params is missing {missing}")
    return params


def _check_tokens(a, name: str, n: int) -> np.ndarray:
    if not isinstance(a, np.ndarray) or a.ndim != 2 or not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"{name} must be an int ndarray of shape (B, {n}), got "
                        f"{getattr(a, 'shape', type(a).__name__)}")
    if a.shape[1] != n or a.min() < 0 or a.max() >= VOCAB:
        raise ValueError(f"{name} must have {n} columns of tokens in [0, {VOCAB}), got shape {a.shape}")
    return a


def _check_n_src(n_src, src: np.ndarray) -> np.ndarray:
    n_src = np.asarray(n_src)
    if n_src.shape != (src.shape[0],) or not np.issubdtype(n_src.dtype, np.integer) or (
            n_src.min() < 1 or n_src.max() > src.shape[1]):
        raise ValueError(f"n_src must be {src.shape[0]} ints in [1, {src.shape[1]}], got {n_src!r}")
    return n_src


def forward(params, src, n_src, tgt_in, n_heads: int) -> tuple[np.ndarray, dict]:
    """Teacher-forced logits.

    Parameters
    ----------
    params : dict from ``init_seq2seq`` (or ``load_reverse``)
    src : int ndarray of shape (B, P)
    n_src : int ndarray of shape (B,), real source tokens (left-padded)
    tgt_in : int ndarray of shape (B, T)
    n_heads : int

    Returns
    -------
    logits : ndarray of shape (B, T, V)
    saved : dict for ``backward``; ``saved["cross"]["weights"]`` is the cross-attention map
        (B, h, T, P).
    """
    p = _check_params(params)
    P, T = p["src_pos"].shape[0], p["tgt_pos"].shape[0]
    src, tgt_in = _check_tokens(src, "src", P), _check_tokens(tgt_in, "tgt_in", T)
    mask = source_mask(_check_n_src(n_src, src), P)  # (B, 1, 1, P)
    e = p["src_emb"][src] + p["src_pos"]  # (B, P, d_model)
    a_enc, s_enc = mha_forward(e, _layer(p, "enc"), n_heads, mask=mask)  # (B, P, d_model)
    memory = e + a_enc  # (B, P, d_model)
    d0 = p["tgt_emb"][tgt_in] + p["tgt_pos"]  # (B, T, d_model)
    a_self, s_self = mha_forward(d0, _layer(p, "self"), n_heads, causal=True)  # (B, T, d_model)
    d1 = d0 + a_self  # (B, T, d_model)
    a_cross, s_cross = mha_forward(d1, _layer(p, "cross"), n_heads, x_kv=memory, mask=mask)  # (B, T, d_model)
    d2 = d1 + a_cross  # (B, T, d_model)
    logits = d2 @ p["W_out"] + p["b_out"]  # (B, T, d_model) @ (d_model, V) -> (B, T, V)
    return logits, {"src": src, "tgt_in": tgt_in, "d2": d2, "enc": s_enc, "self": s_self, "cross": s_cross}


def backward(dlogits: np.ndarray, params: dict, saved: dict) -> dict[str, np.ndarray]:
    """Gradients of the loss for every array in ``params``, given d loss / d logits (B, T, V)."""
    p, d2 = params, saved["d2"]
    d = d2.shape[-1]
    g = {"W_out": d2.reshape(-1, d).T @ dlogits.reshape(-1, VOCAB),  # (d_model, B*T) @ (B*T, V)
         "b_out": dlogits.reshape(-1, VOCAB).sum(0)}  # (V,)
    dd2 = dlogits @ p["W_out"].T  # (B, T, V) @ (V, d_model) -> (B, T, d_model)
    gc = mha_backward(dd2, saved["cross"])  # cross: x is d1, x_kv the memory
    dd1 = dd2 + gc.pop("x")  # the residual, and the queries' path; (B, T, d_model)
    dmemory = gc.pop("x_kv")  # (B, P, d_model)
    gs = mha_backward(dd1, saved["self"])
    dd0 = dd1 + gs.pop("x")  # (B, T, d_model)
    ge = mha_backward(dmemory, saved["enc"])
    de = dmemory + ge.pop("x")  # (B, P, d_model)
    for part, grads in (("cross", gc), ("self", gs), ("enc", ge)):
        g.update({f"{part}.{k}": grads[k] for k in WEIGHT_NAMES})
    g["src_pos"], g["tgt_pos"] = de.sum(0), dd0.sum(0)  # (P, d_model), (T, d_model)
    g["src_emb"], g["tgt_emb"] = np.zeros_like(p["src_emb"]), np.zeros_like(p["tgt_emb"])
    np.add.at(g["src_emb"], saved["src"], de)  # each position's gradient to its token's row
    np.add.at(g["tgt_emb"], saved["tgt_in"], dd0)
    return g


def loss_and_grads(params, batch: dict, n_heads: int) -> tuple[float, dict[str, np.ndarray]]:
    """Cross-entropy over the answer tokens of ``batch`` (``ReverseTask.sample``) and its gradient."""
    logits, saved = forward(params, batch["src"], batch["n_src"], batch["tgt_in"], n_heads)  # (B, T, V)
    loss, dlogits = cross_entropy(logits, batch["tgt_out"])
    return loss, backward(dlogits, params, saved)


@dataclass(frozen=True)
class CrossCache:
    """The encoder-side cache: the cross-attention's keys and values of one batch of sources,
    computed once and read at every decoding step.

    K : ndarray of shape (B, h, P, d_k)
    V : ndarray of shape (B, h, P, d_v)
    mask : bool ndarray of shape (B, 1, 1, P), True = a real source token
    """

    K: np.ndarray
    V: np.ndarray
    mask: np.ndarray


def encode(params, src, n_src, n_heads: int) -> np.ndarray:
    """The encoder's output, the memory that cross-attention reads: (B, P, d_model).

    Parameters
    ----------
    params : dict of the model's weights
    src : int ndarray of shape (B, P), left-padded sources
    n_src : int ndarray of shape (B,)
    n_heads : int
    """
    p = _check_params(params)
    P = p["src_pos"].shape[0]
    src = _check_tokens(src, "src", P)
    mask = source_mask(_check_n_src(n_src, src), P)  # (B, 1, 1, P)
    e = p["src_emb"][src] + p["src_pos"]  # (B, P, d_model)
    return e + mha_forward(e, _layer(p, "enc"), n_heads, mask=mask)[0]  # (B, P, d_model)


def encoder_cache(params, src, n_src, n_heads: int) -> CrossCache:
    """Run the encoder once and project its memory to the cross-attention's K and V (the
    arguments are ``encode``'s)."""
    memory = encode(params, src, n_src, n_heads)  # (B, P, d_model)
    mask = source_mask(np.asarray(n_src), memory.shape[1])  # (B, 1, 1, P)
    cross = _layer(params, "cross")
    K = split_heads(linear(memory, cross, "K"), n_heads)  # (B, P, h*d_k) -> (B, h, P, d_k)
    V = split_heads(linear(memory, cross, "V"), n_heads)  # (B, h, P, d_v)
    return CrossCache(K, V, mask)


def cross_attend(x_t, cache: CrossCache, params, n_heads: int) -> tuple[np.ndarray, np.ndarray]:
    """The decoder's cross-attention for one new token per source, over the cached K and V.

    Parameters
    ----------
    x_t : ndarray of shape (B, d_model), the new tokens' residual stream after self-attention
    cache : CrossCache from ``encoder_cache``
    params : dict of the model's weights
    n_heads : int

    Returns
    -------
    out : ndarray of shape (B, d_model), to add to the stream
    weights : ndarray of shape (B, h, P): where each head reads in the source
    """
    if not isinstance(cache, CrossCache):
        raise TypeError(f"cache must be a CrossCache (from encoder_cache), got {type(cache).__name__}")
    cross = _layer(_check_params(params), "cross")
    B, d = cache.K.shape[0], cross["W_Q"].shape[0]
    if not isinstance(x_t, np.ndarray) or not np.issubdtype(x_t.dtype, np.floating) or x_t.shape != (B, d):
        raise ValueError(f"x_t must be a float ndarray of shape (B, d_model) = ({B}, {d}), one new token per "
                         f"source, got {getattr(x_t, 'dtype', type(x_t).__name__)} {getattr(x_t, 'shape', '')}")
    q = split_heads(linear(x_t[:, None, :], cross, "Q"), n_heads)  # (B, 1, h*d_k) -> (B, h, 1, d_k)
    heads, w = scaled_dot_product_attention(q, cache.K, cache.V, cache.mask)  # (B, h, 1, d_v), (B, h, 1, P)
    out = linear(merge_heads(heads), cross, "O")  # (B, 1, h*d_v) @ W_O -> (B, 1, d_model)
    return out[:, 0], w[:, :, 0]


def greedy_decode(params, src, n_src, n_heads: int) -> tuple[np.ndarray, np.ndarray]:
    """Write the answer one token at a time, every step reusing the encoder-side cache.

    Returns
    -------
    tokens : int ndarray of shape (B, T), the greedy choices (anything after EOS is noise)
    weights : ndarray of shape (B, h, T, P), the cross-attention of every step
    """
    p = _check_params(params)
    cache = encoder_cache(p, src, n_src, n_heads)  # once per source
    self_attn = _layer(p, "self")
    B, T = src.shape[0], p["tgt_pos"].shape[0]
    kv = init_kv_cache(self_attn, n_heads, T, batch=B)  # the decoder's own cache, (B, h, T, d_k)
    tok = np.full(B, BOS)
    tokens, maps = [], []
    for t in range(T):
        x = p["tgt_emb"][tok] + p["tgt_pos"][t]  # (B, d_model)
        x = x + decode_step(x, self_attn, n_heads, kv)  # (B, d_model)
        out, w = cross_attend(x, cache, p, n_heads)  # (B, d_model), (B, h, P)
        x = x + out  # (B, d_model)
        tok = np.argmax(x @ p["W_out"] + p["b_out"], axis=-1)  # (B, d_model) @ (d_model, V) -> (B,)
        tokens.append(tok)
        maps.append(w)
    return np.stack(tokens, 1), np.stack(maps, 2)  # (B, T), (B, h, T, P)


def evaluate(params, batch: dict, n_heads: int) -> dict:
    """Greedy decoding on ``batch``: exact-match accuracy and the cross-attention's alignment.

    Returns
    -------
    dict with ``accuracy`` (fraction of sequences whose L digits and EOS are all right),
    ``token_accuracy``, and ``aligned_weight``: for each head, the mean cross-attention weight on
    the aligned source position ``P - 1 - t`` over the answer's tokens ``t = 0..L`` (h,), and
    ``aligned_weight_mean`` over the heads.
    """
    tokens, w = greedy_decode(params, batch["src"], batch["n_src"], n_heads)  # (B, T), (B, h, T, P)
    want = batch["tgt_out"]  # (B, T)
    keep = want != IGNORE  # (B, T)
    right = (tokens == want) | ~keep  # (B, T)
    P = w.shape[-1]
    t = np.arange(w.shape[2])  # (T,)
    aligned = w[:, :, t, P - 1 - t]  # (B, h, T): the weight on position P - 1 - t
    per_head = (aligned * keep[:, None]).sum((0, 2)) / keep.sum()  # (h,)
    return {"accuracy": float(right.all(1).mean()), "token_accuracy": float((tokens == want)[keep].mean()),
            "aligned_weight": per_head.tolist(), "aligned_weight_mean": float(per_head.mean())}


def train(task: ReverseTask, config: Seq2SeqConfig, progress=None) -> tuple[dict, np.ndarray, float]:
    """Train a fresh model with Adam on fresh batches of training sequences.

    Returns
    -------
    params : dict, losses : ndarray of shape (steps,), seconds : float
    """
    if not isinstance(task, ReverseTask):
        raise TypeError(f"task must be a ReverseTask, got {type(task).__name__}")
    if not isinstance(config, Seq2SeqConfig):
        raise TypeError(f"config must be a Seq2SeqConfig, got {type(config).__name__}")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable (step, steps, loss), got {type(progress).__name__}")
    init_seq, data_seq = np.random.SeedSequence(config.seed).spawn(2)  # the weights, and the batches
    params = init_seq2seq(task, config, np.random.default_rng(init_seq))
    data = np.random.default_rng(data_seq)
    losses, seconds = run_adam(params, lambda: loss_and_grads(params, task.sample(data, config.batch), config.n_heads),
                               config.steps, config.lr, progress)
    return params, losses, seconds


def save_reverse(params: dict, record: dict, weights=WEIGHTS_FILE, record_file=RECORD_FILE) -> None:
    """Write the weights (.npz) and the record of how they were made (.json)."""
    np.savez_compressed(weights, **params)
    Path(record_file).write_text(json.dumps(record, indent=2) + "\n")


def load_reverse(weights=WEIGHTS_FILE, record_file=RECORD_FILE) -> tuple[dict, dict]:
    """The shipped trained model: ``(params, record)``; ``record["model"]`` holds ``n_heads``,
    ``record["task"]`` the ``ReverseTask`` fields, ``record["held_out"]`` what it measured."""
    with np.load(weights) as f:
        params = {k: f[k] for k in f.files}
    return params, json.loads(Path(record_file).read_text())


def task_and_config(record: dict) -> tuple[ReverseTask, Seq2SeqConfig]:
    """The task and the config a record was made with."""
    return ReverseTask(**record["task"]), Seq2SeqConfig(**record["model"])


def describe(task: ReverseTask, config: Seq2SeqConfig) -> dict:
    return {"task": asdict(task), "model": asdict(config)}
