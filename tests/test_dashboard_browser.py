"""The dashboard in a real browser: Playwright driving Debian's chromium against Voila.

One Voila server (started like ``make dashboard``, preheated pool of 1) and one page serve the
whole module. The tests check: no console error and no request leaving 127.0.0.1; exact labels
and numbers after moving each control to an exact value; that the heatmap image changes; the
safety settings (sources stripped, execute API refused, forged widget messages answered with a
readable message); the slides. They measure the page load and the slider-to-pixels latency
(printed, never asserted) and save the README's screenshot to docs/dashboard.png.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pytest
from dashboard_server import (
    CHROMIUM,
    REPO,
    KernelSocket,
    http,
    is_local,
    launch_chromium,
    voila_server,
)
from playwright.sync_api import expect, sync_playwright

import mha_core as m
from mha_core.ui import widgets as W

pytestmark = pytest.mark.browser


# Generous: a cold kernel renders the notebook in ~3-7 s on 2 busy cores.
LOAD_TIMEOUT_MS = 60_000
UPDATE_TIMEOUT_MS = 20_000
SCREENSHOT = REPO / "docs" / "dashboard.png"
TIMINGS: dict[str, list[float]] = {}

# Records, per watched element, when its new content has been painted: for an <img>, after the
# new picture is decoded; for HTML, at the next animation frame after the change.
PAINT_PROBE = """(watch) => {
  window.__mha = {painted: {}, changes: {}};
  for (const [key, selector] of Object.entries(watch)) {
    const el = document.querySelector(selector);
    window.__mha.painted[key] = 0;
    window.__mha.changes[key] = 0;
    new MutationObserver(() => {
      window.__mha.changes[key] += 1;
      const ready = el.tagName === 'IMG' ? el.decode().catch(() => null) : Promise.resolve();
      ready.then(() => requestAnimationFrame(() => { window.__mha.painted[key] = performance.now(); }));
    }).observe(el, el.tagName === 'IMG' ? {attributes: true, attributeFilter: ['src']}
                                        : {childList: true, subtree: true, characterData: true});
  }
}"""
WATCH = {"heads": "img.mha-heads-image", "cost": "img.mha-cost-image", "kv": "img.mha-kv-image",
         "shape": ".mha-shape-summary"}


def _record(name: str, seconds: float) -> None:
    TIMINGS.setdefault(name, []).append(seconds)


@pytest.fixture(scope="module")
def server():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (.ci/run does this)")
    with voila_server("--preheat_kernel=True", "--pool_size=1") as srv:
        yield srv


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


class Recorder:
    """Every request and console message of one page."""

    def __init__(self, page):
        self.requests: list[str] = []
        self.console: list[tuple[str, str]] = []
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("websocket", lambda ws: self.requests.append(ws.url))
        page.on("console", lambda msg: self.console.append((msg.type, msg.text)))
        page.on("pageerror", lambda err: self.console.append(("pageerror", str(err))))

    def errors(self) -> list[tuple[str, str]]:
        return [c for c in self.console if c[0] in ("error", "pageerror")]


def _load(browser, server, height: int = 1000):
    page = browser.new_page(viewport={"width": 1280, "height": height})
    rec = Recorder(page)
    t0 = time.perf_counter()
    page.goto(server.url)
    page.wait_for_selector("img.mha-heads-image[src^='blob:']", timeout=LOAD_TIMEOUT_MS)
    page.wait_for_selector("img.mha-kv-image[src^='blob:']", timeout=LOAD_TIMEOUT_MS)
    seconds = time.perf_counter() - t0
    # the server's share: until the last byte of the HTML (it runs the notebook unless preheated)
    _record("HTML served (s)", page.evaluate("performance.getEntriesByType('navigation')[0].responseEnd") / 1000)
    return page, rec, seconds


def _wait_pool_filled(server, fills: int) -> None:
    """Wait until voila has (re)filled its preheated pool ``fills`` times."""
    deadline = time.monotonic() + LOAD_TIMEOUT_MS / 1000
    while server.log().count("is filled with") < fills:
        assert time.monotonic() < deadline, f"the kernel pool was not refilled:\n{server.log()[-2000:]}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def loaded(browser, server):
    _wait_pool_filled(server, 1)
    first, _, seconds = _load(browser, server)  # also fills the browser's cache
    _record("page load, preheated kernel, empty browser cache (s)", seconds)
    first.close()
    _wait_pool_filled(server, 2)
    page, rec, seconds = _load(browser, server)
    _record("page load, preheated kernel (s)", seconds)
    page.evaluate(PAINT_PROBE, WATCH)
    yield page, rec
    page.close()


# -- helpers that move controls the way a person does ---------------------------------------------

def _panel(page, name: str):
    return page.locator(f".mha-{name}-panel")


def _set_int(page, css: str, value: int) -> None:
    """Type ``value`` into an IntSlider's readout and press Enter."""
    readout = page.locator(f"{css} .widget-readout")
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(value))
    page.keyboard.press("Enter")
    expect(readout).to_have_text(str(value), timeout=UPDATE_TIMEOUT_MS)


def _set_selection(page, css: str, index: int, label: str) -> None:
    """Move a SelectionSlider to option ``index`` with the arrow keys (one step per key)."""
    handle = page.locator(f"{css} .noUi-handle")
    now = round(float(handle.get_attribute("aria-valuenow")))
    handle.focus()
    for _ in range(abs(index - now)):
        page.keyboard.press("ArrowRight" if index > now else "ArrowLeft")
    expect(page.locator(f"{css} .widget-readout")).to_have_text(label, timeout=UPDATE_TIMEOUT_MS)


def _text(page, css: str) -> str:
    return page.locator(css).inner_text()


def _kernel_id(page) -> str:
    return page.evaluate("JSON.parse(document.getElementById('jupyter-config-data').textContent).kernelId")


# -- load, offline, console ----------------------------------------------------------------------

def test_page_loads_offline_without_console_errors(loaded, server):
    page, rec = loaded
    page.wait_for_timeout(500)
    outside = sorted({u for u in rec.requests if not is_local(u, server.port)})
    assert outside == [], f"requests left 127.0.0.1: {outside}"
    assert rec.errors() == []
    assert len(rec.requests) > 10  # the recorder did see the page's own requests
    for panel in ("shape", "heads", "cost", "kv"):
        expect(_panel(page, panel)).to_be_visible()
    assert "Traceback" not in page.inner_text("body")


def test_load_while_the_pool_refills(browser, server):
    """A visitor right after another: the preheated pool is still refilling."""
    page, rec, seconds = _load(browser, server)
    _record("page load, pool refilling (s)", seconds)
    assert rec.errors() == []
    page.close()


def test_cold_load_without_preheating(browser):
    """POOL=0: every visitor waits for a fresh kernel to run the notebook."""
    with voila_server() as srv:
        page, rec, seconds = _load(browser, srv)
        _record("page load, cold kernel, no preheating (s)", seconds)
        assert rec.errors() == []
        page.close()


# -- safety ----------------------------------------------------------------------------------------

def test_sources_are_stripped(loaded):
    page, _ = loaded
    html = page.content()
    for source in ("from mha_core import widgets as W", "W.shape_explorer()", "OPENBLAS_NUM_THREADS"):
        assert source not in html


def test_execute_api_is_refused(loaded, server, tmp_path):
    page, _ = loaded
    assert http(f"{server.url}api/kernels", method="POST") == 403
    assert http(f"{server.url}api/kernels/{_kernel_id(page)}/restart", method="POST") in (403, 404, 405)
    assert http(f"{server.url}voila/files/notebooks/dashboard.ipynb") in (403, 404)
    # execute_request over the page's own kernel socket is dropped by the server.
    marker = tmp_path / "executed"
    sock = KernelSocket(server, _kernel_id(page))
    try:
        msg_id = sock.send("execute_request", {"code": f"open({str(marker)!r}, 'w').write('x')", "silent": False,
                                               "store_history": False, "user_expressions": {},
                                               "allow_stdin": False, "stop_on_error": True})
        replies = [msg for msg in sock.messages(4) if msg.get("parent_header", {}).get("msg_id") == msg_id]
    finally:
        sock.close()
    assert replies == []
    assert not marker.exists()
    assert "execute_request" in server.log() and "not allowed" in server.log()


def test_forged_widget_messages_get_a_readable_message(loaded, server):
    page, _ = loaded
    status = page.locator(".mha-shape-panel .mha-status")
    sock = KernelSocket(server, _kernel_id(page))
    try:
        ids = sock.find_widgets("mha-shape-h", "mha-shape-N")
        h_id, n_id = ids["mha-shape-h"], ids["mha-shape-N"]
        sock.forge_update(h_id, {"index": 99})  # past the end of h's options
        expect(status).to_contain_text("ignored a value the page sent for h", timeout=UPDATE_TIMEOUT_MS)
        # a forged max lets a huge N through ipywidgets' own check: the callback refuses it
        sock.forge_update(n_id, {"max": 1_000_000, "value": 1_000_000})
        expect(status).to_contain_text("N must be between 1 and 128, got N=1000000", timeout=UPDATE_TIMEOUT_MS)
        sock.forge_update(n_id, {"value": 10})  # put things back, one trait at a time
        expect(page.locator(".mha-shape-N .widget-readout")).to_have_text("10", timeout=UPDATE_TIMEOUT_MS)
        sock.forge_update(n_id, {"max": W.SHAPE_MAX_N})
        sock.send("comm_msg", {"comm_id": n_id, "data": {"method": "request_state"}})  # re-sync the page
    finally:
        sock.close()
    assert "Traceback" not in page.inner_text("body")
    # the page is alive and back in step with the kernel: a real slider move still updates
    expect(page.locator(".mha-shape-h .widget-readout")).to_have_text("8")
    _set_selection(page, ".mha-shape-h", W.divisors(512, W.MAX_HEADS).index(4), "4")
    expect(page.locator(".mha-shape-panel .mha-dk")).to_have_text("128", timeout=UPDATE_TIMEOUT_MS)
    expect(status).to_have_text("")


# -- every control, exact values ---------------------------------------------------------------------

def test_shape_sliders_give_exact_numbers(loaded):
    page, _ = loaded
    dk = page.locator(".mha-shape-panel .mha-dk")
    _set_selection(page, ".mha-shape-d_model", W.SHAPE_D_MODELS.index(512), "512")
    _set_selection(page, ".mha-shape-h", W.divisors(512, W.MAX_HEADS).index(8), "8")
    expect(dk).to_have_text("64", timeout=UPDATE_TIMEOUT_MS)  # d_k = 512 / 8
    _set_selection(page, ".mha-shape-h", W.divisors(512, W.MAX_HEADS).index(16), "16")
    expect(dk).to_have_text("32", timeout=UPDATE_TIMEOUT_MS)
    _set_selection(page, ".mha-shape-d_model", W.SHAPE_D_MODELS.index(256), "256")
    expect(dk).to_have_text("16", timeout=UPDATE_TIMEOUT_MS)  # h = 16 still divides 256
    expect(page.locator(".mha-shape-panel .mha-params")).to_have_text(f"{4 * 256**2:,}")
    _set_int(page, ".mha-shape-B", 3)
    _set_int(page, ".mha-shape-N", 100)
    macs = m.count_macs(m.MHAConfig(256, 16), 100, batch=3)["total"]
    expect(page.locator(".mha-shape-panel .mha-macs")).to_have_text(f"{macs:,}", timeout=UPDATE_TIMEOUT_MS)
    ledger = _text(page, ".mha-shape-ledger")
    assert "(B=3, N=100, d_model=256)" in ledger
    assert "(B=3, h=16, N_q=100, N_k=100)" in ledger
    assert "(B=3, h=16, N=100, d_k=16)" in ledger
    assert page.locator(".mha-shape-boxes svg .mha-box").count() == len(m.trace_shapes(
        __import__("numpy").zeros((1, 2, 8), "float32"), m.init_params(m.MHAConfig(8, 2), 0), 2))


def _wait_painted(page, t0: float, key: str = "heads") -> float:
    """Milliseconds from ``t0`` (page clock) until the watched element ``key`` was repainted."""
    page.wait_for_function("([t0, key]) => window.__mha.painted[key] > t0", arg=[t0, key],
                           timeout=UPDATE_TIMEOUT_MS)
    return page.evaluate("key => window.__mha.painted[key]", key) - t0


def test_head_controls_change_the_heatmap(loaded):
    page, _ = loaded
    caption = page.locator(".mha-heads-caption")
    img = page.locator("img.mha-heads-image")
    srcs = [img.get_attribute("src")]
    assert page.locator(".mha-heads-h .widget-readout").inner_text() == "4"
    handle = page.locator(".mha-heads-h .noUi-handle")
    for expected in ("8", "16"):  # h values not drawn before: the grid builds a new frame
        handle.focus()
        t0 = page.evaluate("performance.now()")
        page.keyboard.press("ArrowRight")
        _record("h slider to pixels, first visit of that h (ms)", _wait_painted(page, t0))
        expect(page.locator(".mha-heads-h .widget-readout")).to_have_text(expected)
    _set_int(page, ".mha-heads-N", 64)
    expect(caption).to_contain_text("h=16, N=64, no mask", timeout=UPDATE_TIMEOUT_MS)
    srcs.append(img.get_attribute("src"))
    page.locator(".mha-heads-causal").click()
    expect(caption).to_contain_text("h=16, N=64, causal mask", timeout=UPDATE_TIMEOUT_MS)
    srcs.append(img.get_attribute("src"))
    page.locator(".mha-heads-query select").select_option(label="8: it")
    expect(img).not_to_have_attribute("src", srcs[-1], timeout=UPDATE_TIMEOUT_MS)
    srcs.append(img.get_attribute("src"))
    assert len(set(srcs)) == len(srcs)
    assert len(page.locator(".mha-heads-query option").all()) == 64 + 1
    page.locator(".mha-heads-kind button", has_text="trained").click()
    if W.trained_available():
        if 16 not in W.trained_available():  # a readable refusal first
            expect(page.locator(".mha-heads-panel .mha-status")).to_contain_text(
                "no trained model with h=16", timeout=UPDATE_TIMEOUT_MS)
        h = max(W.trained_available())
        _set_selection(page, ".mha-heads-h", W.HEAD_CHOICES.index(h), str(h))
        expect(caption).to_contain_text(f"TRAINED weights (toy task), h={h}", timeout=UPDATE_TIMEOUT_MS)
    else:  # no trained weights installed: a readable message, the random maps stay
        expect(page.locator(".mha-heads-panel .mha-status")).to_contain_text("not available",
                                                                             timeout=UPDATE_TIMEOUT_MS)
        assert "RANDOM" in caption.inner_text()
    page.locator(".mha-heads-kind button", has_text="random").click()
    expect(caption).to_contain_text("RANDOM", timeout=UPDATE_TIMEOUT_MS)


def test_slider_to_pixels_latency(loaded):
    """h = 16 heads of N = 64 tokens: time from key press to the new heatmap painted."""
    page, _ = loaded
    caption = page.locator(".mha-heads-caption")
    _set_selection(page, ".mha-heads-h", W.HEAD_CHOICES.index(16), "16")
    _set_int(page, ".mha-heads-N", 64)
    expect(caption).to_contain_text("h=16, N=64", timeout=UPDATE_TIMEOUT_MS)
    page.wait_for_timeout(300)
    n_handle = page.locator(".mha-heads-N .noUi-handle")
    h_handle = page.locator(".mha-heads-h .noUi-handle")
    for i in range(6):
        for key, handle, name, expected in (("ArrowLeft", n_handle, "N slider", "N=63"),
                                            ("ArrowRight", n_handle, "N slider", "N=64"),
                                            ("ArrowLeft", h_handle, "h slider", "h=8"),
                                            ("ArrowRight", h_handle, "h slider", "h=16")):
            handle.focus()
            t0 = page.evaluate("performance.now()")
            page.keyboard.press(key)
            _record(f"{name} to pixels, h<=16, N<=64 (ms)", _wait_painted(page, t0))
            expect(caption).to_contain_text(expected)
        t0 = page.evaluate("performance.now()")
        page.locator(".mha-heads-causal").click()
        _record("causal toggle to pixels (ms)", _wait_painted(page, t0))
        t0 = page.evaluate("performance.now()")
        page.locator(".mha-heads-query select").select_option(index=i + 1)
        _record("query selector to pixels (ms)", _wait_painted(page, t0))
    # the other panels' sliders, one arrow-key step each way
    for css, key, name in ((".mha-shape-h", "shape", "shape h slider to text (ms)"),
                           (".mha-cost-N", "cost", "cost N slider to pixels (ms)"),
                           (".mha-kv-n_kv", "kv", "kv n_kv slider to pixels (ms)")):
        handle = page.locator(f"{css} .noUi-handle")
        for key_name in ("ArrowRight", "ArrowLeft") * 3:  # never past either end
            handle.focus()
            t0 = page.evaluate("performance.now()")
            page.keyboard.press(key_name)
            _record(name, _wait_painted(page, t0, key))


def test_cost_and_kv_panels(loaded):
    page, _ = loaded
    _set_selection(page, ".mha-cost-N", W.COST_NS.index(2000), "2000")
    expect(page.locator(".mha-cost-attn")).to_have_text(f"{2 * 2000**2 * 512:,}", timeout=UPDATE_TIMEOUT_MS)
    expect(page.locator(".mha-cost-proj")).to_have_text(f"{4 * 2000 * 512**2:,}")
    expect(page.locator(".mha-cost-crossover")).to_have_text(f"{2 * 512:,}")
    assert "attention-bound" in _text(page, ".mha-cost-numbers")
    _set_selection(page, ".mha-cost-d_model", W.COST_D_MODELS.index(4096), "4096")
    expect(page.locator(".mha-cost-crossover")).to_have_text(f"{2 * 4096:,}", timeout=UPDATE_TIMEOUT_MS)
    assert "projection-bound" in _text(page, ".mha-cost-numbers")
    worked = _text(page, ".mha-cost-worked")
    assert f"{4 * 100 * 512**2:,}" in worked and f"{2 * 100**2 * 512:,}" in worked

    kv_src = page.locator("img.mha-kv-image").get_attribute("src")
    n_kv_options = list(reversed(W.divisors(32)))  # the slider runs from n_kv = h down to 1
    _set_selection(page, ".mha-kv-n_kv", n_kv_options.index(1), "1 (MQA)")
    expect(page.locator(".mha-kv-kind")).to_have_text("MQA", timeout=UPDATE_TIMEOUT_MS)
    expect(page.locator(".mha-kv-ratio")).to_have_text("32")
    state = W.kv_state("large: d_model=4096, h=32, 32 layers", 1, 8192)
    assert f"{state['bytes']:,} bytes" in _text(page, ".mha-kv-bytes")
    _set_selection(page, ".mha-kv-context", W.KV_CONTEXTS.index(131072), "131072")
    state = W.kv_state("large: d_model=4096, h=32, 32 layers", 1, 131072)
    expect(page.locator(".mha-kv-bytes")).to_contain_text(f"{state['bytes']:,} bytes", timeout=UPDATE_TIMEOUT_MS)
    assert page.locator("img.mha-kv-image").get_attribute("src") != kv_src


def test_zz_screenshot_and_report(loaded):
    """Runs last: a tidy state, the README's screenshot, and the measured figures."""
    page, rec = loaded
    _set_selection(page, ".mha-heads-h", W.HEAD_CHOICES.index(4), "4")
    _set_int(page, ".mha-heads-N", 20)
    page.locator(".mha-heads-query select").select_option(label="8: it")
    expect(page.locator(".mha-heads-caption")).to_contain_text("h=4, N=20", timeout=UPDATE_TIMEOUT_MS)
    page.set_viewport_size({"width": 1280, "height": 4000})  # everything on screen, nothing scrolled
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(500)
    image = page.locator("img.mha-heads-image").bounding_box()
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), clip={"x": 0, "y": 0, "width": 1280,
                                                "height": image["y"] + image["height"] + 40})
    assert SCREENSHOT.stat().st_size > 20_000
    assert rec.errors() == []
    lines = ["", "dashboard timings (this machine, this run):"]
    for name, values in TIMINGS.items():
        if name.endswith("(ms)"):
            q = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]
            lines.append(f"  {name}: median {statistics.median(values):.0f}, p90 {q:.0f}, n={len(values)}")
        else:
            lines.append(f"  {name}: {', '.join(f'{v:.2f}' for v in values)}")
    print("\n".join(lines))


# -- classroom mode ----------------------------------------------------------------------------------

def test_slides_work_offline(browser):
    args = ("--template=mha-reveal",
            "--VoilaConfiguration.resources={'reveal': {'url_prefix': "
            "'/voila/templates/mha-reveal/static/reveal'}}")
    with voila_server(*args) as srv:
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        rec = Recorder(page)
        page.goto(srv.url)
        page.wait_for_selector(".reveal .slides section.present:not(.stack)", timeout=LOAD_TIMEOUT_MS)
        page.wait_for_selector("img.mha-heads-image[src^='blob:']", state="attached", timeout=LOAD_TIMEOUT_MS)
        first = page.locator(".reveal .slides section.present:not(.stack)").inner_text()
        page.keyboard.press("ArrowRight")
        expect(page.locator(".reveal .slides section.present:not(.stack)")).not_to_have_text(first, timeout=UPDATE_TIMEOUT_MS)
        assert "SHAPES" in page.locator(".reveal .slides section.present:not(.stack)").inner_text().upper()
        page.wait_for_timeout(500)
        outside = sorted({u for u in rec.requests if not is_local(u, srv.port)})
        assert outside == [], f"requests left 127.0.0.1: {outside}"
        assert rec.errors() == []
        page.close()
