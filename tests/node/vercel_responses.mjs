// The Vercel AI SDK's default OpenAI provider (npm `ai` 6 + `@ai-sdk/openai` 3): `createOpenAI({baseURL})("model")`
// posts to /v1/responses. Reads {system, messages} (AI SDK model messages) on stdin, answers with
// generateText, or streamText when the second argument is "stream", and prints {text, headers} as JSON
// (the answer's x-compaction-* headers, as the SDK's `response.headers` shows them).
// Exits 1 with the error's message when the call fails.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";

const [baseURL, mode] = process.argv.slice(2);
let input = "";
for await (const chunk of process.stdin) input += chunk;
const { system, messages } = JSON.parse(input);
const model = createOpenAI({ baseURL, apiKey: "sk-test" })("small");
const options = { model, system, messages, maxOutputTokens: 300, maxRetries: 0 };

try {
  let text = "";
  let response;
  if (mode === "stream") {
    const result = streamText(options);
    for await (const part of result.fullStream) {
      if (part.type === "error") throw part.error;
      if (part.type === "text-delta") text += part.text;
    }
    response = await result.response;
  } else {
    const result = await generateText(options);
    text = result.text;
    response = result.response;
  }
  const headers = Object.fromEntries(
    Object.entries(response.headers ?? {}).filter(([name]) => name.startsWith("x-compaction-")),
  );
  console.log(JSON.stringify({ text, headers }));
} catch (error) {
  console.error(String(error?.message ?? error));
  process.exit(1);
}
