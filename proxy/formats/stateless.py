"""The members of `WireFormat` (`base.py`) that every format whose server keeps nothing of a
conversation answers alike (Chat Completions and Ollama's chat, Gemini)."""

from __future__ import annotations

from proxy.engine.plan import Body


class StatelessServer:
    """The context members of `WireFormat` for an API whose server keeps nothing of a conversation
    (every request carries all of it): nothing for the server to manage, no context edits for the
    proxy to apply in its place or to report, no refusal about state kept elsewhere to repair."""

    def server_manages_context(self, body: Body, *, upstream_host: str, upstream_kind: str) -> bool:
        return False

    def context_edits(self, body: Body) -> Body:
        return body

    def context_report(self, original: Body, edited: Body) -> None:
        return None

    def resend_after(self, sent: bytes, status: int, error: bytes) -> None:
        return None
