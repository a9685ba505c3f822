// Sends chat requests through the proxy with the official Node `openai` SDK, one after another on
// its keep-alive connection, and reports what happened to each, for tests/process/test_real_sockets.py.
//
//   node long_chats.mjs BASE_URL REQUESTS.json
//
// REQUESTS.json: [{"tag": "...", "body": {chat completion params}}, ...]; each request carries
// `x-fault: ok; tag=TAG` so the test finds what the upstream received. Prints one JSON array:
// [{"tag", "status", "sentSha256", "content", "headers", "date", "server"}] (headers: the
// x-compaction-* ones; fetch joins repeated headers with ", ", so date and server show whether one
// came), or {"tag", "error"} for a request that failed.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [baseURL, requestsPath] = process.argv.slice(2);
const requests = JSON.parse(readFileSync(requestsPath, "utf8"));

let lastBody = null;
const client = new OpenAI({
  baseURL,
  apiKey: "sk-test",
  maxRetries: 0,
  timeout: 60_000,
  // The body exactly as the SDK serialised it, to compare with what the upstream received.
  fetch: (url, init) => {
    lastBody = init?.body ?? null;
    return fetch(url, init);
  },
});

const results = [];
for (const { tag, body } of requests) {
  try {
    const { data, response } = await client.chat.completions
      .create(body, { headers: { "x-fault": `ok; tag=${tag}` } })
      .withResponse();
    let content = "";
    if (body.stream) {
      for await (const chunk of data) content += chunk.choices[0]?.delta?.content ?? "";
    } else {
      content = data.choices[0].message.content;
    }
    const headers = Object.fromEntries(
      [...response.headers.entries()].filter(([name]) => name.startsWith("x-compaction-")),
    );
    const sentSha256 = createHash("sha256").update(lastBody).digest("hex");
    const [date, server] = [response.headers.get("date"), response.headers.get("server")];
    results.push({ tag, status: response.status, sentSha256, content, headers, date, server });
  } catch (error) {
    results.push({ tag, error: `${error.status ?? ""} ${error.message}` });
  }
}
console.log(JSON.stringify(results));
