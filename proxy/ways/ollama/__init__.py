"""The Ollama bridge: an OpenAI chat sent to Ollama's native `/api/chat` (`bridge`, the seam; the
request translated by `native_request`), its answer translated (`openai_answer`) and relayed back as
OpenAI's (`relay`), and knowing an Ollama upstream and its windows (`detection`).
"""
