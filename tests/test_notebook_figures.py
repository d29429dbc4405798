"""Every figure of the lessons (00-08, 12 and any later NN_ notebook) has alt text and no text under 10 pt at rendered size.

The notebooks are committed executed; ``viz.show_figure`` writes each figure as an ``<img>`` with
``alt``, and the output's metadata holds ``min_font_pt`` (the smallest text, measured by
``viz.rendered_font_sizes`` when the notebook ran). A bare PNG output (``plt.show()``) has no alt
text and fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mha_core.ui.viz import MIN_FONT_PT

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
IMG = re.compile(r"<img\b[^>]*>")


def _images(path: Path):
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "image/png" in data or "image/jpeg" in data or "image/svg+xml" in data:
                yield i, None, None  # an image without alt text
            for tag in IMG.findall("".join(data.get("text/html", ""))):
                yield i, tag, out.get("metadata", {}).get("text/html", {}).get("min_font_pt")


def test_the_lesson_notebooks_are_found():
    assert {f"{i:02d}" for i in range(9)} <= {p.name[:2] for p in NOTEBOOKS}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_has_alt_text_and_projector_sized_text(path):
    images = list(_images(path))
    for i, tag, pt in images:
        assert tag is not None, f"cell {i}: a bare image output (plt.show()?); use viz.show_figure(fig, alt)"
        alt = re.search(r'alt="([^"]*)"', tag)
        assert alt and len(alt.group(1).split()) >= 5, f"cell {i}: alt text missing or too short"
        assert pt is not None, f"cell {i}: no min_font_pt in the output's metadata (not from show_figure?)"
        assert pt >= MIN_FONT_PT - 1e-9, f"cell {i}: smallest text renders at {pt} pt"
