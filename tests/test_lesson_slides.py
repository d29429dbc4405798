"""``make lesson-slides``: a lesson notebook as offline reveal.js slides (scripts/lesson_slides.py + Voila)."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
from dashboard_server import REPO, is_local, launch_chromium, voila_server

spec = importlib.util.spec_from_file_location("lesson_slides", REPO / "scripts" / "lesson_slides.py")
lesson_slides = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lesson_slides)

# Voila renders a cold kernel in ~3-7 s on 2 busy cores, then runs the lesson: up to a minute
# on a loaded machine (08 loads its trained models, 10 two real ones).
LOAD_TIMEOUT_MS = 240_000


def _md(src):
    return {"cell_type": "markdown", "source": src, "metadata": {}}


def _code(src):
    return {"cell_type": "code", "source": src, "metadata": {}, "outputs": [], "execution_count": None}


def test_headings_start_slides():
    nb = {"cells": [_code("import numpy"), _md("# Title"), _md("text"), _md("## 1 · A section\nmore"),
                    _code("x = 1"), _md("### Exercise"), _md("#### small heading")]}
    kinds = [c["metadata"]["slideshow"]["slide_type"] for c in lesson_slides.with_slides(nb)["cells"]]
    assert kinds == ["skip", "slide", "-", "slide", "-", "subslide", "-"]  # the import cell is set-up


def test_a_slide_taller_than_the_screen_is_cut():
    long_code = _code("\n".join(f"x{i} = {i}" for i in range(40)))
    nb = {"cells": [_md("## A section"), _code("y = 1"), long_code, _code("z = 2")]}
    kinds = [c["metadata"]["slideshow"]["slide_type"] for c in lesson_slides.with_slides(nb)["cells"]]
    assert kinds == ["slide", "-", "subslide", "subslide"]


def test_a_long_table_is_cut_with_its_header_repeated():
    rows = "\n".join(f"| term {i} | a meaning long enough to fill a line on a slide, or nearly so |" for i in range(40))
    nb = {"cells": [_md("## Glossary\n\n| term | meaning |\n|---|---|\n" + rows)]}
    cells = lesson_slides.with_slides(nb)["cells"]
    assert len(cells) > 2 and all(lesson_slides.cell_height(c) <= lesson_slides.SCREEN_PX for c in cells)
    assert all("| term | meaning |" in c["source"] for c in cells[1:])
    text = "".join(c["source"] for c in cells)
    assert all(f"| term {i} |" in text for i in range(40))


def test_a_notebook_with_its_own_slides_is_kept():
    nb = {"cells": [_md("## A"), {**_md("## B"), "metadata": {"slideshow": {"slide_type": "fragment"}}}]}
    out = lesson_slides.with_slides(json.loads(json.dumps(nb)))
    assert [c["metadata"]["slideshow"]["slide_type"] for c in out["cells"]] == ["slide", "fragment"]


def test_main_writes_a_copy_and_leaves_the_lesson_alone(tmp_path):
    lesson = REPO / "notebooks" / "01_one_head.ipynb"
    before = lesson.read_bytes()
    out = lesson_slides.main([str(lesson), str(tmp_path)])
    assert lesson.read_bytes() == before
    cells = json.loads(out.read_text())["cells"]
    assert cells[0]["metadata"]["slideshow"]["slide_type"] == "slide"
    assert sum(c["metadata"]["slideshow"]["slide_type"] == "slide" for c in cells) >= 3


def test_main_refuses_a_missing_notebook(tmp_path):
    with pytest.raises(SystemExit):
        lesson_slides.main([str(tmp_path / "nope.ipynb"), str(tmp_path)])


@pytest.mark.browser
def test_on_ramp_slides_work_offline():
    from playwright.sync_api import expect, sync_playwright

    out_dir = REPO / "build" / "test-slides"
    copy = lesson_slides.main([str(REPO / "notebooks" / "00_on_ramp.ipynb"), str(out_dir)])
    args = ("--template=mha-reveal", "--VoilaConfiguration.strip_sources=False",
            "--VoilaConfiguration.resources={'reveal': {'url_prefix': "
            "'/voila/templates/mha-reveal/static/reveal'}}")
    try:
        with voila_server(*args, notebook=str(copy.relative_to(REPO))) as srv, sync_playwright() as p:
            browser = launch_chromium(p)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            requests, errors = [], []
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(srv.url, timeout=LOAD_TIMEOUT_MS)  # Voila runs the notebook before the page loads
            present = page.locator(".reveal .slides section.present:not(.stack)")
            present.wait_for(timeout=LOAD_TIMEOUT_MS)
            assert "ON-RAMP" in present.inner_text().upper()  # reveal headings are upper-cased by CSS
            page.keyboard.press("ArrowRight")
            expect(present).to_contain_text("One query searches the keys", timeout=20_000)
            page.keyboard.press("ArrowRight")  # section 2: the first figure, with its alt text
            expect(present).to_contain_text("Softmax: from scores to weights", timeout=20_000)
            for _ in range(4):  # the figure is on one of the section's sub-slides (arrow down)
                if present.locator("img[alt*='Bar chart of one query']").count():
                    break
                page.keyboard.press("ArrowDown")
                page.wait_for_timeout(500)
            assert present.locator("img[alt*='Bar chart of one query']").count() == 1
            assert page.locator("text=def my_softmax").count() >= 1  # code is shown on lesson slides
            page.wait_for_timeout(500)
            outside = sorted({u for u in requests if not is_local(u, srv.port)})
            assert outside == [], f"requests left 127.0.0.1: {outside}"
            assert errors == [], errors
            browser.close()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


LESSONS = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
SCREEN = {"width": 1366, "height": 768}
# The dashboard's panels (02 §8 the shape explorer, 04 §3 the heatmap explorer) are taller than a
# 768-px screen by themselves, whatever the slide breaks: on a slide they scroll. Their layout is
# the panels' own (mha_core/ui), so a slide holding one is reported, not failed.
PANEL = ".widget-vbox, .jupyter-widgets.widget-container"


@pytest.fixture(scope="module")
def lesson_slides_server():
    """One Voila server for the slides of every lesson (a page per lesson: /voila/render/NAME.ipynb),
    so that the server starts once; each page still runs its own kernel."""
    out_dir = REPO / "build" / "test-slides-all"
    for lesson in LESSONS:
        lesson_slides.main([str(REPO / "notebooks" / f"{lesson}.ipynb"), str(out_dir)])
    args = ("--template=mha-reveal", "--VoilaConfiguration.strip_sources=False",
            "--VoilaConfiguration.resources={'reveal': {'url_prefix': "
            "'/voila/templates/mha-reveal/static/reveal'}}")
    try:
        with voila_server(*args, notebook=str(out_dir.relative_to(REPO))) as srv:
            yield srv
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def _slide_heights(page) -> list[tuple[str, int, int, bool]]:
    """Walk every slide (Space = next, sub-slides included); (first words, scroll height, visible
    height, holds a dashboard panel) per slide. Transitions are off (``?transition=none``), so the
    slide that is present after a key press is measured at once."""
    seen = []
    present = page.locator(".reveal .slides section.present:not(.stack)")
    for _ in range(300):
        key, scroll, visible, panel = present.evaluate(
            "(el, panel) => [el.innerText.slice(0, 60) + '@' + Array.from(el.parentNode.children).indexOf(el) "
            "+ '.' + Array.from(document.querySelectorAll('.reveal .slides > section')).indexOf("
            "el.closest('.reveal .slides > section')), el.scrollHeight, el.clientHeight, "
            "el.querySelector(panel) !== null]", PANEL)
        if seen and key == seen[-1][0]:
            return seen
        seen.append((key, scroll, visible, panel))
        page.keyboard.press("Space")
    raise AssertionError("more than 300 slides, or Space does not move")


@pytest.mark.browser
@pytest.mark.parametrize("lesson", LESSONS)
def test_no_slide_overflows_a_1366x768_screen(lesson, lesson_slides_server):
    """"No slide should hold more than a screen": every slide's content fits without scrolling."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport=SCREEN)
        page.goto(f"{lesson_slides_server.url}voila/render/{lesson}.ipynb?transition=none",
                  timeout=LOAD_TIMEOUT_MS)  # Voila runs the lesson before the page loads
        page.locator(".reveal .slides section.present:not(.stack)").wait_for(timeout=LOAD_TIMEOUT_MS)
        heights = _slide_heights(page)
        browser.close()
    assert len(heights) >= 5  # the walk moved through the lesson
    too_tall = [(key, sh, ch) for key, sh, ch, panel in heights if sh > ch + 2 and not panel]
    assert too_tall == [], f"slides taller than the screen (scroll height, visible height): {too_tall}"


def test_a_long_list_is_cut_between_its_items():
    items = "\n".join(f"- **term {i}**: a meaning long enough to fill most of a line on a slide, and then\n"
                      f"  a second line of it" for i in range(30))
    cells = lesson_slides.with_slides({"cells": [_md("## Words\n\n" + items)]})["cells"]
    assert len(cells) > 2 and all(lesson_slides.cell_height(c) <= lesson_slides.SCREEN_PX for c in cells[1:])
    text = "".join(c["source"] for c in cells)
    assert all(f"- **term {i}**" in text for i in range(30))
    assert all(c["source"].lstrip().startswith(("- ", "<style>")) for c in cells[1:])


def test_an_html_table_output_counts_its_rows():
    table = "<table>" + "<tr><td>x</td></tr>" * 30 + "</table>"
    cell = {**_code("show(ledger)"), "outputs": [{"output_type": "display_data", "data": {"text/html": table}}]}
    assert lesson_slides.cell_height(cell) >= 30 * lesson_slides.TABLE_ROW_PX
