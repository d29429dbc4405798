"""Bring your own model, in a real browser: ``MHA_MODELS=/path/to/folder`` adds each model folder
under it to the dashboard's real-heads picker (Playwright + Debian's chromium + Voila).

Two tiny random checkpoints (a Llama with GQA and a GPT-2, written by transformers:
tests/byom_checkpoints.py) go into a folder; Voila serves the dashboard with ``MHA_MODELS``
pointing at it. The picker lists both; choosing one draws its heads (the chosen head and every
head of the layer), the caption names it, find-a-head and the induction demo run on it, and the
write mode writes with it.
"""

from __future__ import annotations

import re

import pytest
from byom_checkpoints import write_checkpoint
from dashboard_server import voila_server
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.transformers, pytest.mark.models]

LOAD_TIMEOUT_MS = 180_000  # a cold kernel runs the whole notebook (MiniLM once) before the HTML comes
UPDATE_TIMEOUT_MS = 30_000
BIG = ".mha-real-big.mha-heatmap[data-drawn] canvas"
THUMBS = ".mha-real-thumbs.mha-heatmap[data-drawn] canvas"
TITLES = {"tiny-llama": "tiny-llama (your llama model: writes text)",
          "tiny-gpt2": "tiny-gpt2 (your gpt2 model: writes text)"}


@pytest.fixture(scope="module")
def page(browser, tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    root = tmp_path_factory.mktemp("mha_models")
    write_checkpoint("llama", root / "tiny-llama")
    write_checkpoint("gpt2", root / "tiny-gpt2")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MHA_MODELS", str(root))  # the server and its kernels inherit it
        with voila_server() as srv:
            pg = browser.new_page(viewport={"width": 1280, "height": 1200})
            pg.console_errors = []
            pg.on("console", lambda m: m.type == "error" and pg.console_errors.append(m.text))
            pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
            pg.goto(srv.url, timeout=LOAD_TIMEOUT_MS)
            pg.wait_for_selector(BIG, timeout=LOAD_TIMEOUT_MS)
            yield pg
            pg.close()


def _caption(page):
    return page.locator(".mha-real-caption")


def test_the_picker_lists_the_folders_models(page):
    options = [o.replace("\xa0", " ") for o in page.locator(".mha-real-model select option").all_inner_texts()]
    assert options[:2] == ["all-MiniLM-L6-v2 (reads a whole sentence)", "SmolLM2-135M-Instruct (writes text)"]
    assert sorted(options[2:]) == sorted(TITLES.values())


@pytest.mark.parametrize("name, heads", [("tiny-llama", 6), ("tiny-gpt2", 4)])
def test_choosing_one_draws_its_heads(page, name, heads):
    page.locator(".mha-real-model select").select_option(label=TITLES[name])
    expect(_caption(page)).to_contain_text(name, timeout=UPDATE_TIMEOUT_MS)
    caption = _caption(page).inner_text()
    assert "your own parameters" in caption and re.search(rf"layer \d of 2\b.* head \d of {heads}\b", caption)
    expect(page.locator(THUMBS)).to_have_count(heads, timeout=UPDATE_TIMEOUT_MS)  # every head of the layer
    expect(page.locator(".mha-real-big .mha-heatmap-alt")).to_contain_text(name, timeout=UPDATE_TIMEOUT_MS)
    assert page.locator(BIG).count() == 1
    # find a head: a button whose pattern some head shows clearly opens it; the others (a tiny random
    # model's heads: all of them here) are off, each named with its reason in the line under them
    note = page.locator(".mha-real-find-note")
    for button in page.locator(".mha-real-preset").all():
        name = button.inner_text().strip()
        if button.is_disabled():
            expect(note).to_contain_text(name, timeout=UPDATE_TIMEOUT_MS)
            continue
        button.click()
        expect(page.locator(".mha-real-about")).to_contain_text(name, timeout=UPDATE_TIMEOUT_MS)
        assert page.locator(".mha-real-panel .mha-status").inner_text() == ""
    assert "Traceback" not in page.inner_text("body") and page.console_errors == []


def test_the_induction_demo_and_the_write_mode_use_it(page):
    page.locator(".mha-real-model select").select_option(label=TITLES["tiny-llama"])
    expect(_caption(page)).to_contain_text("tiny-llama", timeout=UPDATE_TIMEOUT_MS)
    page.locator(".mha-real-induction").click()
    expect(_caption(page)).to_contain_text("induction demo", timeout=UPDATE_TIMEOUT_MS)
    assert "tiny-llama" in _caption(page).inner_text()
    expect(page.locator(".mha-write-panel h3")).to_have_text("Write: watch tiny-llama add tokens")
    page.locator(".mha-write-run").click()
    expect(page.locator(".mha-write-output .mha-write-token").first).to_be_visible(timeout=UPDATE_TIMEOUT_MS)
    expect(page.locator(".mha-write-caption")).to_contain_text("tiny-llama", timeout=UPDATE_TIMEOUT_MS)
    assert page.locator(".mha-write-row").count() >= 1
    assert page.console_errors == []
