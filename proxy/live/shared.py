"""The live page shared by replicas (`COMPACT_CACHE_URL`): each page shows every replica's traffic.

Each change a replica's store makes (a request recorded, retried, answered; a well drawn) is one
message on a Redis channel, and the last ones stay in a capped Redis list, so a replica that starts
later, or reconnects after an outage, replays what it missed. What arrives is added to the local
store under a local number (`take`). A page watching on any replica keeps a short-lived flag
in Redis; while it is up, every replica draws the wells of its own requests and sends them too.

The request path only queues the change (the latest per record); a background task sends what
queued up, at most every `FLUSH_EVERY` seconds, as one message, so the cost per request stays small
under load on the sender and on each replica that receives. Redis down: each page shows its own
replica's traffic (one warning, the shared state's), and catches up once it is back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from typing import Any

import orjson

from proxy.live.entries import ConversationLog, Record
from proxy.live.identity import short_name
from proxy.live.records import Records
from proxy.live.well import Decided
from proxy.sharing.link import PREFIX, SharedState, stop

log = logging.getLogger("proxy.shared")

CHANNEL = PREFIX + "ui"
BACKLOG = PREFIX + "ui:log"  # the last messages, newest first
WATCHING = PREFIX + "ui:watching"
OUTBOX = 2048  # changes kept while Redis is away (the oldest go first)
FLUSH_EVERY = 0.1  # seconds between sends: what queued meanwhile goes as one message
WATCH_TTL = 5  # seconds the watching flag outlives the last page that raised it
WATCH_EVERY = 1.0  # seconds between looks at the flag (one EXISTS: cheap)


class SharedRecords:
    """The `RecordLink` of a store to the other replicas' stores, over the shared state's Redis."""

    def __init__(self, state: SharedState, records: Records) -> None:
        self.state, self.records = state, records
        self.backlog = min(records.max_conversations * records.max_requests, 10_000)
        self.watching = False  # a page watches on another replica
        self._outbox: dict[Hashable, dict[str, Any]] = {}  # the latest change per record (or well)
        self._prefix = self.state.origin.encode() + b" "  # each message and backlog entry starts so
        self._newest: dict[str, int] = {}  # the highest number taken from each other replica
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        records.link = self
        state.attach(self)

    def send(self, event: dict[str, Any]) -> None:
        """Queue one change for the others (no I/O here). A record's event holds the `Record` itself,
        written out when sent: a request recorded then answered is serialised once, as it ends."""
        kind = event["event"]
        key = (kind, event["well"]["seq"] if kind == "well" else event["record"].seq)
        # A record changed again keeps its place: it stays ahead of its well, which the others need
        # it for.
        self._outbox[key] = event
        if len(self._outbox) > OUTBOX:
            del self._outbox[next(iter(self._outbox))]
        self._wake.set()

    async def start(self) -> None:
        self._wake = asyncio.Event()  # bound to the running loop
        if self._outbox:
            self._wake.set()
        self._tasks = [asyncio.create_task(task()) for task in (self._write, self._read, self._watch)]

    async def close(self) -> None:
        await stop(self._tasks, self._flush)

    async def _flush(self) -> None:
        sending, self._outbox = self._outbox, {}
        if not sending:
            return
        try:
            events = [orjson.dumps(event) for event in sending.values()]
            pipe = self.state.redis.pipeline(transaction=False)
            pipe.publish(CHANNEL, self._prefix + b"[" + b",".join(events) + b"]")
            pipe.lpush(BACKLOG, *(self._prefix + event for event in events))
            pipe.ltrim(BACKLOG, 0, self.backlog - 1)
            pipe.expire(BACKLOG, self.state.ttl)
            await pipe.execute()
        except Exception:
            for key, event in sending.items():  # what was not sent, unless newer news came
                self._outbox.setdefault(key, event)
            while len(self._outbox) > OUTBOX:
                del self._outbox[next(iter(self._outbox))]
            raise

    async def _write(self) -> None:
        await self.state.write_behind(self._wake, self._flush, FLUSH_EVERY)

    async def _read(self) -> None:
        await self.state.listen(CHANNEL, self._catch_up, self._take)

    async def _catch_up(self) -> None:
        """What was missed, from the backlog, oldest first (known records updated)."""
        for entry in reversed(await self.state.redis.lrange(BACKLOG, 0, -1)):
            self._take(entry, single=True)

    async def _watch(self) -> None:
        """Raise the flag while a page watches here; look whether one watches anywhere."""
        while True:
            try:
                if self.records.pages:
                    await self.state.redis.set(WATCHING, self.state.origin, ex=WATCH_TTL)
                self.watching = bool(await self.state.redis.exists(WATCHING))
            except asyncio.CancelledError:
                raise
            except Exception:
                self.watching = False  # the reader and writer warn; wells are drawn for local pages
            await asyncio.sleep(WATCH_EVERY)

    def _take(self, data: Any, *, single: bool = False) -> None:
        """Apply a message (a list of changes) or a backlog entry (one), unless this replica sent it."""
        try:
            if data.startswith(self._prefix):
                return
            origin, _, body = data.partition(b" ")
            for event in [orjson.loads(body)] if single else orjson.loads(body):
                take(self.records, {**event, "origin": origin.decode()}, self._newest)
        except Exception as exc:  # another version's or a broken message: left out
            log.debug("ignored a shared record: %s", exc)


def take(records: Records, event: dict[str, Any], newest: dict[str, int]) -> None:
    """Add to `records` what another replica recorded (`Records.link`'s events): a record, new or
    changed, kept under a local number; or the well of its latest one. `newest` holds the highest
    number taken from each replica: a record numbered above it is new, found without a search."""
    origin = event["origin"]
    if event["event"] == "well":
        well = event["well"]
        found = records.conversations.get(well["key"])
        record = found and _find(found, origin, well["seq"])
        if found and record:
            well = {**well, "seq": record.seq}
            if found.records[-1] is record:
                found.well = well
            records.pages.publish("well", found.owner, well)
        return
    fields, opening = dict(event["record"]), event["conversation"]
    fields["model"] = short_name(str(fields["model"]))  # as this replica keeps names, whoever sent it
    conversation = records.conversations.get(fields["key"])
    if conversation is None:
        preview = opening["preview"] if records.content else None
        owner = str(opening.get("owner") or "")
        conversation = records.open_log(
            fields["key"],
            opening["source"],
            fields["format"],
            fields["model"],
            opening["first_at"],
            preview,
            owner,
        )
    else:
        records.conversations.move_to_end(conversation.key)
        conversation.format, conversation.model = fields["format"], fields["model"] or conversation.model
    fields.update(origin=origin, origin_seq=fields["seq"])
    known = fields["seq"] <= newest.get(origin, 0)
    newest[origin] = max(fields["seq"], newest.get(origin, 0))
    record = _find(conversation, origin, fields["seq"]) if known else None
    if record is None:
        record = Record(**{**fields, "seq": records.next_seq()})
        conversation.records.append(record)
        records.tally(conversation, record, +1, request=True)
        conversation.previous, conversation.decided = conversation.decided, Decided(*event["decided"])
    else:
        records.tally(conversation, record, -1)
        for name, value in fields.items():
            if name != "seq":
                setattr(record, name, value)
        records.tally(conversation, record, +1)
    if records.pages:
        records.show(conversation, record)


def _find(conversation: ConversationLog, origin: str, seq: int) -> Record | None:
    """The record another replica numbered `seq` (the latest are looked at first)."""
    return next(
        (r for r in reversed(conversation.records) if r.origin == origin and r.origin_seq == seq), None
    )
