"""Shared helpers of the panel tests: deliver a widget update message the way a page would, read
a widget's HTML as text, check a panel's figure size on the page."""

import html
import re


def forge(widget, state: dict) -> None:
    """Deliver an update message to ``widget`` as the kernel's comm layer would (forged or not)."""
    widget._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}},
                        "buffers": []})


def plain_text(html_str: str) -> str:
    """The text of an HTML string: tags removed, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", html_str))


def assert_no_text_under_10_pt_on_the_page(panel) -> None:
    """``panel.plot.fig`` is drawn at 2x and shown at 1x (96 CSS px per inch), and none of its
    text reads smaller than 10 pt on the page."""
    import pytest

    from mha_core.ui.viz import rendered_font_sizes

    fig = panel.plot.fig
    shown_px_per_inch = int(panel.image.layout.width.removesuffix("px")) / fig.get_figwidth()
    assert shown_px_per_inch == pytest.approx(96, abs=0.1) and fig.dpi == 2 * 96  # drawn at 2x, shown at 1x
    # shown at `shown_px_per_inch` CSS px per inch: s pt reads as s * shown_px_per_inch / 96 pt on the page
    on_page = [(text, pt * shown_px_per_inch / 96) for text, pt in rendered_font_sizes(fig, column_px=10**6)]
    assert on_page and min(pt for _, pt in on_page) >= 10, on_page[:3]
