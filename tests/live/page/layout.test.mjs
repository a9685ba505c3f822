// The well's layout and the timeline's scale without a browser.
import assert from "node:assert/strict";
import { test } from "node:test";

import { WELL, keepSpan, marks, placeItems, timelineScale, wellItems, wellScale } from "../../../proxy/live/static/layout.mjs";

// blocks: [index, kind, tokens, after, state, tool, new]
const WELL_OF_8 = {
  window: 1000, fixed: 50, protected_from: 6, previews: null,
  blocks: [
    [0, "system", 40, 40, "kept", "", false],
    [1, "user", 30, 30, "kept", "", false],
    [2, "call", 10, 0, "dropped", "grep", true],
    [3, "result", 300, 0, "dropped", "grep", true],
    [4, "call", 10, 10, "kept", "read", false],
    [5, "result", 500, 20, "noted", "read", true],
    [6, "user", 20, 20, "kept", "", false],
    [7, "assistant", 60, 60, "kept", "", false],
  ],
  markers: [{ start: 2, count: 2, tokens: 12, summary: false, new: true }],
};

test("blocks go bottom up: system, tools, then messages, a dropped run as one marker", () => {
  const items = wellItems(WELL_OF_8);
  assert.deepEqual(items.map((it) => it.kind), ["system", "tools", "user", "marker", "call", "noted", "user", "assistant"]);
  const marker = items[3];
  assert.deepEqual([marker.count, marker.tokens, marker.from, marker.struck], [2, 12, 310, true]);
  assert.deepEqual(items.map((it) => Boolean(it.keep)), [false, false, false, false, false, false, true, true]);
  const summary = wellItems({ ...WELL_OF_8, markers: [{ ...WELL_OF_8.markers[0], summary: true }] })[3];
  assert.equal(summary.kind, "summary");
  assert.match(summary.label, /summary of 2/);
});

test("placed as they went upstream, the blocks stack to what was forwarded", () => {
  const items = wellItems(WELL_OF_8);
  const scale = wellScale(1000);
  const pos = placeItems(items, scale, 1000);
  const forwarded = 40 + 50 + 30 + 12 + 10 + 20 + 20 + 60;
  const top = pos[pos.length - 1][0];
  // The marker is drawn at least 13 units tall, so it may stand a little higher than its tokens.
  assert.ok(WELL.bottom - top >= forwarded * scale - 1e-9);
  assert.ok(WELL.bottom - top <= forwarded * scale + 13);
  const span = keepSpan(items, pos);
  assert.deepEqual(span, { top: pos[7][0], bottom: pos[6][0] + pos[6][1] });
});

test("before the hammer lands, a struck block stands as it came, no taller than the window and a bit", () => {
  const huge = { ...WELL_OF_8, blocks: WELL_OF_8.blocks.map((b) => (b[0] === 5 ? [5, "result", 50_000, 20, "noted", "read", true] : b)) };
  const items = wellItems(huge);
  const scale = wellScale(1000);
  const [, tall] = placeItems(items, scale, 1000, 0)[5];
  const [, landed] = placeItems(items, scale, 1000, 1)[5];
  assert.equal(tall, 1080 * scale);
  assert.equal(landed, 20 * scale);
});

test("the timeline is scaled to at most two and a half windows", () => {
  const small = timelineScale([{ window: 1000, before: 900 }, { window: 1000, before: 1200 }]);
  assert.equal(small.max, 1200 * 1.05);
  assert.equal(small.cut, false);
  const huge = timelineScale([{ window: 1000, before: 90_000 }]);
  assert.equal(huge.max, 2500 * 1.05);
  assert.equal(huge.cut, true);
  assert.equal(huge.y(0), 214);
  assert.equal(huge.y(1e9), 44, "a taller bar is cut at the top");
});

test("each request's marks: what it did, a remote compaction on top, a dot for nothing new", () => {
  assert.deepEqual(marks({ truncated: 2, dropped: 1, struck: 3 }).map(([g]) => g), ["D", "N"]);
  assert.deepEqual(marks({ truncated: 2, struck: 0 }), [["·", "quiet"]]);
  assert.deepEqual(marks({ remote: { items: 40, sealed: 9 }, dropped: 30, struck: 0 }).map(([g]) => g), ["D", "⇩"]);
  assert.deepEqual(marks({}), []);
});
