"""Shared pytest setup.

Strict mode (``CI=true`` or ``MHA_STRICT=1``): a skipped test is a failure, so a missing
torch or chromium can never pass silently in CI. Notebook cells marked ``# NBVAL_SKIP``
are the one exception (they are deliberate and visible in the notebook).
Slow tests (the dashboard load test) only run with ``--run-slow``, which ``.ci/run`` passes.
"""

from __future__ import annotations

import os

import pytest

STRICT = os.environ.get("CI", "").lower() == "true" or os.environ.get("MHA_STRICT") == "1"


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


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
    from mha_core.models.cache import SOURCES

    src, gguf = cache_dir() / "smollm2" / "source", SOURCES["smollm2"].weights
    tokenizer = transformers.AutoTokenizer.from_pretrained(src, gguf_file=gguf)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        src, gguf_file=gguf, attn_implementation="eager", dtype=torch.float32).eval()
    return model, tokenizer
