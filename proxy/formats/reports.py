"""What a format may add to the upstream's answer about what the proxy did for the request in the
server's place (Anthropic's applied context edits). An optional part of a format: the pipeline asks
a format that has `context_report`, and every other format's answers pass as they came.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from proxy.engine.plan import Body


class AnswerReport(Protocol):
    """Rewrites an answer to carry a report: a whole body, or an SSE stream event by event."""

    def into_body(self, body: bytes) -> bytes: ...

    def into_stream(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]: ...


class ReportsContextEdits(Protocol):
    def context_report(self, original: Body, edited: Body) -> AnswerReport | None:
        """What the answer must report of the context edits that turned `original` into `edited`
        (`context_edits` made it), or None when there is nothing to report."""
        ...
