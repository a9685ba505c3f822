// The page's colours, defined once: as custom properties in ui.css (`--c-user`, ...), read here
// for what the drawing colours itself (a block's fill, a mark's glyph).

export const COLOURS = [
  // the well's kinds of block
  "system", "tools", "user", "assistant", "call", "result", "noted", "capped", "summary", "marker",
  // the timeline's marks
  "bad", "drop", "quiet", "remote",
  // the hammer
  "handle", "head", "struck",
];

// { user: "#3b82f6", ... } as the style sheet defines them on `root`.
export function readPalette(root) {
  const style = getComputedStyle(root);
  return Object.fromEntries(COLOURS.map((name) => [name, style.getPropertyValue("--c-" + name).trim()]));
}
