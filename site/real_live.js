// The real-model panel (dashboard section 1) live on the site, on prepared inputs.
//
// scripts/site_states.py (real_table) ran the panel itself on each shipped model and each
// prepared sentence, and on the induction demo's input, for every pattern the overview can show,
// every layer and every head, and stored what its widgets showed: per (model, input, layer) a JSON
// and the layer's weights (h, N, N) as bytes (both gzipped), and per input one shared JSON
// (<hash>.in.json). This
// file does no maths. It keeps what the panel keeps (model, input, layer, head, the pattern the
// overview is coloured by, and where the induction demo was entered from), loads the one layer it
// needs, merges the stored parts into the view, and hands the maps to heatmap.js and the overview
// to score_grid.js through the page's stand-in models. Free text needs a kernel: the sentence box
// stays off, and a menu of the prepared sentences stands beside it (build_site.py).

const BASE = "assets/states/real/";
const DEMO = "induction";  // site_states.REAL_DEMO: the demo's input
const KEPT = 32;  // layers kept in memory

function dataView(b64) {  // a stored float32 array (the overview's scores), as the widget reads it
  const s = atob(b64);
  const u = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) { u[i] = s.charCodeAt(i); }
  return new DataView(u.buffer);
}

export async function goLive(box, { fetchOk, fetchPacked, modelOf, afterUpdate }) {
  const index = await fetchOk(BASE + "index.json", "json");
  const stems = new Map(index.states.map(([v, stem]) => [v.join("|"), stem]));  // "model|input|layer"
  const [models, inputs] = index.controls;
  const el = box.querySelector(".mha-real-heads");  // not the write mode below it
  const $ = (sel) => el.querySelector(sel);
  const big = modelOf($(".mha-real-big")), thumbs = modelOf($(".mha-real-thumbs")), grid = modelOf($(".mha-real-overview"));
  const modelMenu = $('[data-control="model"] select'), inputMenu = $('[data-control="sentence"] select');
  const sliders = { layer: $('[data-control="layer"]'), head: $('[data-control="head"]') };
  const button = (name) => $(`button[data-control="${name}"]`);
  const presets = [...el.querySelectorAll('button[data-control="preset"]')];
  const text = $(".mha-real-sentence input");
  const status = box.querySelector(".site-live-status");
  const layersOf = (model, input) => index.states.filter(([v]) => v[0] === model && v[1] === input).length;
  const loaded = new Map();  // file -> Promise

  // a file, once: "json" parsed, else its bytes; a .gz one inflated (site_states.PACKED)
  function load(file, as) {
    if (!loaded.has(file)) {
      if (loaded.size >= KEPT) { loaded.delete(loaded.keys().next().value); }
      const bytes = file.endsWith(".gz") ? fetchPacked(BASE + file) : fetchOk(BASE + file);
      loaded.set(file, as === "json" ? bytes.then((b) => JSON.parse(new TextDecoder().decode(b))) : bytes);
    }
    return loaded.get(file);
  }

  // the panel's state, read from the page as saved (the overview names its pattern: "<pattern> score")
  const typedOf = (label) => inputs.values[inputs.labels.indexOf(label)];
  let state = {
    model: models.values[models.labels.indexOf(modelMenu.value)], input: typedOf(text.value),
    layer: Number(sliders.layer.querySelector("output").textContent),
    head: Number(sliders.head.querySelector("output").textContent),
    pattern: grid.get("what").replace(/ score$/, ""), before: null,
  };
  if (!stems.has([state.model, state.input, state.layer].join("|"))) {
    throw new Error(`the saved view ${JSON.stringify(state)} is not among the states`);
  }
  let typed = state.input;  // the sentence the box holds (and "back to your sentence" returns to)
  let common = null;  // the input's shared JSON
  let drawn = { thumbs: "", overview: "" };
  let latest = 0;

  async function show(next) {
    const mine = ++latest;
    next.layer = Math.min(next.layer, layersOf(next.model, next.input) - 1);  // as the panel clamps to the model
    const stem = stems.get([next.model, next.input, next.layer].join("|"));
    const [meta, bytes] = await Promise.all([load(stem + ".json.gz", "json"), load(stem + ".u8.gz")]);
    const shared = await load(meta.files["in.json"], "json");
    if (mine !== latest) { return; }  // a later move won
    const [, H] = shared.shared["overview.shape"];
    next.head = Math.min(next.head, H - 1);
    // the overview keeps its pattern where this input measures it, else as RealHeadsPanel._render picks
    next.pattern = [next.pattern, "previous token", "first token"].find((p) => p in shared.pattern);
    const head = meta.heads[next.head];
    const v = { ...shared.shared, ...shared.pattern[next.pattern], ...meta.layer, ...head.head,
                ...(head.pattern[next.pattern] || {}) };
    if (next.input === DEMO && next.before && shared.demo_note) {  // it names the model it left
      v["html.mha-real-demo-note"] = shared.demo_note[next.before.model];
    }
    state = next;
    common = shared;
    draw(v, stem, new Uint8Array(bytes));
    box.dataset.shown = `${state.model}-${state.input}-${state.layer}-${state.head}-${state.pattern}`;
  }

  function draw(v, stem, u8) {
    const labels = v.labels, n = labels.length, h = u8.length / (n * n);
    const weights = (from, count) => new DataView(Float32Array.from(u8.subarray(from * n * n, (from + count) * n * n),
                                                                     (b) => b / index.scale).buffer);
    if (drawn.thumbs !== stem) {  // a new layer or input: every head of the layer, small
      thumbs.set("h", h); thumbs.set("n", n); thumbs.set("labels", labels); thumbs.set("digits", index.digits);
      thumbs.set("title", v["thumbs.title"]); thumbs.set("alt", v["thumbs.alt"]);
      thumbs.set("weights", weights(0, h));
      drawn.thumbs = stem;
    }
    thumbs.set("captions", v["thumbs.captions"]);
    thumbs.save_changes();
    const q = big.get("n") === n && big.get("query") < n ? big.get("query") : -1;  // the row stays on the same tokens
    big.set("h", 1); big.set("n", n); big.set("labels", labels); big.set("digits", index.digits);
    big.set("title", v["big.title"]); big.set("alt", v["big.alt"]); big.set("captions", v["big.captions"]);
    big.set("lines", v["big.lines"]); big.set("stripe", v["big.stripe"]); big.set("query", q);
    big.set("weights", weights(state.head, 1));
    big.save_changes();
    const shows = `${state.model}|${state.input}|${state.pattern}`;
    if (drawn.overview !== shows) {
      const [L, H] = v["overview.shape"];
      grid.set("layers", L); grid.set("heads", H); grid.set("title", v["overview.title"]);
      grid.set("what", v["overview.what"]); grid.set("current", v["overview.current"]);
      grid.set("scores", dataView(v["overview.scores"]));
      drawn.overview = shows;
    } else {
      grid.set("current", v["overview.current"]);
    }
    grid.save_changes();
    for (const [key, markup] of Object.entries(v)) {
      if (key.startsWith("html.")) { $("." + key.slice(5)).innerHTML = markup; }
    }
    for (const b of presets) {
      const [off, tip] = v[`preset.${b.textContent}`];
      b.disabled = off;
      b.title = tip;
      b.classList.toggle("mha-active", v.lit.includes(b.textContent));
    }
    button("induction").classList.toggle("mha-active", v.lit.includes(button("induction").textContent));
    button("back").hidden = !v.back;
    for (const [name, [value, max]] of [["layer", v.layer], ["head", v.head]]) {
      const range = sliders[name].querySelector("input");
      range.max = String(max);
      range.value = String(value);
      range.setAttribute("aria-valuetext", String(value));
      sliders[name].querySelector("output").textContent = String(value);
    }
    modelMenu.value = models.labels[models.values.indexOf(state.model)];
    inputMenu.value = typed;
    text.value = inputs.labels[inputs.values.indexOf(typed)];
    status.textContent = "";
    afterUpdate();
  }

  const go = (next) => show(next).catch((e) => {
    status.textContent = `This panel could not load its settings (${e.message}); it shows the last view.`;
    console.error(e);
  });
  const open = (layer, head) => {
    if (layer >= 0 && (layer !== state.layer || head !== state.head)) { go({ ...state, layer, head }); }
  };
  const toSentence = (input) => {  // as typing a sentence does: out of the demo, same layer and head
    typed = input;
    go({ ...state, input, before: null });
  };

  modelMenu.replaceChildren(...models.labels.map((l) => new Option(l, l)));
  inputMenu.replaceChildren(...inputs.values.filter((i) => i !== DEMO).map((i) => new Option(inputs.labels[inputs.values.indexOf(i)], i)));
  modelMenu.addEventListener("change", () => {
    const model = models.values[models.labels.indexOf(modelMenu.value)];
    const demo = state.input === DEMO && !stems.has([model, DEMO, 0].join("|"));  // the demo runs on a decoder
    go({ ...state, model, input: demo ? typed : state.input, before: demo ? null : state.before,
         pattern: demo && state.pattern === DEMO ? "previous token" : state.pattern });
  });
  inputMenu.addEventListener("change", () => toSentence(inputMenu.value));
  for (const name of ["layer", "head"]) {
    sliders[name].querySelector("input").addEventListener("input", (e) => {
      sliders[name].querySelector("output").textContent = e.target.value;
      go({ ...state, [name]: Number(e.target.value) });
    });
  }
  button("run").hidden = true;  // it runs the model on typed text: with no free text it has no job here
  button("example").addEventListener("click", () => toSentence(inputs.values[0]));
  button("induction").addEventListener("click", () => {
    const [model, layer, head] = common.demo;
    go({ model, input: DEMO, layer, head, pattern: DEMO, before: state.input === DEMO ? state.before : state });
  });
  button("back").addEventListener("click", () => {
    if (state.input === DEMO && state.before) { go({ ...state.before, input: typed, before: null }); }
  });
  for (const b of presets) {
    b.addEventListener("click", () => {
      const found = common.found[b.textContent];
      if (found) { go({ ...state, layer: found[0], head: found[1], pattern: b.textContent }); }
    });
  }
  grid.on("change:picked", () => {
    const [layer, head] = grid.get("picked");
    if (layer < 0) { return; }
    grid.set("picked", [-1, -1]);  // handled: the same square can be clicked again
    open(layer, head);
  });
  thumbs.on("change:picked", () => {
    const head = thumbs.get("picked");
    if (head < 0) { return; }
    thumbs.set("picked", -1);
    open(state.layer, head);
  });
  await show({ ...state });
  for (const c of [modelMenu, inputMenu, ...Object.values(sliders).map((s) => s.querySelector("input")),
                   button("example"), button("induction"), button("back")]) {
    c.disabled = false;
  }
  box.dataset.liveReady = "1";
}
