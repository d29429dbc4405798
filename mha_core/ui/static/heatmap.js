// The heads panel's heatmaps, drawn in the browser from the attention weights
// (mha_core/ui/heatmap.py, an anywidget: this file ships inside the package, nothing is fetched).
//
// Model traits: weights (float32 bytes, shape (h, N, N), row = query, column = key), h, n,
// labels (N str), title, query (-1 or the outlined row), lut (256 RGB bytes of the colormap),
// gamma (colour = weight ** gamma), digits (decimals of a weight in the tip), alt (the figure's description), tile and max_tile (px of one
// map: 12 px a token between the two), lines and stripe (marks: see draw).
//
// Pointer: hovering a cell (or tapping it, for 1.5 s; a scroll closes it) shows "head i: query q 'tok' -> key k 'tok' = weight"; clicking a
// row selects that query (sets `query`, the kernel answers with the outlined row).
// Keyboard: each head is a tab stop; arrow keys move a cell cursor (announced through an
// aria-live region), Enter or Space selects the cursor's row as the query, Escape clears it.

// Sizes in CSS px at --mha-scale 1: at least 64 px left of a map for the query labels and 56 px
// below it for the (rotated) key labels, more when the longest label needs it (measured, so no
// label is cut at the canvas's edge; one longer than MAX_LABEL_PX ends in "…"); 4 px above it;
// labels at least 11 px apart, in an 11 px font.
const LEFT_PX = 64, BOTTOM_PX = 56, TOP_PX = 4, LABEL_PX = 11, MAX_LABEL_PX = 120;
const FONT_PX = 11;
// The page may ask for larger maps (a projector): the CSS variable --mha-scale (1 by default)
// multiplies every size above, and the canvases are redrawn at that size, never stretched.
// It may also ask a map to fill its box (the CSS variable --mha-fill: 1, a wide window): the map
// is then drawn as wide as the room it gets allows, up to `max_tile` (x scale), whatever N is.
const TAP_TIP_MS = 1500; // after a tap, the tip stays this long
const GAP_PX = 16; // between maps side by side (heatmap.css: .mha-heatmap-grid's column gap)
const MIN_SMALL_PX = 72; // small multiples never shrink below this
const TIP_MARGIN_PX = 4; // the tip keeps this far from the screen's edges
const TOUCH_GAP_PX = 28; // after a tap, the tip's edge keeps this far from the finger's point (a row's height or more)

function floats(model) {
  const dv = model.get("weights");
  if (!dv || !dv.byteLength) { return new Float32Array(0); }
  const buf = dv.buffer.slice(dv.byteOffset, dv.byteOffset + dv.byteLength);
  return new Float32Array(buf);
}

function lutOf(model) {
  const dv = model.get("lut");
  return new Uint8Array(dv.buffer, dv.byteOffset, dv.byteLength);
}

function render({ model, el }) {
  el.classList.add("mha-heatmap");
  const title = document.createElement("div");
  title.className = "mha-heatmap-title";
  const legend = document.createElement("div");
  legend.className = "mha-heatmap-legend";
  const grid = document.createElement("div");
  grid.className = "mha-heatmap-grid";
  grid.setAttribute("role", "group");
  const tip = document.createElement("div");
  tip.className = "mha-heatmap-tip";
  tip.setAttribute("aria-live", "polite");
  const desc = document.createElement("p");
  desc.className = "mha-heatmap-alt";
  desc.id = "mha-heatmap-alt-" + Math.random().toString(36).slice(2);
  grid.setAttribute("aria-describedby", desc.id);
  el.append(title, legend, grid, tip, desc);

  let W = new Float32Array(0);
  let cursor = [0, 0];
  let drawnScale = 1, drawnSide = 0;  // --mha-scale and a map's side at the last build
  let drawnLeft = LEFT_PX, drawnBottom = BOTTOM_PX, shown = [];  // label room (CSS px) and the labels drawn

  function weight(head, q, k) {
    const n = model.get("n");
    return W[(head * n + q) * n + k];
  }

  function name(head) {
    const captions = model.get("captions");
    return captions.length > head ? captions[head] : `head ${head}`;
  }

  function describe(head, q, k) {
    const labels = model.get("labels");
    const digits = model.get("digits") ?? 4;  // traits saved before `digits` existed have none
    return `${name(head)}: query ${q} "${labels[q]}" -> key ${k} "${labels[k]}" = ${weight(head, q, k).toFixed(digits)}`;
  }

  function drawLegend() {
    const lut = lutOf(model);
    const stops = [];
    for (let i = 0; i <= 8; i++) {
      const j = Math.round((i / 8) * 255) * 3;
      stops.push(`rgb(${lut[j]},${lut[j + 1]},${lut[j + 2]}) ${(i / 8) * 100}%`);
    }
    const gamma = model.get("gamma");
    legend.innerHTML = "";
    const bar = document.createElement("span");
    bar.className = "mha-heatmap-bar";
    bar.style.background = `linear-gradient(to right, ${stops.join(",")})`;
    const scale = document.createElement("span");  // "attention weight 0 [bar] 1" never breaks apart
    scale.className = "mha-heatmap-scale";
    scale.append("attention weight 0 ", bar, " 1");
    const how = document.createElement("span");
    how.textContent = gamma === 1 ? "" : (gamma === 0.5 ? "(colour by square root, so that small weights still show)"
                                                         : `(colour = weight^${gamma})`);
    legend.append(scale, how);
  }

  // A map's side: 12 px a token (every label fits) between `tile` and `max_tile` (`max_tile` when
  // the page asks the map to fill its box), times the page's scale, and never wider than the room
  // the page gives it (room()): a map too wide for its box
  // shrinks to fit it (as far as MIN_SMALL_PX), it is never cut off at the box's edge.
  // With `columns` set (small multiples), `columns` maps with their labels share the width.
  function side(n, k) {
    const most = Math.max(model.get("tile"), model.get("max_tile"));
    const want = (fill() ? most : Math.min(Math.max(model.get("tile"), n * 12), most)) * k;
    const cols = Math.max(1, model.get("columns"));
    const width = room();
    if (width <= 0) { return Math.round(want); }  // not laid out yet: the ResizeObserver below redraws
    const fits = (width - 12 - (cols - 1) * GAP_PX) / cols - drawnLeft - 4;
    return Math.round(Math.min(want, Math.max(fits, MIN_SMALL_PX)));
  }

  // What bounds the maps' width: the panel (its width does not depend on the maps), else the parent.
  function frame() { return el.closest(".mha-panel") || el.parentElement; }

  // The widest the maps may be: this element's width when it asks for the whole panel. A box
  // between them (the real-model panel's map column, max-width 36em) may allow less than the
  // panel, and its width follows its content, so it is measured with the content at its widest
  // (for this one synchronous layout; the old width is put back at once).
  function room() {
    const f = frame();
    if (!f || f.clientWidth <= 0) { return 0; }
    const old = el.style.width;
    el.style.width = f.clientWidth + "px";
    const w = Math.min(el.clientWidth, f.clientWidth);
    el.style.width = old;
    return w;
  }

  function scale() {
    return parseFloat(getComputedStyle(el).getPropertyValue("--mha-scale")) || 1;
  }

  function fill() {
    return (parseFloat(getComputedStyle(el).getPropertyValue("--mha-fill")) || 0) > 0;
  }

  // The labels as drawn, each at most MAX_LABEL_PX (x scale) wide, and the room they need on the
  // left and below the map: measured in the labels' font, so none is cut at the canvas's edge.
  function measureLabels(k) {
    const ctx = document.createElement("canvas").getContext("2d");
    ctx.font = `${FONT_PX * k}px sans-serif`;
    const most = MAX_LABEL_PX * k;
    shown = model.get("labels").map((t) => {
      if (ctx.measureText(t).width <= most) { return t; }
      let cut = t;
      while (cut.length > 1 && ctx.measureText(cut + "…").width > most) { cut = cut.slice(0, -1); }
      return cut + "…";
    });
    const widest = shown.reduce((w, t) => Math.max(w, ctx.measureText(t).width), 0);
    drawnLeft = Math.ceil(Math.max(LEFT_PX * k, widest + 8 * k));
    drawnBottom = Math.ceil(Math.max(BOTTOM_PX * k, widest + 8 * k));
  }

  // Draws at the scale, side and label room of the last build, which cellAt reads too.
  function drawHead(canvas, head) {
    const n = model.get("n");
    const labels = shown;
    const k = drawnScale, S = drawnSide;
    const LEFT = drawnLeft, BOTTOM = drawnBottom, TOP = TOP_PX * k;
    const lut = lutOf(model);
    const gamma = model.get("gamma");
    const query = model.get("query");
    const dpr = window.devicePixelRatio || 1;
    const cssW = LEFT + S + 4, cssH = TOP + S + BOTTOM;
    canvas.style.width = cssW + "px";
    canvas.style.height = cssH + "px";
    canvas.width = Math.round(cssW * dpr);
    canvas.height = Math.round(cssH * dpr);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#fff";
    ctx.fillRect(0, 0, cssW, cssH);
    // the map: one ImageData pixel per cell, scaled up without smoothing
    const img = new ImageData(n, n);
    for (let q = 0; q < n; q++) {
      for (let k = 0; k < n; k++) {
        const w = Math.min(Math.max(weight(head, q, k), 0), 1);
        const j = Math.round(Math.pow(w, gamma) * 255) * 3;
        const p = (q * n + k) * 4;
        img.data[p] = lut[j]; img.data[p + 1] = lut[j + 1]; img.data[p + 2] = lut[j + 2]; img.data[p + 3] = 255;
      }
    }
    const off = document.createElement("canvas");
    off.width = n; off.height = n;
    off.getContext("2d").putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, LEFT, TOP, S, S);
    const cell = S / n;
    ctx.font = `${FONT_PX * k}px sans-serif`;
    ctx.fillStyle = "#1a1a1a";
    const step = Math.max(1, Math.ceil((LABEL_PX * k) / cell));
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let t = 0; t < n; t += step) {
      ctx.fillText(labels[t], LEFT - 4, TOP + (t + 0.5) * cell);
    }
    for (let t = 0; t < n; t += step) {
      ctx.save();
      ctx.translate(LEFT + (t + 0.5) * cell, TOP + S + 4);
      ctx.rotate(-Math.PI / 2);
      ctx.fillText(labels[t], 0, 0);
      ctx.restore();
    }
    ctx.setLineDash([5, 3]);  // marks: a dashed line before each position of `lines`, both axes
    ctx.strokeStyle = "#ffffff";
    ctx.lineWidth = 1.5;
    for (const p of model.get("lines")) {
      ctx.beginPath();
      ctx.moveTo(LEFT + p * cell, TOP); ctx.lineTo(LEFT + p * cell, TOP + S);
      ctx.moveTo(LEFT, TOP + p * cell); ctx.lineTo(LEFT + S, TOP + p * cell);
      ctx.stroke();
    }
    ctx.setLineDash([]);
    ctx.strokeStyle = "#ff7f0e";  // the stripe's cells, outlined
    for (const [q, kk] of model.get("stripe")) {
      ctx.strokeRect(LEFT + kk * cell + 0.75, TOP + q * cell + 0.75, cell - 1.5, cell - 1.5);
    }
    if (query >= 0 && query < n) {
      ctx.strokeStyle = "#e7298a";
      ctx.lineWidth = 2;
      ctx.strokeRect(LEFT + 1, TOP + query * cell + 1, S - 2, Math.max(cell - 2, 1));
    }
    if (document.activeElement === canvas && canvas.matches(":focus-visible")) {
      ctx.strokeStyle = "#ffffff";
      ctx.lineWidth = 2;
      ctx.strokeRect(LEFT + cursor[1] * cell, TOP + cursor[0] * cell, cell, cell);
    }
  }

  function cellAt(canvas, event) {
    const r = canvas.getBoundingClientRect();
    const n = model.get("n");
    const S = drawnSide;
    const x = event.clientX - r.left - drawnLeft, y = event.clientY - r.top - TOP_PX * drawnScale;
    if (x < 0 || y < 0 || x >= S || y >= S) { return null; }
    return [Math.min(n - 1, Math.floor((y / S) * n)), Math.min(n - 1, Math.floor((x / S) * n))];
  }

  // The tip stays inside what the screen shows (the visual viewport: a phone may be zoomed or
  // scrolled sideways): it opens right of and below the pointer, to the left of or above it near
  // an edge, is never wider than the screen (its box, padding included: it wraps, the weight
  // "= 0.0245" never split), and is clamped into it. After a tap it opens above the finger (the
  // hand is below it), so that it does not cover the tapped row, below it only when there is no room.
  function showTip(text, canvas, event) {
    clearTimeout(hideTimer);
    const at = text.lastIndexOf(" = ");
    const value = document.createElement("span");
    value.className = "mha-heatmap-tip-weight";
    value.textContent = at < 0 ? "" : text.slice(at + 1);
    tip.replaceChildren(at < 0 ? text : text.slice(0, at + 1), value);
    tip.style.visibility = "visible";
    const vv = window.visualViewport;
    const de = document.documentElement;
    const x0 = vv ? vv.offsetLeft : 0, y0 = vv ? vv.offsetTop : 0;
    const x1 = x0 + (vv ? vv.width : de.clientWidth), y1 = y0 + (vv ? vv.height : de.clientHeight);
    tip.style.maxWidth = Math.max(0, x1 - x0 - 2 * TIP_MARGIN_PX) + "px";
    tip.style.left = "0px";
    tip.style.top = "0px";
    const w = tip.offsetWidth, h = tip.offsetHeight;
    const box = el.getBoundingClientRect(), r = canvas.getBoundingClientRect();
    const px = event ? event.clientX : r.left, py = event ? event.clientY : r.bottom;
    const touch = event && event.pointerType === "touch";
    let left = touch ? px - w / 2 : event ? px + 12 : px, top = touch ? py - TOUCH_GAP_PX - h : event ? py + 14 : py;
    if (left + w > x1 - TIP_MARGIN_PX && event && !touch) { left = px - 12 - w; }
    if (touch && top < y0 + TIP_MARGIN_PX) { top = py + TOUCH_GAP_PX; }
    if (!touch && top + h > y1 - TIP_MARGIN_PX) { top = (event ? py - 14 : r.top) - h; }
    left = Math.max(x0 + TIP_MARGIN_PX, Math.min(left, x1 - TIP_MARGIN_PX - w));
    top = Math.max(y0 + TIP_MARGIN_PX, Math.min(top, y1 - TIP_MARGIN_PX - h));
    tip.style.left = left - box.left + "px";
    tip.style.top = top - box.top + "px";
  }

  let hideTimer = 0;
  function hideTip() { clearTimeout(hideTimer); tip.style.visibility = "hidden"; }

  function selectQuery(q) {
    model.set("query", model.get("query") === q ? -1 : q);
    model.save_changes();
  }

  function pickHead(head) {
    model.set("picked", head);
    model.save_changes();
  }

  // Captions and the canvases' spoken names only: a new caption (the open head moved) needs no redraw.
  function relabel() {
    const h = model.get("h");
    grid.querySelectorAll("figcaption").forEach((cap, head) => {
      cap.style.paddingLeft = drawnLeft + "px";
      cap.textContent = name(head);
    });
    grid.querySelectorAll("canvas").forEach((canvas, head) => {
      canvas.setAttribute("aria-label", `${name(head)}, map ${head + 1} of ${h}. Arrow keys read the weights, Enter ` +
        (model.get("pick_head") ? "opens this head." : "selects the query row."));
    });
  }

  function build() {
    W = floats(model);
    drawnScale = scale();
    measureLabels(drawnScale);
    drawnSide = side(model.get("n"), drawnScale);
    const h = model.get("h");
    title.textContent = model.get("title");
    grid.setAttribute("aria-label", model.get("title"));
    desc.textContent = model.get("alt");
    if (grid.children.length !== h) {
      grid.innerHTML = "";
      for (let head = 0; head < h; head++) {
        const fig = document.createElement("figure");
        fig.className = "mha-head";
        const cap = document.createElement("figcaption");
        const canvas = document.createElement("canvas");
        canvas.tabIndex = 0;
        canvas.setAttribute("role", "img");
        canvas.dataset.head = String(head);
        canvas.addEventListener("pointermove", (e) => {
          if (e.pointerType === "touch") { return; }  // a tap is handled on pointerup
          const c = cellAt(canvas, e);
          if (c) { showTip(describe(head, c[0], c[1]), canvas, e); } else { hideTip(); }
        });
        canvas.addEventListener("pointerleave", (e) => { if (e.pointerType !== "touch") { hideTip(); } });
        // a tap: the tip reads the tapped cell, then closes by itself (no mouseleave comes on touch)
        canvas.addEventListener("pointerup", (e) => {
          if (e.pointerType !== "touch" || model.get("pick_head")) { return; }
          const c = cellAt(canvas, e);
          if (c) { showTip(describe(head, c[0], c[1]), canvas, e); }
          clearTimeout(hideTimer);
          hideTimer = setTimeout(hideTip, TAP_TIP_MS);
        });
        canvas.addEventListener("click", (e) => {
          if (model.get("pick_head")) { pickHead(head); return; }
          const c = cellAt(canvas, e);
          if (c) { selectQuery(c[0]); }
        });
        canvas.addEventListener("focus", () => {  // by keyboard only: a click focuses too
          if (canvas.matches(":focus-visible")) { drawHead(canvas, head); showTip(describe(head, cursor[0], cursor[1]), canvas); }
        });
        canvas.addEventListener("blur", () => { drawHead(canvas, head); hideTip(); });
        canvas.addEventListener("keydown", (e) => {
          const n = model.get("n");
          const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
          if (moves[e.key]) {
            cursor = [Math.min(n - 1, Math.max(0, cursor[0] + moves[e.key][0])),
                      Math.min(n - 1, Math.max(0, cursor[1] + moves[e.key][1]))];
            drawHead(canvas, head);
            showTip(describe(head, cursor[0], cursor[1]), canvas);
          } else if (e.key === "Enter" || e.key === " ") {
            if (model.get("pick_head")) { pickHead(head); } else { selectQuery(cursor[0]); }
          } else if (e.key === "Escape") {
            model.set("query", -1);
            model.save_changes();
          } else {
            return;
          }
          e.preventDefault();
        });
        fig.append(cap, canvas);
        grid.append(fig);
      }
    }
    const n = model.get("n");
    cursor = [Math.min(cursor[0], n - 1), Math.min(cursor[1], n - 1)];
    relabel();
    grid.querySelectorAll("canvas").forEach((canvas, head) => {
      canvas.style.cursor = model.get("pick_head") ? "pointer" : "";
      drawHead(canvas, head);
    });
    el.dataset.labelPx = String(FONT_PX * drawnScale);  // the token labels' font size (the tests read it)
    el.dataset.labelLeft = String(drawnLeft);  // the room left of and below the maps for them
    el.dataset.labelBottom = String(drawnBottom);
    el.dataset.drawn = String((Number(el.dataset.drawn) || 0) + 1);
  }

  drawLegend();
  build();
  // the window crossed a size where the page scales the maps (e.g. onto a projector): redraw
  // and when the room the page gives the maps changes (first layout, a rotated phone), so that the
  // maps are drawn for the width they get
  const onResize = () => {
    const k = scale();
    if (k !== drawnScale || side(model.get("n"), k) !== drawnSide) { build(); }
  };
  window.addEventListener("resize", onResize);
  // a tip never stays over what scrolls under it (the page may scroll inside a box: capture every scroll)
  document.addEventListener("scroll", hideTip, { capture: true, passive: true });
  const watcher = new ResizeObserver(onResize);
  requestAnimationFrame(() => { if (frame()) { watcher.observe(frame()); } });
  model.on("change:weights", build);
  model.on("change:query", build);
  model.on("change:stripe", build);
  model.on("change:captions", relabel);
  model.on("change:lut", drawLegend);
  // a click sets `query` here first, so the kernel's answer may change only the description
  model.on("change:alt", () => { desc.textContent = model.get("alt"); });
  return () => {
    window.removeEventListener("resize", onResize);
    document.removeEventListener("scroll", hideTip, { capture: true });
    watcher.disconnect();
  };
}

// The maps as two files, for a page with no kernel to draw them (the static site's "PNG + SVG";
// in a notebook that button draws them with matplotlib): a PNG of the canvases as drawn, side by
// side under the title, and an SVG of the same maps, each head's weights as an N x N picture in
// the drawn colours (lut, gamma), shown without smoothing, with its caption, token labels and the
// outlined query row in text and lines. `el` is the rendered widget.
const FILE_COLUMNS = 4;  // maps side by side in a file
const FILE_CELL_PX = 12;  // a token's cell in the SVG
export async function figureFiles(model, el) {
  const n = model.get("n"), h = model.get("h"), labels = model.get("labels"), query = model.get("query");
  const lut = lutOf(model), gamma = model.get("gamma"), W = floats(model);
  const captions = model.get("captions") || [];
  const esc = (t) => String(t).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = `${FONT_PX}px sans-serif`;
  const room = Math.ceil(Math.max(LEFT_PX, ...labels.map((t) => ctx.measureText(t).width + 8)));
  const S = n * FILE_CELL_PX, cellW = room + S + GAP_PX, cellH = 20 + S + room;
  const cols = Math.min(h, FILE_COLUMNS), rows = Math.ceil(h / cols);
  const width = cols * cellW, height = 28 + rows * cellH;
  const parts = [`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="${FONT_PX}">`,
    `<rect width="100%" height="100%" fill="#fff"/><text x="4" y="18" font-size="14" font-weight="bold">${esc(model.get("title"))}</text>`];
  for (let head = 0; head < h; head++) {
    const img = new ImageData(n, n);
    for (let i = 0; i < n * n; i++) {
      const j = Math.round(Math.pow(Math.min(Math.max(W[head * n * n + i], 0), 1), gamma) * 255) * 3;
      img.data.set([lut[j], lut[j + 1], lut[j + 2], 255], i * 4);
    }
    const tile = document.createElement("canvas");
    tile.width = n; tile.height = n;
    tile.getContext("2d").putImageData(img, 0, 0);
    const x = (head % cols) * cellW + room, y = 28 + Math.floor(head / cols) * cellH + 20;
    parts.push(`<g class="head" data-head="${head}"><text x="${x}" y="${y - 6}">${esc(captions[head] || `head ${head}`)}</text>`,
      `<image x="${x}" y="${y}" width="${S}" height="${S}" style="image-rendering:pixelated" preserveAspectRatio="none" href="${tile.toDataURL("image/png")}"/>`);
    labels.forEach((t, i) => {
      const c = (i + 0.5) * FILE_CELL_PX;
      parts.push(`<text x="${x - 4}" y="${y + c}" text-anchor="end" dominant-baseline="middle">${esc(t)}</text>`,
        `<text transform="translate(${x + c} ${y + S + 4}) rotate(-90)" text-anchor="end" dominant-baseline="middle">${esc(t)}</text>`);
    });
    if (query >= 0 && query < n) {
      parts.push(`<rect x="${x + 1}" y="${y + query * FILE_CELL_PX + 1}" width="${S - 2}" height="${FILE_CELL_PX - 2}" fill="none" stroke="#e7298a" stroke-width="2"/>`);
    }
    parts.push("</g>");
  }
  parts.push("</svg>");
  const svg = new Blob([parts.join("")], { type: "image/svg+xml" });
  // the PNG: the canvases as drawn (at the screen's pixel ratio), in the same columns
  const canvases = [...el.querySelectorAll(".mha-heatmap-grid canvas")];
  const dpr = window.devicePixelRatio || 1;
  const cw = Math.max(...canvases.map((c) => c.width)), ch = Math.max(...canvases.map((c) => c.height));
  const top = Math.round(28 * dpr), cap = Math.round(18 * dpr);  // the title's band, a caption's
  const out = document.createElement("canvas");
  out.width = cols * cw; out.height = top + rows * (cap + ch);
  const o = out.getContext("2d");
  o.fillStyle = "#fff"; o.fillRect(0, 0, out.width, out.height);
  o.fillStyle = "#1a1a1a"; o.font = `bold ${14 * dpr}px sans-serif`;
  o.fillText(model.get("title"), 4 * dpr, 18 * dpr);
  o.font = `${FONT_PX * dpr}px sans-serif`;
  canvases.forEach((c, head) => {
    const x = (head % cols) * cw, y = top + Math.floor(head / cols) * (cap + ch);
    o.fillText(captions[head] || `head ${head}`, x + 4 * dpr, y + 13 * dpr);
    o.drawImage(c, x, y + cap);
  });
  const png = await new Promise((resolve) => out.toBlob(resolve, "image/png"));
  return { png, svg };
}

export default { render };
