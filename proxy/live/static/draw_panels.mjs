// Drawing the panels around the well: the connection, SENT (the proxy's and the conversation's),
// the list of conversations, the followed conversation's head, and what the proxy did to its
// latest request.

import { $, html } from "./dom.mjs";
import { ago, didWords, fmt, formatName, full, remoteWords, sourceName } from "./format.mjs";
import { latest, shown } from "./store.mjs";

const CONNECTION = {
  connecting: ["connecting", "connecting…"], down: ["down", "reconnecting…"],
  busy: ["down", "too many pages watching; retrying…"], key: ["down", "needs a key"],
};

export function drawConnection(state) {
  const [cls, label] = state.connection === "live"
    ? ["live", "live · since " + new Date(state.started * 1000).toLocaleTimeString()]
    : CONNECTION[state.connection];
  const box = $(".conn");
  box.className = "conn " + cls;
  box.querySelector(".label").textContent = label;
  $("#keyform").hidden = state.connection !== "key";
  $("#key-err").hidden = !state.keyRefused;
  if (state.connection === "key") $("#key-input").focus();
}

export function drawTotals(state) {
  if (!state.totals) return;
  for (const node of document.querySelectorAll("[data-sent]")) setStat(node, state.totals, node.dataset.sent);
}

function setStat(node, t, name) {
  const value = name === "reported" || name === "cached" ? (t.answers ? t[name] : null) : t[name];
  node.textContent = fmt(value);
  node.dataset.value = value === null ? "" : String(value);
  node.title = full(value) + " tokens";
  if (name === "saved" && t.sent) node.textContent += " · " + Math.round((100 * t.saved) / t.sent) + "%";
}

// `flash`: the conversation a record just changed.
export function drawList(state, now, onSelect, flash = null) {
  const list = $(".convs");
  list.replaceChildren();
  $("#no-convs").hidden = state.conversations.length > 0;
  for (const c of state.conversations) {
    const li = html("li", c.key === state.selected ? "sel" : "", null, list);
    if (c.key === flash) li.classList.add("flash");
    li.dataset.key = c.key;
    li.dataset.requests = c.requests;
    const last = c.last || {};
    const row1 = html("div", "row1", null, li);
    html("span", "model", c.model || "(no model)", row1);
    html("span", "ago", ago(last.at || c.first_at, now), row1);
    const row2 = html("div", "row2", null, li);
    html("span", "tag fmt", formatName(c.format), row2);
    html("span", "tag src", sourceName(c.source), row2);
    html("span", "tag", c.requests + (c.requests === 1 ? " request" : " requests"), row2);
    if (c.totals.saved > 0) html("span", "tag saved", "−" + fmt(c.totals.saved), row2);
    if (last.remote) html("span", "tag remote", "remote compaction", row2);
    if (last.refused) html("span", "tag warn", "refused", row2);
    if (c.preview) html("div", "preview", c.preview, li);
    if (last.window) {
      const bar = html("div", "bar", null, li);
      html("i", "", null, bar).style.width = Math.min(100, (100 * last.after) / last.window) + "%";
      html("b", "", null, bar).style.left = Math.min(100, (100 * last.line) / last.window) + "%";
    }
    li.addEventListener("click", () => onSelect(c.key));
  }
}

export function drawHead(state) {
  const conv = shown(state);
  $("#detail").hidden = !conv;
  if (!conv) return;
  $("#conv-title").textContent = (conv.model || "(no model)") + " · " + formatName(conv.format);
  const tags = $("#conv-tags");
  tags.replaceChildren();
  html("span", "tag src", sourceName(conv.source), tags);
  html("span", "tag mono", conv.key, tags);
  html("span", "tag", conv.requests + " requests", tags);
  if (conv.preview) html("span", "tag", "“" + conv.preview + "”", tags);
  for (const node of document.querySelectorAll("[data-csent]")) setStat(node, conv.totals, node.dataset.csent);
}

export function drawFacts(state) {
  const r = latest(state);
  if (!r) return;  // until the selected conversation's records arrive, the last ones stay
  const dl = $("#facts");
  dl.replaceChildren();
  dl.dataset.seq = r.seq;
  $("#req-when").textContent = (r.remote ? "remote compaction #" : "request #") + r.seq + " · " + new Date(r.at * 1000).toLocaleTimeString();
  const row = (k, v, cls) => { html("dt", "", k, dl); html("dd", cls || "", v, dl); };
  const saved = r.before - r.after;
  if (r.remote) row("remote compaction", "Codex's compaction_trigger, answered by the proxy: " + remoteWords(r), "hot remote");
  row("tokens", full(r.before) + " → " + full(r.after) + (saved > 0 ? "  (−" + full(saved) + ")" : ""), saved > 0 ? "good" : "");
  row("window · line · target", full(r.window) + " · " + full(r.line) + " · " + full(r.target));
  row("reply room", full(r.reply) + (r.headers["x-compaction-max-tokens"] ? " (reply limit clamped)" : ""));
  const did = didWords(r);
  row("the hammer", did ? did + (r.struck ? " · " + r.struck + " struck now" : " · nothing new") : "nothing: under the line", did ? "hot" : "");
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
