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
import base64
import json
import math
import re
import struct
from pathlib import Path

# A figure is shown at most this tall on a slide (a share of the screen), so that a cell's code
# and its figure fit on one screen together; the figure keeps its proportions. Prepended to the
# first slide's markdown as a <style> block: it styles only this copy's page.
FIGURE_MAX_VH = 52
SLIDE_STYLE = (f"<style>.reveal .slides section img "
               f"{{max-height: {FIGURE_MAX_VH}vh; width: auto !important;}}</style>\n\n")
SLIDE = re.compile(r"^#{1,2} ")
SUBSLIDE = re.compile(r"^### ")
LIST_ITEM = re.compile(r"^(?:[-*+]|\d+\.) ")


def _source(cell: dict) -> str:
    """A cell's source as one string (nbformat stores it as a string or a list of lines)."""
    return cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])


def slide_type(cell: dict) -> str:
    """``slide``, ``subslide`` or ``-`` (continue the current slide) for one cell."""
    if cell["cell_type"] != "markdown":
        return "-"
    src = _source(cell)
    first = src.lstrip().split("\n", 1)[0]
    if SLIDE.match(first):
        return "slide"
    if SUBSLIDE.match(first):
        return "subslide"
    return "-"


# Heights in reveal.js's own pixels (the slide is 960 x 700, scaled to the screen); measured on
# the lessons in Chromium and rounded up.
SCREEN_PX = 560
CHARS_PER_LINE = {"markdown": 80, "code": 95, "output": 110}
LINE_PX = {"markdown": 30, "heading": 52, "code": 21, "output": 19}
CELL_GAP_PX = 24
TABLE_ROW_PX = 30  # one row of an HTML table output
IMAGE_WIDTH_PX = 900  # an image is shown at most this wide
FIGURE_MAX_PX = round(700 * FIGURE_MAX_VH / 100)  # ... and at most this tall (the slide is 700 px high)
IMG = re.compile(r'<img src="data:image/png;base64,([^"]+)"[^>]*?width="(\d+)"')


def _lines(text: str, kind: str) -> int:
    return sum(max(1, math.ceil(len(line) / CHARS_PER_LINE[kind])) for line in text.splitlines())


def _markdown_px(text: str) -> int:
    """Height (reveal.js px) of markdown text without headings."""
    return _lines(text, "markdown") * LINE_PX["markdown"]


def _png_size(b64: str) -> tuple[int, int]:
    head = base64.b64decode(b64[:64])
    return struct.unpack(">II", head[16:24])


def cell_height(cell: dict) -> int:
    """Estimated height (reveal.js px) of one cell with its outputs on a slide."""
    src = _source(cell)
    if cell["cell_type"] == "markdown":
        body = [ln for ln in src.splitlines() if not ln.startswith("#")]
        headings = len(src.splitlines()) - len(body)
        return CELL_GAP_PX + headings * LINE_PX["heading"] + _markdown_px("\n".join(body))
    height = CELL_GAP_PX + _lines(src, "code") * LINE_PX["code"]
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            height += _lines("".join(out["text"]), "output") * LINE_PX["output"]
            continue
        data = out.get("data", {})
        html = "".join(data.get("text/html", ""))
        match = IMG.search(html)
        if html and not match:  # a table or text drawn in HTML: its rows, else its text lines
            rows = html.count("<tr")
            text = re.sub(r"<[^>]+>", "", html)
            height += rows * TABLE_ROW_PX if rows else _lines(text, "output") * LINE_PX["output"]
        elif match:
            width, px_high = _png_size(match.group(1))
            shown = min(int(match.group(2)), IMAGE_WIDTH_PX)
            height += min(round(px_high * shown / width), FIGURE_MAX_PX)
        elif "application/vnd.jupyter.widget-view+json" in data:
            height += SCREEN_PX  # a panel: a slide of its own
        else:
            height += _lines("".join(data.get("text/plain", "")), "output") * LINE_PX["output"]
    return height


def _is_setup(cell: dict) -> bool:
    """The lesson's import cell: only imports, comments and blank lines."""
    src = _source(cell)
    lines = [ln for ln in src.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    statements = re.sub(r"\([^)]*\)", "", "\n".join(lines), flags=re.S)
    return cell["cell_type"] == "code" and bool(lines) and all(
        ln.startswith(("import ", "from ")) for ln in statements.splitlines() if ln.strip())


def _blocks(markdown: str) -> list[str]:
    """A markdown text cut at blank lines; a list longer than a screen is cut between its items,
    and a table longer than a screen into tables of fewer rows, each with the header repeated."""
    out = []
    for block in re.split(r"\n\s*\n", markdown.strip()):
        lines = block.splitlines()
        items = [i for i, ln in enumerate(lines) if LIST_ITEM.match(ln)]
        if len(items) > 1 and _markdown_px(block) > SCREEN_PX:  # a long list: cut between its items
            starts = [0, *[i for i in items if i > 0], len(lines)]
            chunk: list[str] = []
            for a, b in zip(starts, starts[1:], strict=False):
                item = lines[a:b]
                if chunk and _markdown_px("\n".join(chunk + item)) > SCREEN_PX - 80:
                    out.append("\n".join(chunk))
                    chunk = []
                chunk += item
            out.append("\n".join(chunk))
            continue
        if not (len(lines) > 2 and lines[0].startswith("|") and lines[1].startswith("|")
                and _markdown_px(block) > SCREEN_PX):
            out.append(block)
            continue
        head, rows, chunk = lines[:2], lines[2:], []
        for row in rows:
            if chunk and _markdown_px("\n".join(head + chunk + [row])) > SCREEN_PX - 80:
                out.append("\n".join(head + chunk))
                chunk = []
            chunk.append(row)
        out.append("\n".join(head + chunk))
    return out


def split_long_markdown(cells: list[dict]) -> list[dict]:
    """Markdown cells taller than a screen, cut into several cells at paragraph boundaries."""
    out = []
    for cell in cells:
        if cell["cell_type"] != "markdown" or cell_height(cell) <= SCREEN_PX:
            out.append(cell)
            continue
        part: list[str] = []
        for block in _blocks(_source(cell)):
            trial = {"cell_type": "markdown", "source": "\n\n".join(part + [block])}
            if part and cell_height(trial) > SCREEN_PX:
                out.append({**cell, "metadata": dict(cell.get("metadata", {})), "source": "\n\n".join(part)})
                cell = {**cell, "metadata": {k: v for k, v in cell.get("metadata", {}).items() if k != "slideshow"}}
                part = []
            part.append(block)
        out.append({**cell, "metadata": dict(cell.get("metadata", {})), "source": "\n\n".join(part)})
    return out


def with_slides(nb: dict) -> dict:
    """The notebook with slide breaks (its own ``slideshow`` metadata kept), the set-up skipped,
    and a sub-slide wherever a slide would outgrow the screen."""
    own = any("slideshow" in c.get("metadata", {}) for c in nb["cells"])
    cells = nb["cells"] = split_long_markdown(nb["cells"])
    for c in cells:
        meta = c.setdefault("metadata", {})
        if not own:
            meta["slideshow"] = {"slide_type": slide_type(c)}
        meta.setdefault("slideshow", {"slide_type": "-"})
        if _is_setup(c) or "remove-on-slides" in meta.get("tags", []):
            meta["slideshow"] = {"slide_type": "skip"}
    if cells and cells[0]["metadata"]["slideshow"]["slide_type"] != "skip":
        cells[0]["metadata"]["slideshow"] = {"slide_type": "slide"}  # the first cell opens the first slide
    used = 0
    for c in cells:
        kind = c["metadata"]["slideshow"]["slide_type"]
        if kind == "skip":
            continue
        h = cell_height(c)
        if kind in ("slide", "subslide"):
            used = h
        elif used + h > SCREEN_PX and used > 0:
            c["metadata"]["slideshow"] = {"slide_type": "subslide"}
            used = h
        else:
            used += h
    first_text = next((c for c in cells if c["cell_type"] == "markdown"), None)
    if first_text is not None:
        first_text["source"] = SLIDE_STYLE + _source(first_text)
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
