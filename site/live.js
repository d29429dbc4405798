// Live panels on the static site: their controls move the figure with no kernel.
//
// scripts/site_states.py computed every state of the panel with mha_core when the site was built
// (assets/states/<panel>/: index.json, and for each state <stem>.json.gz with <stem>.u8.gz or .png;
// the .gz files are gzipped, and inflated here).
// This file does no maths: it reads the controls, looks the state up, loads its files and hands
// a heatmap's to the widget's own heatmap.js through the page's stand-in model (site.js), or shows its
// picture (a PNG the panel drew) and puts its HTML (numbers, captions) in place. The panel's
// controls were drawn disabled at their saved values (build_site.py, data-control and
// data-widget); they are enabled once the panel's index is loaded, when it scrolls into view.

const STATES = "assets/states/";
const KEPT_STATES = 32;  // states kept in memory per panel (a phone need not hold all 674 heatmaps)
const KEPT_BUNDLES = 4;  // bundles of states kept in memory per panel (the shape panel's: 1.5 MB of HTML each)
const OWN_SCRIPTS = { write: "./write.js" };  // panels that draw their states themselves, loaded with them

const key = (values) => JSON.stringify(values);
// panels that keep their own state, loaded when they come near the screen (the real-model panel:
// two maps, an overview and buttons that act): their goLive takes over from this file's, given
// its fetchOk, fetchPacked and the page's stand-in models
const OWN_PANELS = { real: "./real_live.js" };

async function fetchOk(url, as) {
  const r = await fetch(url);
  if (!r.ok) { throw new Error(`${url}: HTTP ${r.status}`); }
  return as === "json" ? r.json() : r.arrayBuffer();
}

// A state file written gzipped (site_states.PACKED), inflated. A host that sends .gz files with
// "Content-Encoding: gzip" has had the browser inflate it already: then it lacks gzip's first bytes.
async function fetchPacked(url) {
  const bytes = await fetchOk(url);
  const head = new Uint8Array(bytes, 0, 2);
  if (head[0] !== 0x1f || head[1] !== 0x8b) { return bytes; }
  return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"))).arrayBuffer();
}

// One control as drawn by build_site.py: read its label, show a value among `labels`, lock it.
// An integer slider whose `values` have gaps (a grid: the shape panel's N) moves over their
// indices, as a selection slider does, so that it stops only at the values computed.
function controlOf(el, values) {
  const gapless = values.every((v, j) => j === 0 || v === values[j - 1] + 1);
  if (el.dataset.widget === "int" && !gapless) { el.dataset.widget = "selection"; }
  const kind = el.dataset.widget;
  const range = el.querySelector("input[type=range]");
  const output = el.querySelector("output");
  const buttons = kind === "buttons" ? [...el.querySelectorAll("button")] : [];
  const select = kind === "select" ? el.querySelector("select") : null;
  let domain = [];  // the labels it offers now
  return {
    kind, el,
    label() {
      if (kind === "selection" || kind === "int") { return output.textContent; }
      if (kind === "toggle") { return el.getAttribute("aria-pressed") === "true" ? "on" : "off"; }
      if (kind === "buttons") { return buttons.find((b) => b.getAttribute("aria-pressed") === "true")?.textContent; }
      return select.selectedOptions[0]?.textContent;
    },
    // show `label` as its value, with `offered` the labels it may take (in order)
    show(label, offered) {
      domain = offered;
      if (kind === "selection") {
        range.min = "0"; range.max = String(offered.length - 1); range.value = String(offered.indexOf(label));
      } else if (kind === "int") {  // its values run without a gap (site_states: N = 2..64)
        range.min = offered[0]; range.max = offered[offered.length - 1]; range.value = label;
      }
      if (range) {
        range.disabled = offered.length < 2;
        range.setAttribute("aria-valuetext", label);
        output.textContent = label;
      } else if (kind === "toggle") {
        el.setAttribute("aria-pressed", String(label === "on"));
        el.disabled = offered.length < 2;
      } else if (kind === "buttons") {
        buttons.forEach((b) => {
          b.setAttribute("aria-pressed", String(b.textContent === label));
          b.disabled = !offered.includes(b.textContent);
        });
      } else {
        select.replaceChildren(...offered.map((o) => new Option(o, o, false, o === label)));
        select.disabled = offered.length < 2;
      }
      el.title = offered.length < 2 ? `fixed at ${label}: no other value was computed with these settings` : "";
    },
    // f(label) when the reader moves it
    listen(f) {
      if (range) {
        range.addEventListener("input", () => {
          const label = kind === "selection" ? domain[Number(range.value)] : range.value;
          output.textContent = label;
          f(label);
        });
      } else if (kind === "toggle") {
        el.addEventListener("click", () => f(el.getAttribute("aria-pressed") === "true" ? "off" : "on"));
      } else if (kind === "buttons") {
        buttons.forEach((b) => b.addEventListener("click", () => f(b.textContent)));
      } else {
        select.addEventListener("change", () => f(select.value));
      }
    },
  };
}

// The state to show when control `moved` takes a value: the wanted values if that state was
// computed, else the computed state that keeps `moved`'s value and differs least from the rest,
// controls earlier in the index first, a smaller number before a larger one (as the notebook's
// panel does: h 16 -> 8 and N 40 -> 12 when the weights become the trained toy model's).
function resolve(want, moved, states) {
  if (states.has(key(want))) { return want; }
  const cost = (a, b) => (a === b ? 0 : typeof a === "number" ? (a < b ? 1 : 2) + Math.abs(a - b) / 1e6 : 1);
  const less = (c, d) => { const i = c.findIndex((x, j) => x !== d[j]); return i >= 0 && c[i] < d[i]; };
  let best = null, bestCost = null;
  for (const { values } of states.values()) {
    if (values[moved] !== want[moved]) { continue; }
    const c = values.map((v, i) => (i === moved ? 0 : cost(v, want[i])));
    if (!bestCost || less(c, bestCost)) { best = values; bestCost = c; }
  }
  return best;
}

// Control i's labels, one per value; labels that depend on the first control's value (the KV
// panel's "8 (GQA)" or "8 (MHA)") are looked up under it.
function labelsOf(index, i, values) {
  const labels = index.controls[i].labels;
  return Array.isArray(labels) ? labels : labels[values[0]];
}

// The labels control i offers, given the values of the controls before it.
function offered(index, values, i, states) {
  const c = index.controls[i];
  const ok = new Set();
  for (const s of states.values()) {
    if (s.values.slice(0, i).every((v, j) => v === values[j])) { ok.add(s.values[i]); }
  }
  const labels = labelsOf(index, i, values);
  return c.values.filter((v) => ok.has(v)).map((v) => labels[c.values.indexOf(v)]);
}

async function goLive(box, modelOf, afterUpdate) {
  const base = STATES + box.dataset.live + "/";
  const index = await fetchOk(base + "index.json", "json");
  const states = new Map(index.states.map(([values, stem, bundle]) => [key(values), { values, stem, bundle }]));
  const controls = index.controls.map((c) => controlOf(box.querySelector(`[data-control="${c.name}"]`), c.values));
  const query = box.querySelector('[data-control="query"] select');  // the heatmap's outlined row
  const status = box.querySelector(".site-live-status");
  const loaded = new Map();  // stem -> Promise of [meta, weights or null]
  const bundles = new Map();  // bundle -> Promise of {stem: meta}
  const valueOf = (i, label, vs) => index.controls[i].values[labelsOf(index, i, vs).indexOf(label)];
  const labelOf = (i, value, vs) => labelsOf(index, i, vs)[index.controls[i].values.indexOf(value)];
  let values = [];
  controls.forEach((c, i) => values.push(valueOf(i, c.label(), values)));  // in order: labels may need the first
  let latest = 0;
  let drawOwn = null;  // the panel's own drawing (OWN_SCRIPTS), given each state loaded
  // the last values under each value of the first control (the weights' kind): going back to
  // one brings its settings back, as the notebook's panel does
  const before = new Map();

  // a state's JSON, and its weights when the panel stores any (index.files); a bundled state's
  // JSON from its bundle, loaded once for all its states
  function load(stem, bundle) {
    if (bundle) {
      if (!bundles.has(bundle)) {
        if (bundles.size >= KEPT_BUNDLES) { bundles.delete(bundles.keys().next().value); }  // the oldest
        bundles.set(bundle, fetchPacked(base + bundle + ".json.gz").then((b) => JSON.parse(new TextDecoder().decode(b))));
      }
      return bundles.get(bundle).then((metas) => [metas[stem], null]);
    }
    if (!loaded.has(stem)) {
      if (loaded.size >= KEPT_STATES) { loaded.delete(loaded.keys().next().value); }  // the oldest
      const weights = index.files.includes("u8") ? fetchPacked(base + stem + ".u8.gz") : null;
      const meta = fetchPacked(base + stem + ".json.gz").then((b) => JSON.parse(new TextDecoder().decode(b)));
      loaded.set(stem, Promise.all([meta, weights]));
    }
    return loaded.get(stem);
  }

  // the heatmap's new traits, through the page's stand-in model: heatmap.js redraws (and the
  // links to files of the maps before go)
  function drawHeatmap(heatmap, bytes) {
    box.querySelector(".site-download-links")?.replaceChildren();
    const model = modelOf(box.querySelector(".site-heatmap"));
    const w = Float32Array.from(new Uint8Array(bytes), (b) => b / index.scale);  // (h, N, N): the stored bytes, as weights
    const [h, n] = heatmap.shape;
    const q = model.get("query") < n ? model.get("query") : -1;  // the row stays if the new N has it
    model.set("h", h); model.set("n", n); model.set("labels", heatmap.labels);
    model.set("title", heatmap.title); model.set("alt", heatmap.alt); model.set("digits", index.digits);
    model.set("query", q);
    model.set("weights", new DataView(w.buffer));
    model.save_changes();
    return q;
  }

  // the panel's picture: the state's PNG (or the shared one its JSON names), once decoded (so
  // that it never flashes half-loaded); in a panel as narrow as a phone's, the chart the panel
  // drew for a phone (its text larger for its width), when the states have one
  const chartFor = () => (index.files.includes("phone.png") && box.clientWidth < index.phone_below ? "phone.png" : "png");
  async function drawImage(meta, stem) {
    const img = box.querySelector("img." + meta.image.class);
    const suffix = chartFor();
    const next = new Image();
    next.src = base + (meta.files?.[suffix] || `${stem}.${suffix}`);
    await next.decode();
    img.src = next.src;
    img.alt = meta.image.alt;
    img.dataset.chart = suffix;
  }

  async function show(next, moved, why) {
    const was = values;
    values = next;
    before.set(values[0], values);
    controls.forEach((c, i) => c.show(labelOf(i, values[i], values), offered(index, values, i, states)));
    // each control that moved too, and why: its own reason (index.because, its {names} filled
    // in with the controls' values), else `why`
    const because = (name) => (index.because?.[name] || "").replace(/\{(\w+)\}/g, (_, n) => {
      const i = index.controls.findIndex((c) => c.name === n);
      return labelOf(i, values[i], values);
    });
    const changes = values.map((v, i) => (i !== moved && v !== was[i]
      ? `${index.controls[i].name} is now ${labelOf(i, v, values)} (was ${labelOf(i, was[i], was)})` : null)).filter(Boolean);
    const reasons = [...new Set(values.map((v, i) => (i !== moved && v !== was[i] ? because(index.controls[i].name) || why : null))
      .filter(Boolean))];
    status.textContent = changes.length ? `${changes.join("; ")}: ${reasons.join("; ")}.` : "";
    const state = states.get(key(values));
    const stem = state.stem;
    const mine = ++latest;
    const [meta, bytes] = await load(stem, state.bundle);
    if (meta.image) { await drawImage(meta, stem); }
    if (mine !== latest) { return; }  // a later move won
    const q = meta.heatmap ? drawHeatmap(meta.heatmap, bytes) : -1;
    for (const [cls, markup] of Object.entries(meta.html || {})) {
      box.querySelector("." + cls).innerHTML = markup;
    }
    afterUpdate();  // the page's own touches on new HTML (a table that scrolls becomes a tab stop)
    for (const [name, text] of Object.entries(meta.texts || {})) {
      const el = box.querySelector(`[data-control="${name}"]`);
      if (el && el.dataset.widget === "toggle") { el.textContent = text; }
    }
    if (query && meta.query) {
      query.replaceChildren(...meta.query.map((label) => new Option(label)));
      query.selectedIndex = q + 1;
    }
    box.dataset.shown = stem;
    if (drawOwn) { drawOwn(meta, bytes); }
  }

  controls.forEach((c, i) => c.listen((label) => {
    const value = valueOf(i, label, values);
    const back = i === 0 && index.recall !== false ? before.get(value) : undefined;
    const want = back ? back.slice() : values.slice();
    want[i] = value;
    const why = back ? "the settings it had before" : "the nearest settings computed with that choice";
    show(resolve(want, i, states), i, why).catch((e) => fail(box, e));
  }));
  if (query) {
    const model = modelOf(box.querySelector(".site-heatmap"));
    query.addEventListener("change", () => { model.set("query", query.selectedIndex - 1); model.save_changes(); });
    model.on("change:query", () => {
      query.selectedIndex = model.get("query") + 1;
      box.querySelector(".site-download-links")?.replaceChildren();  // they show the row outlined before
    });
    query.disabled = false;
  }
  const download = box.querySelector('[data-control="download"]');  // the maps as PNG and SVG files
  if (download) {
    download.addEventListener("click", () => offerFiles(box, modelOf).catch((e) => fail(box, e)));
    download.disabled = false;
  }
  if (!states.has(key(values))) { throw new Error(`the saved settings ${key(values)} are not among the states`); }
  if (index.note) {  // which values a control moves over here (a grid), said above the controls
    const note = document.createElement("p");
    note.className = "site-live-grid";
    note.textContent = index.note;
    status.before(note);
  }
  if (OWN_SCRIPTS[box.dataset.live]) {
    drawOwn = (await import(OWN_SCRIPTS[box.dataset.live])).start(box, index, () => load(states.get(key(values)).stem));
  }
  before.set(values[0], values);
  controls.forEach((c, i) => c.show(labelOf(i, values[i], values), offered(index, values, i, states)));
  box.dataset.shown = states.get(key(values)).stem;
  const img = index.files.includes("phone.png") ? box.querySelector("img") : null;
  if (img) {  // the saved chart was drawn for a laptop: a phone gets its own, now and after a rotation
    img.dataset.chart = "png";
    const redraw = () => {
      if (chartFor() !== img.dataset.chart) {
        const stem = box.dataset.shown;
        load(stem).then(([meta]) => (stem === box.dataset.shown ? drawImage(meta, stem) : null)).catch((e) => fail(box, e));
      }
    };
    new ResizeObserver(redraw).observe(box);
  }
  box.dataset.liveReady = "1";
}

// Links to the shown maps as files, made in the page by the heatmap's own script (figureFiles),
// put where the notebook's button puts its links (after the button).
async function offerFiles(box, modelOf) {
  const el = box.querySelector(".site-heatmap");
  const button = box.querySelector('[data-control="download"]');
  let links = box.querySelector(".site-download-links");
  if (!links) {
    links = document.createElement("span");
    links.className = "site-download-links";
    links.setAttribute("role", "status");
    button.after(links);
  }
  links.querySelectorAll("a").forEach((a) => URL.revokeObjectURL(a.href));
  links.replaceChildren("making the files…");
  const { figureFiles } = await import("./" + el.dataset.esm);
  const files = await figureFiles(modelOf(el), el);
  links.replaceChildren(...["png", "svg"].flatMap((kind, i) => {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(files[kind]);
    a.download = `attention_heads.${kind}`;
    a.textContent = `attention_heads.${kind} (${Math.round(files[kind].size / 1e3).toLocaleString("en")} kB)`;
    return i ? [" ", a] : [a];
  }));
}

function fail(box, err) {
  const status = box.querySelector(".site-live-status");
  if (status) { status.textContent = `This panel could not load its settings (${err.message}); it shows the saved view.`; }
  console.error(err);
}

// Each live panel loads its states when it comes near the screen. modelOf(el): a heatmap's
// stand-in model; afterUpdate(): called once new HTML is in a panel.
export function startLivePanels(modelOf, afterUpdate) {
  const watch = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (e.isIntersecting) {
        watch.unobserve(e.target);
        const own = OWN_PANELS[e.target.dataset.live];
        (own ? import(own).then((m) => m.goLive(e.target, { fetchOk, fetchPacked, modelOf, afterUpdate }))
          : goLive(e.target, modelOf, afterUpdate)).catch((err) => fail(e.target, err));
      }
    }
  }, { rootMargin: "300px" });
  document.querySelectorAll(".site-live").forEach((box) => watch.observe(box));
}
