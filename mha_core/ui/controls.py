"""What every dashboard panel shares: the guarded controls, the panel base and argument checks.

A widget's value can be set by any message the browser sends. Every control is a "guarded"
widget: a value that fails ipywidgets' own checks (an index past the options, a string for an
int) is refused and the panel says so in its status line; and every callback validates what it
reads (``h`` must divide ``d_model``, ...) and shows a readable message instead of a traceback.
The page stays alive either way.

    Guarded, Guarded*     controls that report a refused value instead of raising
    Panel                 status line, error display, figure boxes, refresh from the controls
    divisors, check_*     the checks the panels' pure state functions share
    Cache, compute_here   where a panel's results come from: computed here, or a cache passed in

The panels themselves: ``shapes_panel``, ``heads_panel``, ``cost_panel``, ``kv_panel`` and
``real_heads_panel``.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable

import ipywidgets as widgets

from ..core.validate import check_positive_int

# The cost and KV plots are shown at 96 CSS px per inch of figure, so a 10 pt font reads as 10 pt
# on the page (at 80 dpi it read as 8.3 pt). They are drawn at PIXEL_RATIO times that many pixels
# and shown at half their pixel width: sharp on phones and laptops with 2x screens.
PANEL_DPI = 96
PIXEL_RATIO = 2

# Real models use at most ~128 heads; more would make the h slider unusably long.
MAX_HEADS = 64

# A results cache: ``cache(name, inputs, compute)`` returns ``compute()``'s result for ``inputs``
# (``name`` an identifier naming the computation). The heads panels take one as ``cache=``; each
# panel also remembers its own last few results, whatever the cache.
Cache = Callable[[str, tuple, Callable[[], tuple]], tuple]


def compute_here(name: str, inputs: tuple, compute: Callable[[], tuple]) -> tuple:
    """A panel's default ``cache``: nothing shared, ``compute()`` runs in this kernel.

    A server for a class passes a cache shared by every kernel instead (the served dashboard
    passes ``mha_serve.shared_cache.shared``), so a setting one student's kernel has computed is
    read by the others.
    """
    return compute()


def check_cache(cache) -> Cache:
    """``cache`` if it is callable (``None``: ``compute_here``), else a TypeError."""
    if cache is None:
        return compute_here
    if not callable(cache):
        raise TypeError(f"cache must be callable as cache(name, inputs, compute), got {type(cache).__name__}")
    return cache


def divisors(n: int, limit: int | None = None) -> tuple[int, ...]:
    """The divisors of ``n`` in increasing order, optionally only those ``<= limit``.

    Parameters
    ----------
    n : int, positive
    limit : int, optional
        Keep only divisors ``<= limit``.

    Returns
    -------
    tuple of int, e.g. ``divisors(12) == (1, 2, 3, 4, 6, 12)``
    """
    n = check_positive_int(n, "n")
    top = n if limit is None else min(n, check_positive_int(limit, "limit"))
    return tuple(d for d in range(1, top + 1) if n % d == 0)


def check_choice(value, name: str, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not one of the allowed values {', '.join(map(str, choices))}")


def check_int_in(value, name: str, lo: int, hi: int) -> int:
    value = check_positive_int(value, name)
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be between {lo} and {hi}, got {name}={value}")
    return value


def check_heads(d_model: int, h: int) -> None:
    if d_model % h:
        raise ValueError(
            f"h={h} does not divide d_model={d_model}; the heads split d_model evenly, "
            f"so h must be one of {', '.join(map(str, divisors(d_model, MAX_HEADS)))}"
        )


# -- guarded widgets -----------------------------------------------------------------------------

class Guarded:
    """Mixin: a value from the browser that ipywidgets refuses is reported, not raised.

    ``set_state`` is what the kernel runs when the browser sends a widget update. Without this
    guard a forged index or a string for an int raises ``TraitError`` in the kernel: the panel
    would silently ignore it and the browser's view would drift from the kernel's value.
    """

    def __init__(self, *args, on_invalid: Callable | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self._on_invalid = on_invalid

    def set_state(self, sync_data):
        try:
            super().set_state(sync_data)
        except Exception as err:  # any refused value: report it, never let it escape as a traceback
            self.send_state()  # put the browser's view back on the kernel's (unchanged) value
            if self._on_invalid is None:
                raise
            self._on_invalid(self, sync_data, err)


class GuardedIntSlider(Guarded, widgets.IntSlider):
    """``IntSlider`` that reports refused values (see ``Guarded``)."""


class GuardedSelectionSlider(Guarded, widgets.SelectionSlider):
    """``SelectionSlider`` that reports refused values (see ``Guarded``)."""


class GuardedDropdown(Guarded, widgets.Dropdown):
    """``Dropdown`` that reports refused values (see ``Guarded``)."""


class GuardedToggleButtons(Guarded, widgets.ToggleButtons):
    """``ToggleButtons`` that reports refused values (see ``Guarded``)."""


class GuardedToggleButton(Guarded, widgets.ToggleButton):
    """``ToggleButton`` that reports refused values (see ``Guarded``)."""


class GuardedText(Guarded, widgets.Text):
    """``Text`` that reports refused values (a forged number instead of text) in the panel."""


def scrolling_table(table: str, label: str) -> str:
    """``table`` (HTML) in a box that scrolls sideways when the screen is narrower than the table,
    with a line above it that the page shows only then (the template's script sets
    ``mha-overflows``). The box is a labelled region with a tab stop, so a keyboard can scroll it."""
    return (f"<div class='mha-table'><p class='mha-scroll-hint' aria-hidden='true'>&#8596;&#xFE0E; wider than "
            f"the screen: swipe the table sideways</p><div class='mha-scroll' tabindex='0' role='region' "
            f"aria-label='{html.escape(label, quote=True)}'>{table}</div></div>")


# -- the panel base ------------------------------------------------------------------------------

class Panel:
    """Shared plumbing: a status line, error display, and display as the panel's VBox."""

    name = "panel"
    _syncing = False  # True while the panel itself rewrites a control's options

    def __init__(self):
        self.status = widgets.HTML(value="")
        self.status.add_class("mha-status")
        self.errors = 0  # messages shown so far (tests read it)
        self.renders = 0
        self.widget: widgets.VBox | None = None

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def _figure(self, css: str) -> tuple[widgets.Image, widgets.HTML, widgets.Box]:
        """A PNG image with its alt text: the image, the (hidden) text, and the box holding both.

        ipywidgets' Image has no ``alt`` (and its ``tooltip`` breaks the view in Voila 0.5), so
        the text travels in an HTML widget beside it; the page's template copies it into the
        image's ``alt`` whenever it changes. On a narrow screen the image shrinks to fit.
        """
        image = widgets.Image(format="png")
        image.add_class(f"mha-{self.name}-{css}")
        alt = widgets.HTML()
        alt.add_class("mha-alt")
        box = widgets.Box([image, alt])
        box.add_class("mha-figure")
        return image, alt, box

    @staticmethod
    def _set_alt(alt: widgets.HTML, text: str, **data: float) -> None:
        """The figure's alt text; ``data``: facts about the figure for the browser tests, as data-
        attributes (a chart's ``text_px``, its smallest text in CSS px at its own width;
        ``image_text_px``, the same text in the PNG's own pixels, so that a test reads the text as
        shown from the picture itself: image_text_px x shown width / natural width; and
        ``for_width``, the panel width it was drawn for: ``chart_size``)."""
        attrs = "".join(f" data-{k.replace('_', '-')}='{v:g}'" for k, v in data.items())
        alt.value = f"<div aria-hidden='true'{attrs}>{html.escape(text)}</div>"

    def _finish(self, box: widgets.VBox) -> widgets.VBox:
        """Name the panel's box for the page's CSS (``mha-panel``: stacks on small screens)."""
        box.add_class(f"mha-{self.name}-panel")
        box.add_class("mha-panel")
        return box

    @staticmethod
    def _controls(*rows: widgets.Widget) -> widgets.VBox:
        """The rows of controls that drive the figure below them (``mha-controls``): they sit just
        above it and scroll with the page (nothing is pinned over the page at any size)."""
        box = widgets.VBox(list(rows))
        box.add_class("mha-controls")
        return box

    def _control(self, cls, css: str, **kwargs):
        w = cls(on_invalid=self._invalid, **kwargs)
        w.add_class(f"mha-{self.name}-{css}")
        w.observe(self._changed, names="value")
        return w

    def _invalid(self, widget, sync_data, err) -> None:
        keys = ", ".join(f"{k}={v!r:.40}" for k, v in sync_data.items())
        self.show_error(f"ignored a value the page sent for {widget.description or 'a control'} "
                        f"({keys}): {err}. The panel keeps {widget.description}={widget.value!r}.")

    def show_error(self, message: str) -> None:
        self.errors += 1
        self.status.value = f"<div class='mha-error' style='color:#b00020'>&#9888; {html.escape(str(message))}</div>"

    def _changed(self, change) -> None:
        if not self._syncing:
            self.refresh()

    @contextlib.contextmanager
    def _quiet(self):
        """Controls set inside ``with self._quiet():`` cause no refresh (``_syncing``); nests."""
        was, self._syncing = self._syncing, True
        try:
            yield
        finally:
            self._syncing = was

    def _replace_options(self, widget, options, value) -> None:
        """Give ``widget`` new options and value without a refresh for the values in between."""
        with self._quiet():
            widget.options = options
            widget.value = value

    def refresh(self, **overrides) -> bool:
        """Recompute from the controls' values (``overrides`` replace some, as a forged message would).

        Returns True if the panel updated, False if the values were refused (the message is in
        ``status`` and the previous figures stay).
        """
        values = self.values()
        values.update(overrides)
        try:
            self._render(**values)
        except (ValueError, TypeError, KeyError) as err:
            self.show_error(str(err))
            return False
        except Exception as err:  # never a traceback in the page
            self.show_error(f"could not update ({type(err).__name__}: {err})")
            return False
        self.status.value = ""
        self.renders += 1
        return True

    def values(self) -> dict:  # pragma: no cover - overridden
        raise NotImplementedError

    def _render(self, **values) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


def changed_offering_divisors(panel, change) -> None:
    """``_changed`` for panels with d_model and h: h offers only the divisors of d_model.

    When d_model moves, h keeps its value if it still divides, else takes the largest smaller divisor,
    and the status line says so (until the next redraw: a value that moved without a word confused a
    cold visitor).
    """
    before = panel.h.value
    if not panel._syncing and change["owner"] is panel.d_model:
        options = divisors(panel.d_model.value, MAX_HEADS)
        keep = panel.h.value if panel.h.value in options else max(k for k in options if k <= panel.h.value)
        panel._replace_options(panel.h, options, keep)
    Panel._changed(panel, change)
    if panel.h.value != before and not panel.status.value:
        panel.status.value = (f"<p class='mha-moved' role='status'>h is now {panel.h.value} (was {before}): "
                              f"h must divide d_model = {panel.d_model.value}.</p>")
