"""Tiny helper for the notebook generator scripts in this folder.

Each ``build_XX.py`` script lists a notebook's cells as ``md(...)`` and ``code(...)`` and calls
``write``. The committed artefact is the executed ``.ipynb``; regenerate one with::

    .venv/bin/python notebooks/_src/build_01_one_head.py
    .venv/bin/jupyter nbconvert --to notebook --execute --inplace notebooks/01_one_head.ipynb
    .venv/bin/nbstripout --keep-output --keep-count notebooks/01_one_head.ipynb
    .venv/bin/pytest notebooks/01_one_head.ipynb -q
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent


def md(text: str) -> nbformat.NotebookNode:
    """A markdown cell from an indented triple-quoted string."""
    return nbformat.v4.new_markdown_cell(textwrap.dedent(text).strip("\n"))


def code(text: str) -> nbformat.NotebookNode:
    """A code cell from an indented triple-quoted string."""
    return nbformat.v4.new_code_cell(textwrap.dedent(text).strip("\n"))


def write(name: str, cells: list[nbformat.NotebookNode]) -> Path:
    """Write ``notebooks/<name>`` with a plain python3 kernelspec (works in Lab, Voila, Binder)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    path = NOTEBOOKS / name
    nbformat.write(nb, path)
    return path
