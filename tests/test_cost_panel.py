"""Tests for mha_core.ui.cost_panel: cost_state, the crossover and the cost panel.

Callbacks are driven the way the browser drives them: by setting widget values, and by feeding
``set_state`` / ``_handle_msg`` the update messages a page would send, including forged ones.
"""

from __future__ import annotations

import pytest
from widget_messages import assert_no_text_under_10_pt_on_the_page

import mha_core as m
from mha_core.ui import controls as C
from mha_core.ui import cost_panel as CP


@pytest.mark.parametrize("d_model", [64, 512, 4096])
def test_crossover_is_where_attention_catches_up(d_model):
    n = CP.crossover_n(d_model)
    cfg = m.MHAConfig(d_model, 8)
    at = m.count_macs(cfg, n)
    assert at["projections"] == at["attention"]
    assert m.count_macs(cfg, n - 1)["projections"] > m.count_macs(cfg, n - 1)["attention"]
    assert m.count_macs(cfg, n + 1)["projections"] < m.count_macs(cfg, n + 1)["attention"]


def test_cost_state_worked_example_and_h_independence():
    s = CP.cost_state(512, 8, 100)
    d = 512
    (n1, a), (n2, b) = s["worked"]
    assert (n1, n2) == (100, 2000)
    assert a["projections"] == 4 * 100 * d**2 and a["attention"] == 2 * 100**2 * d
    assert b["projections"] == 4 * 2000 * d**2 and b["attention"] == 2 * 2000**2 * d
    assert a["projections"] > a["attention"] and b["projections"] < b["attention"]
    assert s["worked_params"] == 4 * d * d
    assert {mm["total"] for _, mm in s["by_h"]} == {s["macs"]["total"]}  # h changes nothing...
    exps = [mm["softmax_exps"] for _, mm in s["by_h"]]
    assert exps == sorted(exps) and exps[-1] > exps[0]  # ...but the softmax work
    assert s["crossover"] == 2 * d
    assert len(s["curve_n"]) == len(s["curve_proj"]) == len(s["curve_attn"])
    with pytest.raises(ValueError, match="h=3"):
        CP.cost_state(512, 3, 100)


def test_cost_panel():
    p = CP.cost_panel()
    image = p.image.value
    p.N.value = 1000
    assert p.plot.full_draws == 1 and p.image.value != image  # N only moves the marker (blitting)
    assert "<span class='mha-cost-crossover'>1,024</span>" in p.numbers.value
    assert f"{4 * 100 * 512**2:,}" in p.worked.value and f"{2 * 2000**2 * 512:,}" in p.worked.value
    p.N.value = 2000
    assert "attention-dominated" in p.numbers.value
    p.d_model.value = 64
    assert p.h.options == C.divisors(64) and p.h.value == 8
    assert "<span class='mha-cost-crossover'>128</span>" in p.numbers.value
    assert p.plot.full_draws == 2
    assert p.by_h.value.count("<tr") == len(C.divisors(64)) + 1
    assert "<tr style='font-weight:bold'><td>8</td>" in p.by_h.value  # the current h
    assert p.refresh(h=3) is False and "h=3" in p.status.value


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [({"d_model": 500}, ValueError, "d_model"),
     ({"N": 99}, ValueError, "N")],
)
def test_cost_panel_validates_its_starting_values(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        CP.cost_panel(**kwargs)


def test_cost_panel_figure_has_no_text_under_10_pt_on_the_page():
    assert_no_text_under_10_pt_on_the_page(CP.cost_panel())


def test_the_against_h_bars_show_that_only_the_softmax_grows():
    """Each column's bars are linear against that column's largest value: the projection and
    attention bars are equally long for every h, the softmax bars grow in proportion to h."""
    import re

    p = CP.cost_panel()
    rows = re.findall(r"<tr[^>]*><td>(\d+)</td>(.*?)</tr>", p.by_h.value)
    assert len(rows) == p.by_h.value.count("<tr") - 1 >= 3
    shares = {int(h): [float(w) for w in re.findall(r"data-share='([0-9.]+)'", cells)] for h, cells in rows}
    hs = sorted(shares)
    assert all(shares[h][:2] == [1.0, 1.0] for h in hs)  # projections and attention: full, equal bars
    for h in hs:
        assert shares[h][2] == pytest.approx(h / hs[-1], abs=1e-4)  # the softmax: in proportion to h
        assert f"calc({shares[h][2]:.4f} * var(--mha-bar, {CP.BAR_PX}px))" in dict(rows)[str(h)]
    assert "table" in p.by_h.value and "mha-scroll" in p.by_h.value  # scrolls on a phone, and says so
