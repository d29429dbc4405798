"""A lesson notebook as slides: ``python scripts/lesson_slides.py NOTEBOOK OUT_DIR`` (``make lesson-slides``).

Writes a copy of NOTEBOOK to OUT_DIR with reveal.js slide breaks, for Voila's offline
``mha-reveal`` template. A notebook that already has ``slideshow`` metadata (``00_on_ramp``, the
dashboard) is copied as it is, so a teacher's own slide layout from JupyterLab's property
inspector wins. Otherwise every markdown cell that opens with a ``#`` or ``##`` heading starts a
slide, a ``###`` heading starts a sub-slide (arrow down), and every other cell stays on the slide
above it. The copy is what Voila serves; the lesson itself is never modified.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

SLIDE = re.compile(r"^#{1,2} ")
SUBSLIDE = re.compile(r"^### ")


def slide_type(cell: dict) -> str:
    """``slide``, ``subslide`` or ``-`` (continue the current slide) for one cell."""
    if cell["cell_type"] != "markdown":
        return "-"
    src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    first = src.lstrip().split("\n", 1)[0]
    if SLIDE.match(first):
        return "slide"
    if SUBSLIDE.match(first):
        return "subslide"
    return "-"


def with_slides(nb: dict) -> dict:
    """The notebook with slide breaks, unless it already has its own ``slideshow`` metadata."""
    cells = nb["cells"]
    if any("slideshow" in c.get("metadata", {}) for c in cells):
        return nb
    for c in cells:
        c.setdefault("metadata", {})["slideshow"] = {"slide_type": slide_type(c)}
    if cells:  # the first cell always opens the first slide
        cells[0]["metadata"]["slideshow"] = {"slide_type": "slide"}
    return nb


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    if args.notebook.suffix != ".ipynb" or not args.notebook.is_file():
        parser.error(f"notebook must be an existing .ipynb file, got {args.notebook}")
    nb = with_slides(json.loads(args.notebook.read_text()))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / args.notebook.name
    out.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    print(out)
    return out


if __name__ == "__main__":
    main()
