"""references.md against the notebooks: its "used in" column lists exactly the notebooks whose
text cites each work, every author-year citation in a notebook is one of its works, and a few
citations that once said more than the paper say what the paper says.

A citation is the work's first author (and second, for a key "A & B YEAR"), then the year within
a few words: "Vaswani 2017", "Vaswani et al. (2017)", "Vaswani, A. et al. (2017)".
"""

from __future__ import annotations

import re

import pytest
from lesson_claims import NOTEBOOKS, markdown_text

REFERENCES = NOTEBOOKS / "references.md"
NAMES = sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")) + sorted(
    f"solutions/{p.name}" for p in (NOTEBOOKS / "solutions").glob("*.ipynb"))


def _label(name: str) -> str:
    """"11_real_heads.ipynb" -> "11", "solutions/solutions.ipynb" -> "solutions"."""
    return name[:2] if name[0].isdigit() else name.split("/")[1].removesuffix(".ipynb")


def _rows() -> list[list[str]]:
    """The rows (key, reference, used in, for) of every table of references.md."""
    rows = []
    for line in REFERENCES.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.search(r"(19|20)\d\d$", cells[0]):
            rows.append(cells)
    return rows


def table() -> dict[str, set[str]]:
    """key -> the labels of its "used in" column ("—" is none)."""
    rows = {}
    for key, _, used_in, _ in _rows():
        assert key not in rows, f"{key} is listed twice in references.md"
        rows[key] = set() if used_in == "—" else {u.strip() for u in used_in.split(",")}
    return rows


def citation(key: str) -> re.Pattern:
    """How a notebook cites the work ``key`` ("Milakov & Gimelshein 2018")."""
    *authors, year = key.split()
    first, *others = " ".join(authors).split(" & ")
    rest = "".join(rf"\s*(?:&|and)\s*{re.escape(o)}" for o in others)
    return re.compile(rf"\b{re.escape(first)}\b{rest}[^()\d]{{0,30}}?\(?{year}\b")


def cited_in(key: str) -> set[str]:
    pattern = citation(key)
    return {_label(n) for n in NAMES if pattern.search(markdown_text(n))}


def test_the_table_is_read():
    rows = table()
    assert len(rows) > 20 and rows["Dao 2023"] == {"12"} and rows["Harris 2020"] == set()
    assert citation("Milakov & Gimelshein 2018").search("Milakov & Gimelshein (2018) noticed")
    assert citation("Vaswani 2017").search("Vaswani, A. et al. (2017). *Attention")
    assert not citation("Shazeer 2019").search("Shazeer (2020) found")


@pytest.mark.parametrize("key", sorted(table()))
def test_used_in_lists_exactly_the_notebooks_that_cite_the_work(key):
    assert cited_in(key) == table()[key], (
        f"{key}: cited in {sorted(cited_in(key))}, references.md says {sorted(table()[key])}")


# "Xiao et al. 2023", "Zhang & Sennrich (2019)", "Clark 2019", "Modal (2025)": a capitalised name
# then a year. Words that can stand before a year without being a citation are left out.
_CITE = re.compile(r"\b([A-Z][a-z]+)(?:,? [A-Z]\.)*(?: et al\.?| & [A-Z][a-z]+)?,? \(?((?:19|20)\d\d)\b")
NOT_AUTHORS = {"In", "Since", "From", "Until", "By", "The", "Nature", "NeurIPS", "ICML", "ICLR", "EMNLP", "ACL",
               "NAACL", "MLSys", "JMLR", "Neurocomputing", "Llama", "OpenAI", "Anthropic", "Google"}


@pytest.mark.parametrize("name", NAMES)
def test_every_citation_in_a_notebook_is_in_references(name):
    # any author of a listed work, with its year: a list of sources may end a name list anywhere
    known = {(name, key.split()[-1]) for key, reference, _, _ in _rows()
             for name in re.findall(r"[A-Z][a-z]+", f"{key} {reference.split('*')[0]}")}
    found = {(a, y) for a, y in _CITE.findall(markdown_text(name)) if a not in NOT_AUTHORS}
    assert found <= known, f"{name} cites {sorted(found - known)}, which references.md does not list"


# ------------------------------------------------------------- citations that say what the paper says


def test_the_first_token_sink_is_xiao_and_clarks_no_op_is_sep():
    """Clark et al. 2019: heads park attention on [SEP] as a "no-op"; the first-token sink of decoders
    is Xiao et al. 2023. Notebook 08 once credited a first-token "rest" head to Voita and Clark."""
    prose = markdown_text("08_why_several_heads.ipynb")
    assert '"rest" head' not in prose and "[SEP] when their pattern does not apply" in prose
    assert "Xiao et al. (2023) named the first-token version an *attention sink*" in markdown_text("11_real_heads.ipynb")


def test_the_direct_path_is_elhages():
    """Elhage et al. 2021: the direct path is the embedding-to-unembedding term, through no head."""
    prose = markdown_text("11_real_heads.ipynb")
    assert "their *direct path* goes from the embedding straight to the unembedding through no head" in prose
    assert "head's **direct path**" not in prose


def test_michel_is_credited_with_what_michel_found():
    """Michel et al. 2019 (abstract): many heads can be removed at test time without a large loss,
    some layers even reduced to one head. They did not show that which heads matter depends on the task."""
    prose = markdown_text("11_real_heads.ipynb")
    assert "which ones depends on the task" not in prose
    assert "in some layers all but one, could be removed with little loss" in prose


def test_flashattention_loop_orders_and_the_online_softmax_are_credited_right():
    """FlashAttention-1 (Dao et al. 2022, Algorithm 1) loops over key/value blocks outside and query
    blocks inside; FlashAttention-2 (Dao 2023) swaps them. Milakov & Gimelshein 2018 keep a running
    maximum and normaliser; the running weighted sum of the values is Rabe & Staats's and FlashAttention's."""
    prose = markdown_text("12_long_context.ipynb")
    assert "FlashAttention-2 (Dao 2023) takes a **block of queries**" in prose
    assert "key/value tiles outside, query blocks inside" in prose
    assert "keep two running numbers, the largest score so far $m$ and the sum" in prose
    assert "not in Milakov & Gimelshein" in prose
