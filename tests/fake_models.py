"""A small stand-in for ``mha_core.models.load(name)``, for tests that must not need the model cache.

It has the interface of the real models (``encode``, ``tokens``, ``attention``, ``logits`` and
the config facts) and planted, known heads: in every layer head 0 attends to the previous
token, head 1 to the first token (a sink), and in the last layer head 2 is an induction head;
with 5 heads or more, head 3 attends to each token itself and, in layer 0, head 4 sends all of
"it" to an earlier "animal".
"""

from __future__ import annotations

import numpy as np

from mha_core.core.attention import softmax
from mha_core.core.masks import causal_mask

VOCAB = 500
BOS = 1


class FakeModel:
    def __init__(self, name: str = "fake", *, causal: bool = True, quantised: bool = False,
                 n_layers: int = 2, n_heads: int = 3):
        self.name = name
        self.causal = causal
        self.quantised = quantised
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.n_kv_heads = n_heads
        self.vocab_size = VOCAB
        self.d_model, self.d_k = 8 * n_heads, 8
        self.max_tokens = 128
        self.label = f"fake {name} ({'4-bit weights' if quantised else 'float32 weights'})"
        self.forwards = 0  # attention() calls (the panel must cache them)
        self._words: dict[str, int] = {}
        self._strings: dict[int, str] = {BOS: "<s>"}

    def encode(self, text: str) -> np.ndarray:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if not text.strip():
            raise ValueError("the sentence is empty: type a few words")
        if len(text.split()) + 1 > self.max_tokens:
            raise ValueError(f"the sentence has {len(text.split()) + 1} tokens, over the cap of "
                             f"{self.max_tokens}; shorten it")
        ids = [BOS]
        for word in text.split():
            if word not in self._words:
                self._words[word] = 10 + len(self._words) % (VOCAB - 10)
                self._strings[self._words[word]] = word
            ids.append(self._words[word])
        return np.array(ids, dtype=np.int64)

    def tokens(self, ids) -> list[str]:
        return [self._strings.get(int(i), f"t{int(i)}") for i in ids]

    def attention(self, ids: np.ndarray) -> np.ndarray:
        self.forwards += 1
        n = len(ids)
        rng = np.random.default_rng(int(np.sum(ids)) % 2**32)
        mask = causal_mask(n) if self.causal else None
        w = softmax(rng.standard_normal((self.n_layers, self.n_heads, n, n)), axis=-1, mask=mask)  # (L, h, N, N)
        w[:, 0] = np.eye(n, k=-1)
        w[:, 0, 0, 0] = 1.0
        w[:, 1] = 0.0
        w[:, 1, :, 0] = 1.0
        if self.n_heads >= 5:  # head 3 looks at each token itself; in layer 0, head 4 sends "it" to "animal"
            w[:, 3] = np.eye(n)
            words = self.tokens(ids)
            if "it" in words and "animal" in words:
                it, animal = words.index("it"), words.index("animal")
                w[0, 4, it] = 0.0
                w[0, 4, it, animal] = 1.0
        last = w[-1, 2]
        for i in range(n):  # induction: after the earlier occurrence of this token
            earlier = [j for j in range(i) if ids[j] == ids[i] and j + 1 < i]
            if earlier:
                last[i] = 0.0
                last[i, earlier[-1] + 1] = 1.0
        return w.astype(np.float32)

    def logits(self, ids: np.ndarray) -> np.ndarray:
        out = np.zeros((len(ids), VOCAB), dtype=np.float32)  # (N, vocab)
        out[np.arange(len(ids)), ids] = 3.0
        return out


def fake_loader(available=("minilm", "smollm2")):
    """A ``load(name)`` that returns fake models; names outside ``available`` raise like a missing cache."""
    models: dict[str, FakeModel] = {}

    def load(name: str) -> FakeModel:
        if name not in available:
            raise FileNotFoundError(f"model cache for {name!r} is missing: run `make models`")
        if name not in models:
            models[name] = FakeModel(name, causal=name != "minilm", quantised=name == "smollm2",
                                     n_heads=12 if name == "minilm" else 9)
        return models[name]

    load.models = models
    return load
