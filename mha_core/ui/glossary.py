"""Plain-words explanations of the dashboard's jargon, shown as tips on the words themselves.

    GLOSSARY          term -> one or two sentences for a reader with no background
    term(word)        the word as a glossary tip: a dotted word that explains itself on hover,
                      keyboard focus or a tap (the page's CSS: mha_dashboard.html.j2)

The dashboard notebook's markdown writes the same ``<span class="mha-term">`` markup by hand (a
teacher edits it there); ``tests/test_glossary.py`` checks that every tip in it matches this table.
"""

from __future__ import annotations

import html

GLOSSARY: dict[str, str] = {
    "token": "A piece of text the model reads as one unit: a word, part of a word, or a punctuation mark.",
    "query": "The token that is looking: each row of a map is one query.",
    "key": "A token being looked at: each column of a map is one key.",
    "head": "One way of looking: for every token, how much attention it pays to each token it may look "
            "at (its attention weights). A layer runs several heads side by side (h of them), each with "
            "its own idea of what is relevant.",
    "attention weight": "How much one token looks at another: a share between 0 and 1, and the shares of "
                        "one token add up to 1. The colour of a square in a map.",
    "parameters": "The numbers a model learns in training (its weight matrices, often also called "
                  "weights). Random parameters: an untrained model. Not the attention weights, "
                  "which the model computes afresh for every sentence.",
    "layer": "One round of attention in a model. A model stacks layers: each layer's heads look at what "
             "the layer below produced, so later layers can combine what earlier ones found.",
    "softmax": "Turns a row of scores into weights that are positive and add up to 1.",
    "d_model": "The width of the model: how many numbers describe each token.",
    "d_k": "The width of one head: d_model / h numbers per token.",
    "causal": "Each token may look only at itself and the tokens before it, never ahead: "
              "how a model that writes text left to right works.",
    "bidirectional": "Each token may look at every token, before and after it: how an encoder "
                     "such as BERT or MiniLM reads a whole sentence at once.",
    "MACs": "Multiply-accumulates: one multiplication and one addition. The unit of work counted here "
            "(about half the FLOPs).",
    "KV cache": "While a model writes, it keeps the keys and values of every token so far, so it "
                "does not recompute them for each new token. Its size limits how much text fits in memory.",
    "GQA": "Grouped-query attention: several query heads share one key/value head, so the KV cache "
           "is smaller (Ainslie et al. 2023).",
    "MQA": "Multi-query attention: all query heads share a single key/value head, the smallest KV cache "
           "(Shazeer 2019).",
    "MHA": "Plain multi-head attention: every head has its own keys and values.",
    "[CLS]": "A special token BERT-style models put before the text; many heads park weight on it "
             "when they have nothing better to look at.",
    "quantised": "The parameters are stored with fewer bits (here 4 bits each, like rounding every "
                 "number coarsely) to make the file small; they are expanded back to ordinary numbers "
                 "before use.",
    "first token": "Many heads send their attention to the first token when nothing in the sentence "
                   "fits what they look for: a resting place, often called an attention sink.",
    "previous token": "A head that looks at the token just before: it lets the next layer know which "
                      "word came before each word (word order, pairs such as \"New York\").",
    "induction head": "A head that finds the earlier place where the current token appeared and looks "
                      "at the token that came next there: it lets a model continue a pattern it has "
                      "seen (Olsson et al. 2022).",
}


def term(word: str, shown: str | None = None) -> str:
    """``word`` as an HTML glossary tip (``shown`` is the text on the page, default ``word``).

    Parameters
    ----------
    word : str, a key of ``GLOSSARY``
    shown : str, optional

    Returns
    -------
    str, ``<span class="mha-term" tabindex="0">word<span class="mha-term-tip">: explanation</span></span>``.
    The explanation is in the text itself (visually hidden until hover, focus or a tap), so a
    screen reader reads it after the word, and no id has to be unique on the page.
    """
    if word not in GLOSSARY:
        raise ValueError(f"word must be one of the glossary's terms ({', '.join(GLOSSARY)}), got {word!r}")
    if shown is not None and not isinstance(shown, str):
        raise TypeError(f"shown must be a str or None, got {type(shown).__name__}")
    return (f'<span class="mha-term" tabindex="0">{html.escape(shown or word)}'
            f'<span class="mha-term-tip"> ({html.escape(GLOSSARY[word])})</span></span>')
