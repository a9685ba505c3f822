"""The Gemini bridge: a Gemini API request sent to a Chat Completions server (llama.cpp, vLLM,
Ollama's `/v1`, any OpenAI-compatible one) as a chat (`chat_request`), and the chat answer, whole or
streamed, translated back into Gemini's (`gemini_answer`, relayed by `relay`); `bridge` is the seam.
For Ollama the chat goes on to its native API through the Ollama bridge (`over_ollama`).
"""
