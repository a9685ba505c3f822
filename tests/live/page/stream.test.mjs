// Reading the event stream, and the page's words, without a browser.
import assert from "node:assert/strict";
import { test } from "node:test";

import { ago, fmt, formatName, remoteWords, sourceName } from "../../../proxy/live/static/format.mjs";
import { parseFrame, splitFrames } from "../../../proxy/live/static/stream.mjs";

test("frames are cut at blank lines, the rest kept for the next read", () => {
  const { frames, rest } = splitFrames('event: hello\ndata: {"a":1}\n\n: ping\n\nevent: rec');
  assert.deepEqual(frames, ['event: hello\ndata: {"a":1}', ": ping"]);
  assert.equal(rest, "event: rec");
});

test("a frame is its event's name and its data; a comment is nothing", () => {
  assert.deepEqual(parseFrame('event: well\ndata: {"seq":3}'), { kind: "well", data: { seq: 3 } });
  assert.deepEqual(parseFrame('data: {"x":\ndata: 2}'), { kind: "message", data: { x: 2 } });
  assert.equal(parseFrame(": ping"), null);
});

test("the page's words", () => {
  assert.deepEqual([fmt(999), fmt(12_345), fmt(123_456), fmt(1_234_567), fmt(null)], ["999", "12.3k", "123k", "1.23M", "–"]);
  assert.equal(ago(100, 102_000), "now");
  assert.equal(ago(100, 400_000), "5 min ago");
  assert.equal(formatName("gemini"), "Gemini generateContent", "never the raw format name");
  assert.equal(formatName("chat"), "Chat Completions");
  assert.equal(sourceName("session-id"), "Codex session");
  assert.match(remoteWords({ remote: { items: 40, sealed: 9 }, before: 31_200, after: 7_800 }), /^40 items, 31,200 tokens → one compaction item standing for 9 \(7,800/);
});
