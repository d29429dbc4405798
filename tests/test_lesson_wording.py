"""Wording of notebooks 00-06 that a cold reader tripped on (issue 28, second cold read): the
terms the lessons use, the options of the printed layer, text meant for maintainers."""

from __future__ import annotations

import inspect
import re

import pytest
from lesson_claims import NOTEBOOKS, markdown_text

from mha_core import multi_head_attention

LESSONS = sorted(p.name for p in NOTEBOOKS.glob("0[0-6]_*.ipynb"))


@pytest.mark.parametrize("name", LESSONS)
def test_counts_are_called_dominated_not_bound(name):
    """"-bound" names a time bottleneck; the lessons' statement is about MAC counts."""
    assert not re.findall(r"\b(?:projection|attention)-bound\b", markdown_text(name), re.I)


@pytest.mark.parametrize("name", LESSONS)
def test_no_text_for_maintainers_in_a_students_path(name):
    assert not re.findall(r"\ba test checks\b", markdown_text(name), re.I)


def test_02_says_what_each_option_of_the_printed_layer_is():
    """Notebook 02 prints the layer's source; each keyword option in it is named in backticks in the
    prose beside it, with what it is."""
    options = [p for p in inspect.signature(multi_head_attention).parameters.values()
               if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "return_weights"]
    prose = markdown_text("02_shape_round_trip.ipynb")
    missing = [p.name for p in options if f"`{p.name}" not in prose]
    assert not missing, missing


def test_01_says_the_head_block_is_half_open():
    assert "up to but not including $(i+1)\\,d_k$" in markdown_text("01_one_head.ipynb")


def test_02_points_to_the_notebook_that_writes_the_formula():
    assert "the formula of notebook 00, section 3" in markdown_text("02_shape_round_trip.ipynb")
    assert "## 3 · Every query at once: one attention head" in markdown_text("00_on_ramp.ipynb")
    assert "lesson 01's formula" not in markdown_text("02_shape_round_trip.ipynb")
