"""Tests for mha_core.ui.controls: the guarded controls and the panel base, driven through real panels.

Callbacks are driven the way the browser drives them: by setting widget values, and by feeding
``set_state`` / ``_handle_msg`` the update messages a page would send, including forged ones.
"""

from __future__ import annotations

import pytest
from widget_messages import forge

from mha_core.ui import controls as C
from mha_core.ui import kv_panel as KV
from mha_core.ui import shapes_panel as S


def test_divisors():
    assert C.divisors(12) == (1, 2, 3, 4, 6, 12)
    assert C.divisors(768, 64) == tuple(d for d in range(1, 65) if 768 % d == 0)
    with pytest.raises(ValueError, match="n"):
        C.divisors(0)


@pytest.mark.parametrize(("control", "state"), [("h", {"index": 99}), ("N", {"value": "abc"}),
                                                ("B", {"value": None}), ("d_model", {"index": -5})])
def test_forged_comm_messages_are_reported_not_raised(control, state):
    p = S.shape_explorer()
    widget = getattr(p, control)
    value, renders = widget.value, p.renders
    forge(widget, state)  # must not raise
    assert widget.value == value and p.renders == renders
    assert "ignored a value the page sent" in p.status.value and control in p.status.value


def test_a_valid_comm_message_moves_the_slider():
    p = S.shape_explorer()
    forge(p.h, {"index": p.h.options.index(4)})
    assert p.h.value == 4 and "= <span class='mha-dk'>128</span>" in p.summary.value


def test_panels_display_as_their_widget():
    p = KV.kv_cache_panel()
    bundle = p._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == p.widget.model_id


def test_scrolling_table_is_a_labelled_focusable_region_with_a_hint():
    from mha_core.ui.controls import scrolling_table

    out = scrolling_table("<table><tr><td>1</td></tr></table>", "a 'quoted' table")
    assert "<table><tr><td>1</td></tr></table>" in out
    assert "tabindex='0'" in out and "role='region'" in out and "aria-label='a &#x27;quoted&#x27; table'" in out
    assert "class='mha-scroll-hint' aria-hidden='true'" in out and "sideways" in out
