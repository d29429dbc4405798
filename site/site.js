// The course site's module script (scripts/build_site.py copies it into build/site/assets/); the
// maths is typeset before it runs, by maths.js (a classic script, so it works from file:// too).
// 1. Heatmaps: each div.site-heatmap carries the saved traits of the dashboard's heatmap anywidget
//    (mha_core/ui/heatmap.py). The widget's own ESM file draws it, given a small stand-in for the
//    widget model (get / set / save_changes / on / off / send) that lives in the page. So hover and
//    the keyboard cursor show the exact weights with no kernel; a click outlines the query row.
// 3. Live panels (live.js): their controls look up states computed when the site was built.

import { startLivePanels } from "./live.js";

function bytes(b64) {
  const s = atob(b64);
  const u = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) { u[i] = s.charCodeAt(i); }
  return new DataView(u.buffer);
}

// The part of an anywidget model that a render() uses, without a kernel behind it.
function savedModel(traits) {
  const handlers = {};
  const changed = new Set();
  return {
    get: (name) => traits[name],
    set: (name, value) => { if (traits[name] !== value) { traits[name] = value; changed.add(name); } },
    save_changes: () => {
      const names = [...changed];
      changed.clear();
      names.forEach((name) => (handlers["change:" + name] || []).forEach((f) => f()));
    },
    on: (event, f) => { (handlers[event] = handlers[event] || []).push(f); },
    off: (event, f) => { handlers[event] = (handlers[event] || []).filter((g) => f && g !== f); },
    send: () => {},
  };
}

const models = new WeakMap();  // a heatmap's element -> its stand-in model (live.js moves it)

async function renderHeatmaps() {
  for (const el of document.querySelectorAll(".site-heatmap, .site-scoregrid")) {  // the overview: score_grid.js
    const traits = JSON.parse(el.dataset.state);
    for (const name of ["weights", "scores", "lut"].filter((b) => b in traits)) { traits[name] = bytes(traits[name]); }
    const widget = (await import("./" + el.dataset.esm)).default;
    el.querySelector(".site-noscript")?.remove();
    const model = savedModel(traits);
    models.set(el, model);
    widget.render({ model, el });
  }
}

// 2. A box that scrolls sideways (long code lines, wide tables on a phone) becomes a tab stop, so a
//    keyboard can scroll it too; checked again when the window is resized.
function markScrollers() {
  const boxes = ".jp-InputArea-editor, .jp-OutputArea-output, .jp-RenderedHTMLCommon, .jp-RenderedHTMLCommon table, .site-widget, .site-html";
  document.querySelectorAll(boxes).forEach((el) => {
    const scrolls = el.scrollWidth > el.clientWidth + 1 && getComputedStyle(el).overflowX !== "visible";
    if (scrolls && !el.hasAttribute("tabindex")) {
      el.setAttribute("tabindex", "0");
      el.setAttribute("role", "region");
      el.setAttribute("aria-label", el.matches(".jp-InputArea-editor") ? "code, scrolls sideways" : "scrolls sideways");
      el.dataset.scroller = "1";
    } else if (!scrolls && el.dataset.scroller) {
      ["tabindex", "role", "aria-label", "data-scroller"].forEach((a) => el.removeAttribute(a));
    }
  });
  // a panel's table: its "swipe" line, while the table is wider than its box (the box scrolls, or
  // the table itself: the page's CSS makes a rendered table a block that scrolls)
  const wider = (el) => !!el && el.scrollWidth > el.clientWidth + 1;
  document.querySelectorAll(".mha-table").forEach((box) => {
    const inner = box.querySelector(".mha-scroll");
    box.classList.toggle("mha-overflows", wider(inner) || wider(inner?.firstElementChild));
  });
}

async function start() {
  await renderHeatmaps();
  startLivePanels((el) => models.get(el), markScrollers);
  markScrollers();
  let timer;
  window.addEventListener("resize", () => { clearTimeout(timer); timer = setTimeout(markScrollers, 100); });
  document.body.dataset.ready = "1";
}

if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", start);
} else {
  start();
}
