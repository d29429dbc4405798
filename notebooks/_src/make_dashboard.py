"""Write notebooks/dashboard.ipynb (the Voila dashboard) from this script.

Run, then execute and strip (see the project's notebook rules):
    .venv/bin/python notebooks/_src/make_dashboard.py
    .venv/bin/jupyter nbconvert --to notebook --execute --inplace notebooks/dashboard.ipynb
    .venv/bin/nbstripout --keep-output --keep-count notebooks/dashboard.ipynb
Every code cell only builds a panel from mha_core.ui.widgets; the logic lives there (and is tested).
"""

from pathlib import Path

import nbformat as nbf

SLIDE = {"slideshow": {"slide_type": "slide"}}
SAME = {"slideshow": {"slide_type": "-"}}


def md(text: str, meta=SLIDE):
    return nbf.v4.new_markdown_cell(text.strip(), metadata=dict(meta))


def code(text: str, meta=SAME):
    return nbf.v4.new_code_cell(text.strip(), metadata=dict(meta))


cells = [
    md("""
# Multi-head attention, interactively

Four panels, one idea each. Move a slider and the page recomputes with the project's own NumPy
layer (`mha_core`), so every number and shape you see comes from running the code.

1. **Shapes**: how `(B, N, d_model)` is split into `h` heads of width `d_k = d_model / h` and put back together.
2. **Heads**: what each head attends to, for a real sentence.
3. **Cost**: parameters and multiply-accumulates (MACs), and where attention starts to dominate.
4. **KV cache**: how sharing key/value heads (GQA, MQA) shrinks the decoding cache.
"""),
    code("""
# One BLAS thread: the panels multiply small matrices, where waking a second BLAS thread costs more
# than it saves (about 5x slower on a busy 2-core machine). Only effective before numpy is imported.
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from mha_core.ui import widgets as W
"""),
    md("""
## 1. Shapes: the round trip

Choose a batch size `B`, a sequence length `N`, the width `d_model` and the number of heads `h`
(only divisors of `d_model` are offered: the heads share the width evenly). The ledger lists the
shape after every step of one real forward pass; the boxes draw the same tensors, with sides
that grow with each dimension. Note that the parameter count, `4 d_model²`, does not depend on `h`.
"""),
    code("""
# NBVAL_IGNORE_OUTPUT
W.shape_explorer()
"""),
    md("""
## 2. Heads: who attends to whom

The sentence: *"The animal did not cross the street because it was too tired, so the farmer carried it home."*
Each panel is one head's attention weights: row = the query token, column = the key token it reads, every
row sums to 1. Pick a **query** to outline its row in every head, switch on the **causal mask** to hide the
future, and compare **random** weights (an untrained layer: no structure to expect) with weights **trained**
on the project's toy task (when they are installed). The download button gives the current figure as PNG and SVG.
"""),
    code("""
# NBVAL_IGNORE_OUTPUT
W.head_explorer()
"""),
    md("""
## 3. Cost: projections against attention

The four projections cost `4 N d_model²` MACs and grow linearly with `N`; the attention core costs
`2 N² d_model` and grows quadratically. They cross at `N = 2 d_model`. Changing `h` leaves both
unchanged (only the softmax work, `h N²` exponentials, grows). The table repeats the worked
example of the source text: `d_model = 512`, `h = 8`, `N = 100` and `N = 2000`.
"""),
    code("""
# NBVAL_IGNORE_OUTPUT
W.cost_panel()
"""),
    md("""
## 4. KV cache: from MHA through GQA to MQA

While generating text a model keeps the keys and values of every past token: `2 · N · n_kv · d_k`
numbers per layer. Plain multi-head attention has `n_kv = h`; grouped-query attention shares each
key/value head among `h / n_kv` query heads; multi-query attention keeps one (`n_kv = 1`).
"""),
    code("""
# NBVAL_IGNORE_OUTPUT
W.kv_cache_panel()
"""),
    md("""
## Recap

* `d_k = d_model / h`: more heads means narrower heads, not more parameters.
* The shape round trip is a reshape and a transpose out, and a transpose and a reshape back.
* Attention overtakes the projections at `N = 2 d_model`.
* The KV cache scales with `n_kv`: GQA and MQA divide it by `h / n_kv`.
"""),
]

nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (mha)", "language": "python"}
nb.metadata["language_info"] = {"name": "python"}
nb.metadata["title"] = "Multi-head attention dashboard"
out = Path(__file__).resolve().parents[1] / "dashboard.ipynb"
nbf.write(nb, out)
print(f"wrote {out}")
