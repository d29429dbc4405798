"""The real-model panel's write mode in a real browser (Playwright + Debian's chromium + Voila).

Needs the model cache (``make models``). The reader types a prompt, and SmolLM2's new tokens
appear one at a time, each with the chosen head's attention row; the prompt
``<img src=x onerror=alert(1)>`` renders as text (no dialog, no injected element).
"""

from __future__ import annotations

import pytest
from dashboard_server import launch_chromium, voila_server
from playwright.sync_api import expect, sync_playwright

pytestmark = pytest.mark.browser

LOAD_TIMEOUT_MS = 180_000  # a cold kernel runs the whole notebook before the HTML comes
WRITE_TIMEOUT_MS = 120_000  # three tokens of SmolLM2 on a busy 2-core machine
XSS = "<img src=x onerror=alert(1)>"
NEW_TOKENS = 3

# Records every number of rows the page shows, so that "one at a time" can be checked.
ROW_PROBE = """() => {
  const box = document.querySelector('.mha-write-rows');
  window.__rows = [];
  new MutationObserver(() => {
    const n = box.querySelectorAll('.mha-write-row').length;
    if (window.__rows[window.__rows.length - 1] !== n) window.__rows.push(n);
  }).observe(box, {childList: true, subtree: true});
}"""


@pytest.fixture(scope="module")
def page():
    from mha_core.models import load

    load("smollm2")  # raises with a message naming `make models`
    with sync_playwright() as p, voila_server() as srv:
        browser = launch_chromium(p)
        pg = browser.new_page(viewport={"width": 1280, "height": 1200})
        pg.dialogs = []
        pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))
        pg.console_errors = []
        pg.on("pageerror", lambda e: pg.console_errors.append(str(e)))
        pg.goto(srv.url, timeout=LOAD_TIMEOUT_MS)
        pg.wait_for_selector(".mha-write-panel .mha-write-prompt input", timeout=LOAD_TIMEOUT_MS)
        yield pg
        pg.close()
        browser.close()


def _write(page, prompt: str) -> None:
    readout = page.locator(".mha-write-length .widget-readout")
    readout.fill(str(NEW_TOKENS))
    readout.press("Enter")
    box = page.locator(".mha-write-prompt input")
    box.fill(prompt)
    box.press("Enter")
    page.evaluate(ROW_PROBE)
    page.locator(".mha-write-run").click()


def test_tokens_appear_one_at_a_time_and_the_xss_prompt_is_text(page):
    _write(page, XSS)
    rows = page.locator(".mha-write-row")
    expect(rows).to_have_count(NEW_TOKENS, timeout=WRITE_TIMEOUT_MS)
    assert page.evaluate("window.__rows") == list(range(1, NEW_TOKENS + 1))  # one new row per token
    assert XSS in page.locator(".mha-write-output").inner_text()
    caption = page.locator(".mha-write-caption").inner_text()
    assert "4-bit quantised" in caption and "layer 0, head 0" in caption
    page.wait_for_timeout(500)
    assert page.dialogs == []
    assert page.locator("img[src='x']").count() == 0
    assert page.evaluate("document.querySelectorAll('[onerror]').length") == 0
    assert page.locator(".mha-write-panel img").count() == 0
    label = rows.first.get_attribute("aria-label")
    assert label.startswith("new token 1, ") and "most weight on token" in label
    key = page.locator(".mha-write-key").first
    assert key.get_attribute("title").startswith("0: ")
    assert page.console_errors == []


def test_an_empty_prompt_gives_a_message(page):
    box = page.locator(".mha-write-prompt input")
    box.fill("   ")
    box.press("Enter")
    page.locator(".mha-write-run").click()
    expect(page.locator(".mha-write-status")).to_contain_text("the sentence is empty", timeout=WRITE_TIMEOUT_MS)
    assert "Traceback" not in page.inner_text("body")
