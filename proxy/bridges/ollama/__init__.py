"""The Ollama bridge: an OpenAI chat sent to Ollama's native `/api/chat` (`bridge`), its answer
relayed back as OpenAI's (`relay`), and knowing an Ollama upstream and its windows (`upstream`).
"""
