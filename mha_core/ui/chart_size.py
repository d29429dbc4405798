"""Charts drawn for the screen they are shown on: the cost and KV panels' matplotlib figures.

A PNG shrunk to fit a phone shrinks its text with it (a 720 px chart at 10 pt read as ~6 px on a
390 px screen), and one drawn for a laptop stays small on a projector. So the page tells the
kernel how wide the panel is, and the panel draws its chart for that width:

    PanelWidth          an invisible anywidget: ``width`` = its panel's width in CSS px (the page
                        reports it on load and when the window is resized or rotated)
    ChartSize, chart_size(width)   the figure's size in inches and its font size in points
    redraw_for_width               a panel's chart redrawn when its PanelWidth reports a width
    smallest_text_px(fig)          the smallest text the figure draws, in its own pixels
    text_facts(fig, size)          that text and the width drawn for, as the alt text's data for the tests
    wrapped_title(fig, text, pt)   a title wrapped to the figure's width, measured (never cut off)

The figure is shown at its own width in CSS px (``PANEL_DPI`` px per inch), so a font of ``pt``
points reads as ``pt * PANEL_DPI / 72`` CSS px: 8 pt on a phone (10.7 px), 10 pt on a laptop
(13.3 px), 16 pt on a panel from 1550 px wide (21.3 px, a projector's back row).

Until the page has reported the width, the chart is drawn for a laptop (``for_width`` 0); the page
(the ``mha`` template) keeps such a chart transparent, so that no one sees its small text.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, replace

import anywidget
import traitlets
from matplotlib.figure import Figure
from matplotlib.text import Text

from .controls import PANEL_DPI

# Panel widths (CSS px) where the chart changes: a phone below PHONE_PX, a projector from WALL_PX.
# A 1920 px screen's window is often narrower than the screen (not maximised, a side panel: its
# page then has the template's middle sizes, from a 1600 px window): a panel from 1550 px (a 1600 px
# window's, less the page's margins and a scrollbar) gets the wall's chart, not a laptop's.
PHONE_PX, WALL_PX = 500, 1550
# The laptop chart's width (as before: 7.5 in at 96 px per inch), and the widest on a wall.
LAPTOP_FIG_PX, WALL_FIG_PX = 720, 1500
FONT_PT = {"phone": 8, "laptop": 10, "wall": 16}
# A chart is never narrower than this (a very narrow window scrolls it in its box instead).
MIN_FIG_PX = 300


@dataclass(frozen=True)
class ChartSize:
    """A chart's width and height in inches (at ``PANEL_DPI``), its font size in points, and the
    panel width it is for."""

    width_in: float
    height_in: float
    font_pt: float
    for_width: int  # the panel width (CSS px) it was chosen for; 0: not known

    @property
    def width_px(self) -> int:
        """The width it is shown at, in CSS px."""
        return round(self.width_in * PANEL_DPI)


def chart_size(width: int, aspect: float) -> ChartSize:
    """The chart for a panel ``width`` CSS px wide (0: not known yet, drawn for a laptop).

    ``aspect`` is height / width on a laptop; a phone's chart is taller for its width, so that
    its plot keeps room between the title, the legend and the axis labels.
    """
    if isinstance(width, bool) or not isinstance(width, int) or width < 0:
        raise ValueError(f"width must be an int >= 0 (CSS px), got {width!r}")
    if not 0 < aspect <= 2:
        raise ValueError(f"aspect must be in (0, 2], got {aspect!r}")
    if width == 0 or PHONE_PX <= width < WALL_PX:
        kind, px = "laptop", min(LAPTOP_FIG_PX, width - 16) if width else LAPTOP_FIG_PX
    elif width < PHONE_PX:
        kind, px = "phone", width - 8
    else:
        kind, px = "wall", min(WALL_FIG_PX, width - 16)
    px = max(MIN_FIG_PX, px)
    height_px = px * aspect * (1.6 if kind == "phone" else 1.0)
    return ChartSize(px / PANEL_DPI, height_px / PANEL_DPI, FONT_PT[kind], width)


def redraw_for_width(panel, make_plot: Callable[[ChartSize], object], aspect: float, change: dict) -> None:
    """``PanelWidth.width`` of ``panel`` changed (first layout, a rotated phone, a projector): give
    ``panel.plot`` the chart for it (``make_plot(size)``, a new figure only when its size or font
    changes: else only the width it is for) and redraw the panel."""
    size = chart_size(change["new"], aspect)
    if replace(size, for_width=0) != replace(panel.plot.size, for_width=0):
        panel.plot = make_plot(size)
    else:  # the same chart: the picture is re-blitted, not redrawn
        panel.plot.size = size
    panel.refresh()


def wrapped_title(fig: Figure, text: str, fontsize: float, *, margin_px: float = 6) -> Text:
    """``fig``'s title (its suptitle: centred on the figure, which its layout keeps room for), with
    ``text`` wrapped at the longest line that fits the figure's width, measured in its renderer.

    A guess of the characters per line from the font size cut the phone's cost title off at its
    right edge ("..., crossov"); an axes' title is centred on the axes, off the figure's middle
    by the axis labels, so it is the figure's own title here, and nothing needs laying out first.
    """
    title = fig.suptitle(text, fontsize=fontsize)
    room = fig.bbox.width - 2 * margin_px * fig.dpi / PANEL_DPI  # device px
    renderer = fig.canvas.get_renderer()
    chars = len(text)
    while chars > 10 and title.get_window_extent(renderer).width > room:
        chars -= max(1, chars // 20)
        title.set_text(textwrap.fill(text, chars))
    return title


def smallest_text_px(fig: Figure) -> float:
    """The smallest font of any visible text in ``fig``, in CSS px at its shown size (PANEL_DPI)."""
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return min(sizes) * PANEL_DPI / 72 if sizes else 0.0


def text_facts(fig: Figure, size: ChartSize) -> dict[str, float]:
    """What the browser tests read from a chart's alt text: its smallest text in CSS px at its own
    width (``text_px``), the same in the PNG's own pixels (``image_text_px``: a test multiplies it by
    shown width / natural width, reading the text as shown from the picture itself) and the panel
    width it was drawn for (``for_width``)."""
    text_px = smallest_text_px(fig)
    return {"text_px": round(text_px, 2), "image_text_px": round(text_px * fig.dpi / PANEL_DPI, 2),
            "for_width": size.for_width}


class PanelWidth(anywidget.AnyWidget):
    """Invisible: ``width`` follows the width (CSS px) of the panel it is placed in."""

    _esm = """
    export default { render({ model, el }) {
      el.style.height = "0"; el.style.overflow = "hidden";
      const panel = () => el.closest('.mha-panel') || el.parentElement;
      let timer = 0;
      const report = () => {
        clearTimeout(timer);
        timer = setTimeout(() => {
          const w = Math.round(panel().clientWidth);
          if (w > 0 && Math.abs(w - model.get('width')) >= 8) { model.set('width', w); model.save_changes(); }
          el.dataset.width = String(model.get('width'));  // what the kernel was told (the tests read it)
        }, 150);
      };
      const watcher = new ResizeObserver(report);
      requestAnimationFrame(() => { watcher.observe(panel()); report(); });
      return () => watcher.disconnect();
    } };
    """
    width = traitlets.Int(0).tag(sync=True)

    @traitlets.validate("width")
    def _valid_width(self, proposal):
        w = proposal["value"]
        if not 0 <= w <= 20_000:
            raise traitlets.TraitError(f"width must be between 0 and 20000 CSS px, got {w}")
        return w
