// The event stream, GET /ui/events: read with fetch (an EventSource cannot send the key as a header,
// and a key in the address would land in access logs), parsed frame by frame, reconnecting by itself.

// Complete frames in `buffer` (a frame ends at a blank line), and what is left of it.
export function splitFrames(buffer) {
  const frames = buffer.split("\n\n");
  const rest = frames.pop();
  return { frames, rest };
}

// One frame: its event's name and its data parsed, or null for a comment (": ping").
export function parseFrame(frame) {
  let kind = "message";
  let data = "";
  for (const line of frame.split("\n")) {
    if (line.startsWith("event:")) kind = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  return data ? { kind, data: JSON.parse(data) } : null;
}

const FIRST_RETRY_MS = 500;
const MOST_RETRY_MS = 5000;

// Keep the stream open: `onEvent(kind, data)` for each event, `onStatus(status, detail)` as the
// connection goes ("connecting", "down", "busy": too many pages watch; "key": a key is needed,
// detail true if the one given was refused; the stream is live once its `hello` event arrives). `headers()` gives the request's headers each time.
export function keepStreaming({ url, headers, onEvent, onStatus }) {
  let retry = FIRST_RETRY_MS;
  const again = (status, waitMs) => {
    onStatus(status);
    setTimeout(connect, waitMs);
    retry = Math.min(retry * 2, MOST_RETRY_MS);
  };

  async function connect() {
    onStatus("connecting");
    let response;
    try {
      response = await fetch(url, { headers: headers(), cache: "no-store" });
    } catch (err) {
      return again("down", retry);
    }
    if (response.status === 401) return onStatus("key", headers()["x-api-key"] !== undefined);
    if (response.status === 503) {
      const after = Number(response.headers.get("retry-after")) * 1000;
      return again("busy", Math.max(retry, after || 0));
    }
    if (!response.ok || !response.body) return again("down", retry);
    retry = FIRST_RETRY_MS;  // "live" once its hello arrives
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const { frames, rest } = splitFrames(buffer + decoder.decode(value, { stream: true }));
        buffer = rest;
        for (const frame of frames) {
          const event = parseFrame(frame);
          if (event) onEvent(event.kind, event.data);
        }
      }
    } catch (err) { /* the connection broke: reconnect below */ }
    again("down", retry);
  }

  connect();
  return { reconnect: connect };
}
