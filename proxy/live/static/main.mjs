// The live page's wiring: events (from the stream, the user, the fetches) go through the store's
// `apply`; what changed is drawn; a new selection fetches that conversation's records and well.

import { $ } from "./dom.mjs";
import { drawConnection, drawFacts, drawHead, drawList, drawTotals } from "./draw_panels.mjs";
import { drawTimeline } from "./draw_timeline.mjs";
import { drawWell } from "./draw_well.mjs";
import { readPalette } from "./palette.mjs";
import { apply, initialState } from "./store.mjs";
import { keepStreaming } from "./stream.mjs";

const KEY_STORE = "compacting-proxy-ui-key";
const LIST_REFRESH_MS = 15000;  // "2 min ago" moves on

const palette = readPalette(document.documentElement);
let state = initialState();

function headers() {
  const key = sessionStorage.getItem(KEY_STORE);
  return key !== null ? { "x-api-key": key } : {};
}

const select = (key) => dispatch({ type: "select", key, byUser: true });

function dispatch(event) {
  const before = state;
  state = apply(state, { now: Date.now(), ...event });
  draw(before, state);
  if (state.selected && (state.selected !== before.selected || event.type === "hello")) fetchDetail(state.selected);
}

function draw(before, after) {
  if (after.connection !== before.connection || after.started !== before.started || after.keyRefused !== before.keyRefused) {
    drawConnection(after);
  }
  if (after.totals !== before.totals) drawTotals(after);
  if (after.conversations !== before.conversations || after.selected !== before.selected) {
    const flash = after.conversations !== before.conversations ? after.flash : null;
    drawList(after, Date.now(), select, flash);
    $("#follow").checked = after.follow;
    drawHead(after);
  }
  if (after.records !== before.records) {
    drawFacts(after);
    drawTimeline(after.records, palette);
  }
  if (after.well !== before.well || after.records !== before.records) drawWell(after, palette);
}

async function fetchDetail(key) {
  const response = await fetch("/ui/conversations/" + encodeURIComponent(key), { headers: headers(), cache: "no-store" });
  if (response.ok) dispatch({ type: "detail", key, detail: await response.json() });
}

const stream = keepStreaming({
  url: "/ui/events",
  headers,
  onEvent: (kind, data) => {
    if (kind === "hello") dispatch({ type: "hello", snapshot: data });
    else if (kind === "record") dispatch({ type: "record", ...data });
    else if (kind === "well") dispatch({ type: "well", well: data });
  },
  onStatus: (status, refused) => dispatch({ type: "status", status, refused }),
});

$("#key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(KEY_STORE, $("#key-input").value.trim());
  dispatch({ type: "status", status: "connecting" });
  stream.reconnect();
});
$("#follow").addEventListener("change", (e) => dispatch({ type: "follow", on: e.target.checked }));
setInterval(() => { if (state.conversations.length) drawList(state, Date.now(), select); }, LIST_REFRESH_MS);
