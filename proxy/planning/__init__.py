"""Deciding a chat request: its window, its count (what the server counts), its plan, and what the
upstream's answer reports back. Between the upstream's parts (probes, offload) and the server's
request steps: it imports the former and is imported by the latter."""
