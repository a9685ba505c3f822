// Headroom's own client (npm headroom-ai 0.37) against the proxy's /v1/compress and /v1/retrieve:
// node headroom_client.mjs BASE_URL API_KEY CHAT.json  ->  one JSON line with what it returned.
// The client is made as Headroom documents it, without its fallback, so an error is an error.
import { readFileSync } from "node:fs";
import { HeadroomClient, HeadroomAuthError } from "headroom-ai";

const [baseUrl, apiKey, path] = process.argv.slice(2);
const { model, messages, tokenBudget } = JSON.parse(readFileSync(path, "utf8"));
const client = new HeadroomClient({ baseUrl, apiKey, fallback: false, retries: 0, timeout: 60000 });
const result = await client.compress(messages, { model, tokenBudget });
const retrieved = result.ccrHashes.length ? await client.retrieve(result.ccrHashes[0]) : null;
let wrongKey = null;
try {
  await new HeadroomClient({ baseUrl, apiKey: "not-a-key", fallback: false, retries: 0 }).compress(messages, { model });
} catch (error) {
  wrongKey = error instanceof HeadroomAuthError ? "HeadroomAuthError" : String(error);
}
console.log(JSON.stringify({ result, retrieved, wrongKey }));
