// The live page's store without a browser: `node --test tests/live/page/` (scripts/test.sh runs it).
import assert from "node:assert/strict";
import { test } from "node:test";

import { FOLLOW_QUIET_MS, apply, initialState, latest, shown } from "../../../proxy/live/static/store.mjs";

const conv = (key, requests = 1, extra = {}) => ({ key, requests, model: "m", format: "chat", source: "hash", totals: { saved: 0 }, ...extra });
const rec = (key, seq, extra = {}) => ({ key, seq, before: 100, after: 80, window: 1000, line: 800, ...extra });
const hello = (conversations) => ({ type: "hello", snapshot: { started: 1, content: false, totals: { sent: 1 }, conversations } });
const record = (conversation, r, now = 0) => ({ type: "record", conversation, record: r, totals: { sent: r.seq }, now });

// Every state and event frozen all the way down: `apply` must never change what it is given.
function frozen(value) {
  if (value && typeof value === "object") {
    Object.values(value).forEach(frozen);
    Object.freeze(value);
  }
  return value;
}

function run(events, state = initialState()) {
  for (const event of events) state = apply(frozen(state), frozen(event));
  return state;
}

test("the hello selects the most recently active conversation and marks the stream live", () => {
  const state = run([hello([conv("b"), conv("a")])]);
  assert.equal(state.connection, "live");
  assert.equal(state.selected, "b");
  assert.deepEqual(state.records, []);
});

test("a new hello keeps the conversation the page shows, if the proxy still has it", () => {
  const state = run([hello([conv("b"), conv("a")]), { type: "select", key: "a", byUser: true }, hello([conv("c"), conv("a")])]);
  assert.equal(state.selected, "a");
  assert.equal(run([hello([conv("c")])], state).selected, "c");
});

test("a record moves its conversation to the top and updates the followed one in place", () => {
  let state = run([hello([conv("a"), conv("b")]), record(conv("a", 2), rec("a", 5), 1000)]);
  assert.deepEqual(state.conversations.map((c) => c.key), ["a", "b"]);
  state = run([record(conv("a", 2), rec("a", 5, { after: 60 }), 1100), record(conv("a", 3), rec("a", 7), 1200)], state);
  assert.deepEqual(state.records.map((r) => [r.seq, r.after]), [[5, 60], [7, 80]]);
  assert.equal(latest(state).seq, 7);
  assert.equal(state.flash, "a");
  assert.deepEqual(state.totals, { sent: 7 });
});

test("following: a new conversation is shown at once, another only once the shown one is quiet", () => {
  let state = run([hello([conv("a", 3)]), record(conv("a", 4), rec("a", 9), 10_000)]);
  state = run([record(conv("b", 5), rec("b", 10), 11_000)], state);
  assert.equal(state.selected, "a", "b is not new and a is not quiet");
  assert.deepEqual(state.conversations.map((c) => c.key), ["b", "a"]);
  state = run([record(conv("b", 6), rec("b", 11), 10_000 + FOLLOW_QUIET_MS + 1)], state);
  assert.equal(state.selected, "b");
  assert.deepEqual(state.records.map((r) => r.seq), [11]);
  assert.equal(state.well, null);
  state = run([record(conv("c", 1), rec("c", 12), 10_000 + FOLLOW_QUIET_MS + 2)], state);
  assert.equal(state.selected, "c", "a new conversation is shown at once");
});

test("a conversation chosen by hand stays shown", () => {
  let state = run([hello([conv("a"), conv("b")]), { type: "select", key: "b", byUser: true }]);
  assert.equal(state.follow, false);
  state = run([record(conv("c", 1), rec("c", 3), 99_999_999)], state);
  assert.equal(state.selected, "b");
  state = run([{ type: "follow", on: true }], state);
  assert.equal(state.follow, true);
  assert.equal(state.selected, "c");
});

test("a well is taken for the shown conversation only, never an older one, and animated once", () => {
  let state = run([hello([conv("a")]), { type: "well", well: { key: "b", seq: 9 } }]);
  assert.equal(state.well, null);
  state = run([{ type: "well", well: { key: "a", seq: 4 } }], state);
  assert.equal(state.well.seq, 4);
  assert.equal(state.animate, true);
  state = run([{ type: "well", well: { key: "a", seq: 3 } }], state);
  assert.equal(state.well.seq, 4);
  state = run([{ type: "well", well: { key: "a", seq: 4, again: true } }], state);
  assert.equal(state.animate, false, "the same request's well again: no second hammer");
});

test("the fetched detail fills in the records; what streamed in meanwhile stays", () => {
  let state = run([hello([conv("a")]), record(conv("a", 3), rec("a", 7, { after: 10 }), 5)]);
  state = run([{ type: "detail", key: "a", detail: { ...conv("a", 3), records: [rec("a", 3), rec("a", 7, { after: 99 })], well: { key: "a", seq: 7 } } }], state);
  assert.deepEqual(state.records.map((r) => [r.seq, r.after]), [[3, 80], [7, 10]]);
  assert.equal(state.well.seq, 7);
  assert.equal(state.animate, false);
  const other = run([{ type: "detail", key: "zz", detail: { records: [rec("zz", 1)], well: null } }], state);
  assert.equal(other, state, "a late answer for another conversation changes nothing");
});

test("the connection's state", () => {
  let state = run([{ type: "status", status: "key", refused: true }]);
  assert.equal(state.connection, "key");
  assert.equal(state.keyRefused, true);
  state = run([{ type: "status", status: "busy" }], state);
  assert.deepEqual([state.connection, state.keyRefused], ["busy", false]);
  assert.equal(shown(state), null);
  assert.equal(apply(state, { type: "unknown" }), state);
});
