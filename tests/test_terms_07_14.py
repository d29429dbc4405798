"""Terms that notebooks 07-12 (now 07-14) once used before defining them (the cold read of issue 28) are now
defined where they are first used: a short clause right after the first use, in that notebook's
own prose. (The glossary of notebook 00 has its own test; this one is about the later notebooks'
text.)"""

from __future__ import annotations

import re

import pytest
from lesson_claims import markdown_text

WINDOW = 250  # characters after the first use in which the defining clause must start

# (notebook, the term as first used, the start of the clause that defines it there)
TERMS = [
    ("08_why_several_heads.ipynb", "backward pass", "the code that computes how the loss changes with each weight"),
    ("08_why_several_heads.ipynb", "position embeddings", "a learned vector for each token of the vocabulary and a"),
    ("08_why_several_heads.ipynb", "cross-entropy", "the mean, over the answers, of $-\\ln p$"),
    ("09_the_block.ipynb", "tokenizer", "the program that cuts a text into tokens"),
    ("09_the_block.ipynb", "GPT-2", "OpenAI's 2019 decoder"),
    ("09_the_block.ipynb", "gradient", "how much the loss changes when that weight moves a little"),
    ("09_the_block.ipynb", "backpropagation", "the chain rule applied layer by layer"),
    ("09_the_block.ipynb", "attention sinks", "a sink is a token that takes the weight of heads"),
    ("09_the_block.ipynb", "non-linearity", "a function that is not a straight line"),
    ("09_the_block.ipynb", "\\Phi", "is the probability that a number drawn from the standard normal"),
    ("10_a_real_layer.ipynb", "b_Q, b_K, b_V, b_O", "a **bias** is a learned vector added after a matrix product"),
    ("11_real_heads.ipynb", "BERT-base", "the original BERT, 12 layers of 12 heads"),
    ("12_long_context.ipynb", "7B-class", "about 7 billion parameters"),
    ("12_long_context.ipynb", "serving", "running a trained model to answer many users' requests"),
    ("12_long_context.ipynb", "paged caches", "the cache kept in fixed-size blocks"),
]


@pytest.mark.parametrize(("name", "term", "definition"), TERMS, ids=[f"{n[:2]}-{t}" for n, t, _ in TERMS])
def test_a_term_is_defined_where_it_is_first_used(name, term, definition):
    text = markdown_text(name)
    first = re.search(rf"(?<![\w-]){re.escape(term)}", text, re.I)
    assert first, f"{term!r} is not used in {name}"
    at = text.find(definition)
    assert at >= 0, f"{name} no longer defines {term!r} with {definition!r}"
    assert first.start() <= at <= first.end() + WINDOW, (
        f"{name}: {term!r} is first used at {first.start()} but defined at {at}: ...{text[first.start():first.start() + 120]}")
