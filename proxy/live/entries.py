"""What the live page's store keeps: a record per compacted request, a log per conversation, and the
totals (SENT: the proxy's, and each key's). Sizes and decisions only, never message text (but the
opening's preview, when `COMPACT_UI_CONTENT` asks for it)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from proxy.counting.cache import ModelTable
from proxy.engine.plan import ChatPlan
from proxy.live.owners import Sight
from proxy.live.well import Decided

MAX_OWNERS = 1024  # keys whose totals are kept (configured keys, and other replicas')
REMOTE_HEADERS = {"x-compaction-remote": "answered"}  # what the client of a remote compaction is told


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


@dataclass(frozen=True, slots=True)
class Remote:
    """A remote compaction the proxy answered (Codex's `compaction_trigger`): the plan for the model's
    own window (the well and the timeline are drawn in it), the history's items, and how many of them
    the sealed item stands for once compacted (the rest Codex keeps and sends itself)."""

    window: ChatPlan
    items: int
    sealed: int

    def figures(self) -> dict[str, int]:
        return {"items": self.items, "sealed": self.sealed}


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
    remote: dict[str, int] | None = None  # a remote compaction answered: items before, items sealed
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
        if self.remote is not None:
            data["remote"] = dict(self.remote)
        return data


@dataclass(slots=True)
class ConversationLog:
    key: str
    source: str  # the session header that names it, or `hash`
    format: str
    model: str
    first_at: float
    preview: str | None = None  # the first user request's start, with COMPACT_UI_CONTENT
    owner: str = ""  # the key that sent it, as `owners.owner_id` has it ("" without keys)
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


class RecordLink(Protocol):
    """Where the store sends its changes for the other replicas, and whether a page watches on any."""

    watching: bool

    def send(self, event: dict[str, Any]) -> None: ...


def reply_room(plan: ChatPlan) -> int:
    """The room the reply gets at the top of the window: its limit (as clamped), else the reserve."""
    return max(0, min(plan.max_tokens or plan.reply or plan.window.reply_reserve, plan.window.window))


class Ledger:
    """SENT since start: the proxy's, and each key's (a page sees its key's)."""

    def __init__(self) -> None:
        self.all = Totals()
        self.owners: ModelTable[Totals] = ModelTable(MAX_OWNERS)

    def of(self, sight: Sight) -> Totals:
        return self.all if sight.everything else self.owners.get(sight.owner) or Totals()

    def tally(self, log: ConversationLog, record: Record, sign: int, *, request: bool = False) -> None:
        """Add (`sign` 1) or take back (-1) a record's figures; `request`: count it as a request. A
        remote compaction went nowhere upstream: it counts as a request and a compaction only."""
        each = (self.all, log.totals) if not log.owner else (self.all, log.totals, self._mine(log.owner))
        if record.remote is not None:
            for totals in each:
                totals.requests += 1 if request else 0
                totals.compacted += sign
            return
        for totals in each:
            if request:
                totals.requests += 1
            totals.compacted += sign if record.headers else 0
            totals.sent += sign * record.before
            totals.forwarded += sign * record.after
            totals.saved += sign * (record.before - record.after)
            if record.prompt_tokens is not None:
                totals.reported += sign * record.prompt_tokens
                totals.cached += sign * (record.cached_tokens or 0)
                totals.answers += sign

    def _mine(self, owner: str) -> Totals:
        mine = self.owners.get(owner)
        if mine is None:
            mine = self.owners[owner] = Totals()
        return mine


_TOTALS = tuple(f.name for f in fields(Totals))
_RECORD = tuple(f.name for f in fields(Record))
