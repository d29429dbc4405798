"""Shared pytest setup.

Strict mode (``CI=true`` or ``MHA_STRICT=1``): a skipped test is a failure, so a missing
torch or chromium can never pass silently in CI. Notebook cells marked ``# NBVAL_SKIP``
are the one exception (they are deliberate and visible in the notebook).
Two tiers, chosen by marker (the Makefile's TEST_TIER and SLOW_TIER; tests/test_tiers.py checks
that every test is in exactly one): ``make test`` runs everything not marked ``slow`` or
``browser`` (unit, model and reference tests, strict nbval on every notebook); ``make test-slow``
runs the rest (browser, load, JupyterHub, static site). ``make test-fast`` also leaves out the
tests marked ``models`` (the real models' cache), ``torch`` and ``transformers``: numpy only.
A test that uses the ``minilm`` or ``smollm2`` fixture, or a notebook in ``MODEL_NOTEBOOKS``, is
marked ``models`` here; a test that loads a model otherwise carries the marker itself.
Tests marked ``slow`` only run with ``--run-slow`` (``make test-slow`` passes it); in strict
mode, leaving one out for want of ``--run-slow`` is an error, never a silent deselection.

A test module that measures something defines ``timing_report() -> list[str]``; the lines it
returns are printed in pytest's terminal summary, after every test has run.

Outside strict mode a skip must still never read as a pass: the run ends with a red, counted
list of every test and test module that did not run, grouped by reason, and how to run them
(a missing reference library such as torch is installed by ``make references``). Any skip
counts, whatever its cause (``importorskip``, a ``skipif`` marker, a missing browser).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict

import numpy as np
import pytest

pytest_plugins = ["lesson_markers"]  # -m lesson03: the tests that defend one lesson (tests/lesson_markers.py)

STRICT = os.environ.get("CI", "").lower() == "true" or os.environ.get("MHA_STRICT") == "1"


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")
    parser.addoption("--browser", default=None, metavar="PATH",
                     help="the Chromium or Chrome for the browser tests (default: $CHROMIUM, then "
                          "the PATH, snap, macOS's Google Chrome, Playwright's own Chromium)")


def pytest_configure(config):
    # The panels' shared results (mha_serve.shared_cache) go to a folder of this run, so no test
    # reads a result left by another run or by the user's dashboard; servers started by tests inherit it.
    if "MHA_SHARED_CACHE" not in os.environ:
        import tempfile

        os.environ["MHA_SHARED_CACHE"] = tempfile.mkdtemp(prefix="mha-shared-")
    config.pluginmanager.register(AfterMarkerSelection(), "mha-after-marker-selection")
    if config.getoption("--browser"):  # read by tests/dashboard_server.py when a test module imports it
        os.environ["CHROMIUM"] = config.getoption("--browser")


_TEST_MODULES: list = []  # the collected test modules, in order (for their timing reports)

MODEL_FIXTURES = {"minilm", "smollm2"}  # the cached real models (the *_reference fixtures use them)
MODEL_NOTEBOOKS = {"09_the_block.ipynb", "10_a_real_layer.ipynb", "11_real_heads.ipynb", "block_solutions.ipynb", "13_a_model_that_writes.ipynb",
                   "14_capstone.ipynb", "capstone_solutions.ipynb",
                   "decoder_solutions.ipynb"}


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(config, items):
    """Mark ``models`` every test that needs the real models' cache (a hook of the whole session:
    ``pytest_itemcollected`` would not see the notebooks, outside this folder)."""
    for item in items:
        if MODEL_FIXTURES & set(getattr(item, "fixturenames", ())) or item.path.name in MODEL_NOTEBOOKS:
            item.add_marker(pytest.mark.models)


class AfterMarkerSelection:
    """Registered by ``pytest_configure``: a second collection hook, run after -m's."""

    @staticmethod
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(config, items):
        _after_marker_selection(config, items)


def _after_marker_selection(config, items):
    """Deselect the slow tests unless --run-slow (in strict mode an error instead); skip the browser
    tests when no browser is found and the axe tests when axe-core is missing, each with a reason
    naming the fix (a skip, listed under NOT RUN, never an error; in strict mode a failure)."""
    for module in dict.fromkeys(getattr(item, "module", None) for item in items):
        if module is not None:
            _TEST_MODULES.append(module)
    if not config.getoption("--run-slow"):
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow and STRICT:
            raise pytest.UsageError(
                f"strict mode (CI=true): {len(slow)} selected tests are marked slow but --run-slow is "
                f"missing, so they would not run (e.g. {slow[0].nodeid}); `make test-slow` passes it")
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]
    browser_items = [item for item in items if item.get_closest_marker("browser")]
    if browser_items:
        from dashboard_server import CHROMIUM, CHROMIUM_FOUND

        if CHROMIUM is None:
            for item in browser_items:
                item.add_marker(pytest.mark.skip(reason=CHROMIUM_FOUND))
    axe_items = [item for item in items if item.get_closest_marker("axe")]
    if axe_items:
        from dashboard_server import AXE, NO_AXE

        if not AXE.is_file():
            for item in axe_items:
                item.add_marker(pytest.mark.skip(reason=NO_AXE))


@pytest.fixture(scope="module")
def browser():
    """The Chromium ``find_browser`` found, driven by Playwright, for one test module (tests marked
    ``browser`` are skipped when there is none). Per module, not per session: Playwright's sync
    API cannot run beside another Playwright (test_lesson_slides opens its own) or an asyncio loop
    (test_dashboard_load)."""
    from dashboard_server import launch_chromium
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch_chromium(p)
        yield b
        b.close()


def _is_notebook(nodeid: str) -> bool:
    return ".ipynb" in nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if STRICT and report.skipped and not _is_notebook(report.nodeid) and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in strict mode (CI=true): {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    report = outcome.get_result()
    if STRICT and report.skipped and not _is_notebook(report.nodeid):
        report.outcome = "failed"
        report.longrepr = f"module skipped in strict mode (CI=true): {report.longrepr}"


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return reason.removeprefix("Skipped: ")


MISSING_MODULE = re.compile(r"could not import '([\w.]+)'")


def _how_to_run(reasons) -> list[str]:
    missing = sorted({m.group(1).split(".")[0] for r in reasons if (m := MISSING_MODULE.search(r))})
    hints = []
    if missing:
        hints.append(f"missing {', '.join(missing)}: `make references` installs the test-only reference "
                     "libraries (REFERENCES in the Makefile) into .venv; then `make test` again")
    hints.append("`CI=true make test` (or MHA_STRICT=1) turns every skip into a failure")
    return hints


_NOT_RUN: list[tuple[str, bool]] = []  # (line, loud), printed after pytest's last line


def pytest_terminal_summary(terminalreporter):
    """Print the test modules' timing reports; count what did not run (a skip is not a pass),
    which ``pytest_unconfigure`` prints last."""
    for module in _TEST_MODULES:
        report = getattr(module, "timing_report", None)
        for line in report() if callable(report) else ():
            terminalreporter.write_line(line)
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if not _is_notebook(r.nodeid)]
    if not skipped:
        return
    by_reason: dict[str, list[str]] = defaultdict(list)
    for r in skipped:
        by_reason[_skip_reason(r)].append(r.nodeid + (" (whole module)" if r.when == "collect" else ""))
    n_modules = sum(r.when == "collect" for r in skipped)
    n_tests = len(skipped) - n_modules
    counts = " and ".join(f"{n} {what}{'s' if n != 1 else ''}" for n, what in ((n_modules, "test module"),
                                                                           (n_tests, "test")) if n)
    for reason, nodes in sorted(by_reason.items()):
        _NOT_RUN.append((f"{len(nodes):>4} x {reason}", True))
        _NOT_RUN.extend((f"         {node}", False) for node in nodes[:5])
        if len(nodes) > 5:
            _NOT_RUN.append((f"         ... and {len(nodes) - 5} more", False))
    _NOT_RUN.extend((f"  to run them: {hint}", True) for hint in _how_to_run(by_reason))
    _NOT_RUN.append((f"NOT RUN: {counts} skipped. A skip is not a pass.", True))


def pytest_unconfigure(config):
    tr = config.pluginmanager.get_plugin("terminalreporter")
    if tr is None or not _NOT_RUN:
        return
    tr.write_sep("!", "skipped: these checks did NOT run", red=True, bold=True)
    for line, loud in _NOT_RUN:
        tr.write_line(line, red=loud, bold=loud)
    _NOT_RUN.clear()


# ------------------------------------------------------------------ real models (mha_core.models)
# The cached models come from `make models` (which `make test` runs first). Without them the
# tests that need them skip, naming the command; in strict mode (CI) that skip is a failure.
# The transformers references load once per session: SmolLM2's takes ~40 s.

SENTENCES = (  # accents, CJK, emoji, numbers, markup, odd whitespace
    "The animal didn't cross the street because it was too tired.",
    "Crème brûlée à la carte: naïve façade, Zoë and Ångström.",
    "東京は日本の首都です。北京欢迎你！",
    "I ❤️ pizza 🍕🙂 and 🇫🇷 flags!",
    "In 2024, 3.14159 × 1,000,000 = 3141590 (approx.) and 007.",
    "<img src=x onerror=alert(1)>",
    "  two  spaces\tand a\nnewline",
)


@pytest.fixture(scope="session")
def sentences():
    return SENTENCES


def _cached_model(name):
    from mha_core.models import ModelCacheError, load

    try:
        return load(name)
    except ModelCacheError as err:
        pytest.skip(f"{name} is not fetched: {err}")


@pytest.fixture(scope="session")
def minilm():
    return _cached_model("minilm")


@pytest.fixture(scope="session")
def smollm2():
    return _cached_model("smollm2")


@pytest.fixture(scope="session")
def minilm_reference(minilm):
    """transformers' BertModel (eager attention) and its pure-Python BertTokenizer, from the
    same checked files (the cache's source/ folder)."""
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mha_core.models import cache_dir

    src = cache_dir() / "minilm" / "source"
    model = transformers.AutoModel.from_pretrained(src, attn_implementation="eager").eval()
    return model, transformers.BertTokenizer.from_pretrained(src)


@pytest.fixture(scope="session")
def smollm2_reference(smollm2):
    """transformers' Llama model and tokenizer built from the same GGUF file, dequantised to float32."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from mha_core.models import cache_dir
    from mha_core.models.store import SOURCES

    src, gguf = cache_dir() / "smollm2" / "source", SOURCES["smollm2"].weights
    tokenizer = transformers.AutoTokenizer.from_pretrained(src, gguf_file=gguf)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        src, gguf_file=gguf, attn_implementation="eager", dtype=torch.float32).eval()
    return model, tokenizer


def _compare_layers(ours, theirs, tol: float, what: str, text: str) -> float:
    """The largest ``|ours[l] - theirs[l][0]|`` over the layers (``theirs``: torch tensors with a
    batch axis); fails naming the first layer off by ``tol`` or more."""
    assert len(theirs) == len(ours), f"{len(ours)} {what} layers against the reference's {len(theirs)}"
    worst = 0.0
    for layer, ref in enumerate(theirs):
        err = float(np.abs(ours[layer] - ref[0].numpy()).max())
        assert err < tol, f"{what} of layer {layer} off by {err:.2e} on {text!r}"
        worst = max(worst, err)
    return worst


@pytest.fixture
def compare_layers():
    return _compare_layers
