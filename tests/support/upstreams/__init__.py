"""Upstream servers for tests and benchmarks: fakes, each behaving as the real server it stands for
(and saying which), and real processes (llama.cpp's llama-server, the proxy itself)."""
