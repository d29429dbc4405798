"""What a head does, measured: one score per head for each pattern the literature names.

Every function takes attention weights of shape ``(..., N, N)`` (row = query, column = key, rows
sum to 1), usually a model's ``(layers, h, N, N)``, and returns one number per map, shape
``(...)``, e.g. ``(layers, h)``. Each score is the mean, over the query positions where the
pattern is defined, of the weight the pattern predicts, so it is in [0, 1] and a head that
does exactly the pattern scores 1:

    previous_token_score   weight on key i-1             (Clark et al. 2019; Olsson et al. 2022)
    next_token_score       weight on key i+1             (Clark et al. 2019; 0 for a causal model)
    self_token_score       weight on key i, the token itself
    key_score              weight on a set of keys, e.g. [CLS] (a sink; Xiao et al. 2023),
                           [SEP] or punctuation          (Clark et al. 2019)
    induction_score        on a sequence repeated with period T, weight on key i-T+1: the token
                           that followed the current token last time (Olsson et al. 2022)

``bert_pattern_scores`` computes the first four for a BERT input ([CLS] ... [SEP]) in one call.
``token_losses`` and ``repeat_losses`` turn a decoder's logits into the per-token loss that
shows induction at work: on the second copy of a random sequence the loss falls. ``top_heads``
ranks heads by a score, ``repeated_tokens`` builds the random repeated sequence, and
``punctuation_positions`` / ``token_positions`` find the keys of ``key_score``.
``query_row`` reads where one query token (e.g. "it") looks in every head, and ``swap_test``
compares those rows between two inputs that differ in one word.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# Attention rows sum to 1; float32 softmax over a few hundred keys is exact to ~1e-6. A row
# off by more than this is not a row of attention weights (logits or scores passed by mistake).
ROW_SUM_TOL = 1e-3


def check_weights(weights, name: str = "weights") -> np.ndarray:
    """``weights`` as a float ndarray of shape (..., N, N) whose rows are probability vectors.

    Raises TypeError for a non-array or a non-float dtype, ValueError for a wrong shape, a
    non-finite or negative value, or a row that does not sum to 1 (within ``ROW_SUM_TOL``).
    """
    if not isinstance(weights, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray of shape (..., N, N), got {type(weights).__name__}")
    if not np.issubdtype(weights.dtype, np.floating):
        raise TypeError(f"{name} must be a float array, got dtype {weights.dtype}")
    if weights.ndim < 2 or weights.shape[-1] != weights.shape[-2] or 0 in weights.shape:
        raise ValueError(f"{name} must have shape (..., N, N) with N >= 1 and no empty axis, got {weights.shape}")
    if not np.isfinite(weights).all():
        raise ValueError(f"{name} must be finite, got {np.count_nonzero(~np.isfinite(weights)):,} NaN/inf values")
    if (weights < 0).any():
        raise ValueError(f"{name} must be >= 0 (attention weights), got min {float(weights.min()):.3g}")
    worst = float(np.abs(weights.sum(axis=-1) - 1.0).max())  # rows: (...,)
    if worst > ROW_SUM_TOL:
        raise ValueError(f"every row of {name} must sum to 1 (attention weights, after the softmax); "
                         f"a row is off by {worst:.3g}")
    return weights


def _check_int(value, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {name}={value}")
    return int(value)


def _check_two_tokens(weights) -> np.ndarray:
    weights = check_weights(weights)
    if weights.shape[-1] < 2:
        raise ValueError(f"weights must have N >= 2 tokens for a neighbour to exist, got shape {weights.shape}")
    return weights


def _diagonal_mean(weights: np.ndarray, offset: int) -> np.ndarray:
    """Mean of the ``offset``-th diagonal of the last two axes: (..., N, N) -> (...)."""
    return np.diagonal(weights, offset=offset, axis1=-2, axis2=-1).mean(axis=-1, dtype=np.float64)  # (...)


def previous_token_score(weights: np.ndarray) -> np.ndarray:
    """Mean weight of query ``i`` on key ``i - 1``, over queries ``1 .. N-1``.

    Parameters
    ----------
    weights : ndarray of shape (..., N, N), N >= 2
        Attention weights, e.g. ``(layers, h, N, N)``.

    Returns
    -------
    ndarray of shape (...), float64, in [0, 1]
    """
    return _diagonal_mean(_check_two_tokens(weights), -1)


def next_token_score(weights: np.ndarray) -> np.ndarray:
    """Mean weight of query ``i`` on key ``i + 1``, over queries ``0 .. N-2`` (0 under a causal mask).

    Parameters
    ----------
    weights : ndarray of shape (..., N, N), N >= 2

    Returns
    -------
    ndarray of shape (...), float64, in [0, 1]
    """
    return _diagonal_mean(_check_two_tokens(weights), 1)


def self_token_score(weights: np.ndarray) -> np.ndarray:
    """Mean weight of query ``i`` on key ``i`` (the token itself), over all ``N`` queries.

    Parameters
    ----------
    weights : ndarray of shape (..., N, N)

    Returns
    -------
    ndarray of shape (...), float64, in [0, 1]
    """
    return _diagonal_mean(check_weights(weights), 0)


def key_score(weights: np.ndarray, keys: Sequence[int], *, queries: Sequence[int] | None = None) -> np.ndarray:
    """Mean, over ``queries``, of the total weight a query puts on the key positions ``keys``.

    ``keys=[0]`` measures attention to the first token ([CLS] in BERT, the first token of a
    decoder): a "sink" when it is large. ``keys`` = the [SEP] and punctuation positions
    measures the "no-op" attention of Clark et al. 2019.

    Parameters
    ----------
    weights : ndarray of shape (..., N, N)
    keys : sequence of int
        Distinct key positions in ``[0, N-1]``, at least one.
    queries : sequence of int, optional
        Query positions to average over (default: all ``N``), at least one.

    Returns
    -------
    ndarray of shape (...), float64, in [0, 1]
    """
    weights = check_weights(weights)
    n = weights.shape[-1]
    keys = _positions(keys, "keys", n)
    queries = np.arange(n) if queries is None else _positions(queries, "queries", n)
    on_keys = weights[..., keys].sum(axis=-1, dtype=np.float64)  # (..., N): weight of each query on keys
    return on_keys[..., queries].mean(axis=-1)  # (...)


def _positions(positions, name: str, n: int) -> np.ndarray:
    if isinstance(positions, (str, bytes)) or not isinstance(positions, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a sequence of int positions, got {type(positions).__name__}")
    out = np.asarray(positions)
    if out.ndim != 1 or len(out) == 0 or not np.issubdtype(out.dtype, np.integer):
        raise ValueError(f"{name} must be a non-empty 1-D sequence of ints, got {positions!r:.80}")
    if out.min() < 0 or out.max() >= n:
        raise ValueError(f"{name} must be positions in [0, N-1] = [0, {n - 1}], got {positions!r:.80}")
    if len(np.unique(out)) != len(out):
        raise ValueError(f"{name} must not repeat a position, got {positions!r:.80}")
    return out


# The names of bert_pattern_scores' scores, in the order of Clark et al. (2019)'s figures.
BERT_PATTERNS = ("previous token", "next token", "[CLS]", "[SEP]", "punctuation")


def bert_pattern_scores(weights: np.ndarray, tokens: Sequence[str]) -> dict[str, np.ndarray]:
    """The five patterns of Clark et al. (2019) for one BERT input: previous token, next token,
    [CLS] (the first token), [SEP] and punctuation (other than [SEP]).

    Parameters
    ----------
    weights : ndarray of shape (..., N, N)
        Attention of one input, e.g. ``(layers, h, N, N)``.
    tokens : sequence of N str
        Its tokens: ``[CLS]`` first, at least one ``[SEP]``, at least one punctuation token.

    Returns
    -------
    dict str -> ndarray of shape (...), keyed by ``BERT_PATTERNS``
    """
    weights = _check_two_tokens(weights)
    tokens = _check_tokens(tokens)
    if len(tokens) != weights.shape[-1]:
        raise ValueError(f"tokens must have N={weights.shape[-1]} entries (one per row of weights), got {len(tokens)}")
    if tokens[0] != "[CLS]":
        raise ValueError(f"tokens must start with [CLS] (a BERT input), got {tokens[0]!r}")
    sep, punct = token_positions(tokens, "[SEP]"), punctuation_positions(tokens)
    if not sep or not punct:
        raise ValueError(f"tokens must hold a [SEP] and a punctuation token, got {tokens!r:.120}")
    return {
        "previous token": previous_token_score(weights),
        "next token": next_token_score(weights),
        "[CLS]": key_score(weights, [0]),
        "[SEP]": key_score(weights, sep),
        "punctuation": key_score(weights, punct),
    }


def _check_period(period, start: int, n: int) -> tuple[int, int]:
    start = _check_int(start, "start", 0, n)
    period = _check_int(period, "period", 1, n)
    if start + 2 * period > n:
        raise ValueError(f"two copies of period={period} after start={start} need N >= {start + 2 * period}, "
                         f"got N={n}")
    return period, start


def induction_score(weights: np.ndarray, period: int, *, start: int = 0) -> np.ndarray:
    """On a sequence whose tokens repeat with ``period``, the mean weight on "what came next last time".

    The layout is ``start`` tokens of prefix (e.g. a BOS token), then ``period`` tokens, then
    the same ``period`` tokens again (see ``repeated_tokens``). A query ``i`` in the second copy
    holds the token that stood at ``i - period``; an induction head attends to the token after
    that one, at key ``i - period + 1``. The score averages over the queries of the second copy,
    ``start + period .. start + 2 * period - 1``.

    Parameters
    ----------
    weights : ndarray of shape (..., N, N)
    period : int, >= 1
        Length ``T`` of one copy.
    start : int, default 0
        Tokens before the first copy.

    Returns
    -------
    ndarray of shape (...), float64, in [0, 1]
    """
    weights = check_weights(weights)
    period, start = _check_period(period, start, weights.shape[-1])
    queries = np.arange(start + period, start + 2 * period)  # (T,): the second copy
    on_target = weights[..., queries, queries - period + 1]  # (..., T)
    return on_target.mean(axis=-1, dtype=np.float64)  # (...)


def top_heads(scores: np.ndarray, k: int = 5) -> list[tuple[int, int, float]]:
    """The ``k`` highest-scoring heads of a ``(layers, h)`` score grid, best first.

    Returns
    -------
    list of ``(layer, head, score)``; ties keep the lower (layer, head) first
    """
    if not isinstance(scores, np.ndarray) or scores.ndim != 2 or 0 in scores.shape:
        raise ValueError(f"scores must be an ndarray of shape (layers, h), got "
                         f"{getattr(scores, 'shape', type(scores).__name__)}")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    k = _check_int(k, "k", 1, scores.size)
    order = np.argsort(-scores, axis=None, kind="stable")[:k]  # (k,) flat indices
    h = scores.shape[1]
    return [(int(i // h), int(i % h), float(scores.flat[i])) for i in order]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    """(N, vocab) -> (N, vocab), stable in float64."""
    z = logits.astype(np.float64) - logits.max(axis=-1, keepdims=True)  # (N, vocab)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))  # (N, vocab)


def token_losses(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Cross-entropy of each next token: entry ``t`` is ``-log p(ids[t+1] | ids[:t+1])`` in nats.

    Parameters
    ----------
    logits : ndarray of shape (N, vocab)
        A decoder's logits for the sequence ``ids``.
    ids : ndarray of shape (N,), int
        Token ids, each in ``[0, vocab-1]``.

    Returns
    -------
    ndarray of shape (N - 1,), float64, >= 0
    """
    if not isinstance(logits, np.ndarray) or logits.ndim != 2 or not np.issubdtype(logits.dtype, np.floating):
        raise ValueError(f"logits must be a float ndarray of shape (N, vocab), got "
                         f"{getattr(logits, 'shape', type(logits).__name__)}")
    if not np.isfinite(logits).all():
        raise ValueError("logits must be finite")
    if not isinstance(ids, np.ndarray) or ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be a 1-D int ndarray, got {getattr(ids, 'shape', type(ids).__name__)}")
    n, vocab = logits.shape
    if len(ids) != n or n < 2:
        raise ValueError(f"ids must have N={n} >= 2 entries (one per row of logits), got {len(ids)}")
    if ids.min() < 0 or ids.max() >= vocab:
        raise ValueError(f"ids must be in [0, vocab-1] = [0, {vocab - 1}], got range [{ids.min()}, {ids.max()}]")
    logp = _log_softmax(logits[:-1])  # (N-1, vocab): position t predicts token t+1
    return -logp[np.arange(n - 1), ids[1:]]  # (N-1,)


def repeat_losses(logits: np.ndarray, ids: np.ndarray, period: int, *, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-token loss on the first and on the second copy of a repeated sequence.

    Token ``j`` of a copy (``1 <= j < period``) is predicted from the position before it. In the
    second copy the model has seen token ``j-1`` followed by token ``j`` once already, so a
    model with induction heads predicts it far better. Token 0 of each copy is left out: it
    follows the end of the previous part, which gives no hint.

    Parameters
    ----------
    logits : ndarray of shape (N, vocab)
    ids : ndarray of shape (N,), int
        ``start`` prefix tokens, then the same ``period`` tokens twice.
    period : int, >= 2
    start : int, default 0

    Returns
    -------
    first, second : ndarray of shape (period - 1,), float64
        The losses of tokens ``1 .. period-1`` of each copy, in nats.
    """
    losses = token_losses(logits, ids)  # (N-1,)
    period, start = _check_period(period, start, len(ids))
    if period < 2:
        raise ValueError(f"period must be >= 2 (token 0 of a copy is not scored), got period={period}")
    first_copy = ids[start: start + period]
    if not np.array_equal(first_copy, ids[start + period: start + 2 * period]):
        raise ValueError(f"ids[{start + period}:{start + 2 * period}] must repeat ids[{start}:{start + period}] "
                         f"(period={period}, start={start})")
    j = np.arange(1, period)  # (T-1,)
    return losses[start + j - 1], losses[start + period + j - 1]


def repeated_tokens(rng: np.random.Generator, candidates: np.ndarray, period: int,
                    prefix: Sequence[int] = ()) -> np.ndarray:
    """``prefix`` then ``period`` distinct tokens drawn from ``candidates``, then the same tokens again.

    Distinct tokens make "the token after its earlier occurrence" unambiguous.

    Parameters
    ----------
    rng : numpy.random.Generator
    candidates : ndarray of shape (V,), int
        Token ids to draw from (e.g. ordinary word tokens, no special tokens); ``V >= period``.
    period : int, >= 1
    prefix : sequence of int, default ()
        E.g. a BOS or [CLS] id.

    Returns
    -------
    ndarray of shape (len(prefix) + 2 * period,), int64
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    if not isinstance(candidates, np.ndarray) or candidates.ndim != 1 or not np.issubdtype(candidates.dtype, np.integer):
        raise ValueError("candidates must be a 1-D int ndarray of token ids")
    period = _check_int(period, "period", 1, len(np.unique(candidates)))
    draw = rng.choice(np.unique(candidates), size=period, replace=False)  # (T,)
    return np.concatenate([np.asarray(prefix, dtype=np.int64), draw, draw]).astype(np.int64)


def is_punctuation(token: str) -> bool:
    """True if ``token`` is non-empty and every character is Unicode punctuation (category P*).

    WordPiece's ``##`` prefix and byte-level BPE's leading-space marker ``Ġ`` / a plain
    leading space are ignored, so ``"##."`` and ``" ,"`` count.
    """
    if not isinstance(token, str):
        raise TypeError(f"token must be a str, got {type(token).__name__}")
    core = token.removeprefix("##").lstrip(" Ġ")
    return bool(core) and all(unicodedata.category(c).startswith("P") for c in core)


def punctuation_positions(tokens: Sequence[str]) -> list[int]:
    """Positions of the tokens for which ``is_punctuation`` holds."""
    return [i for i, t in enumerate(_check_tokens(tokens)) if is_punctuation(t)]


def token_positions(tokens: Sequence[str], wanted: str | Sequence[str]) -> list[int]:
    """Positions whose token equals ``wanted`` (one str) or one of ``wanted`` (e.g. ``["[SEP]"]``)."""
    wanted = {wanted} if isinstance(wanted, str) else set(wanted)
    return [i for i, t in enumerate(_check_tokens(tokens)) if t in wanted]


def _check_tokens(tokens) -> list[str]:
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"tokens must be a list of str, got {type(tokens).__name__}")
    if not all(isinstance(t, str) for t in tokens):
        raise TypeError("tokens must be a list of str")
    return list(tokens)


def _plain(token: str) -> str:
    """A token's text without WordPiece's ``##``, byte-level BPE's ``Ġ`` or a leading space, lower-cased."""
    return token.removeprefix("##").lstrip(" Ġ").lower()


@dataclass(frozen=True)
class QueryRow:
    """Where one query token looks, in every map of one input.

    ``maps`` (..., N, N) are the input's attention weights (e.g. ``(layers, h, N, N)``),
    ``tokens`` its N tokens, ``query`` the query's position and ``positions`` the position of
    each named word (its first occurrence).
    """

    maps: np.ndarray
    tokens: list[str]
    query: int
    positions: dict[str, int]

    @property
    def row(self) -> np.ndarray:
        """The query's row of every map, shape (..., N)."""
        return self.maps[..., self.query, :]

    def on(self, word: str) -> np.ndarray:
        """The query's weight on ``word``, per map: shape (...)."""
        return self.row[..., self.positions[word]]

    def others_on(self, word: str) -> np.ndarray:
        """The mean weight that the *other* queries put on ``word``, per map: shape (...)."""
        column = self.maps[..., :, self.positions[word]]  # (..., N)
        return np.delete(column, self.query, axis=-1).mean(axis=-1)


def query_row(weights: np.ndarray, tokens: Sequence[str], query: str, words: Sequence[str]) -> QueryRow:
    """The row of the token ``query`` and the positions of ``words``, found by their text
    (``"it"`` matches ``"it"``, ``" it"``, ``"Ġit"``; the first occurrence counts).

    Parameters
    ----------
    weights : ndarray of shape (..., N, N)
    tokens : sequence of N str
    query : str
    words : sequence of str

    Raises ValueError, naming the word, if a word or the query is not among the tokens.
    """
    weights = check_weights(weights)
    tokens = _check_tokens(tokens)
    if len(tokens) != weights.shape[-1]:
        raise ValueError(f"tokens must have N={weights.shape[-1]} entries (one per row of weights), got {len(tokens)}")
    plain = [_plain(t) for t in tokens]
    positions = {}
    for word in (query, *words):
        if not isinstance(word, str):
            raise TypeError(f"query and words must be str, got {type(word).__name__}")
        if word.lower() not in plain:
            raise ValueError(f"word {word!r} is not among the tokens {tokens!r:.120}")
        positions[word] = plain.index(word.lower())
    return QueryRow(weights, tokens, positions[query], positions)


@dataclass(frozen=True)
class SwapTest:
    """What changed in one query's rows between two inputs that differ in one word.

    ``with_meaning`` / ``against``: maps that prefer ``first`` over ``second`` in input a and
    ``second`` over ``first`` in input b, and the reverse. ``change``: the largest change of any
    weight of the query on a key that holds the same token at the same position in both inputs
    (the swapped word itself is left out). ``shift``: the index of the map whose preference moved
    most toward ``first`` in a and ``second`` in b.
    """

    with_meaning: int
    against: int
    change: float
    shift: tuple[int, ...]


def swap_test(a: QueryRow, b: QueryRow, first: str, second: str) -> SwapTest:
    """Compare the query's rows of two inputs ``a`` and ``b`` (see :class:`SwapTest`)."""
    if a.maps.shape[:-2] != b.maps.shape[:-2]:
        raise ValueError(f"a and b must come from the same model: maps {a.maps.shape} and {b.maps.shape}")
    pref_a = a.on(first) - a.on(second)  # (...): > 0 prefers first
    pref_b = b.on(first) - b.on(second)
    shared = [k for k, (s, t) in enumerate(zip(a.tokens, b.tokens, strict=False)) if s == t]  # up to the shorter
    if not shared:
        raise ValueError("a and b share no token at the same position: nothing to compare")
    change = float(np.abs(a.row[..., shared] - b.row[..., shared]).max())
    shift = np.unravel_index(np.argmax(pref_a - pref_b), pref_a.shape)
    return SwapTest(with_meaning=int(np.sum((pref_a > 0) & (pref_b < 0))),
                    against=int(np.sum((pref_a < 0) & (pref_b > 0))),
                    change=change, shift=tuple(int(i) for i in shift))
