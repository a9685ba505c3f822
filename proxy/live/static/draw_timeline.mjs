// Drawing the timeline: every request's tokens before (outline) and after (solid) against the
// window and the line, what the upstream served from its cache, what was done (a mark over each
// bar; a remote compaction also a dashed rule across), and a tooltip on hover.

import { $, html, svg } from "./dom.mjs";
import { didWords, fmt, full, remoteWords } from "./format.mjs";
import { PLOT as P, marks, timelineScale } from "./layout.mjs";

const LEGEND = "N notes · C caps · D drops · S summary · R refused · ↻ retried · ✂ silent cut · ⇩ remote compaction";

export function drawTimeline(records, palette) {
  const box = $("#timeline");
  box.replaceChildren();
  if (!records.length) return;
  const s = timelineScale(records);
  const { y, step } = s;
  svg("line", { x1: P.l, x2: P.r, y1: P.b, y2: P.b, class: "tl-axis" }, box);
  for (let q = 1; q <= 4; q++) {
    const v = ((s.max / 1.05) * q) / 4;
    svg("line", { x1: P.l, x2: P.r, y1: y(v), y2: y(v), class: "tl-grid" }, box);
    svg("text", { x: P.l - 6, y: y(v) + 4, "text-anchor": "end" }, box).textContent = fmt(Math.round(v));
  }
  const xs = records.map((_, k) => P.l + step * k + step / 2);
  const path = (key) => records.map((r, k) => (k ? "L" : "M") + (xs[k] - step / 2) + "," + y(r[key]) + " H" + (xs[k] + step / 2)).join(" ");
  svg("path", { d: path("window"), class: "tl-window" }, box);
  records.forEach((r, k) => drawBar(box, r, xs[k], s, palette));
  svg("path", { d: path("line"), class: "tl-line" }, box);
  const newest = records[records.length - 1];
  svg("text", { x: P.r - 2, y: y(newest.line) - 4, "text-anchor": "end", class: "red" }, box).textContent = "line";
  svg("text", { x: P.r - 2, y: y(newest.window) - 4, "text-anchor": "end" }, box).textContent = "window";
  svg("text", { x: P.l, y: P.b + 16 }, box).textContent = "#" + records[0].seq;
  svg("text", { x: P.r, y: P.b + 16, "text-anchor": "end" }, box).textContent = "#" + newest.seq;
  if (s.cut) {
    const cut = svg("text", { x: (P.l + P.r) / 2, y: P.b + 16, "text-anchor": "middle" }, box);
    cut.textContent = "sent cut at " + fmt(Math.round(s.max));
  }
  svg("text", { x: (P.l + P.r) / 2, y: P.b + 30, "text-anchor": "middle" }, box).textContent = LEGEND;
  records.forEach((r, k) => {
    const hit = svg("rect", { x: xs[k] - step / 2, y: P.t, width: step, height: P.b - P.t, class: "tl-hit" }, box);
    hit.addEventListener("mousemove", (e) => showTip(e, r, k ? records[k - 1] : null));
    hit.addEventListener("mouseleave", () => { $("#tip").hidden = true; });
  });
}

function drawBar(box, r, x, s, palette) {
  const { y, bar } = s;
  const left = x - bar / 2;
  if (r.remote) {
    const rule = svg("line", { x1: x, x2: x, y1: P.t - 6, y2: P.b, class: "tl-remote" }, box);
    rule.dataset.seq = r.seq;
  }
  svg("rect", { x: left, y: y(r.before), width: bar, height: P.b - y(r.before), class: "tl-before" + (r.before > s.max ? " clipped" : "") }, box);
  const after = svg("rect", { x: left, y: y(r.after), width: bar, height: P.b - y(r.after), class: "tl-after" + (r.remote ? " remote" : "") }, box);
  after.dataset.seq = r.seq;
  if (r.remote) after.dataset.remote = "1";
  if (r.cached_tokens) {
    const cached = Math.min(r.cached_tokens, r.after);
    svg("rect", { x: left, y: y(cached), width: bar, height: P.b - y(cached), class: "tl-cached" }, box);
  }
  marks(r).forEach(([glyph, colour], j) => {
    const t = svg("text", { x, y: y(Math.max(r.before, r.after)) - 5 - j * 10, "text-anchor": "middle", class: "tl-ev" }, box);
    t.style.fill = palette[colour];  // through the CSSOM: the page's policy allows no style attribute
    t.textContent = glyph;
  });
}

function showTip(e, r, prev) {
  const tip = $("#tip");
  const card = tip.parentElement.getBoundingClientRect();
  tip.replaceChildren();
  const line = (text, cls) => html("div", cls || "", text, tip);
  line("request #" + r.seq + " · " + new Date(r.at * 1000).toLocaleTimeString(), "muted");
  if (r.remote) {
    line("remote compaction, answered by the proxy", "hot");
    line(remoteWords(r));
  } else {
    line("sent " + full(r.before) + " → forwarded " + full(r.after));
  }
  line("line " + full(r.line) + " of window " + full(r.window));
  const did = didWords(r);
  line(did ? did + (r.struck ? " (" + r.struck + " new)" : " (as before)") : "left as it came");
  if (prev) line("prefix kept: " + r.prefix + " of " + prev.messages + " messages");
  if (r.prompt_tokens !== null) line("upstream read " + full(r.prompt_tokens) + (r.cached_tokens !== null ? ", cached " + full(r.cached_tokens) : ""));
  if (r.refused) line("refused: cannot fit", "bad");
  if (r.retried) line("upstream overflow, retried: " + r.retried);
  if (r.truncation) line("silent truncation: read " + full(r.truncation.read) + " of " + full(r.truncation.sent));
  tip.hidden = false;
  tip.style.left = Math.min(e.clientX - card.left + 14, card.width - 230) + "px";
  tip.style.top = e.clientY - card.top + 10 + "px";
}
