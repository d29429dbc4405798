"""Build the course as a static web site: ``build/site/``, readable with no install and no kernel.

    python scripts/build_site.py [--out build/site] [--binder URL] [--for-teachers]   (make site)

The teachers' build (--for-teachers) defaults to build/site-teachers/, so it never empties the students' one.

Why nbconvert with a template of our own (site/templates/mha-site), not Jupyter Book 2 / MyST:
nbconvert is already installed with JupyterLab and needs no network at build time, it renders
the committed executed notebooks as they are (every number on a page is a stored output), and
its templates are plain Jinja, so the page shell (navigation, print styles, KaTeX, the heatmap
script) is ours and small. MyST's book theme is downloaded on every build, which fails on a
machine without internet access, and the heatmaps would still need code of our own.

The pages, discovered from the files (nothing is listed by hand):
  1. the numbered lessons ``notebooks/NN_*.ipynb``, in file-name order;
  2. ``notebooks/solutions/*.ipynb``, each marked as solutions;
  3. the teacher's guide ``docs/teachers_guide.md``;
  4. the references ``notebooks/references.md``;
  5. the dashboard's static views ``notebooks/dashboard.ipynb`` (sources hidden, as in Voila).
By default the site is for students: 2 and 3 are left out, and a lesson's link to the solutions
points to the home page's "Solutions" section, which says that the teacher gives them out.
``--for-teachers`` puts them in (``make site FOR=teachers``); ``--binder URL`` links every
notebook page to Binder.

Widgets: committed notebooks carry no widget state (nbstripout), so a notebook with a widget
output is executed once more into memory with its widget state stored (nbclient), and only the
widget outputs are taken from that run; every other output is the committed one. Each widget
is drawn as static HTML from its saved state (``StaticWidgets``): text, tables, figures with
their alt text, controls shown at their saved values but disabled, under a note that says a
kernel is needed to move them. Live panels (``scripts/site_states.py``, ``LIVE``) are the
exception: every state their controls can reach is computed by the panel's own code at build
time into ``assets/states/<panel>/``, and ``assets/live.js`` enables their controls and looks
the states up once the panel scrolls into view. The client-side heatmap (an anywidget) is drawn by its own
``mha_core/ui/static/*.js`` file with a small stand-in for the widget model (assets/site.js), so
it still shows the exact weight and both tokens on hover, with no kernel. An unknown widget
type stops the build (never a silent ``VBox(...)``).

Everything the pages load is copied into ``assets/``: the notebook CSS, KaTeX (with its fonts,
from site/node_modules: ``npm ci --prefix site``) and the heatmap's JS and CSS. No CDN.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
from bs4 import BeautifulSoup
from nbclient import NotebookClient
from nbconvert import HTMLExporter

ROOT = Path(__file__).resolve().parents[1]
SITE_SRC = ROOT / "site"
TEMPLATES = SITE_SRC / "templates"
KATEX = SITE_SRC / "node_modules" / "katex" / "dist"
WIDGET_STATIC = ROOT / "mha_core" / "ui" / "static"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
SITE_TITLE = "Multi-head attention, taught in NumPy"
KERNEL_NOTE = "run this notebook to move it"
# said once a page, over its first live panel; the next ones say only how their settings load
COMPUTED_NOTE = ("Every setting it offers was computed by <code>mha_core</code> when this site was built, "
                 "and is loaded when the panel scrolls into view.")
# what a live panel's button does on the site, by its text (the note over the panel says it)
WORKING_BUTTONS = {"PNG + SVG": "makes two links, to the maps as drawn here as a PNG file and as an SVG file",
                   "write": "replays the writing, one token at a time",
                   # the real-heads panel's (site/real_live.js); "show heads" runs the model on typed text
                   "show heads": "is not offered here: it runs the model on the text typed in the box",
                   "example sentence": "shows the example sentence",
                   "induction demo": "shows the demo's input at its strongest induction head",
                   "back to your sentence": "returns from the demo",
                   **{name: "opens the head with the highest score for it" for name in
                      ("previous token", "first token", "itself", "'it' → animal")}}
# beside a live panel's free-text box (the write panel's prompt), which stays frozen
FREE_TEXT_NOTE = ("Typing your own {what} needs Python running behind the page: use the live dashboard ({where}). "
                  "Here, pick a {what} from the menu: each was computed when this site was built.")
LOADED_NOTE = "Its settings, computed with the site as well, load when the panel scrolls into view."
LIVE_HEATMAP_NOTE = ("Point at a cell (or tap it, or Tab to a map and use the arrow keys) to read its weight and "
                     "its two tokens; a click outlines that query's row. The first maps are the notebook's own, "
                     "to 4 decimals; the weights of a setting you move to are stored to the nearest 1/255, so "
                     "the tip then shows 2.")
RUN_IT = "index.html#Run-it-yourself"  # the home page's section on running the course
DEFAULT_OUT = {False: ROOT / "build" / "site", True: ROOT / "build" / "site-teachers"}  # by --for-teachers
SOLUTIONS_NOTE = "index.html#Solutions"  # on a students' site: where the solutions are given out
NO_SOLUTIONS = ("The worked solutions are not on this site: your teacher gives them out, after "
                "you have tried the exercises. Each exercise's checker tells you when your answer "
                "is right, and names the mistake when it recognises one.")


@dataclass(frozen=True)
class Page:
    source: Path  # the notebook or Markdown file
    slug: str  # the page is {slug}.html
    kind: str  # lesson | solutions | guide | references | dashboard
    title: str  # the source's first heading, as written (may hold $math$)

    @property
    def href(self) -> str:
        return f"{self.slug}.html"


# -- discovery -----------------------------------------------------------------------------------

def _first_heading(text: str, source: Path) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    raise ValueError(f"{source} has no '# ' heading to title its page")


def _title_of(source: Path) -> str:
    if source.suffix == ".md":
        return _first_heading(source.read_text(encoding="utf-8"), source)
    nb = nbformat.read(source, as_version=4)
    return _first_heading("\n".join(c.source for c in nb.cells if c.cell_type == "markdown"), source)


def plain_title(title: str) -> str:
    """A heading without TeX, for <title> and the print header: '$d_{model}=512$' -> 'd_model=512'."""
    text = title.replace(r"\times", "×").replace(r"\cdot", "·")
    return re.sub(r"[${}\\]", "", text)


def discover(root: Path = ROOT, *, for_teachers: bool = False) -> list[Page]:
    """The site's pages in reading order, found from the files (see the module docstring).
    Without ``for_teachers`` the solutions and the teacher's guide are left out."""
    nbdir = root / "notebooks"
    lessons = sorted(nbdir.glob("[0-9][0-9]_*.ipynb"))
    if not lessons:
        raise ValueError(f"no numbered lessons (NN_*.ipynb) in {nbdir}")
    pages = [Page(p, p.stem, "lesson", _title_of(p)) for p in lessons]
    for p in sorted((nbdir / "solutions").glob("*.ipynb")) if for_teachers else []:
        slug = p.stem if p.stem.startswith("solutions") else f"solutions_{p.stem}"
        pages.append(Page(p, slug, "solutions", _title_of(p)))
    for path, slug, kind in [(root / "docs" / "teachers_guide.md", "teachers_guide", "guide"),
                             (nbdir / "references.md", "references", "references"),
                             (nbdir / "dashboard.ipynb", "dashboard", "dashboard")]:
        if path.exists() and (for_teachers or kind != "guide"):
            # the dashboard's own heading promises sliders; its page here is a static copy
            title = "The dashboard, live on prepared settings" if kind == "dashboard" else _title_of(path)
            pages.append(Page(path, slug, kind, title))
    return pages


# -- widgets from saved state --------------------------------------------------------------------

def _strip_tags(markup: str) -> str:
    return " ".join(BeautifulSoup(markup, "html.parser").get_text(" ").split())


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


class StaticWidgets:
    """Static HTML for widget views, from a notebook's stored widget state.

    ``render(model_id)`` returns the view's HTML. Controls keep their saved values but are
    disabled; the caller says on the page that a kernel is needed to move them. The heatmap
    anywidget becomes a ``div.site-heatmap`` carrying its saved traits, drawn by its own ESM
    file in the browser (assets/site.js).
    """

    CONTROLS = {"IntSliderModel", "FloatSliderModel", "FloatLogSliderModel", "SelectionSliderModel",
                "DropdownModel", "SelectModel", "RadioButtonsModel", "ToggleButtonsModel",
                "ToggleButtonModel", "ButtonModel", "TextModel", "TextareaModel", "IntTextModel",
                "FloatTextModel", "BoundedIntTextModel", "BoundedFloatTextModel", "CheckboxModel"}
    SKIPPED = {"LayoutModel"}

    def __init__(self, state: dict, heatmap_esm: dict[str, str], live: dict[str, list[str]] | None = None,
                 where: str = ""):
        self.models = state["state"]
        self.where = where  # where to run the notebook, as HTML (_where): a free-text box says it
        self.heatmap_esm = heatmap_esm  # ESM source text -> asset file name
        self.live = live or {}  # live panel name -> its controls that the page moves (site_states)
        self.controls: list[str] = []  # "h = 8" for each setting met by render() that needs a kernel
        self.has_controls = False  # a control (a button too) that needs a kernel: the panel needs the kernel note
        self.live_panel = ""  # the live panel being rendered, if any
        self.live_controls: list[str] = []  # the labels of the controls the page moves, met by render()
        self.live_buttons: list[str] = []  # the buttons of a live panel that work on the page, met by render()
        self.buttons: list[str] = []  # the buttons met by render() (each needs a kernel)
        self.heatmaps = 0
        self.live_heatmaps = 0  # of those, the ones in a live panel (their weights are stored as bytes)

    def _model(self, ref: str) -> dict:
        model_id = ref.removeprefix("IPY_MODEL_")
        if model_id not in self.models:
            raise ValueError(f"widget state has no model {model_id!r}")
        return self.models[model_id]

    def _buffer(self, model: dict, name: str) -> str:
        for buf in model.get("buffers", []):
            if buf["path"] == [name]:
                if buf.get("encoding", "base64") != "base64":
                    raise ValueError(f"buffer {name!r} is {buf['encoding']}, expected base64")
                return buf["data"]
        raise ValueError(f"{model['model_name']} has no saved buffer {name!r}")

    def render(self, ref: str, *, alt: str = "") -> str:
        model = self._model(ref)
        name, s = model["model_name"], model["state"]
        classes = " ".join(["site-w", *s.get("_dom_classes", [])])
        desc = s.get("description", "")
        if name in ("VBoxModel", "HBoxModel", "BoxModel", "GridBoxModel"):
            panel = self._live_panel_of(s.get("_dom_classes", []))
            if panel:
                self.live_panel = panel
            kids = [self._model(c) for c in s["children"]]
            # a figure's alt text travels in a hidden HTML widget beside its image (ui/controls.py)
            alts = [_strip_tags(k["state"]["value"]) for k in kids
                    if "mha-alt" in k["state"].get("_dom_classes", [])]
            inner = "".join(self.render(c, alt=alts[0] if alts else "") for c in s["children"]
                            if "mha-alt" not in self._model(c)["state"].get("_dom_classes", []))
            box = "site-hbox" if name == "HBoxModel" else "site-vbox"
            if panel:
                self.live_panel = ""
                return (f'<div class="{_esc(classes)} {box} site-live" data-live="{_esc(panel)}">'
                        f'<p class="site-live-status" role="status"></p>{inner}</div>')
            return f'<div class="{_esc(classes)} {box}">{inner}</div>'
        if name in ("HTMLModel", "HTMLMathModel", "LabelModel"):
            value = s["value"] if name != "LabelModel" else _esc(s["value"])
            if not value and not self.live_panel:  # in a live panel, a place for the HTML a state brings
                return ""
            label = f'<span class="site-label">{_esc(desc)}</span> ' if desc else ""
            return f'<div class="{_esc(classes)} site-html">{label}{value}</div>'
        if name == "ImageModel":
            if not alt:
                raise ValueError(f"an image widget ({classes}) has no alt text beside it")
            data = self._buffer(model, "value")
            return (f'<img class="{_esc(classes)}" alt="{_esc(alt)}" '
                    f'src="data:image/{_esc(s["format"])};base64,{data}">')
        if name == "OutputModel":
            return f'<div class="{_esc(classes)}">{"".join(_output_html(o) for o in s["outputs"])}</div>'
        if name == "AnyModel" and model["state"].get("_anywidget_id") == "mha_core.ui.chart_size.PanelWidth":
            return ""  # invisible: it reports the panel's width to the kernel, and a site has no kernel
        if name == "AnyModel":
            return self._heatmap(model, classes)
        if name in self.CONTROLS:
            return self._control(name, s, classes, desc)
        raise ValueError(f"no static view for widget model {name} ({classes}); add one to "
                         "scripts/build_site.py rather than let the page show its text")

    def _live_panel_of(self, dom_classes: list[str]) -> str:
        """The name of the live panel whose box has these classes (``mha-heads-panel``), else ""."""
        names = [c.removeprefix("mha-").removesuffix("-panel") for c in dom_classes
                 if c.startswith("mha-") and c.endswith("-panel")]
        return next((n for n in names if n in self.live), "")

    def _live_control(self, classes: str) -> str:
        """The name of the control (``mha-heads-N`` -> "N") if the page moves it, else ""."""
        prefix = f"mha-{self.live_panel}-"
        if not self.live_panel:
            return ""
        names = [c.removeprefix(prefix) for c in classes.split() if c.startswith(prefix)]
        return next((n for n in names if n in self.live[self.live_panel]), "")

    def _heatmap(self, model: dict, classes: str) -> str:
        s = model["state"]
        asset = self.heatmap_esm.get(s.get("_esm", ""))
        if asset is None:
            raise ValueError(f"anywidget {s.get('_anywidget_id')} runs an ESM that matches no file "
                             f"in {WIDGET_STATIC}")
        if "layers" in s and self.live_panel:
            # the real panel's layers x heads overview (score_grid.js), in a live panel: drawn by its
            # own script like a heatmap (assets/site.js), moved by the panel's script
            traits = {k: v for k, v in s.items() if not k.startswith("_") and k not in ("scores", "lut")
                      and not isinstance(v, dict)}
            traits["scores"] = self._buffer(model, "scores")  # float32 (layers, h), base64
            traits["lut"] = self._buffer(model, "lut")
            return (f'<div class="{_esc(classes)} site-scoregrid" data-esm="{_esc(asset)}" '
                    f'data-state="{_esc(json.dumps(traits))}"><p class="site-noscript">{_esc(s["title"])}</p></div>')
        if "h" not in s:  # another client-side widget (the real panel's layers x heads overview)
            what = s.get("title") or "an interactive overview"
            return (f'<div class="{_esc(classes)}"><p class="site-noscript">{_esc(what)}: '
                    "run this notebook to use it.</p></div>")
        # every synced trait the page's heatmap.js reads (the real panel's adds marks and captions)
        traits = {k: v for k, v in s.items() if not k.startswith("_") and k not in ("weights", "lut")
                  and not isinstance(v, dict)}
        traits["weights"] = self._buffer(model, "weights")  # float32 (h, N, N), base64
        traits["lut"] = self._buffer(model, "lut")  # 256 RGB bytes, base64
        self.heatmaps += 1
        self.live_heatmaps += bool(self.live_panel)
        return (f'<div class="{_esc(classes)} site-heatmap" data-esm="{_esc(asset)}" '
                f'data-state="{_esc(json.dumps(traits))}"><p class="site-noscript">{_esc(s["alt"])}</p></div>')

    def _control(self, name: str, s: dict, classes: str, desc: str) -> str:
        label = desc or s.get("tooltip") or name.removesuffix("Model")
        live = self._live_control(classes)
        if live and name in ("TextModel", "TextareaModel"):
            return self._free_text(s, classes, label, live)
        if live:  # drawn disabled as saved; assets/live.js enables it once its states are loaded
            if name == "ButtonModel":  # a button acts on the figure (the maps as files): the note names it apart
                self.live_buttons.append(s["description"])
            else:
                self.live_controls.append(re.sub(r": (on|off)$", "", label))  # "causal mask", not "causal mask: off"
            kind = {"SelectionSliderModel": "selection", "IntSliderModel": "int", "ToggleButtonModel": "toggle",
                    "ToggleButtonsModel": "buttons", "DropdownModel": "select", "ButtonModel": "button"}.get(name)
            if kind is None:
                raise ValueError(f"live control {live!r} is a {name}, which assets/live.js cannot move")
            return self._control_html(name, s, classes, desc, label, [],
                                      f'data-control="{_esc(live)}" data-widget="{kind}" ')
        self.has_controls = True
        if name == "ButtonModel":
            self.buttons.append(s["description"])
        return self._control_html(name, s, classes, desc, label, self.controls)

    def _free_text(self, s: dict, classes: str, label: str, live: str) -> str:
        """A live panel's free-text box (the write panel's prompt) stays frozen at its saved value,
        and says beside it why (free text needs a kernel) and where to run one; next to it, a menu
        of the values whose states were computed (``data-control``: assets/live.js fills and moves
        it; ``site_states``: the table's labels)."""
        note = f"site-free-text-{self.live_panel}-{live}"
        self.live_controls.append(f"prepared {label}")
        return (f'<div class="site-free-text"><label class="{_esc(classes)} site-control">'
                f'<span class="site-label">{_esc(label)}</span><input type="text" disabled value="{_esc(s["value"])}" '
                f'aria-describedby="{note}"></label>'
                f'<label data-control="{_esc(live)}" data-widget="select" class="site-w site-control">'
                f'<span class="site-label">prepared {_esc(label)}</span><select disabled>'
                f'<option selected>{_esc(s["value"])}</option></select></label>'
                f'<p class="site-free-text-note" id="{note}">{FREE_TEXT_NOTE.format(what=_esc(label), where=self.where)}'
                "</p></div>")

    @staticmethod
    def _control_html(name: str, s: dict, classes: str, desc: str, label: str, settings: list[str],
                      attrs: str = "") -> str:
        """A control at its saved value, disabled; its setting ("h = 8") is added to ``settings``;
        ``attrs`` (``'data-control="N" '``) go on its outer element."""
        if name == "ButtonModel":
            return f'<button {attrs}class="{_esc(classes)}" disabled>{_esc(s["description"])}</button>'
        if name == "ToggleButtonModel":
            pressed = "true" if s["value"] else "false"
            settings.append(f"{label}: {'on' if s['value'] else 'off'}")
            return f'<button {attrs}class="{_esc(classes)}" disabled aria-pressed="{pressed}">{_esc(s["description"])}</button>'
        if "_options_labels" in s:
            options = s["_options_labels"]
            index = s.get("index")
            shown = options[index] if isinstance(index, int) else "none"
            settings.append(f"{label} = {shown}")
            if name == "SelectionSliderModel":
                field = (f'<input type="range" disabled min="0" max="{len(options) - 1}" value="{index}" '
                         f'aria-valuetext="{_esc(shown)}"><output>{_esc(shown)}</output>')
            elif name in ("ToggleButtonsModel", "RadioButtonsModel"):
                buttons = "".join(f'<button disabled aria-pressed="{"true" if i == index else "false"}">'
                                  f'{_esc(o)}</button>' for i, o in enumerate(options))
                return (f'<div {attrs}class="{_esc(classes)} site-control" role="group" aria-label="{_esc(label)}">'
                        f'<span class="site-label" aria-hidden="true">{_esc(desc)}</span>{buttons}</div>')
            else:
                opts = "".join(f'<option{" selected" if i == index else ""}>{_esc(o)}</option>'
                               for i, o in enumerate(options))
                field = f"<select disabled>{opts}</select>"
        elif name in ("IntSliderModel", "FloatSliderModel", "FloatLogSliderModel"):
            settings.append(f"{label} = {s['value']}")
            field = (f'<input type="range" disabled min="{s["min"]}" max="{s["max"]}" step="{s["step"]}" '
                     f'value="{s["value"]}"><output>{_esc(s["value"])}</output>')
        elif name == "CheckboxModel":
            settings.append(f"{label}: {'on' if s['value'] else 'off'}")
            field = f'<input type="checkbox" disabled{" checked" if s["value"] else ""}>'
        else:  # text fields
            settings.append(f"{label} = {s['value']!r}")
            field = f'<input type="text" disabled value="{_esc(s["value"])}">'
        return (f'<label {attrs}class="{_esc(classes)} site-control"><span class="site-label">{_esc(label)}</span>'
                f"{field}</label>")


def _output_html(out: dict) -> str:
    """One output of an Output widget (text/html, image with alt, or text)."""
    data = out.get("data", {})
    if "text/html" in data:
        return "".join(data["text/html"]) if isinstance(data["text/html"], list) else data["text/html"]
    if out.get("output_type") == "stream":
        return f"<pre>{_esc(''.join(out['text']))}</pre>"
    if "text/plain" in data:
        return f"<pre>{_esc(''.join(data['text/plain']))}</pre>"
    raise ValueError(f"an Output widget holds an output with no static form: {sorted(data)}")


def _kernel_note(controls: list[str], heatmaps: int, where: str) -> str:
    saved = f" ({_esc('; '.join(dict.fromkeys(controls)))})" if controls else ""
    hover = ('<span class="site-hover-hint"> The heatmaps do work here: point at a cell (or tap it, or '
             "Tab to a map and use the arrow keys) to read its exact weight and its two tokens; a "
             "click outlines that query's row in every head.</span>" if heatmaps else "")
    return (f'<p class="site-kernel-note" role="note"><strong>A saved copy of a live panel</strong>, with '
            f"the settings it had when the notebook ran{saved}. Its controls need Python "
            f"running behind them, so they do nothing on this page: {KERNEL_NOTE} ({where}).{hover}</p>")


def _live_note(moved: list[str], frozen: list[str], buttons: list[str], heatmaps: int, where: str,
               first: bool = True, working: tuple[str, ...] = ()) -> str:
    """The note over a live panel: its controls work here, from states computed at build time
    (said in full over the page's ``first`` live panel only); ``frozen`` (settings) and
    ``buttons`` (their names) need a kernel, and the note says so; ``working``: its buttons that
    work on the page (the heads panel's "PNG + SVG")."""
    still = [*dict.fromkeys(frozen), *(f"the “{b}” button" for b in dict.fromkeys(buttons))]
    rest = (f" Still frozen here, as they need Python running behind them ({_esc('; '.join(still))}): "
            f"run this notebook to use them ({where})." if still else
            f" To change its code or try values it does not offer, run the notebook itself ({where}).")
    hover = f" {LIVE_HEATMAP_NOTE}" if heatmaps else ""
    hover += "".join(f" “{_esc(b)}” {WORKING_BUTTONS.get(b, 'works here too')}." for b in working)
    return (f'<p class="site-kernel-note site-live-note" role="note"><strong>A live panel</strong>: move '
            f"{_esc(', '.join(dict.fromkeys(moved)))} and the figure follows. "
            f"{COMPUTED_NOTE if first else LOADED_NOTE}{hover}{rest}</p>")


def widget_states(nb_path: Path, timeout: int = 600) -> tuple[nbformat.NotebookNode, float]:
    """Execute a copy of the notebook in memory with its widget state stored.

    Returns (the executed notebook, seconds). The file itself is never written.
    """
    nb = nbformat.read(nb_path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=True,
                   resources={"metadata": {"path": str(nb_path.parent)}}).execute()
    return nb, time.perf_counter() - start


def _widget_cells(nb) -> list[int]:
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
            and any(WIDGET_VIEW in o.get("data", {}) for o in c.outputs)]


def static_widgets(nb, nb_path: Path, executed, heatmap_esm: dict[str, str], where: str,
                   live: dict[str, list[str]] | None = None) -> None:
    """Replace every widget output of ``nb`` (committed) by static HTML drawn from the widget
    state of ``executed``, the same notebook run again (``widget_states``). ``live``: {panel
    name: its controls that the page moves} (``site_states``); their panels become live."""
    cells = _widget_cells(nb)
    if not cells:
        return
    state = executed.metadata.get("widgets", {}).get(WIDGET_STATE)
    if state is None:
        raise ValueError(f"executing {nb_path} stored no widget state")
    live_panels = 0  # on this page so far
    for i in cells:
        if executed.cells[i].source != nb.cells[i].source:
            raise ValueError(f"{nb_path} cell {i}: executed copy differs from the committed cell")
        views = [o for o in executed.cells[i].outputs if WIDGET_VIEW in o.get("data", {})]
        kept = []
        for out in nb.cells[i].outputs:
            if WIDGET_VIEW not in out.get("data", {}):
                kept.append(out)
                continue
            if not views:
                raise ValueError(f"{nb_path} cell {i}: the executed copy shows no widget")
            renderer = StaticWidgets(state, heatmap_esm, live, where=where)
            body = renderer.render(views.pop(0)["data"][WIDGET_VIEW]["model_id"])
            if renderer.live_controls:
                note = _live_note(renderer.live_controls, renderer.controls, renderer.buttons,
                                  renderer.live_heatmaps, where, first=live_panels == 0,
                                  working=tuple(renderer.live_buttons))
                live_panels += 1
            else:
                note = _kernel_note(renderer.controls, renderer.heatmaps, where) if renderer.has_controls else ""
            kept.append(nbformat.v4.new_output(
                "display_data", data={"text/html": f'<div class="site-widget">{note}{body}</div>'}))
        nb.cells[i].outputs = kept


def _site_states():
    """``scripts/site_states.py`` (the live panels' states), imported from beside this file: the
    script runs as a file (``make site``) and the tests load it by its path."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import site_states

    return site_states


# -- pages -----------------------------------------------------------------------------------------

def _markdown_notebook(text: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(text)]
    return nb


def _home_markdown(pages: list[Page], binder: str | None) -> str:
    groups = [("lesson", "Lessons"), ("solutions", "Solutions"), ("guide", "For teachers"),
              ("references", "References"), ("dashboard", "The dashboard")]
    lines = [f"# {SITE_TITLE}", "",
             "A course on multi-head attention: the part of a transformer (the kind of model behind "
             "today's chatbots) that lets every word of a sentence look at the others, several ways "
             "at once. Each lesson explains one idea and shows it with short Python programs and "
             "their results. Start with lesson 00.", "",
             "These pages are the course's notebooks, made for reading: the code and its results are "
             "shown as they were when the notebooks were run, and nothing runs here. The attention "
             "heatmaps still respond when you point at them, and the panels marked *live* move "
             "with their controls: every setting they offer was computed by the course's own code "
             "when this site was built. The other panels' sliders and buttons need Python running "
             "behind them, and each panel says so (see *Run it yourself* below).", ""]
    for kind, heading in groups:
        members = [p for p in pages if p.kind == kind]
        if members:
            lines += [f"## {heading}", ""] + [f"- [{p.title}]({p.href})" for p in members] + [""]
        elif kind == "solutions":
            lines += [f"## {heading}", "", NO_SOLUTIONS, ""]
    lines += ["## Run it yourself", ""]
    if binder:
        lines += [f"- **In your browser, nothing to install:** [the notebooks on Binder]"
                  f"({binder}?urlpath=lab/tree/notebooks) or [the live dashboard on Binder]"
                  f"({binder}?urlpath=voila/render/notebooks/dashboard.ipynb). Binder starts a "
                  "copy of the course for you; it takes a minute or two, and your changes are not kept.", ""]
    lines += ["- **On your own computer:** you need a copy of the course project (ask your teacher "
              "where to get it), Python 3.10 or newer, and `make` (Linux or macOS). In a terminal, in "
              "the project's folder, type `make lab` to open the notebooks in JupyterLab, where you "
              "can run the code and do the exercises, or `make dashboard` for the live dashboard "
              "(then open http://127.0.0.1:8866 in your browser).", "",
              "- **In class:** your teacher can run the live dashboard for everyone.", ""]
    return "\n".join(lines)


def _link_map(pages: list[Page]) -> dict[Path, Page]:
    return {p.source.resolve(): p for p in pages}


def rewrite_links(soup: BeautifulSoup, source: Path, links: dict[Path, Page], unresolved: list) -> None:
    """Point links to other notebooks/Markdown files at their pages (a link that reads as a file
    name is renamed after the page); others to repository files become plain code text (the
    site has no copy of them), except links to the solutions on a site without them: those point
    to the home page's note on where the solutions are given out."""
    pages = {"index.html", *(p.href for p in links.values())}
    solutions = (ROOT / "notebooks" / "solutions").resolve()
    for a in soup.find_all("a", href=True):
        href = a["href"]
        parts = urlsplit(href)
        if parts.scheme or parts.netloc or href.startswith("#") or not parts.path or parts.path in pages:
            continue
        target = (source.parent / unquote(parts.path)).resolve()
        if target in links:
            a["href"] = links[target].href + (f"#{parts.fragment}" if parts.fragment else "")
            if a.get_text().strip().endswith((".ipynb", ".md")):
                a.string = plain_title(links[target].title)
        elif target.is_relative_to(solutions):
            a["href"] = SOLUTIONS_NOTE
            a.string = "the solutions (your teacher gives them out)"
        else:
            unresolved.append(f"{source.relative_to(ROOT)} -> {href}")
            code = soup.new_tag("code", attrs={"class": "site-repo-path", "title": "a file in the repository"})
            code.string = a.get_text()
            a.replace_with(code)


def _exporter(exclude_input: bool) -> HTMLExporter:
    return HTMLExporter(template_name="mha-site", extra_template_basedirs=[str(TEMPLATES)],
                        exclude_input=exclude_input, exclude_input_prompt=exclude_input,
                        exclude_output_prompt=exclude_input, anchor_link_text="¶")


def _where(page: Page, binder: str | None) -> str:
    """Where to run the page's notebook, as HTML: Binder when its URL is known, else the home
    page's "Run it yourself"."""
    if binder:
        path = page.source.relative_to(ROOT).as_posix()
        urlpath = f"voila/render/{path}" if page.kind == "dashboard" else f"lab/tree/{path}"
        return (f'<a href="{_esc(binder)}?urlpath={_esc(urlpath)}">open it on Binder</a>, nothing to '
                f'install; or on your own computer: <a href="{RUN_IT}">run it yourself</a>')
    return f'see <a href="{RUN_IT}">Run it yourself</a> on the home page'


def render_page(page: Page | None, nb, pages: list[Page], exporter: HTMLExporter, *,
                slug: str, title: str, where: str = "") -> str:
    i = pages.index(page) if page in pages else -1
    site = {"kind": page.kind if page else "home", "slug": slug, "pages": pages, "where": where,
            "prev": pages[i - 1] if i > 0 else None,
            "next": pages[i + 1] if 0 <= i < len(pages) - 1 else None,
            "site_title": SITE_TITLE, "title": title}
    nb.metadata["title"] = f"{plain_title(title)} · {SITE_TITLE}" if page else SITE_TITLE
    body, _ = exporter.from_notebook_node(nb, resources={"site": site})
    return body


def copy_assets(out: Path) -> dict[str, str]:
    """Copy every file the pages load into out/assets; return {heatmap ESM text: asset name}."""
    assets = out / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    if not (KATEX / "katex.min.js").exists():
        raise FileNotFoundError(f"{KATEX / 'katex.min.js'} is missing: run `npm ci --prefix site` "
                                "(make site does)")
    katex = assets / "katex"
    (katex / "fonts").mkdir(parents=True, exist_ok=True)
    (katex / "contrib").mkdir(exist_ok=True)
    for name in ("katex.min.js", "katex.min.css"):
        shutil.copy2(KATEX / name, katex / name)
    shutil.copy2(KATEX / "contrib" / "auto-render.min.js", katex / "contrib" / "auto-render.min.js")
    for font in (KATEX / "fonts").glob("*.woff2"):  # every browser that runs ES modules reads woff2
        shutil.copy2(font, katex / "fonts" / font.name)
    shutil.copy2(KATEX.parent / "LICENSE", katex / "LICENSE")
    # the notebook look: nbconvert's own lab CSS, once for all pages instead of inlined in each
    lab = Path(HTMLExporter(template_name="lab").template_paths[0])
    css = [(lab / "static" / name).read_text(encoding="utf-8") for name in ("index.css", "theme-light.css")]
    (assets / "notebook.css").write_text("\n".join(css), encoding="utf-8")
    for name in ("site.css", "maths.js", "site.js", "live.js", "write.js", "real_live.js"):
        shutil.copy2(SITE_SRC / name, assets / name)
    esm = {}
    for path in sorted(WIDGET_STATIC.iterdir()):
        if path.suffix in (".js", ".css"):
            shutil.copy2(path, assets / path.name)
            if path.suffix == ".js":
                esm[path.read_text(encoding="utf-8")] = path.name
    return esm


def build(out: Path, log=print, *, binder: str | None = None, for_teachers: bool = False) -> dict:
    """Build the site into ``out`` (emptied first). Returns a summary: pages, seconds, bytes.

    binder : a Binder URL of the repository (e.g. ``https://mybinder.org/v2/gh/OWNER/REPO/HEAD``);
        given, every page that can run links to its notebook there.
    for_teachers : put in the solutions and the teacher's guide (with its answers); without it
        the site is for students and has neither.
    """
    if binder is not None and not re.match(r"https://[^\s?#]+$", binder):
        raise ValueError(f"binder must be an https:// URL with no query, got {binder!r}")
    start = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    pages = discover(for_teachers=for_teachers)
    heatmap_esm = copy_assets(out)
    links = _link_map(pages)
    unresolved: list[str] = []
    # the notebooks with widgets, run again for their widget state: two at a time (kernels start
    # in parallel; two keep a small laptop's cores busy without contending)
    notebooks = {p: nbformat.read(p.source, as_version=4) for p in pages if p.source.suffix == ".ipynb"}
    rerun = [p for p, nb in notebooks.items() if _widget_cells(nb)]
    states = _site_states()
    live = {name: table.live_controls for name, table in states.live_tables().items()}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2) as pool:
        running = pool.map(lambda p: widget_states(p.source), rerun)
        # meanwhile, in two processes: the live panels' states (site_states)
        stored = states.write_states(list(live), out / "assets" / "states")
        states_seconds = time.perf_counter() - t0
        runs = dict(zip(rerun, running, strict=True))
    rerun_seconds = time.perf_counter() - t0
    for p, (_, seconds) in runs.items():
        log(f"  executed {p.source.name} for its widget state: {seconds:.1f} s")
    for name, facts in stored.items():
        kept = " (kept from an earlier build of the same code)" if facts["cached"] else ""
        took = f", computed in {facts['seconds']} s" if "seconds" in facts else ""
        log(f"  live panel {name}: {facts['states']} states, {facts['bytes'] / 1e6:.1f} MB{took}{kept}")
    log(f"  the live panels' states ready in {states_seconds:.1f} s")
    exporters = {exclude: _exporter(exclude) for exclude in (False, True)}  # one each: building one takes ~0.5 s
    for page in [None, *pages]:
        where = ""
        if page is None:
            nb, slug, title, exclude = _markdown_notebook(_home_markdown(pages, binder)), "index", SITE_TITLE, False
        elif page.source.suffix == ".md":
            nb = _markdown_notebook(page.source.read_text(encoding="utf-8"))
            slug, title, exclude = page.slug, page.title, False
        else:
            nb, where = notebooks[page], _where(page, binder)
            if page in runs:
                static_widgets(nb, page.source, runs[page][0], heatmap_esm, where, live)
            slug, title, exclude = page.slug, page.title, page.kind == "dashboard"
        # no copy of nb needed: the exporter renders a copy of its own
        body = render_page(page, nb, pages, exporters[exclude], slug=slug, title=title, where=where)
        soup = BeautifulSoup(body, "html.parser")
        rewrite_links(soup, page.source if page else ROOT / "notebooks" / "index", links, unresolved)
        (out / f"{slug}.html").write_text(str(soup), encoding="utf-8")
        log(f"  {slug}.html")
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    seconds = time.perf_counter() - start
    for item in unresolved:
        log(f"  (not on the site, shown as a path) {item}")
    log(f"built {len(pages) + 1} pages into {out} in {seconds:.1f} s ({rerun_seconds:.1f} s of it running "
        f"{len(rerun)} notebooks for their widget state and computing the live panels' states, side by side), "
        f"{size / 1e6:.1f} MB")
    return {"pages": pages, "seconds": seconds, "bytes": size, "unresolved": unresolved,
            "rerun": [p.source.name for p in rerun], "rerun_seconds": rerun_seconds,
            "states": stored, "states_seconds": states_seconds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path,
                        help="output folder, emptied first (default: build/site, or build/site-teachers "
                             "with --for-teachers, so that one build never overwrites the other)")
    parser.add_argument("--binder", metavar="URL",
                        help="the repository's Binder URL, e.g. https://mybinder.org/v2/gh/OWNER/REPO/HEAD: "
                             "every lesson then links to its notebook on Binder")
    parser.add_argument("--for-teachers", action="store_true",
                        help="put in the solutions and the teacher's guide with its answers "
                             "(the default site, for students, has neither)")
    args = parser.parse_args(argv)
    args.out = args.out or DEFAULT_OUT[args.for_teachers]
    build(args.out, binder=args.binder, for_teachers=args.for_teachers)
    print(f"serve it with: python -m http.server --bind 127.0.0.1 --directory {args.out} 8000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
