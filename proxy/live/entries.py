"""What the live page's store keeps: a record per compacted request, a log per conversation, and the
totals (SENT). Sizes and decisions only, never message text (but the opening's preview, when
`COMPACT_UI_CONTENT` asks for it)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any

from proxy.live.well import Decided


@dataclass(slots=True)
class Totals:
    """SENT: what clients sent, what went upstream, what compaction saved, what the upstream read."""

    requests: int = 0
    compacted: int = 0
    sent: int = 0
    forwarded: int = 0
    saved: int = 0
    reported: int = 0  # prompt tokens the upstream reported, over the answers that reported them
    cached: int = 0
    answers: int = 0  # answers that reported their prompt size

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _TOTALS}


@dataclass(slots=True)
class Record:
    """One compacted request, as the page shows it (x-compaction-* figures in `headers`)."""

    seq: int
    at: float
    key: str
    format: str
    model: str
    messages: int
    window: int
    line: int
    target: int
    reply: int
    fixed: int
    before: int
    after: int
    truncated: int
    capped: int
    dropped: int
    summarized: int
    protected_from: int
    struck: int  # messages changed on this request that were not on the one before
    prefix: int  # leading messages forwarded as the request before forwarded them
    overflow: bool
    refused: bool
    counted_by: str
    headers: dict[str, str]
    retried: str | None = None  # the overflow the upstream reported, when the proxy retried
    truncation: dict[str, int] | None = None  # the upstream cut the prompt silently
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    origin: str = ""  # the replica that served it, when another one did (`shared.py`)
    origin_seq: int = 0  # its number there

    def to_json(self) -> dict[str, Any]:
        """The fields, with dicts of their own (dataclasses' `asdict` took 36 µs of every request)."""
        data = {name: getattr(self, name) for name in _RECORD}
        data["headers"] = dict(self.headers)
        if self.truncation is not None:
            data["truncation"] = dict(self.truncation)
        return data


@dataclass(slots=True)
class ConversationLog:
    key: str
    source: str  # the session header that names it, or `hash`
    format: str
    model: str
    first_at: float
    preview: str | None = None  # the first user request's start, with COMPACT_UI_CONTENT
    records: deque[Record] = field(default_factory=deque)
    totals: Totals = field(default_factory=Totals)
    decided: Decided | None = None  # the latest request's decisions, to tell what is new
    previous: Decided | None = None  # those of the request before it
    well: dict[str, Any] | None = None  # the latest well built (sizes only)

    def summary(self) -> dict[str, Any]:
        last = self.records[-1] if self.records else None
        return {
            "key": self.key,
            "source": self.source,
            "format": self.format,
            "model": self.model,
            "first_at": self.first_at,
            "preview": self.preview,
            "requests": self.totals.requests,
            "totals": self.totals.to_json(),
            "last": last.to_json() if last else None,
        }


_TOTALS = tuple(f.name for f in fields(Totals))
_RECORD = tuple(f.name for f in fields(Record))
