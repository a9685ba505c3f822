// The page's state, and the one function that changes it: `apply(state, event)` returns the next
// state and never touches the one it was given, the DOM or the network (`node --test` runs it).
//
// Events: the stream's `hello` (the snapshot), `record` and `well`; the stream's `status`; the
// user's `select` and `follow`; `detail` (the selected conversation's records and well, fetched).
// `now` (milliseconds) travels in the events that need the time.

export const FOLLOW_QUIET_MS = 8000;  // a followed conversation this quiet gives way to another

export function initialState() {
  return {
    connection: "connecting",  // "live", "connecting", "down", "busy", "key"
    keyRefused: false,
    started: null,  // when the proxy started (seconds)
    content: false,  // previews shown (COMPACT_UI_CONTENT)
    totals: null,  // SENT for the whole proxy (or this key's)
    conversations: [],  // summaries, the most recently active first
    flash: null,  // the conversation the latest record changed
    selected: null,
    follow: true,
    records: [],  // the selected conversation's, by number
    well: null,  // the selected conversation's latest well
    animate: false,  // the well is new: the hammer falls as it is drawn
    lastActivity: 0,
  };
}

export function apply(state, event) {
  switch (event.type) {
    case "hello": return hello(state, event.snapshot);
    case "record": return record(state, event);
    case "well": return well(state, event.well);
    case "status": return { ...state, connection: event.status, keyRefused: Boolean(event.refused) };
    case "select": return select(state, event.key, event.byUser);
    case "detail": return detail(state, event.key, event.detail);
    case "follow": return follow(state, event.on);
    default: return state;
  }
}

// The conversation the page shows, or null.
export const shown = (state) => state.conversations.find((c) => c.key === state.selected) || null;
export const latest = (state) => state.records[state.records.length - 1] || null;

function hello(state, snap) {
  const next = {
    ...state, connection: "live", keyRefused: false, started: snap.started, content: snap.content,
    totals: snap.totals, conversations: snap.conversations, flash: null,
  };
  const keep = state.selected && snap.conversations.some((c) => c.key === state.selected);
  const first = snap.conversations[0];
  return keep ? next : select(next, first ? first.key : null, false);
}

function record(state, { conversation, record: r, totals, now }) {
  const others = state.conversations.filter((c) => c.key !== conversation.key);
  const next = { ...state, totals, conversations: [conversation, ...others], flash: conversation.key };
  // Following: a new conversation, or another one once the shown one has been quiet for a while.
  const other = state.selected !== conversation.key;
  const quiet = now - state.lastActivity > FOLLOW_QUIET_MS;
  if (!state.selected || (state.follow && other && (conversation.requests === 1 || quiet))) {
    return { ...select(next, conversation.key, false), records: [r], lastActivity: now };
  }
  if (other) return next;
  return { ...next, records: upsert(state.records, [r]), lastActivity: now };
}

function well(state, w) {
  if (w.key !== state.selected) return state;
  if (state.well && w.seq < state.well.seq) return state;
  return { ...state, well: w, animate: !state.well || state.well.seq !== w.seq };
}

function select(state, key, byUser) {
  const changed = state.selected !== key;
  return {
    ...state,
    selected: key,
    follow: byUser ? false : state.follow,
    records: changed ? [] : state.records,
    well: changed ? null : state.well,
    animate: false,
  };
}

function detail(state, key, found) {
  if (key !== state.selected) return state;
  const newer = found.well && (!state.well || found.well.seq >= state.well.seq);
  const conversations = state.conversations.some((c) => c.key === key)
    ? state.conversations
    : [...state.conversations, summaryOf(found)];
  return {
    ...state,
    conversations,
    records: upsert(found.records, state.records),  // what streamed in meanwhile is newer
    well: newer ? found.well : state.well,
    animate: false,
  };
}

function follow(state, on) {
  const next = { ...state, follow: on };
  const newest = state.conversations[0];
  return on && newest ? select(next, newest.key, false) : next;
}

// `records` with `newer` laid over them (by number), in order.
function upsert(records, newer) {
  const bySeq = new Map(records.map((r) => [r.seq, r]));
  for (const r of newer) bySeq.set(r.seq, r);
  return [...bySeq.values()].sort((a, b) => a.seq - b.seq);
}

function summaryOf(found) {
  const { records, well: _well, ...summary } = found;
  return summary;
}
