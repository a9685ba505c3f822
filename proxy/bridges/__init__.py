"""Bridges to servers that speak another API than their clients do: Ollama's native chat."""
