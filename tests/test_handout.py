"""``make handout``: one printed page, its numbers those of mha_core (scripts/handout.py)."""

from __future__ import annotations

import importlib.util
import re

import pytest
from dashboard_server import REPO, launch_chromium

from mha_core import MHAConfig, count_macs, count_params, kv_cache_bytes

spec = importlib.util.spec_from_file_location("handout", REPO / "scripts" / "handout.py")
handout = importlib.util.module_from_spec(spec)
spec.loader.exec_module(handout)


def test_the_numbers_are_mha_cores():
    page = handout.handout_html()
    cfg = MHAConfig(512, 8)
    for value in (count_params(cfg)["total"], count_macs(cfg, 100)["projections"],
                  count_macs(cfg, 100)["attention"], count_macs(cfg, 100)["softmax_exps"]):
        assert f"{value:,}" in page
    gqa = kv_cache_bytes(MHAConfig(4096, 32, n_kv_heads=8), 32_768, n_layers=32) / 2**30
    assert f"{gqa:g} GiB" in page and "16 GiB" in page
    assert "(3, 4, 5, 6)" in page  # the round trip's (B, h, N, d_k), from a real run, at 02's sizes
    for formula in ("softmax(Q K^T / sqrt(d_k)) V", "concat(head_0 ... head_(h-1)) W_O"):
        assert formula in page
    assert f"{count_params(MHAConfig(512, 8, bias=True))['total']:,}" in page  # with biases, said so


def test_the_page_says_what_grows_with_h():
    """Issue 28: the counts' heading said "the same for every h" above the h N^2 row. Each row now
    says what doubling h does, computed: only the softmax's exponentials double."""
    page = handout.handout_html()
    assert "the same for every h" not in page
    rows = dict(re.findall(r"<tr><td>([^<]+)</td><td>[^<]*</td><td>[^<]*</td><td>([^<]+)</td></tr>", page))
    assert rows == {"parameters": "the same", "projection MACs": "the same", "attention-core MACs": "the same",
                    "softmax exponentials": "x2", "crossover": "the same"}


def test_heads_are_counted_from_0_only():
    page = handout.handout_html()
    assert "head_1" not in page and "head_h" not in page
    assert "columns i*d_k to (i+1)*d_k" in page and "counted from 0" in page


def test_main_writes_the_page(tmp_path):
    out = handout.main([str(tmp_path / "h.html")])
    assert out.read_text().startswith("<!doctype html>")


@pytest.mark.browser
def test_it_prints_on_one_page(tmp_path):
    from playwright.sync_api import sync_playwright

    out = handout.main([str(tmp_path / "handout.html")])
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page()
        page.goto(out.as_uri())
        pages = {}
        for size in ("A4", "Letter"):
            pdf = page.pdf(format=size, prefer_css_page_size=False)
            pages[size] = len(re.findall(rb"/Type\s*/Page\b(?!s)", pdf))
        browser.close()
    assert pages == {"A4": 1, "Letter": 1}
