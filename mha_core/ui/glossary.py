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
    "head": "One attention pattern: for every token, a set of weights over the tokens it may look at. "
            "A layer runs h heads side by side, each with its own idea of what is relevant.",
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
    "quantised": "The weights are stored with fewer bits (here 4 bits, grouped with a scale: the "
                 "GGUF formats Q4_1, and Q8_0 for the embeddings) to make the file small; they are "
                 "expanded back to ordinary numbers before use.",
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
