"""What every real model offers: text in, token ids, attention maps, hidden states.

``Model`` holds the tokenizer, the config facts and the input checks. The families (``bert``,
``decoder`` with ``gpt2`` and ``llama``) write only their forward pass, and all of them call the
core's ``multi_head_attention`` for every layer's attention; the two shipped models (``MiniLM``,
``SmolLM2``) are instances of the BERT and Llama families.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..core.validate import BIAS_NAMES, WEIGHT_NAMES


class ModelCacheError(RuntimeError):
    """A model is missing from the store, or its files there are damaged."""


class ModelFetchError(RuntimeError):
    """Fetching or checking a model's source failed (no network, wrong hash, bad file)."""


class ModelMemoryError(MemoryError):
    """A model would not fit: its float32 size is over the limit (the memory available, or ``max_bytes``)."""


MODEL_MAX_TOKENS = 128  # the longest input, special tokens included: (h, 128, 128) maps stay small
MAX_CHARS = 20_000  # refuse longer text before tokenizing it (128 tokens never need this many)


@dataclass(frozen=True)
class Forward:
    """One forward pass, kept whole.

    hidden : ndarray of shape (layers + 1, N, d_model)
        The residual stream: the embeddings, then the output of every layer.
    attention : ndarray of shape (layers, h, N, N), float32
        Every layer's attention weights; each row sums to 1.
    logits : ndarray of shape (N, vocab), or None (an encoder has no language-model head)
    """

    hidden: np.ndarray
    attention: np.ndarray
    logits: np.ndarray | None = None


class Model:
    """A pretrained transformer whose attention runs through ``mha_core.core``.

    Subclasses set ``name``, ``label``, ``causal``, ``quantised`` and ``config_keys``, and write
    ``forward``; the sizes come from the config (the cached one, or a model folder's, translated).

    Attributes
    ----------
    name : str                 "minilm", "smollm2", or the folder of a model loaded from its path
    label : str                a human label for figures: model, size, quantisation
    n_layers, n_heads, n_kv_heads, d_model, d_k, vocab_size : int   (d_k: config "d_k", else d_model / h)
    eps : float                the norms' epsilon
    layers : list of dict      each layer's weights (read-only views), e.g. layers[0]["W_Q"]
    causal : bool              True for a decoder (each token sees only the past)
    quantised : bool           True when the weights were stored at fewer than 16 bits
    max_tokens : int           the longest input accepted (special tokens included): 128, or fewer
                               if the model's positions or sliding window end sooner
    """

    name: str
    label: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    d_model: int
    d_k: int
    vocab_size: int
    eps: float
    causal: bool
    quantised: bool
    max_tokens: int = MODEL_MAX_TOKENS
    # our name -> the key in the cached config (each release names its sizes its own way)
    config_keys = {"n_layers": "n_layers", "n_heads": "n_heads", "n_kv_heads": "n_kv_heads",
                   "d_model": "d_model", "vocab_size": "vocab_size", "eps": "eps"}

    def __init__(self, tokenizer, arrays: dict[str, np.ndarray], config: dict):
        self._tokenizer = tokenizer
        self.arrays = arrays  # read-only memory maps, shared with every other process
        self.config = config
        for ours, theirs in self.config_keys.items():
            setattr(self, ours, config[theirs])
        self.d_k = config.get("d_k", self.d_model // self.n_heads)
        self._byte_level = _is_byte_level(tokenizer)
        # layer i's arrays, named without their "layer{i}." prefix (views, nothing is copied)
        self.layers = [{k.removeprefix(f"layer{i}."): v for k, v in arrays.items() if k.startswith(f"layer{i}.")}
                       for i in range(self.n_layers)]
        # layer i's attention weights alone (W_Q, ..., and whichever biases it has): the params
        # dict of its multi_head_attention call
        self.layer_attention = [{k: p[k] for k in WEIGHT_NAMES + BIAS_NAMES if k in p} for p in self.layers]
        self.max_tokens = min(MODEL_MAX_TOKENS, config.get("max_tokens", MODEL_MAX_TOKENS))

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.label}: {self.n_layers} layers x {self.n_heads} heads "
                f"({self.n_kv_heads} key/value), d_model={self.d_model}, d_k={self.d_k}>")

    # ------------------------------------------------------------------ text <-> ids

    def encode(self, text: str) -> np.ndarray:
        """The token ids the model sees, special tokens included: int64 array of shape (N,).

        Raises ValueError for an empty text or one over ``max_tokens`` tokens.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("the sentence is empty: type a few words")
        if len(text) > MAX_CHARS:
            raise ValueError(f"the sentence has {len(text):,} characters, far over the cap of "
                             f"{self.max_tokens} tokens; shorten it")
        text = text.encode("utf-8", errors="replace").decode("utf-8")  # lone surrogates -> '?'
        ids = np.asarray(self._tokenizer.encode(text).ids, dtype=np.int64)  # (N,)
        n_special = self._n_special()
        if ids.size <= n_special:
            raise ValueError(f"the sentence {text!r} has no tokens once normalised: type a few words")
        if ids.size > self.max_tokens:
            raise ValueError(f"the sentence has {ids.size} tokens, over the cap of {self.max_tokens}; shorten it")
        return ids

    def _n_special(self) -> int:
        """How many special tokens ``encode`` adds around any text ([CLS] and [SEP]: 2)."""
        post = self._tokenizer.post_processor
        return post.num_special_tokens_to_add(False) if post is not None else 0

    def tokens(self, ids) -> list[str]:
        """One display string per id (WordPiece pieces keep their ``##``; byte-level BPE
        tokens are shown as the text they stand for, with their leading space)."""
        ids = self.check_ids(ids, cap=False)
        return [self._display(int(i)) for i in ids]

    def _display(self, i: int) -> str:
        """A byte-level BPE token (GPT-2, SmolLM2, Qwen2) as the text it stands for; a
        SentencePiece token with its word-start mark as a space; any other token as it is."""
        token = self._tokenizer.id_to_token(i)
        if token is None:  # a row of the embedding table past the tokenizer's vocabulary (padding)
            return f"[id {i}]"
        decoder = _byte_decoder()
        if not self._byte_level or any(ch not in decoder for ch in token):  # e.g. <|im_start|>
            return token.replace("▁", " ")
        return bytes(decoder[ch] for ch in token).decode("utf-8", errors="backslashreplace")

    def decode(self, ids) -> str:
        """The text of ``ids``, special tokens left out."""
        return self._tokenizer.decode([int(i) for i in self.check_ids(ids, cap=False)])

    def check_ids(self, ids, cap: bool = True) -> np.ndarray:
        """``ids`` as a 1-D int64 array of known tokens, at most ``max_tokens`` long (if ``cap``)."""
        if isinstance(ids, str):
            raise TypeError("ids must be token ids, not text: use model.encode(text) first")
        arr = np.asarray(ids)
        if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
            raise ValueError(f"ids must be a 1-D array of ints, got dtype {arr.dtype} and shape {arr.shape}")
        if arr.size == 0:
            raise ValueError("ids is empty: a forward pass needs at least one token")
        if cap and arr.size > self.max_tokens:
            raise ValueError(f"{arr.size} tokens is over the cap of {self.max_tokens}; shorten the sentence")
        if arr.min() < 0 or arr.max() >= self.vocab_size:
            raise ValueError(f"ids must lie in [0, {self.vocab_size}), got min {arr.min()} and max {arr.max()}")
        return arr.astype(np.int64, copy=False)

    # ------------------------------------------------------------------ the forward pass

    def check_head_mask(self, head_mask) -> np.ndarray | None:
        """``head_mask`` as a bool array of shape (layers, h), or None.

        False switches a head off: its output is zeroed before ``W_O``, so it adds nothing to
        the residual stream (the core's ``multi_head_attention(..., head_mask=)``, layer by layer).
        """
        if head_mask is None:
            return None
        arr = np.asarray(head_mask)
        want = (self.n_layers, self.n_heads)
        if arr.dtype != bool:
            raise TypeError(f"head_mask must be a bool array of shape (layers, h) = {want} "
                            f"(False switches a head off), got dtype {arr.dtype}")
        if arr.shape != want:
            raise ValueError(f"head_mask must have shape (layers, h) = {want}, got {arr.shape}")
        return arr

    def forward(self, ids, logits: bool = True, head_mask=None) -> Forward:  # pragma: no cover - abstract
        raise NotImplementedError

    def attention(self, ids) -> np.ndarray:
        """Every layer's attention weights, float32 of shape (layers, h, N, N)."""
        return self.forward(ids, logits=False).attention

    def hidden_states(self, ids) -> np.ndarray:
        """The residual stream after the embeddings and after each layer: (layers + 1, N, d_model)."""
        return self.forward(ids, logits=False).hidden

    def next_token_losses(self, ids, head_mask=None) -> np.ndarray:
        """The model's surprise at each next token: ``-log p(ids[t+1] | ids[:t+1])``, in nats,
        shape (N - 1,). Low where the model could predict the token (e.g. a repeated passage).
        ``head_mask``: bool (layers, h), False switches a head off (see ``check_head_mask``)."""
        ids = self.check_ids(ids)
        if ids.size < 2:
            raise ValueError("next_token_losses needs at least 2 tokens")
        logits = self.logits(ids, head_mask=head_mask)[:-1].astype(np.float64)  # (N-1, vocab): position t predicts t+1
        top = logits.max(axis=-1)  # (N-1,)
        log_z = top + np.log(np.exp(logits - top[:, None]).sum(axis=-1))  # (N-1,), log-sum-exp
        return log_z - logits[np.arange(ids.size - 1), ids[1:]]  # (N-1,)

    def logits(self, ids, head_mask=None) -> np.ndarray:
        """The next-token logits at every position, shape (N, vocab); ``head_mask`` as in
        ``check_head_mask``."""
        out = self.forward(ids, logits=True, head_mask=head_mask).logits
        if out is None:
            raise ValueError(f"{self.label} is an encoder without a language-model head: it has no "
                             f"logits; use load('smollm2') for a model that predicts tokens")
        return out


def _is_byte_level(tokenizer) -> bool:
    """True when the tokenizer's decoder is GPT-2's byte-level one (alone or in a sequence)."""
    decoder = json.loads(tokenizer.to_str()).get("decoder") or {}
    steps = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    return any(step.get("type") == "ByteLevel" for step in steps)


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's map from the printable stand-in characters back to the bytes 0..255."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars
