// How the page words things: token counts, times, the names of formats, sources and blocks.
// Pure functions, no DOM: `node --test tests/live/page/` runs them.

export const FORMAT_NAMES = {
  chat: "Chat Completions", messages: "Anthropic Messages", responses: "Responses",
  ollama: "Ollama chat", azure: "Azure chat", gemini: "Gemini generateContent",
};

export const SOURCE_NAMES = {
  "x-claude-code-session-id": "Claude Code session", "session-id": "Codex session",
  session_id: "Codex session", "x-session-affinity": "opencode session", "x-session-id": "session",
  "x-opencode-session": "opencode session", conversation_id: "session", hash: "by its opening",
};

// The well's kinds of block, bottom up as the legend lists them.
export const KIND_NAMES = {
  system: "system", tools: "tools", user: "user", assistant: "assistant", call: "tool call",
  result: "tool result", noted: "note", capped: "capped result", summary: "summary", marker: "drop marker",
};

export const formatName = (name) => FORMAT_NAMES[name] || name;
export const sourceName = (source) => SOURCE_NAMES[source] || source;

// Tokens, short: 1,234 · 12.3k · 123k · 1.23M.
export function fmt(n) {
  if (n === null || n === undefined) return "–";
  const a = Math.abs(n);
  if (a >= 1e6) return (n / 1e6).toFixed(a >= 1e7 ? 1 : 2) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
  return n.toLocaleString("en-US");
}

// Tokens, whole: 1,234,567.
export const full = (n) => (n === null || n === undefined ? "–" : n.toLocaleString("en-US"));

// How long ago `t` (seconds since the epoch) was at `now` (milliseconds since the epoch).
export function ago(t, now) {
  const s = Math.max(0, now / 1000 - t);
  if (s < 5) return "now";
  if (s < 60) return Math.floor(s) + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  return Math.floor(s / 3600) + " h ago";
}

// What the hammer did to a request, in words ("3 noted, 1 dropped"), or "" when nothing.
export function didWords(r) {
  const did = [
    r.truncated && r.truncated + " noted", r.capped && r.capped + " capped",
    r.dropped && r.dropped + " dropped", r.summarized && r.summarized + " summarised",
  ].filter(Boolean);
  return did.join(", ");
}

// A remote compaction (Codex's compaction_trigger, answered by the proxy), in words.
export function remoteWords(r) {
  if (!r.remote) return "";
  const { items, sealed } = r.remote;
  return items + " items, " + full(r.before) + " tokens → one compaction item standing for " + sealed +
    " (" + full(r.after) + " tokens with the messages Codex keeps)";
}
