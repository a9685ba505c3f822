// Where things go: the well's blocks bottom up and their heights, the timeline's scale. Pure
// arithmetic over the server's figures (`node --test` runs it); the drawing turns it into SVG.

// The well's frame in the SVG's units (viewBox 420 x 600).
export const WELL = { x: 86, w: 210, top: 28, bottom: 572 };
// The timeline's plot in the SVG's units (viewBox 720 x 250).
export const PLOT = { l: 48, r: 712, t: 44, b: 214 };

// A well's blocks bottom up: the leading system messages, the tool schemas, then the messages, a
// dropped run as one block (a marker, or the summary that replaced it).
export function wellItems(well) {
  const items = [];
  const markers = new Map(well.markers.map((m) => [m.start, m]));
  const blocks = well.blocks;
  let i = 0;
  for (; i < blocks.length && blocks[i][1] === "system"; i++) items.push(item(blocks[i], well));
  if (well.fixed > 0) items.push({ kind: "tools", tokens: well.fixed, from: well.fixed, index: -1 });
  for (; i < blocks.length; i++) {
    const b = blocks[i];
    if (b[4] !== "dropped") {
      items.push(item(b, well));
      continue;
    }
    const m = markers.get(b[0]);
    if (!m) continue;  // inside a run: its marker stands for it
    let dropped = 0;
    for (let j = b[0]; j < b[0] + m.count && j < blocks.length; j++) dropped += blocks[j][2];
    items.push({
      kind: m.summary ? "summary" : "marker", state: "dropped", tokens: m.tokens, from: dropped,
      index: b[0], count: m.count, struck: m.new,
      label: (m.summary ? "summary of " : "✕ ") + m.count + " dropped",
    });
  }
  return items;
}

function item(b, well) {
  const [index, kind, tokens, after, state, tool, isNew] = b;
  const shown = state === "noted" || state === "capped" ? state : kind;
  return {
    kind: shown, state, tokens: after, from: tokens, index, tool, struck: isNew,
    keep: index >= well.protected_from, preview: well.previews ? well.previews[index] : null,
  };
}

// Tokens to SVG units in a well drawn for `window` tokens.
export const wellScale = (window) => (WELL.bottom - WELL.top) / Math.max(1, window);

// Each item's [y, height], bottom up. `t` in [0, 1]: 0 draws the blocks the hammer struck as they
// came (no taller than the window and a bit), 1 as they went upstream.
export function placeItems(items, scale, window, t = 1) {
  const cap = window * 1.08;
  let y = WELL.bottom;
  return items.map((it) => {
    const from = it.struck ? Math.min(it.from, cap) : it.tokens;
    const tokens = from + (it.tokens - from) * t;
    const h = Math.max(tokens * scale, it.count ? 13 : 0.8);
    y -= h;
    return [y, h];
  });
}

// The KEEP bracket's span (top and bottom y), or null when nothing is protected.
export function keepSpan(items, pos) {
  const kept = items.map((it, k) => (it.keep ? k : -1)).filter((k) => k >= 0);
  if (!kept.length) return null;
  return { top: pos[kept[kept.length - 1]][0], bottom: pos[kept[0]][0] + pos[kept[0]][1] };
}

// The timeline's vertical scale: up to twice and a half the window, so the line and the window
// stay readable however much a client sends (a taller "sent" bar is cut at the top).
export function timelineScale(records) {
  const windowMax = Math.max(...records.map((r) => r.window));
  const tallest = Math.max(...records.map((r) => Math.max(r.window, r.before, r.prompt_tokens || 0)));
  const max = Math.min(tallest, windowMax * 2.5) * 1.05;
  const y = (v) => PLOT.b - (Math.min(v, max) / max) * (PLOT.b - PLOT.t);
  const step = (PLOT.r - PLOT.l) / records.length;
  return { max, cut: tallest > max, y, step, bar: Math.max(1.5, Math.min(22, step * 0.7)) };
}

// What the timeline marks over a request, as [glyph, colour name], bottom up.
export function marks(r) {
  const out = [];
  if (r.refused) out.push(["R", "bad"]);
  if (r.retried) out.push(["↻", "bad"]);
  if (r.truncation) out.push(["✂", "bad"]);
  if (r.summarized) out.push(["S", "summary"]);
  if (r.dropped) out.push(["D", "drop"]);
  if (r.capped) out.push(["C", "capped"]);
  if (r.truncated) out.push(["N", "noted"]);
  if (r.remote) out.push(["⇩", "remote"]);  // on top, by its rule
  const news = r.struck || r.refused || r.retried || r.truncation || r.remote;
  return news ? out : out.length ? [["·", "quiet"]] : [];
}
