"""The demo input shared by the notebooks and the dashboard: a real sentence and its embeddings.

``SENTENCE`` is one English sentence, already split into word tokens, in which two pronouns
("it", "it") refer back to earlier nouns: the kind of link a head can learn to draw.
``PASSAGE`` continues it to ``DEMO_MAX_TOKENS`` tokens so that sliders for ``N`` can go past one
sentence. ``embed_tokens`` turns tokens into an input ``X`` of shape ``(N, d_model)``:
a seeded vector per distinct token plus the sinusoidal position code of the original
Transformer, so the same word at two positions gets related but different rows.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from ..core.validate import check_positive_int

SENTENCE: tuple[str, ...] = tuple(
    "The animal did not cross the street because it was too tired , "
    "so the farmer carried it home .".split()
)
"""One real sentence as word tokens (punctuation is its own token); ``len(SENTENCE) == 20``."""

TEXT: str = " ".join(SENTENCE).replace(" ,", ",").replace(" .", ".")
"""``SENTENCE`` as ordinary text."""

PASSAGE: tuple[str, ...] = SENTENCE + tuple(
    "The next morning the animal woke early , drank from the river and walked back to the "
    "street where the farmer had found it . Nobody knew where it had come from , but the "
    "children gave it a name and kept it .".split()
)
"""``SENTENCE`` followed by more text, so that ``N`` can reach ``DEMO_MAX_TOKENS``."""

# The dashboard's N sliders stop here: 64 tokens keep a 16-head grid of N x N maps readable.
DEMO_MAX_TOKENS = 64

# 10000 is the base of the original Transformer's sinusoidal position code.
POSITION_BASE = 10_000.0


def tokens(n: int | None = None) -> tuple[str, ...]:
    """The first ``n`` tokens of ``PASSAGE`` (default: the whole ``SENTENCE``).

    Parameters
    ----------
    n : int, optional
        Number of tokens, ``1 <= n <= DEMO_MAX_TOKENS``; default ``len(SENTENCE)``.

    Returns
    -------
    tuple of str, length ``n``
    """
    if n is None:
        return SENTENCE
    n = check_positive_int(n, "n")
    if n > len(PASSAGE):
        raise ValueError(f"n must be at most {len(PASSAGE)} (the demo passage's length), got n={n}")
    return PASSAGE[:n]


def positional_encoding(n: int, d_model: int) -> np.ndarray:
    """Sinusoidal position code: ``PE[p, 2i] = sin(p / base^(2i/d_model))``, ``PE[p, 2i+1] = cos(...)``.

    Parameters
    ----------
    n : int
        Number of positions ``N``.
    d_model : int
        Width; an odd ``d_model`` drops the last cosine column.

    Returns
    -------
    ndarray of shape (N, d_model), float64, entries in [-1, 1]
    """
    n = check_positive_int(n, "n")
    d_model = check_positive_int(d_model, "d_model")
    half = (d_model + 1) // 2
    pos = np.arange(n)[:, None]  # (N, 1)
    freq = POSITION_BASE ** (-2.0 * np.arange(half) / d_model)  # (ceil(d_model/2),)
    angle = pos * freq  # (N, ceil(d_model/2))
    pe = np.empty((n, 2 * half))  # (N, 2*ceil(d_model/2))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)
    return pe[:, :d_model]  # (N, d_model)


def _token_vector(token: str, d_model: int, seed: int) -> np.ndarray:
    """A unit-variance vector that depends only on ``(token, d_model, seed)``: shape (d_model,)."""
    # crc32 is stable across runs and platforms (Python's hash() is salted per process).
    key = zlib.crc32(token.lower().encode("utf-8"))
    return np.random.default_rng([seed, key]).standard_normal(d_model)  # (d_model,)


def embed_tokens(tokens: Sequence[str], d_model: int, seed: int = 0) -> np.ndarray:
    """Embed ``tokens`` as rows of ``X``: a seeded vector per distinct token + its position code.

    The token part is the same for equal tokens (case-insensitive) wherever they occur and for
    any sentence, so two occurrences of "it" differ only by their position code.

    Parameters
    ----------
    tokens : sequence of str
        The ``N`` tokens, each a non-empty string.
    d_model : int
        Width of each row.
    seed : int, default 0
        Selects the token vectors; the same seed gives the same ``X``.

    Returns
    -------
    ndarray of shape (N, d_model), float32
    """
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise TypeError(f"tokens must be a list or tuple of str, got {type(tokens).__name__}")
    if len(tokens) == 0:
        raise ValueError("tokens must hold at least one token, got an empty sequence")
    for i, tok in enumerate(tokens):
        if not isinstance(tok, str) or not tok:
            raise TypeError(f"tokens[{i}] must be a non-empty str, got {type(tok).__name__} {tok!r}")
    d_model = check_positive_int(d_model, "d_model")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise TypeError(f"seed must be a non-negative int, got {type(seed).__name__} {seed!r}")
    content = np.stack([_token_vector(t, d_model, int(seed)) for t in tokens])  # (N, d_model)
    x = content + positional_encoding(len(tokens), d_model)  # (N, d_model)
    return x.astype(np.float32)  # (N, d_model)
