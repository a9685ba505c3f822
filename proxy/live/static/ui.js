// compacting-proxy live page. Plain JS, no build step, no network beyond this proxy.
// Reads /ui/events (server-sent events) with fetch, so that a key can travel in a header;
// reconnects by itself. Draws the well and the timeline as SVG.
"use strict";

const KEY_STORE = "compacting-proxy-ui-key";
const FOLLOW_QUIET_MS = 8000;
const SVG = "http://www.w3.org/2000/svg";
const COLORS = {
  system: "#64748b", tools: "#475569", user: "#3b82f6", assistant: "#8b5cf6", call: "#a78bfa",
  result: "#f59e0b", noted: "#10b981", capped: "#f97316", summary: "#06b6d4", marker: "#94a3b8",
};
const KIND_NAMES = {
  system: "system", tools: "tools", user: "user", assistant: "assistant", call: "tool call",
  result: "tool result", noted: "note", capped: "capped result", summary: "summary", marker: "drop marker",
};
const FORMAT_NAMES = { chat: "Chat Completions", messages: "Anthropic Messages", responses: "Responses",
  ollama: "Ollama chat", azure: "Azure chat" };

const state = {
  totals: null, conversations: new Map(), selected: null, follow: true, content: false,
  records: [], well: null, connected: false, retry: 500, lastActivity: 0,
};

// ------------------------------------------------------------------ small helpers

const $ = (sel) => document.querySelector(sel);
function el(tag, attrs = {}, parent = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}
function html(tag, cls, text, parent) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
function fmt(n) {
  if (n === null || n === undefined) return "–";
  const a = Math.abs(n);
  if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 1 : 2) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
  return n.toLocaleString("en-US");
}
const full = (n) => (n === null || n === undefined ? "–" : n.toLocaleString("en-US"));
function ago(t) {
  const s = Math.max(0, Date.now() / 1000 - t);
  if (s < 5) return "now";
  if (s < 60) return Math.floor(s) + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  return Math.floor(s / 3600) + " h ago";
}
function sourceName(src) {
  return { "x-claude-code-session-id": "Claude Code session", "session-id": "Codex session", session_id: "Codex session",
    "x-session-affinity": "opencode session", "x-session-id": "session", "x-opencode-session": "opencode session",
    hash: "by its opening" }[src] || src;
}
function headers() {
  const key = sessionStorage.getItem(KEY_STORE);
  return key ? { "x-api-key": key } : {};
}

// ------------------------------------------------------------------ the event stream

async function connect() {
  setConn("connecting", "connecting…");
  let response;
  try {
    response = await fetch("/ui/events", { headers: headers(), cache: "no-store" });
  } catch (err) {
    return reconnect();
  }
  if (response.status === 401) return askKey(sessionStorage.getItem(KEY_STORE) !== null);
  if (!response.ok || !response.body) return reconnect();
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        dispatch(frame);
      }
    }
  } catch (err) { /* the connection broke: reconnect below */ }
  reconnect();
}

function reconnect() {
  state.connected = false;
  setConn("down", "reconnecting…");
  setTimeout(connect, state.retry);
  state.retry = Math.min(state.retry * 2, 5000);
}

function dispatch(frame) {
  let kind = "message", data = "";
  for (const line of frame.split("\n")) {
    if (line.startsWith("event:")) kind = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  if (!data) return;
  const payload = JSON.parse(data);
  if (kind === "hello") onHello(payload);
  else if (kind === "record") onRecord(payload);
  else if (kind === "well") onWell(payload);
}

function setConn(cls, label) {
  const box = $(".conn");
  box.className = "conn " + cls;
  box.querySelector(".label").textContent = label;
}

// ------------------------------------------------------------------ events

function onHello(snap) {
  state.retry = 500;
  state.connected = true;
  state.content = snap.content;
  state.totals = snap.totals;
  state.conversations = new Map(snap.conversations.map((c) => [c.key, c]));
  setConn("live", "live · since " + new Date(snap.started * 1000).toLocaleTimeString());
  renderTotals();
  renderList();
  const first = snap.conversations[0];
  if (state.selected && state.conversations.has(state.selected)) select(state.selected, false);
  else if (first) select(first.key, false);
}

function onRecord({ conversation, record, totals }) {
  state.totals = totals;
  state.conversations.delete(conversation.key);
  state.conversations = new Map([[conversation.key, conversation], ...state.conversations]);
  renderTotals();
  renderList(conversation.key);
  // Following: a new conversation, or another one once the shown one has been quiet for a while.
  const quiet = Date.now() - state.lastActivity > FOLLOW_QUIET_MS;
  const other = state.selected !== conversation.key;
  if (!state.selected || (state.follow && other && (conversation.requests === 1 || quiet))) {
    state.lastActivity = Date.now();
    select(conversation.key, false);
    return;
  }
  if (other) return;
  state.lastActivity = Date.now();
  const i = state.records.findIndex((r) => r.seq === record.seq);
  if (i >= 0) state.records[i] = record;
  else state.records.push(record);
  renderDetail(conversation);
}

function onWell(well) {
  if (well.key !== state.selected) return;
  if (state.well && well.seq < state.well.seq) return;
  const animate = !state.well || state.well.seq !== well.seq;
  state.well = well;
  renderWell(animate);
}

async function select(key, byUser) {
  if (byUser) {
    state.follow = false;
    $("#follow").checked = false;
  }
  const changed = state.selected !== key;
  state.selected = key;
  if (changed) { state.records = []; state.well = null; }
  renderList();
  const response = await fetch("/ui/conversations/" + encodeURIComponent(key), { headers: headers(), cache: "no-store" });
  if (!response.ok || state.selected !== key) return;
  const detail = await response.json();
  const known = new Map(state.records.map((r) => [r.seq, r]));
  for (const r of detail.records) if (!known.has(r.seq)) known.set(r.seq, r);
  state.records = [...known.values()].sort((a, b) => a.seq - b.seq);
  if (detail.well && (!state.well || detail.well.seq >= state.well.seq)) state.well = detail.well;
  renderDetail(state.conversations.get(key) || detail);
  renderWell(false);
}

// ------------------------------------------------------------------ rendering: totals and list

function renderTotals() {
  const t = state.totals;
  if (!t) return;
  for (const node of document.querySelectorAll("[data-sent]")) setStat(node, t, node.dataset.sent);
}

function setStat(node, t, name) {
  const value = name === "reported" || name === "cached" ? (t.answers ? t[name] : null) : t[name];
  node.textContent = fmt(value);
  node.dataset.value = value === null ? "" : String(value);
  node.title = full(value) + " tokens";
  if (name === "saved" && t.sent) node.textContent += " · " + Math.round((100 * t.saved) / t.sent) + "%";
}

function renderList(flashKey) {
  const list = $(".convs");
  list.replaceChildren();
  $("#no-convs").hidden = state.conversations.size > 0;
  for (const c of state.conversations.values()) {
    const li = html("li", c.key === state.selected ? "sel" : "", null, list);
    if (c.key === flashKey) li.classList.add("flash");
    li.dataset.key = c.key;
    li.dataset.requests = c.requests;
    const last = c.last || {};
    const row1 = html("div", "row1", null, li);
    html("span", "model", c.model || "(no model)", row1);
    html("span", "ago", ago(last.at || c.first_at), row1);
    const row2 = html("div", "row2", null, li);
    html("span", "tag fmt", FORMAT_NAMES[c.format] || c.format, row2);
    html("span", "tag src", sourceName(c.source), row2);
    html("span", "tag", c.requests + (c.requests === 1 ? " request" : " requests"), row2);
    if (c.totals.saved > 0) html("span", "tag saved", "−" + fmt(c.totals.saved), row2);
    if (last.refused) html("span", "tag warn", "refused", row2);
    if (c.preview) html("div", "preview", c.preview, li);
    if (last.window) {
      const bar = html("div", "bar", null, li);
      const fill = html("i", "", null, bar);
      fill.style.width = Math.min(100, (100 * last.after) / last.window) + "%";
      const line = html("b", "", null, bar);
      line.style.left = Math.min(100, (100 * last.line) / last.window) + "%";
    }
    li.addEventListener("click", () => select(c.key, true));
  }
}

// ------------------------------------------------------------------ rendering: the selected conversation

function renderDetail(conv) {
  $("#detail").hidden = false;
  const last = state.records[state.records.length - 1];
  $("#conv-title").textContent = (conv.model || "(no model)") + " · " + (FORMAT_NAMES[conv.format] || conv.format);
  const tags = $("#conv-tags");
  tags.replaceChildren();
  html("span", "tag src", sourceName(conv.source), tags);
  html("span", "tag mono", conv.key, tags);
  html("span", "tag", conv.requests + " requests", tags);
  if (conv.preview) html("span", "tag", "“" + conv.preview + "”", tags);
  for (const node of document.querySelectorAll("[data-csent]")) setStat(node, conv.totals, node.dataset.csent);
  if (last) renderFacts(last);
  renderTimeline();
  if (!state.well || (last && state.well.seq !== last.seq)) renderWell(false);
}

function renderFacts(r) {
  const dl = $("#facts");
  dl.replaceChildren();
  dl.dataset.seq = r.seq;
  $("#req-when").textContent = "request #" + r.seq + " · " + new Date(r.at * 1000).toLocaleTimeString();
  const row = (k, v, cls) => { html("dt", "", k, dl); html("dd", cls || "", v, dl); };
  const saved = r.before - r.after;
  row("tokens", full(r.before) + " → " + full(r.after) + (saved > 0 ? "  (−" + full(saved) + ")" : ""), saved > 0 ? "good" : "");
  row("window · line · target", full(r.window) + " · " + full(r.line) + " · " + full(r.target));
  row("reply room", full(r.reply) + (r.headers["x-compaction-max-tokens"] ? " (reply limit clamped)" : ""));
  const did = [];
  if (r.truncated) did.push(r.truncated + " noted");
  if (r.capped) did.push(r.capped + " capped");
  if (r.dropped) did.push(r.dropped + " dropped");
  if (r.summarized) did.push(r.summarized + " summarised");
  row("the hammer", did.length ? did.join(", ") + (r.struck ? " · " + r.struck + " struck now" : " · nothing new") : "nothing: under the line", did.length ? "hot" : "");
  row("KEEP", "from message " + r.protected_from + " of " + r.messages);
  row("prefix kept", r.seq && r.prefix !== undefined ? r.prefix + " of the messages sent before" : "–");
  if (r.prompt_tokens !== null) row("upstream read", full(r.prompt_tokens) + (r.cached_tokens !== null ? " · cached " + full(r.cached_tokens) : ""));
  if (r.overflow) row("over the line", r.refused ? "refused: it cannot fit the window" : "sent as it came (over the line)", "bad");
  if (r.retried) row("upstream overflow", "retried once, harder: " + r.retried, "bad");
  if (r.truncation) row("silent truncation", "the upstream read " + full(r.truncation.read) + " of " + full(r.truncation.sent) + " tokens (window " + full(r.truncation.window) + ")", "bad");
  row("counted by", r.counted_by);
  const xs = Object.entries(r.headers).map(([k, v]) => k + ": " + v).join("\n");
  $("#xheaders").textContent = xs || "no x-compaction-* headers: the request went as it came";
}

// ------------------------------------------------------------------ the well

const W = { x: 86, w: 210, top: 28, bottom: 572 };

function wellItems(well) {
  // Bottom up: leading system messages, the tool schemas, then the messages (a dropped run as one marker).
  const items = [];
  const markers = new Map(well.markers.map((m) => [m.start, m]));
  const blocks = well.blocks;
  let i = 0;
  while (i < blocks.length && blocks[i][1] === "system") {
    items.push(item(blocks[i], well));
    i++;
  }
  if (well.fixed > 0) items.push({ kind: "tools", tokens: well.fixed, from: well.fixed, index: -1, label: "tools" });
  for (; i < blocks.length; i++) {
    const b = blocks[i];
    if (b[4] === "dropped") {
      const m = markers.get(b[0]);
      if (m) {
        let dropped = 0;
        for (let j = b[0]; j < b[0] + m.count && j < blocks.length; j++) dropped += blocks[j][2];
        items.push({ kind: m.summary ? "summary" : "marker", state: "dropped", tokens: m.tokens, from: dropped,
          index: b[0], count: m.count, struck: m.new, label: (m.summary ? "summary of " : "✕ ") + m.count + " dropped" });
      }
      continue;
    }
    items.push(item(b, well));
  }
  return items;
}

function item(b, well) {
  const [index, kind, tokens, after, st, tool, isNew] = b;
  const shown = st === "noted" ? "noted" : st === "capped" ? "capped" : kind;
  return { kind: shown, base: kind, state: st, tokens: after, from: tokens, index, tool, struck: isNew,
    keep: index >= well.protected_from, preview: well.previews ? well.previews[index] : null };
}

let wellAnimation = null;

function renderWell(animate) {
  const svg = $("#well");
  const well = state.well;
  const last = state.records[state.records.length - 1];
  svg.replaceChildren();
  defs(svg);
  $("#well-seq").textContent = well ? "request #" + well.seq : "";
  svg.dataset.key = well ? well.key : "";
  svg.dataset.seq = well ? well.seq : "";
  if (!well) {
    drawFrame(svg, last || { window: 1, line: 0, target: 0, reply: 0 });
    const t = el("text", { x: W.x + W.w / 2, y: 300, "text-anchor": "middle", class: "big" }, svg);
    t.textContent = last ? "its blocks appear with the next request" : "waiting for a request…";
    renderLegend(null);
    return;
  }
  const frame = { window: well.window, line: well.line, target: well.target, reply: last && last.seq === well.seq ? last.reply : 0 };
  const scale = drawFrame(svg, frame, well);
  const items = wellItems(well);
  const layer = el("g", { "data-testid": "blocks" }, svg);
  const rects = items.map((it) => {
    const r = el("rect", { x: W.x + 4, width: W.w - 8, class: "blk" + (it.struck ? " struck" : ""), fill: COLORS[it.kind] }, layer);
    r.dataset.kind = it.kind;
    r.dataset.state = it.state || "kept";
    r.dataset.index = it.index;
    r.dataset.tokens = it.tokens;
    if (it.count) r.dataset.count = it.count;
    if (it.struck) r.dataset.struck = "1";
    const title = el("title", {}, r);
    title.textContent = describe(it);
    return r;
  });
  const labels = el("g", {}, svg);
  const capTokens = well.window * 1.08;
  const place = (t) => {
    // t in [0,1]: 0 draws struck blocks as they came, 1 as they went upstream.
    let y = W.bottom;
    const pos = [];
    let total = 0;
    items.forEach((it, k) => {
      const from = animate && it.struck ? Math.min(it.from, capTokens) : it.tokens;
      const tokens = from + (it.tokens - from) * t;
      total += tokens;
      const h = Math.max(tokens * scale, it.count ? 13 : 0.8);
      y -= h;
      const r = rects[k];
      r.setAttribute("y", Math.max(y, W.top - 20));
      r.setAttribute("height", Math.max(0.5, h - (h > 5 ? 0.8 : 0)));
      pos.push([y, h]);
    });
    return pos;
  };
  const finish = () => {
    const pos = place(1);
    labels.replaceChildren();
    items.forEach((it, k) => {
      const [y, h] = pos[k];
      if (it.count && h >= 12) {
        const t = el("text", { x: W.x + W.w / 2, y: y + h / 2 + 3.5, "text-anchor": "middle", class: "drop-label" }, labels);
        t.textContent = it.label;
      } else if (it.struck && h >= 2) {
        el("line", { x1: W.x + 8, x2: W.x + W.w - 8, y1: y + h / 2, y2: y + h / 2, class: "strike-mark" }, labels);
      }
      if (it.struck) miniHammer(labels, W.x + W.w - 16, y + h / 2);
      if (h >= 13 && !it.count) {
        const t = el("text", { x: W.x + 10, y: y + h / 2 + 4, class: "drop-label" }, labels);
        t.textContent = (KIND_NAMES[it.kind] || it.kind) + (it.tool ? " · " + it.tool : "") + " · " + fmt(it.tokens);
      }
    });
    drawKeep(svg, items, pos);
    if (animate) drawHammer(svg, items, pos);
  };
  if (wellAnimation) cancelAnimationFrame(wellAnimation);
  const struck = items.some((it) => it.struck && it.from !== it.tokens);
  if (!animate || !struck) {
    finish();
  } else {
    const start = performance.now();
    const step = (now) => {
      const t = Math.min(1, (now - start) / 700);
      place(1 - Math.pow(1 - t, 3));
      if (t < 1) wellAnimation = requestAnimationFrame(step);
      else { wellAnimation = null; finish(); }
    };
    place(0);
    wellAnimation = requestAnimationFrame(step);
  }
  renderLegend(items);
}

function describe(it) {
  const name = KIND_NAMES[it.kind] || it.kind;
  let s = name + (it.index >= 0 ? " #" + it.index : "") + (it.tool ? " · " + it.tool : "") + ": " + full(it.tokens) + " tokens";
  if (it.from !== it.tokens) s += " (was " + full(it.from) + ")";
  if (it.count) s += " · " + it.count + " messages dropped";
  if (it.keep) s += " · KEEP";
  if (it.struck) s += " · struck on this request";
  if (it.preview) s += "\n" + it.preview;
  return s;
}

function defs(svg) {
  const d = el("defs", {}, svg);
  const p = el("pattern", { id: "hatch", width: 7, height: 7, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" }, d);
  el("rect", { width: 7, height: 7, fill: "#0f172a" }, p);
  el("line", { x1: 0, y1: 0, x2: 0, y2: 7, stroke: "#334155", "stroke-width": 3 }, p);
}

function drawFrame(svg, f, well) {
  const scale = (W.bottom - W.top) / Math.max(1, f.window);
  const y = (tokens) => W.bottom - tokens * scale;
  el("rect", { x: W.x, y: W.top, width: W.w, height: W.bottom - W.top, class: "well-floor" }, svg);
  const reply = Math.min(f.reply || 0, Math.max(0, f.window - f.line));
  if (reply > 0) {
    el("rect", { x: W.x, y: W.top, width: W.w, height: reply * scale, class: "reply" }, svg);
    const t = el("text", { x: W.x + W.w / 2, y: W.top + Math.min(reply * scale, 30) / 2 + 4, "text-anchor": "middle" }, svg);
    t.textContent = "reply room " + fmt(f.reply);
  }
  // The scale on the left, every quarter of the window.
  for (let q = 0; q <= 4; q++) {
    const tokens = (f.window * q) / 4;
    el("line", { x1: W.x - 5, x2: W.x, y1: y(tokens), y2: y(tokens), stroke: "#475569" }, svg);
    const t = el("text", { x: W.x - 8, y: y(tokens) + 4, "text-anchor": "end" }, svg);
    t.textContent = fmt(Math.round(tokens));
  }
  el("path", { d: `M${W.x},${W.top - 8} V${W.bottom} H${W.x + W.w} V${W.top - 8}`, class: "well-wall" }, svg);
  const top = el("text", { x: W.x + W.w / 2, y: W.top - 12, "text-anchor": "middle", class: "big" }, svg);
  top.textContent = "window " + full(f.window);
  const target = el("line", { x1: W.x, x2: W.x + W.w, y1: y(f.target), y2: y(f.target), class: "target-line" }, svg);
  target.dataset.tokens = f.target;
  const tt = el("text", { x: W.x + W.w + 6, y: y(f.target) + 4, class: "amber" }, svg);
  tt.textContent = "target " + fmt(f.target);
  if (well && well.before > well.after) {
    const sy = Math.max(W.top - 6, y(well.before));
    el("line", { x1: W.x - 40, x2: W.x + W.w, y1: sy, y2: sy, class: "sent-line" }, svg);
    const st = el("text", { x: W.x + W.w + 6, y: sy + 4 }, svg);
    st.textContent = (well.before > f.window ? "↑ " : "") + "sent " + fmt(well.before);
  }
  // The red line last, over the blocks' layer it is inserted before.
  const line = el("line", { x1: W.x - 10, x2: W.x + W.w + 10, y1: y(f.line), y2: y(f.line), class: "red-line", "data-testid": "red-line" }, null);
  line.dataset.tokens = f.line;
  line.dataset.window = f.window;
  const lt = el("text", { x: W.x + W.w + 6, y: y(f.line) - 5, class: "red" }, null);
  lt.textContent = "line " + fmt(f.line);
  queueMicrotask(() => { svg.appendChild(line); svg.appendChild(lt); });
  return scale;
}

function drawKeep(svg, items, pos) {
  const kept = items.map((it, k) => (it.keep ? k : -1)).filter((k) => k >= 0);
  if (!kept.length) return;
  const lo = pos[kept[0]][0] + pos[kept[0]][1];
  const hi = pos[kept[kept.length - 1]][0];
  const x = W.x + W.w + 64;
  el("path", { d: `M${x - 6},${hi} H${x} V${lo} H${x - 6}`, class: "keep", "data-testid": "keep" }, svg);
  const t = el("text", { x: x + 14, y: (hi + lo) / 2, class: "keep-t", transform: `rotate(90 ${x + 14} ${(hi + lo) / 2})`, "text-anchor": "middle" }, svg);
  t.textContent = "KEEP";
}

function drawHammer(svg, items, pos) {
  let k = -1;
  items.forEach((it, j) => { if (it.struck) k = j; });
  if (k < 0) return;
  const [y, h] = pos[k];
  const g = el("g", { class: "hammer", "data-testid": "hammer" }, svg);
  const cx = W.x + W.w - 24, cy = y + h / 2 - 30;
  el("rect", { x: cx - 3, y: cy, width: 6, height: 34, rx: 2, fill: "#d4a373" }, g);
  el("rect", { x: cx - 16, y: cy - 10, width: 32, height: 13, rx: 3, fill: "#cbd5e1", stroke: "#0b1120" }, g);
  setTimeout(() => g.remove(), 1400);
}

function miniHammer(parent, x, y) {
  // A small hammer on each block struck on this request (the big one swings once as it lands).
  const g = el("g", { class: "mini-hammer", transform: `translate(${x} ${y}) rotate(-35)` }, parent);
  el("rect", { x: -1.2, y: -2, width: 2.4, height: 9, fill: "#d4a373" }, g);
  el("rect", { x: -5, y: -5, width: 10, height: 4, rx: 1, fill: "#f8fafc", stroke: "#0b1120", "stroke-width": 0.6 }, g);
}

function renderLegend(items) {
  const box = $("#legend");
  box.replaceChildren();
  const seen = new Set(items ? items.map((it) => it.kind) : []);
  for (const kind of Object.keys(COLORS)) {
    if (items && !seen.has(kind)) continue;
    const s = html("span", "", KIND_NAMES[kind], box);
    s.style.setProperty("--c", COLORS[kind]);
  }
  if (items && items.some((it) => it.struck)) html("span", "struck", "struck on this request", box);
}

// ------------------------------------------------------------------ the timeline

const T = { l: 48, r: 712, t: 44, b: 214 };

function renderTimeline() {
  const svg = $("#timeline");
  svg.replaceChildren();
  const rs = state.records;
  if (!rs.length) return;
  // Up to twice and a half the window: the line and the window stay readable however much the
  // client sends; a taller "sent" bar is cut at the top (its figure is in the tooltip).
  const windowMax = Math.max(...rs.map((r) => r.window));
  const tallest = Math.max(...rs.map((r) => Math.max(r.window, r.before, r.prompt_tokens || 0)));
  const max = Math.min(tallest, windowMax * 2.5) * 1.05;
  const y = (v) => T.b - (Math.min(v, max) / max) * (T.b - T.t);
  const step = (T.r - T.l) / rs.length;
  const bw = Math.max(1.5, Math.min(22, step * 0.7));
  el("line", { x1: T.l, x2: T.r, y1: T.b, y2: T.b, class: "tl-axis" }, svg);
  for (let q = 1; q <= 4; q++) {
    const v = (max / 1.05) * q / 4;
    el("line", { x1: T.l, x2: T.r, y1: y(v), y2: y(v), stroke: "#1e293b" }, svg);
    const t = el("text", { x: T.l - 6, y: y(v) + 4, "text-anchor": "end" }, svg);
    t.textContent = fmt(Math.round(v));
  }
  const xs = rs.map((_, k) => T.l + step * k + step / 2);
  const path = (key) => rs.map((r, k) => (k ? "L" : "M") + (xs[k] - step / 2) + "," + y(r[key]) + " H" + (xs[k] + step / 2)).join(" ");
  el("path", { d: path("window"), class: "tl-window" }, svg);
  rs.forEach((r, k) => {
    const x = xs[k] - bw / 2;
    el("rect", { x, y: y(r.before), width: bw, height: T.b - y(r.before), class: "tl-before" + (r.before > max ? " clipped" : "") }, svg);
    const a = el("rect", { x, y: y(r.after), width: bw, height: T.b - y(r.after), class: "tl-after" + (r.before > r.after ? " cut" : "") }, svg);
    a.dataset.seq = r.seq;
    if (r.cached_tokens) el("rect", { x, y: y(Math.min(r.cached_tokens, r.after)), width: bw, height: T.b - y(Math.min(r.cached_tokens, r.after)), class: "tl-cached" }, svg);
    const ev = events(r);
    ev.forEach(([glyph, color], j) => {
      const t = el("text", { x: xs[k], y: y(Math.max(r.before, r.after)) - 5 - j * 10, "text-anchor": "middle", class: "tl-ev", fill: color }, svg);
      t.textContent = glyph;
    });
  });
  el("path", { d: path("line"), class: "tl-line" }, svg);
  const lbl = el("text", { x: T.r - 2, y: y(rs[rs.length - 1].line) - 4, "text-anchor": "end", class: "red" }, svg);
  lbl.textContent = "line";
  const wl = el("text", { x: T.r - 2, y: y(rs[rs.length - 1].window) - 4, "text-anchor": "end" }, svg);
  wl.textContent = "window";
  const first = el("text", { x: T.l, y: T.b + 16 }, svg);
  first.textContent = "#" + rs[0].seq;
  const lastT = el("text", { x: T.r, y: T.b + 16, "text-anchor": "end" }, svg);
  lastT.textContent = "#" + rs[rs.length - 1].seq;
  const legend = el("text", { x: (T.l + T.r) / 2, y: T.b + 30, "text-anchor": "middle" }, svg);
  legend.textContent = (tallest > max ? "sent cut at " + fmt(Math.round(max)) + " · " : "") + "N notes · C caps · D drops · S summary · R refused · ↻ overflow retried · ✂ silent cut";
  rs.forEach((r, k) => {
    const hit = el("rect", { x: xs[k] - step / 2, y: T.t, width: step, height: T.b - T.t, class: "tl-hit" }, svg);
    hit.addEventListener("mousemove", (e) => showTip(e, r, k ? rs[k - 1] : null));
    hit.addEventListener("mouseleave", () => { $("#tip").hidden = true; });
  });
}

function events(r) {
  const out = [];
  if (r.refused) out.push(["R", "#f87171"]);
  if (r.retried) out.push(["↻", "#f87171"]);
  if (r.truncation) out.push(["✂", "#f87171"]);
  if (r.summarized) out.push(["S", COLORS.summary]);
  if (r.dropped) out.push(["D", "#cbd5e1"]);
  if (r.capped) out.push(["C", COLORS.capped]);
  if (r.truncated) out.push(["N", COLORS.noted]);
  return r.struck || r.refused || r.retried || r.truncation ? out : out.length ? [["·", "#64748b"]] : [];
}

function showTip(e, r, prev) {
  const tip = $("#tip");
  const card = tip.parentElement.getBoundingClientRect();
  tip.replaceChildren();
  const line = (text, cls) => html("div", cls || "", text, tip);
  line("request #" + r.seq + " · " + new Date(r.at * 1000).toLocaleTimeString(), "muted");
  line("sent " + full(r.before) + " → forwarded " + full(r.after));
  line("line " + full(r.line) + " of window " + full(r.window));
  const did = [r.truncated && r.truncated + " noted", r.capped && r.capped + " capped", r.dropped && r.dropped + " dropped", r.summarized && r.summarized + " summarised"].filter(Boolean);
  line(did.length ? did.join(", ") + (r.struck ? " (" + r.struck + " new)" : " (as before)") : "left as it came");
  if (prev) line("prefix kept: " + r.prefix + " of " + prev.messages + " messages");
  if (r.prompt_tokens !== null) line("upstream read " + full(r.prompt_tokens) + (r.cached_tokens !== null ? ", cached " + full(r.cached_tokens) : ""));
  if (r.refused) line("refused: cannot fit", "bad");
  if (r.retried) line("upstream overflow, retried: " + r.retried);
  if (r.truncation) line("silent truncation: read " + full(r.truncation.read) + " of " + full(r.truncation.sent));
  tip.hidden = false;
  const x = e.clientX - card.left + 14;
  tip.style.left = Math.min(x, card.width - 230) + "px";
  tip.style.top = e.clientY - card.top + 10 + "px";
}

// ------------------------------------------------------------------ the key form

function askKey(refused) {
  setConn("down", "needs a key");
  $("#keyform").hidden = false;
  $("#key-err").hidden = !refused;
  $("#key-input").focus();
}

$("#key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY_STORE, $("#key-input").value.trim());
  $("#keyform").hidden = true;
  connect();
});
$("#follow").addEventListener("change", (e) => {
  state.follow = e.target.checked;
  const newest = state.conversations.keys().next().value;
  if (state.follow && newest) select(newest, false);
});
setInterval(() => { if (state.conversations.size) renderList(); }, 15000);

connect();
