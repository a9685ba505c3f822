"""The seam between the pipeline and a bridge: a compacted request that goes to a server speaking
another API than its client's, translated there and its answer translated back.

A bridge is a `proxy.upstream.way.Way`, as the route's own way upstream is: where the request goes
(`path`, `from_root`, `outgoing`), the bytes to send for a plan (`content`), and the client's answer
made from the server's (`relay`), so the pipeline sends and relays without knowing it is there.
`proxy.bridges.choice.Bridges` picks the way once per request from the route's `bridge` name and
the upstream (the route's own way when no bridge applies). The bridges: `ollama` (an OpenAI chat on
Ollama's native API, with the window set) and `gemini` (a Gemini API request on a Chat Completions
server, or on Ollama's native API through both).
"""

from __future__ import annotations

from proxy.upstream.way import Answer, Body, Headers, Learn
from proxy.upstream.way import Way as Bridge

__all__ = ["Answer", "Body", "Bridge", "Headers", "Learn"]
