// The heads panel's heatmaps, drawn in the browser from the attention weights
// (mha_core/ui/heatmap.py, an anywidget: this file ships inside the package, nothing is fetched).
//
// Model traits: weights (float32 bytes, shape (h, N, N), row = query, column = key), h, n,
// labels (N str), title, query (-1 or the outlined row), lut (256 RGB bytes of the colormap),
// gamma (colour = weight ** gamma), alt (the figure's description), tile (px of one map).
//
// Pointer: hovering a cell shows "head i: query q 'tok' -> key k 'tok' = weight"; clicking a
// row selects that query (sets `query`, the kernel answers with the outlined row).
// Keyboard: each head is a tab stop; arrow keys move a cell cursor (announced through an
// aria-live region), Enter or Space selects the cursor's row as the query, Escape clears it.

const LEFT = 64;     // px for the query labels
const BOTTOM = 56;   // px for the key labels (rotated)
const TOP = 4;
const LABEL_PX = 11; // least vertical distance between two labels
const FONT = "11px sans-serif";

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

  function weight(head, q, k) {
    const n = model.get("n");
    return W[(head * n + q) * n + k];
  }

  function describe(head, q, k) {
    const labels = model.get("labels");
    return `head ${head}: query ${q} "${labels[q]}" -> key ${k} "${labels[k]}" = ${weight(head, q, k).toFixed(4)}`;
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
    const lo = document.createElement("span");
    lo.textContent = "weight 0";
    const hi = document.createElement("span");
    hi.textContent = `1 (colour = weight^${gamma})`;
    legend.append(lo, bar, hi);
  }

  function drawHead(canvas, head) {
    const n = model.get("n");
    const labels = model.get("labels");
    const S = model.get("tile");
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
    ctx.font = FONT;
    ctx.fillStyle = "#1a1a1a";
    const step = Math.max(1, Math.ceil(LABEL_PX / cell));
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
    const S = model.get("tile");
    const x = event.clientX - r.left - LEFT, y = event.clientY - r.top - TOP;
    if (x < 0 || y < 0 || x >= S || y >= S) { return null; }
    return [Math.min(n - 1, Math.floor((y / S) * n)), Math.min(n - 1, Math.floor((x / S) * n))];
  }

  function showTip(text, canvas, event) {
    tip.textContent = text;
    tip.style.visibility = "visible";
    if (event) {
      const box = el.getBoundingClientRect();
      tip.style.left = Math.min(event.clientX - box.left + 12, Math.max(0, el.clientWidth - 260)) + "px";
      tip.style.top = event.clientY - box.top + 14 + "px";
    } else {
      const r = canvas.getBoundingClientRect(), box = el.getBoundingClientRect();
      tip.style.left = r.left - box.left + "px";
      tip.style.top = r.bottom - box.top + "px";
    }
  }

  function selectQuery(q) {
    model.set("query", model.get("query") === q ? -1 : q);
    model.save_changes();
  }

  function build() {
    W = floats(model);
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
        cap.textContent = `head ${head}`;
        const canvas = document.createElement("canvas");
        canvas.tabIndex = 0;
        canvas.setAttribute("role", "img");
        canvas.dataset.head = String(head);
        canvas.addEventListener("mousemove", (e) => {
          const c = cellAt(canvas, e);
          if (c) { showTip(describe(head, c[0], c[1]), canvas, e); } else { tip.style.visibility = "hidden"; }
        });
        canvas.addEventListener("mouseleave", () => { tip.style.visibility = "hidden"; });
        canvas.addEventListener("click", (e) => {
          const c = cellAt(canvas, e);
          if (c) { selectQuery(c[0]); }
        });
        canvas.addEventListener("focus", () => {  // by keyboard only: a click focuses too
          if (canvas.matches(":focus-visible")) { drawHead(canvas, head); showTip(describe(head, cursor[0], cursor[1]), canvas); }
        });
        canvas.addEventListener("blur", () => { drawHead(canvas, head); tip.style.visibility = "hidden"; });
        canvas.addEventListener("keydown", (e) => {
          const n = model.get("n");
          const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
          if (moves[e.key]) {
            cursor = [Math.min(n - 1, Math.max(0, cursor[0] + moves[e.key][0])),
                      Math.min(n - 1, Math.max(0, cursor[1] + moves[e.key][1]))];
            drawHead(canvas, head);
            showTip(describe(head, cursor[0], cursor[1]), canvas);
          } else if (e.key === "Enter" || e.key === " ") {
            selectQuery(cursor[0]);
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
    grid.querySelectorAll("canvas").forEach((canvas, head) => {
      canvas.setAttribute("aria-label", `head ${head} of ${h}. Arrow keys read the weights, Enter selects the query row.`);
      drawHead(canvas, head);
    });
    el.dataset.drawn = String((Number(el.dataset.drawn) || 0) + 1);
  }

  drawLegend();
  build();
  model.on("change:weights", build);
  model.on("change:query", build);
  model.on("change:lut", drawLegend);
  // a click sets `query` here first, so the kernel's answer may change only the description
  model.on("change:alt", () => { desc.textContent = model.get("alt"); });
}

export default { render };
