// The real-model panel's overview (mha_core/ui/score_grid.py, an anywidget): one square per
// (layer, head), coloured by a score in [0, 1]; the open head outlined. A click, or Enter on the
// square the arrow keys moved to, sets `picked` = [layer, head]. The grid is one tab stop; the
// square under the pointer or the keyboard cursor is read out in a line under the grid; with
// neither, that line reads the open head, so it never describes a head that is no longer open.
// The squares are built once per `scores`; a new `current`, an arrow key or a blur only moves an
// outline (mark), so "only the outline moves" with the head costs one class, not a rebuild.

function render({ model, el }) {
  el.classList.add("mha-scoregrid");
  const title = document.createElement("div");
  title.className = "mha-scoregrid-title";
  const grid = document.createElement("div");
  grid.className = "mha-scoregrid-grid";
  grid.tabIndex = 0;
  grid.setAttribute("role", "group");
  const tip = document.createElement("div");
  tip.className = "mha-scoregrid-tip";
  tip.setAttribute("aria-live", "polite");
  el.append(title, grid, tip);
  let cursor = null;
  let S = new Float32Array(0);  // the scores, decoded once per build

  function decode() {
    const dv = model.get("scores");
    if (!dv || !dv.byteLength) { return new Float32Array(0); }
    return new Float32Array(dv.buffer.slice(dv.byteOffset, dv.byteOffset + dv.byteLength));
  }

  function say(layer, head) {
    const s = S[layer * model.get("heads") + head];
    return `layer ${layer}, head ${head}: ${model.get("what")} ${s.toFixed(2)}`;
  }

  // the line under the grid: the open head, unless the pointer or the keyboard cursor is on a square
  // (a new `current` may come a moment before the scores it belongs to: the build then says it)
  function sayOpen() {
    const [l, h] = model.get("current");
    const H = model.get("heads");
    const known = h < H && l * H + h < S.length && S.length === model.get("layers") * H;
    if (known) { tip.textContent = `open: ${say(l, h)}`; }
  }

  function pick(layer, head) {
    model.set("picked", [layer, head]);
    model.save_changes();
  }

  function cellOf(target) {
    const c = target.closest(".mha-scoregrid-cell");
    return c ? [Number(c.dataset.layer), Number(c.dataset.head)] : null;
  }

  // Class `cls` moves to the square (l, h); with no square given it is only taken off.
  function mark(cls, l, h) {
    const old = grid.querySelector(`.${cls}`);
    if (old) { old.classList.remove(cls); }
    if (l === undefined) { return; }
    const c = grid.querySelector(`.mha-scoregrid-cell[data-layer="${l}"][data-head="${h}"]`);
    if (c) { c.classList.add(cls); }
  }

  function titles() {
    title.textContent = model.get("title");
    grid.setAttribute("aria-label", model.get("title") + ". Arrow keys move, Enter opens the head.");
  }

  function build() {
    const L = model.get("layers"), H = model.get("heads");
    S = decode();
    const lut = new Uint8Array(model.get("lut").buffer, model.get("lut").byteOffset, model.get("lut").byteLength);
    titles();
    grid.innerHTML = "";
    grid.style.gridTemplateColumns = `auto repeat(${H}, auto)`;
    const corner = document.createElement("div");
    corner.className = "mha-scoregrid-axis";
    corner.textContent = "layer \\\nhead";  // two short lines: 12 heads fit a phone
    grid.append(corner);
    for (let h = 0; h < H; h++) {
      const d = document.createElement("div");
      d.className = "mha-scoregrid-head";
      d.textContent = String(h);
      grid.append(d);
    }
    for (let l = 0; l < L; l++) {
      const a = document.createElement("div");
      a.className = "mha-scoregrid-axis";
      a.textContent = String(l);
      grid.append(a);
      for (let h = 0; h < H; h++) {
        const s = Math.min(Math.max(S[l * H + h], 0), 1);
        const j = Math.round(s * 255) * 3;
        const c = document.createElement("div");
        c.className = "mha-scoregrid-cell";
        c.dataset.layer = String(l);
        c.dataset.head = String(h);
        c.style.background = `rgb(${lut[j]},${lut[j + 1]},${lut[j + 2]})`;
        grid.append(c);
      }
    }
    mark("mha-current", ...model.get("current"));
    if (cursor) { mark("mha-cursor", ...cursor); } else { sayOpen(); }
    el.dataset.drawn = String((Number(el.dataset.drawn) || 0) + 1);
  }

  // One listener each on the grid for all its squares (pointerover bubbles, pointerenter does not).
  grid.addEventListener("pointerover", (e) => {
    const at = cellOf(e.target);
    if (at) { tip.textContent = say(...at); }
  });
  grid.addEventListener("pointerleave", () => { if (!cursor) { sayOpen(); } });
  grid.addEventListener("click", (e) => {
    const at = cellOf(e.target);
    if (at) { pick(...at); }
  });
  grid.addEventListener("keydown", (e) => {
    const L = model.get("layers"), H = model.get("heads");
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (!cursor) { cursor = model.get("current").slice(); }
    if (moves[e.key]) {
      cursor = [Math.min(L - 1, Math.max(0, cursor[0] + moves[e.key][0])),
                Math.min(H - 1, Math.max(0, cursor[1] + moves[e.key][1]))];
      mark("mha-cursor", ...cursor);
      tip.textContent = say(cursor[0], cursor[1]);
    } else if (e.key === "Enter" || e.key === " ") {
      pick(cursor[0], cursor[1]);
    } else {
      return;
    }
    e.preventDefault();
  });
  grid.addEventListener("blur", () => { cursor = null; mark("mha-cursor"); sayOpen(); });

  build();
  model.on("change:scores", build);
  model.on("change:title", titles);
  model.on("change:current", () => { mark("mha-current", ...model.get("current")); if (!cursor) { sayOpen(); } });
}

export default { render };
