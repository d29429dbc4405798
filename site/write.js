// The write panel on the site: SmolLM2's writing after a prepared prompt, with no kernel.
//
// live.js loads the prompt's state (scripts/site_states.py, write_panel_view): the tokens the
// model wrote, the panel's own HTML of the text after each new token and of its caption, and
// every layer's and head's attention rows as bytes. This file shows the first `length` new
// tokens, draws their rows for the chosen layer and head as mha_core/ui/write_panel.py's
// row_html does (tests/test_site.py checks it against row_html), and replays the tokens one at a
// time on "write". Its only arithmetic: byte / scale, and each weight over its row's largest.

const REPLAY_MS = 150;  // between two tokens of a replay (the dashboard shows each once it is chosen)

// Python's html.escape(s, quote=True)
const esc = (s) => s.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;")
  .replaceAll('"', "&quot;").replaceAll("'", "&#x27;");
// write_panel._escape: a token on one line
const escToken = (t) => esc(t.replaceAll("\n", "\\n").replaceAll("\t", "\\t"));

// Python's f"{x:.{d}f}": toFixed, except at an exact tie (x * 2^(d+1) an odd integer, which
// toFixed rounds up), where Python keeps the even last digit
export function fixed(x, d) {
  const s = x.toFixed(d);
  const t = x * 2 ** (d + 1);
  if (!Number.isInteger(t) || t % 2 === 0 || Number(s.at(-1)) % 2 === 0) { return s; }
  return s.slice(0, -1) + String(Number(s.at(-1)) - 1);
}

// write_panel.row_html: new token `next` (number `step`, from 1) and the row `w` of weights over
// `tokens`, the tokens before it; look = {shade: [r, g, b], min_alpha, digits}
export function rowHtml(tokens, w, next, step, look) {
  if (tokens.length !== w.length) { throw new Error(`${w.length} weights for ${tokens.length} tokens`); }
  let k = 0;
  w.forEach((x, i) => { if (x > w[k]) { k = i; } });  // the first largest, as argmax
  const top = w[k] || 1;
  const [r, g, b] = look.shade;
  const spans = tokens.map((tok, i) => {
    const alpha = w[i] / top;
    const style = alpha >= look.min_alpha
      ? `background:rgba(${r},${g},${b},${fixed(alpha, 2)});color:${alpha > 0.5 ? "#fff" : "inherit"}` : "";
    return `<span class='mha-write-key' title='${i}: ${escToken(tok)} (${fixed(w[i], look.digits)})' `
      + `style='${style};white-space:pre-wrap'>${escToken(tok)}</span>`;
  });
  const summary = `new token ${step}, ${escToken(next)}: most weight on token ${k}, ${escToken(tokens[k])} `
    + `(${fixed(w[k], 2)})`;
  return `<div class='mha-write-row' role='listitem' aria-label='${summary}' style='overflow-wrap:anywhere'>`
    + `<b class='mha-write-new'>${step}. <code>${escToken(next)}</code></b> &larr; `
    + `<span class='mha-write-keys' aria-hidden='true'>${spans.join("")}</span></div>`;
}

// The rows of the first `count` new tokens at (layer, head): meta is a state's "write" part,
// bytes its .u8 file (layers, h, R), R the rows one after another (row k has n_prompt + k entries)
export function rowsHtml(meta, bytes, scale, digits, layer, head, count) {
  const [, h, width] = meta.shape;
  const all = new Uint8Array(bytes, (layer * h + head) * width, width);
  const look = { shade: meta.shade, min_alpha: meta.min_alpha, digits };
  const rows = [];
  let at = 0;
  for (let k = 0; k < count; k++) {
    const t = meta.n_prompt + k;
    const w = Array.from(all.subarray(at, at + t), (x) => x / scale);
    rows.push(rowHtml(meta.tokens.slice(0, t), w, meta.tokens[t], k + 1, look));
    at += t;
  }
  return `<div role='list' class='mha-write-list'>${rows.join("")}</div>`;
}

// The panel `box` (div.site-live[data-live=write]) goes live: its sliders and button move it.
// current(): a Promise of the shown prompt's [meta, bytes]. Returns shown(meta, bytes), which
// live.js calls when a prompt is picked.
export function start(box, index, current) {
  const slider = (name) => box.querySelector(`[data-control="${name}"] input`);
  const sliders = { length: slider("length"), layer: slider("layer"), head: slider("head") };
  const button = box.querySelector('button[data-control="run"]');
  const prompt = box.querySelector(".mha-write-prompt input");
  // the caption, the text and the rows, as the panel's HTML widgets are drawn (empty ones are not)
  const part = (name) => {
    let el = box.querySelector(`.mha-write-${name}`);
    if (!el) {
      el = document.createElement("div");
      el.className = `site-w mha-write-${name} site-html`;
      box.append(el);
    }
    return el;
  };
  const parts = { caption: part("caption"), text: part("text"), rows: part("rows") };
  let state = null;  // {meta, bytes} of the prompt shown
  let replay = null;

  const value = (name) => Number(sliders[name].value);
  function draw(count) {
    const { meta, bytes } = state;
    const n = Math.min(count, meta.tokens.length - meta.n_prompt);
    const [layer, head] = [value("layer"), value("head")];
    parts.caption.innerHTML = meta.caption.replace("{layer}", layer).replace("{head}", head);
    parts.text.innerHTML = meta.texts[n - 1];
    parts.rows.innerHTML = rowsHtml(meta, bytes, index.scale, index.digits, layer, head, n);
    box.dataset.written = `${box.dataset.shown}/${n}/${layer}/${head}`;
  }
  function stop() { clearInterval(replay); replay = null; }
  // the first `length` tokens at once, or (on "write") one at a time, unless motion is reduced
  async function show(oneByOne) {
    stop();
    if (!state) {
      const [meta, bytes] = await current();
      state = { meta: meta.write, bytes };
    }
    const length = value("length");
    if (!oneByOne || length === 1 || matchMedia("(prefers-reduced-motion: reduce)").matches) { draw(length); return; }
    let k = 1;
    draw(k);
    replay = setInterval(() => { k += 1; draw(k); if (k >= length) { stop(); } }, REPLAY_MS);
  }
  const failed = (e) => {
    box.querySelector(".site-live-status").textContent = `The writing could not be loaded (${e.message}).`;
    console.error(e);
  };

  for (const range of Object.values(sliders)) {
    range.addEventListener("input", () => {
      range.nextElementSibling.textContent = range.value;  // its <output>
      range.setAttribute("aria-valuetext", range.value);
      show(false).catch(failed);
    });
    range.disabled = false;
  }
  button.addEventListener("click", () => show(true).catch(failed));
  button.disabled = false;
  return (meta, bytes) => {
    state = { meta: meta.write, bytes };
    prompt.value = meta.write.prompt;
    show(false).catch(failed);
  };
}
