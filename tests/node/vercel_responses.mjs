// The Vercel AI SDK's default OpenAI provider (npm `ai` 6 + `@ai-sdk/openai` 3): `createOpenAI({baseURL})("model")`
// posts to /v1/responses. Reads {system, messages} (AI SDK model messages) on stdin, answers with
// generateText, or streamText when the second argument is "stream", and prints {text} as JSON.
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
  if (mode === "stream") {
    for await (const part of streamText(options).fullStream) {
      if (part.type === "error") throw part.error;
      if (part.type === "text-delta") text += part.text;
    }
  } else {
    text = (await generateText(options)).text;
  }
  console.log(JSON.stringify({ text }));
} catch (error) {
  console.error(String(error?.message ?? error));
  process.exit(1);
}
