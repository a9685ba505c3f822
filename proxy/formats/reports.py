"""What a format may add to the upstream's answer about what the proxy did for the request in the
server's place (Anthropic's applied context edits): a format's `context_report` makes one, and the
route's own way (`proxy.ways.direct`) writes it into the answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol


class AnswerReport(Protocol):
    """Rewrites an answer to carry a report: a whole body, or an SSE stream event by event."""

    def into_body(self, body: bytes) -> bytes: ...

    def into_stream(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]: ...
