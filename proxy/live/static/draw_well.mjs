// Drawing the well: the window's frame, the reply's room, the red line and the dashed target, the
// blocks bottom up (animated as the hammer lands), the KEEP bracket and the legend.

import { $, html, svg } from "./dom.mjs";
import { KIND_NAMES, fmt, full } from "./format.mjs";
import { WELL as W, keepSpan, placeItems, wellItems, wellScale } from "./layout.mjs";
import { latest } from "./store.mjs";

const SETTLE_MS = 700;  // the struck blocks shrink from what came to what went upstream
const HAMMER_MS = 1400;
let running = null;  // the animation frame under way

export function drawWell(state, palette) {
  const box = $("#well");
  const { well } = state;
  const last = latest(state);
  box.replaceChildren();
  hatch(box);
  $("#well-seq").textContent = well ? (well.remote ? "remote compaction #" : "request #") + well.seq : "";
  box.dataset.key = well ? well.key : "";
  box.dataset.seq = well ? well.seq : "";
  box.dataset.remote = well && well.remote ? "1" : "";
  if (running) cancelAnimationFrame(running);
  if (!well) {
    const frame = last || { window: 1, line: 0, target: 0, reply: 0 };
    drawFrame(box, frame, null);
    drawLine(box, frame);
    const t = svg("text", { x: W.x + W.w / 2, y: 300, "text-anchor": "middle", class: "big" }, box);
    t.textContent = last ? "its blocks appear with the next request" : "waiting for a request…";
    drawLegend(null, palette);
    return;
  }
  const frame = {
    window: well.window, line: well.line, target: well.target,
    reply: last && last.seq === well.seq ? last.reply : 0,
  };
  drawFrame(box, frame, well);
  const scale = wellScale(well.window);
  const items = wellItems(well);
  const layer = svg("g", { "data-testid": "blocks" }, box);
  const rects = items.map((it) => block(layer, it, palette));
  const labels = svg("g", {}, box);
  drawLine(box, frame);
  const place = (t) => {
    const pos = placeItems(items, scale, well.window, t);
    pos.forEach(([y, h], k) => {
      rects[k].setAttribute("y", Math.max(y, W.top - 20));
      rects[k].setAttribute("height", Math.max(0.5, h - (h > 5 ? 0.8 : 0)));
    });
    return pos;
  };
  const finish = () => {
    const pos = place(1);
    drawLabels(labels, items, pos, palette);
    drawKeep(box, keepSpan(items, pos));
    if (state.animate) drawHammer(box, items, pos, palette);
  };
  const settles = state.animate && items.some((it) => it.struck && it.from !== it.tokens);
  if (!settles) {
    finish();
  } else {
    const start = performance.now();
    const step = (now) => {
      const t = Math.min(1, (now - start) / SETTLE_MS);
      place(1 - Math.pow(1 - t, 3));
      running = t < 1 ? requestAnimationFrame(step) : null;
      if (t >= 1) finish();
    };
    place(0);
    running = requestAnimationFrame(step);
  }
  drawLegend(items, palette);
}

function block(layer, it, palette) {
  const r = svg("rect", { x: W.x + 4, width: W.w - 8, class: "blk" + (it.struck ? " struck" : ""), fill: palette[it.kind] }, layer);
  r.dataset.kind = it.kind;
  r.dataset.state = it.state || "kept";
  r.dataset.index = it.index;
  r.dataset.tokens = it.tokens;
  if (it.count) r.dataset.count = it.count;
  if (it.struck) r.dataset.struck = "1";
  svg("title", {}, r).textContent = describe(it);
  return r;
}

function describe(it) {
  let s = (KIND_NAMES[it.kind] || it.kind) + (it.index >= 0 ? " #" + it.index : "") +
    (it.tool ? " · " + it.tool : "") + ": " + full(it.tokens) + " tokens";
  if (it.from !== it.tokens) s += " (was " + full(it.from) + ")";
  if (it.count) s += " · " + it.count + " messages dropped";
  if (it.keep) s += " · KEEP";
  if (it.struck) s += " · struck on this request";
  if (it.preview) s += "\n" + it.preview;
  return s;
}

function drawLabels(layer, items, pos, palette) {
  items.forEach((it, k) => {
    const [y, h] = pos[k];
    if (it.count && h >= 12) {
      const t = svg("text", { x: W.x + W.w / 2, y: y + h / 2 + 3.5, "text-anchor": "middle", class: "drop-label" }, layer);
      t.textContent = it.label;
    } else if (it.struck && h >= 2) {
      svg("line", { x1: W.x + 8, x2: W.x + W.w - 8, y1: y + h / 2, y2: y + h / 2, class: "strike-mark" }, layer);
    }
    if (it.struck) miniHammer(layer, W.x + W.w - 16, y + h / 2, palette);
    if (h >= 13 && !it.count) {
      const t = svg("text", { x: W.x + 10, y: y + h / 2 + 4, class: "drop-label" }, layer);
      t.textContent = (KIND_NAMES[it.kind] || it.kind) + (it.tool ? " · " + it.tool : "") + " · " + fmt(it.tokens);
    }
  });
}

function hatch(box) {
  const p = svg("pattern", { id: "hatch", width: 7, height: 7, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" }, svg("defs", {}, box));
  svg("rect", { width: 7, height: 7, class: "hatch-bg" }, p);
  svg("line", { x1: 0, y1: 0, x2: 0, y2: 7, class: "hatch-line" }, p);
}

// The frame: the floor, the reply's room, the scale every quarter, the walls, the target, what was sent.
function drawFrame(box, f, well) {
  const scale = wellScale(f.window);
  const y = (tokens) => W.bottom - tokens * scale;
  svg("rect", { x: W.x, y: W.top, width: W.w, height: W.bottom - W.top, class: "well-floor" }, box);
  const reply = Math.min(f.reply || 0, Math.max(0, f.window - f.line));
  if (reply > 0) {
    svg("rect", { x: W.x, y: W.top, width: W.w, height: reply * scale, class: "reply" }, box);
    const t = svg("text", { x: W.x + W.w / 2, y: W.top + Math.min(reply * scale, 30) / 2 + 4, "text-anchor": "middle" }, box);
    t.textContent = "reply room " + fmt(f.reply);
  }
  for (let q = 0; q <= 4; q++) {
    const tokens = (f.window * q) / 4;
    svg("line", { x1: W.x - 5, x2: W.x, y1: y(tokens), y2: y(tokens), class: "tick" }, box);
    const t = svg("text", { x: W.x - 8, y: y(tokens) + 4, "text-anchor": "end" }, box);
    t.textContent = fmt(Math.round(tokens));
  }
  svg("path", { d: `M${W.x},${W.top - 8} V${W.bottom} H${W.x + W.w} V${W.top - 8}`, class: "well-wall" }, box);
  const top = svg("text", { x: W.x + W.w / 2, y: W.top - 12, "text-anchor": "middle", class: "big" }, box);
  top.textContent = "window " + full(f.window);
  const target = svg("line", { x1: W.x, x2: W.x + W.w, y1: y(f.target), y2: y(f.target), class: "target-line" }, box);
  target.dataset.tokens = f.target;
  svg("text", { x: W.x + W.w + 6, y: y(f.target) + 4, class: "amber" }, box).textContent = "target " + fmt(f.target);
  if (well && well.before > well.after) {
    const sy = Math.max(W.top - 6, y(well.before));
    svg("line", { x1: W.x - 40, x2: W.x + W.w, y1: sy, y2: sy, class: "sent-line" }, box);
    const st = svg("text", { x: W.x + W.w + 6, y: sy + 4 }, box);
    st.textContent = (well.before > f.window ? "↑ " : "") + "sent " + fmt(well.before);
  }
}

// The red line, over the blocks.
function drawLine(box, f) {
  const y = W.bottom - f.line * wellScale(f.window);
  const line = svg("line", { x1: W.x - 10, x2: W.x + W.w + 10, y1: y, y2: y, class: "red-line", "data-testid": "red-line" }, box);
  line.dataset.tokens = f.line;
  line.dataset.window = f.window;
  svg("text", { x: W.x + W.w + 6, y: y - 5, class: "red" }, box).textContent = "line " + fmt(f.line);
}

function drawKeep(box, span) {
  if (!span) return;
  const x = W.x + W.w + 64;
  svg("path", { d: `M${x - 6},${span.top} H${x} V${span.bottom} H${x - 6}`, class: "keep", "data-testid": "keep" }, box);
  const mid = (span.top + span.bottom) / 2;
  const t = svg("text", { x: x + 14, y: mid, class: "keep-t", transform: `rotate(90 ${x + 14} ${mid})`, "text-anchor": "middle" }, box);
  t.textContent = "KEEP";
}

// The hammer swings once over the last block struck.
function drawHammer(box, items, pos, palette) {
  let k = -1;
  items.forEach((it, j) => { if (it.struck) k = j; });
  if (k < 0) return;
  const [y, h] = pos[k];
  const g = svg("g", { class: "hammer", "data-testid": "hammer" }, box);
  const cx = W.x + W.w - 24, cy = y + h / 2 - 30;
  svg("rect", { x: cx - 3, y: cy, width: 6, height: 34, rx: 2, fill: palette.handle }, g);
  svg("rect", { x: cx - 16, y: cy - 10, width: 32, height: 13, rx: 3, fill: palette.head, class: "hammer-head" }, g);
  setTimeout(() => g.remove(), HAMMER_MS);
}

// A small hammer on each block struck on this request.
function miniHammer(parent, x, y, palette) {
  const g = svg("g", { class: "mini-hammer", transform: `translate(${x} ${y}) rotate(-35)` }, parent);
  svg("rect", { x: -1.2, y: -2, width: 2.4, height: 9, fill: palette.handle }, g);
  svg("rect", { x: -5, y: -5, width: 10, height: 4, rx: 1, fill: palette.struck, class: "hammer-head" }, g);
}

function drawLegend(items, palette) {
  const box = $("#legend");
  box.replaceChildren();
  const seen = new Set(items ? items.map((it) => it.kind) : []);
  for (const kind of Object.keys(KIND_NAMES)) {
    if (items && !seen.has(kind)) continue;
    html("span", "", KIND_NAMES[kind], box).style.setProperty("--c", palette[kind]);
  }
  if (items && items.some((it) => it.struck)) html("span", "struck", "struck on this request", box);
}
