// The real-model panel's overview (mha_core/ui/score_grid.py, an anywidget): one square per
// (layer, head), coloured by a score in [0, 1]; the open head outlined. A click, or Enter on the
// square the arrow keys moved to, sets `picked` = [layer, head]. The grid is one tab stop; the
// square under the pointer or the keyboard cursor is read out in an aria-live line.

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

  function scores() {
    const dv = model.get("scores");
    if (!dv || !dv.byteLength) { return new Float32Array(0); }
    return new Float32Array(dv.buffer.slice(dv.byteOffset, dv.byteOffset + dv.byteLength));
  }

  function say(layer, head) {
    const s = scores()[layer * model.get("heads") + head];
    return `layer ${layer}, head ${head}: ${model.get("what")} ${s.toFixed(2)}`;
  }

  function pick(layer, head) {
    model.set("picked", [layer, head]);
    model.save_changes();
  }

  function build() {
    const L = model.get("layers"), H = model.get("heads"), S = scores();
    const lut = new Uint8Array(model.get("lut").buffer, model.get("lut").byteOffset, model.get("lut").byteLength);
    const [cl, ch] = model.get("current");
    title.textContent = model.get("title");
    grid.setAttribute("aria-label", model.get("title") + ". Arrow keys move, Enter opens the head.");
    grid.innerHTML = "";
    grid.style.gridTemplateColumns = `auto repeat(${H}, auto)`;
    const corner = document.createElement("div");
    corner.className = "mha-scoregrid-axis";
    corner.textContent = "layer\\head";
    corner.style.fontSize = "10px";
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
        if (l === cl && h === ch) { c.classList.add("mha-current"); }
        if (cursor && l === cursor[0] && h === cursor[1]) { c.classList.add("mha-cursor"); }
        c.addEventListener("pointerenter", () => { tip.textContent = say(l, h); });
        c.addEventListener("click", () => { pick(l, h); });
        grid.append(c);
      }
    }
    el.dataset.drawn = String((Number(el.dataset.drawn) || 0) + 1);
  }

  grid.addEventListener("keydown", (e) => {
    const L = model.get("layers"), H = model.get("heads");
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (!cursor) { cursor = model.get("current").slice(); }
    if (moves[e.key]) {
      cursor = [Math.min(L - 1, Math.max(0, cursor[0] + moves[e.key][0])),
                Math.min(H - 1, Math.max(0, cursor[1] + moves[e.key][1]))];
      build();
      tip.textContent = say(cursor[0], cursor[1]);
    } else if (e.key === "Enter" || e.key === " ") {
      pick(cursor[0], cursor[1]);
    } else {
      return;
    }
    e.preventDefault();
  });
  grid.addEventListener("blur", () => { cursor = null; build(); });

  build();
  model.on("change:scores", build);
  model.on("change:current", build);
}

export default { render };
