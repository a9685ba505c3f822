"""The records the live page reads: one small record per compacted request, sizes only, bounded.

`Records.add` is the pipeline's one call once a request is planned (before a refusal, so refusals
are recorded too); `retried` and `answered` complete the record when the upstream reported an
overflow and when it has answered. The store keeps the last `ui_conversations` conversations, each
with its last `ui_requests` records, and the proxy's totals since start (SENT), also per key when
`COMPACT_API_KEYS` tells clients apart (`owners.py`). When a page is watching (`pages.py`), each
change is offered to the pages that may see it, and the well of the request (its blocks, `well.py`)
is built in a worker thread after the request (`drawing.py`); nobody watching, nothing more is done.

With `COMPACT_CACHE_URL` set, a `RecordLink` (`shared.py`) sends each change to the other replicas,
and it adds theirs here, so every replica's page shows every replica's traffic.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any

from proxy.counting.calibration import Truncation
from proxy.counting.tokens import RequestCounter
from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation
from proxy.live.answers import cached_tokens
from proxy.live.drawing import Well, Wells
from proxy.live.entries import (
    REMOTE_HEADERS,
    ConversationLog,
    Ledger,
    Record,
    RecordLink,
    Remote,
    Totals,
    reply_room,
)
from proxy.live.identity import MAX_NAME_CHARS, conversation_key, owned_key, short_name
from proxy.live.owners import EVERYTHING, Owners, Sight
from proxy.live.pages import Pages
from proxy.live.well import Decided, first_change, first_user_text
from proxy.settings import Settings
from proxy.upstream.overflow import Overflow


class Records:
    """The bounded store of records, and the pages watching it."""

    def __init__(self, settings: Settings, counter_for: Callable[[ChatPlan], RequestCounter]) -> None:
        self.enabled = settings.ui
        self.content = settings.ui_content
        self.max_conversations = settings.ui_conversations
        self.max_requests = settings.ui_requests
        self.refuse_over_line = settings.overflow == "reject"
        self.counter_for = counter_for
        self.conversations: OrderedDict[str, ConversationLog] = OrderedDict()
        self.ledger = Ledger()
        self.tally = self.ledger.tally  # add (+1) or take back (-1) a record's figures
        self.owners = Owners(settings)
        self.pages = Pages(settings.ui_streams)
        self.started = time.time()
        self._seq = 0
        self.wells = Wells(counter_for, self.content)
        self.link: RecordLink | None = None  # the other replicas, when they share the page

    @property
    def watched(self) -> bool:
        """A page watches, here or on another replica: wells are worth drawing."""
        return bool(self.pages.open_pages) or (self.link is not None and self.link.watching)

    @property
    def totals(self) -> Totals:
        """SENT for the whole proxy since it started."""
        return self.ledger.all

    def __len__(self) -> int:
        return sum(len(c.records) for c in self.conversations.values())

    # ------------------------------------------------------------------ the pipeline's calls

    def add(
        self,
        headers: Iterable[tuple[bytes, bytes]],
        fmt: str,
        conversation: Conversation,
        plan: ChatPlan,
        *,
        remote: Remote | None = None,
    ) -> Record | None:
        """Record a planned request (None when the page is off); `remote`: a remote compaction the
        proxy answered, `plan` its compaction of the history."""
        if not self.enabled:
            return None
        request = conversation.request
        model = plan.model if len(plan.model) <= MAX_NAME_CHARS else short_name(plan.model)
        log = self._log_of(headers, request, fmt, model)
        decided = Decided.of(plan.result, len(request.get("messages") or ()))
        shown = remote.window if remote else plan  # the model's own window and line
        record = self._record(log, model, decided, plan, shown)
        if remote:
            record.remote, record.headers = remote.figures(), REMOTE_HEADERS
        log.previous, log.decided = log.decided, decided
        log.records.append(record)
        self.tally(log, record, +1, request=True)
        self._changed(log, record)
        if self.watched:
            self._draw_well(log, record, conversation, plan, shown)
        return record

    def retried(
        self, record: Record | None, overflow: Overflow | None, plan: ChatPlan, conversation: Conversation
    ) -> None:
        """The upstream reported an overflow and the proxy sent `plan` instead."""
        log = self.conversations.get(record.key) if record else None
        if record is None or log is None:
            return
        self.tally(log, record, -1)
        result = plan.result
        record.retried = str(overflow)
        record.after, record.line, record.window = result.tokens_after, plan.budget.limit, plan.window.window
        record.truncated, record.capped, record.dropped = (
            len(result.truncated),
            len(result.capped),
            len(result.dropped),
        )
        record.summarized, record.overflow, record.headers = plan.summarized, result.overflow, plan.headers()
        latest = bool(log.records) and log.records[-1] is record
        if latest:
            log.decided = Decided.of(result, record.messages)
        self.tally(log, record, +1)
        self._changed(log, record)
        if latest and self.watched:
            self._draw_well(log, record, conversation, plan, plan)

    def answered(
        self, record: Record | None, reported: int | None, tail: bytes, truncation: Truncation | None = None
    ) -> None:
        """What the upstream's answer reported: its prompt tokens, its cached ones, a silent cut."""
        log = self.conversations.get(record.key) if record else None
        if record is None or log is None or record.prompt_tokens is not None:
            return
        self.tally(log, record, -1)
        record.prompt_tokens, record.cached_tokens = reported, cached_tokens(tail)
        if truncation is not None:
            record.truncation = {
                "sent": truncation.sent,
                "read": truncation.read,
                "window": truncation.window,
            }
        self.tally(log, record, +1)
        self._changed(log, record)

    def next_seq(self) -> int:
        """The next request's number on this replica's page."""
        self._seq += 1
        return self._seq

    # ------------------------------------------------------------------ what the page reads

    def snapshot(self, sight: Sight = EVERYTHING) -> dict[str, Any]:
        """What a page shows first: the totals and the conversations `sight` may see."""
        return {
            "started": self.started,
            "content": self.content,
            "totals": self.ledger.of(sight).to_json(),
            "limits": {"conversations": self.max_conversations, "requests": self.max_requests},
            "conversations": [
                c.summary() for c in reversed(self.conversations.values()) if sight.sees(c.owner)
            ],
        }

    def conversation(self, key: str, sight: Sight = EVERYTHING) -> dict[str, Any] | None:
        log = self.conversations.get(key)
        if log is None or not sight.sees(log.owner):
            return None
        return {**log.summary(), "records": [r.to_json() for r in log.records], "well": log.well}

    def open_log(
        self, key: str, source: str, fmt: str, model: str, at: float, preview: str | None, owner: str
    ) -> ConversationLog:
        """A new conversation's log, the oldest forgotten past `max_conversations`."""
        log = ConversationLog(key, source, fmt, model, at, preview, owner)
        log.records = deque(maxlen=self.max_requests)
        self.conversations[key] = log
        while len(self.conversations) > self.max_conversations:
            self.conversations.popitem(last=False)
        return log

    # ------------------------------------------------------------------ inside

    def _log_of(
        self, headers: Iterable[tuple[bytes, bytes]], request: dict[str, Any], fmt: str, model: str
    ) -> ConversationLog:
        """The log of the request's conversation (of its key's owner), the newest now; opened when new."""
        key, source = conversation_key(headers, request)
        owner = self.owners.owner_of(headers) if self.owners.keyed else ""
        if owner:
            key = owned_key(owner, key)
        log = self.conversations.get(key)
        if log is None:
            return self.open_log(key, source, fmt, model, time.time(), self._preview(request), owner)
        self.conversations.move_to_end(key)
        log.format, log.model = fmt, model or log.model
        return log

    def _record(
        self, log: ConversationLog, model: str, decided: Decided, plan: ChatPlan, shown: ChatPlan
    ) -> Record:
        """The next record of `log`, a planned request's figures: the window, line and reply room
        `shown` (a remote compaction's are the model's own), the rest its plan's."""
        result = plan.result
        struck, prefix = first_change(log.decided, decided)
        return Record(
            seq=self.next_seq(),
            at=time.time(),
            key=log.key,
            format=log.format,
            model=model,
            messages=decided.messages,
            window=shown.window.window,
            line=shown.budget.limit,
            target=plan.budget.target,
            reply=reply_room(shown),
            fixed=plan.budget.fixed,
            before=result.tokens_before,
            after=result.tokens_after,
            truncated=len(result.truncated),
            capped=len(result.capped),
            dropped=len(result.dropped),
            summarized=plan.summarized,
            protected_from=result.protected_from,
            struck=struck,
            prefix=prefix,
            overflow=result.overflow,
            refused=result.over_window or (result.overflow and self.refuse_over_line),
            counted_by=plan.counted_by,
            headers=plan.headers(),
        )

    def _changed(self, log: ConversationLog, record: Record) -> None:
        """Show a new or changed record to the pages watching, and send it to the other replicas."""
        if self.pages.open_pages:
            self.show(log, record)
        if self.link is not None and not record.origin:
            decided = log.decided or Decided(record.messages)
            opening = {"source": log.source, "first_at": log.first_at, "preview": log.preview}
            self.link.send(
                {
                    "event": "record",
                    "conversation": {**opening, "owner": log.owner},
                    "record": record,  # written out when sent: its latest state, once
                    "decided": [decided.messages, decided.truncated, decided.capped, decided.dropped],
                }
            )

    def _preview(self, request: dict[str, Any]) -> str | None:
        return first_user_text(request) if self.content else None

    def show(self, log: ConversationLog, record: Record) -> None:
        """Offer a record to the pages that may see it, each with the totals it sees."""
        data = {
            "conversation": log.summary(),
            "record": record.to_json(),
            "totals": self.totals.to_json(),
        }
        own = self.ledger.owners.get(log.owner) if log.owner else None
        self.pages.publish(
            "record", log.owner, data, None if own is None else {**data, "totals": own.to_json()}
        )

    def _draw_well(
        self,
        log: ConversationLog,
        record: Record,
        conversation: Conversation,
        plan: ChatPlan,
        shown: ChatPlan,
    ) -> None:
        """The latest request's well, drawn off the loop (`drawing.py`), shown in `shown`'s window and
        line, then offered to the pages and the other replicas."""

        def drawn(well: Well) -> None:
            well["seq"], well["key"] = record.seq, record.key
            well["window"], well["line"] = shown.window.window, shown.budget.limit
            if record.remote is not None:
                well["remote"] = dict(record.remote)
            if log.records and log.records[-1] is record:
                log.well = well
            self.pages.publish("well", log.owner, well)
            if self.link is not None:
                self.link.send({"event": "well", "well": well})

        self.wells.draw(log, record.seq, conversation.request, plan, drawn)
