"""Upstream servers for end-to-end tests: real processes (llama.cpp's llama-server, the proxy itself)."""
