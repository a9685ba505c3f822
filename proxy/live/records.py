"""The records the live page reads: one small record per compacted request, sizes only, bounded.

`Records.add` is the pipeline's one call once a request is planned (before a refusal, so refusals
are recorded too); `retried` and `answered` complete the record when the upstream reported an
overflow and when it has answered. The store keeps the last `ui_conversations` conversations, each
with its last `ui_requests` records, and the proxy's totals since start (SENT). When a page is
watching, each change is published to it as an event, and the well of the request (its blocks,
`well.py`) is built in a task after the request; nobody watching, nothing more is done.

With `COMPACT_CACHE_URL` set, a `RecordLink` (`shared.py`) sends each change to the other replicas,
and it adds theirs here, so every replica's page shows every replica's traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from proxy.counting.calibration import Truncation
from proxy.counting.tokens import RequestCounter
from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation
from proxy.live.answers import cached_tokens
from proxy.live.entries import ConversationLog, Record, Totals
from proxy.live.identity import conversation_key
from proxy.live.well import Decided, build_well, first_change, first_user_text
from proxy.settings import Settings
from proxy.upstream.overflow import Overflow

logger = logging.getLogger("proxy")

EVENT_QUEUE = 256  # events a slow page may fall behind by before it is dropped (it reconnects)
OFFLOAD_MESSAGES = 400  # a well of more messages is built in a worker thread


class RecordLink(Protocol):
    """Where the store sends its changes for the other replicas, and whether a page watches on any."""

    watching: bool

    def send(self, event: dict[str, Any]) -> None: ...


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
        self.totals = Totals()
        self.started = time.time()
        self.watchers: set[asyncio.Queue[tuple[str, dict[str, Any]]]] = set()
        self._seq = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self.link: RecordLink | None = None  # the other replicas, when they share the page

    @property
    def watched(self) -> bool:
        """A page watches, here or on another replica: wells are worth drawing."""
        return bool(self.watchers) or (self.link is not None and self.link.watching)

    def __len__(self) -> int:
        return sum(len(c.records) for c in self.conversations.values())

    # ------------------------------------------------------------------ the pipeline's calls

    def add(
        self, headers: Iterable[tuple[bytes, bytes]], fmt: str, conversation: Conversation, plan: ChatPlan
    ) -> Record | None:
        """Record a planned request (None when the page is off)."""
        if not self.enabled:
            return None
        request = conversation.request
        key, source = conversation_key(headers, request)
        log = self.conversations.get(key)
        if log is None:
            log = ConversationLog(key, source, fmt, plan.model, time.time(), self._preview(request))
            log.records = deque(maxlen=self.max_requests)
            self.conversations[key] = log
            while len(self.conversations) > self.max_conversations:
                self.conversations.popitem(last=False)
        else:
            self.conversations.move_to_end(key)
            log.format, log.model = fmt, plan.model or log.model
        seq = self.next_seq()
        result = plan.result
        decided = Decided.of(result, len(request.get("messages") or ()))
        struck, prefix = first_change(log.decided, decided)
        record = Record(
            seq=seq,
            at=time.time(),
            key=key,
            format=fmt,
            model=plan.model,
            messages=decided.messages,
            window=plan.window.window,
            line=plan.budget.limit,
            target=plan.budget.target,
            reply=_reply_room(plan),
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
        log.previous, log.decided = log.decided, decided
        log.records.append(record)
        self.tally(log, record, +1, request=True)
        self._changed(log, record)
        if self.watched:
            self._build_well(log, record, conversation, plan)
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
            self._build_well(log, record, conversation, plan)

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

    def snapshot(self) -> dict[str, Any]:
        return {
            "started": self.started,
            "content": self.content,
            "totals": self.totals.to_json(),
            "limits": {"conversations": self.max_conversations, "requests": self.max_requests},
            "conversations": [c.summary() for c in reversed(self.conversations.values())],
        }

    def conversation(self, key: str) -> dict[str, Any] | None:
        log = self.conversations.get(key)
        if log is None:
            return None
        return {**log.summary(), "records": [r.to_json() for r in log.records], "well": log.well}

    def watch(self) -> asyncio.Queue[tuple[str, dict[str, Any]]]:
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(EVENT_QUEUE)
        self.watchers.add(queue)
        return queue

    def unwatch(self, queue: asyncio.Queue[tuple[str, dict[str, Any]]]) -> None:
        self.watchers.discard(queue)

    # ------------------------------------------------------------------ inside

    def tally(self, log: ConversationLog, record: Record, sign: int, *, request: bool = False) -> None:
        """Add (`sign` 1) or take back (-1) a record's figures; `request`: count it as a request."""
        for totals in (self.totals, log.totals):
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

    def _changed(self, log: ConversationLog, record: Record) -> None:
        """Show a new or changed record to the pages watching, and send it to the other replicas."""
        if self.watchers:
            self.show(log, record)
        if self.link is not None and not record.origin:
            decided = log.decided or Decided(record.messages)
            self.link.send(
                {
                    "event": "record",
                    "conversation": {"source": log.source, "first_at": log.first_at, "preview": log.preview},
                    "record": record,  # written out when sent: its latest state, once
                    "decided": [decided.messages, decided.truncated, decided.capped, decided.dropped],
                }
            )

    def _preview(self, request: dict[str, Any]) -> str | None:
        return first_user_text(request) if self.content else None

    def publish(self, kind: str, data: dict[str, Any]) -> None:
        for queue in list(self.watchers):
            try:
                queue.put_nowait((kind, data))
            except asyncio.QueueFull:  # too far behind: it is dropped, and its page reconnects
                self.watchers.discard(queue)
                with contextlib.suppress(asyncio.QueueFull):
                    queue.get_nowait()
                    queue.put_nowait(("close", {}))

    def show(self, log: ConversationLog, record: Record) -> None:
        self.publish(
            "record",
            {"conversation": log.summary(), "record": record.to_json(), "totals": self.totals.to_json()},
        )

    def _build_well(
        self, log: ConversationLog, record: Record, conversation: Conversation, plan: ChatPlan
    ) -> None:
        """The latest request's blocks, counted after the request has gone on (in a worker thread
        when it is long)."""
        decided, previous = log.decided, log.previous
        assert decided is not None
        args = (conversation.request, plan, self.counter_for(plan), decided, previous, self.content)

        async def build() -> None:
            try:
                if decided.messages > OFFLOAD_MESSAGES:
                    well = await asyncio.to_thread(build_well, *args)
                else:
                    await asyncio.sleep(0)  # after the request's own step
                    well = build_well(*args)
            except Exception:  # the page's drawing must never disturb the proxy: logged, left out
                logger.exception("the live page could not draw request %d", record.seq)
                return
            well["seq"], well["key"] = record.seq, record.key
            if log.records and log.records[-1] is record:
                log.well = well
            self.publish("well", well)
            if self.link is not None:
                self.link.send({"event": "well", "well": well})

        task = asyncio.get_running_loop().create_task(build())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _reply_room(plan: ChatPlan) -> int:
    """The room the reply gets at the top of the window: its limit (as clamped), else the reserve."""
    return max(0, min(plan.max_tokens or plan.reply or plan.window.reply_reserve, plan.window.window))
