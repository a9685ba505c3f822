"""The live page's limits, in-process: names kept short, each page's backlog bounded in bytes, the
cap on pages watching, a page that reads nothing dropped, and each key seeing only its own
conversations. The same limits against the real process under attack are
`tests/process/test_redteam_live_page.py`."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from proxy.engine.plan import plan_chat
from proxy.formats import Conversation
from proxy.live.drawing import WELLS_AT_ONCE
from proxy.live.events import EventStream
from proxy.live.identity import MAX_NAME_CHARS, short_name
from proxy.live.owners import EVERYTHING, Owners, Sight
from proxy.live.pages import Page, Pages
from proxy.live.records import Records
from proxy.live.well import PREVIEW_CHARS, PREVIEW_SCAN, _text_start, first_user_text
from proxy.planning.planner import Planner
from tests.support.fakes import make_settings

ALICE, BOB, ADMIN = b"k-alice", b"k-bob", b"k-admin"


def test_a_long_name_is_kept_as_its_start_and_a_digest() -> None:
    assert short_name("qwen3-coder:30b") == "qwen3-coder:30b"
    one, two = short_name("m" * 4_000_000 + "1"), short_name("m" * 4_000_000 + "2")
    assert one != two and len(one) == len(two) == MAX_NAME_CHARS
    assert one.startswith("mmmm") and "…" in one
    assert short_name("\ud800" * 300)  # a lone surrogate neither fails nor passes whole


def test_a_preview_reads_only_the_start_of_a_huge_text() -> None:
    text = "word " * 200_000
    huge = [{"type": "text", "text": text} for _ in range(50)]
    start, more = _text_start(huge)
    assert len(start) <= PREVIEW_SCAN and more
    preview = first_user_text({"messages": [{"role": "user", "content": huge}]})
    assert preview is not None and len(preview) == PREVIEW_CHARS + 1 and preview.endswith("…")
    assert first_user_text({"messages": [{"role": "user", "content": "  short   text "}]}) == "short text"


# ------------------------------------------------------------------ pages


def test_a_page_that_falls_behind_by_its_bound_is_dropped() -> None:
    async def run() -> None:
        page = Page(EVERYTHING, limit=1000)
        page.offer(b"x" * 5000)  # one event however large, when nothing waits
        assert page.size == 5000 and not page.dropped
        assert await page.next(1) == b"x" * 5000
        for _ in range(9):
            page.offer(b"y" * 100)
        assert page.size == 900 and not page.dropped
        page.offer(b"z" * 200)
        assert page.dropped and page.size == 0 and not page.backlog and page.gone.is_set()
        assert await page.next(1) is None
        page.offer(b"late")
        assert not page.backlog

    asyncio.run(run())


def test_at_most_the_cap_of_pages_watch() -> None:
    async def run() -> None:
        pages = Pages(cap=2)
        first, second = pages.open(EVERYTHING), pages.open(EVERYTHING)
        assert first and second and pages.open(EVERYTHING) is None
        pages.close(first)
        assert pages.open(EVERYTHING) is not None and len(pages) == 2

    asyncio.run(run())


def test_an_event_is_written_once_and_offered_to_who_may_see_it() -> None:
    async def run() -> None:
        pages = Pages(cap=10)
        admin, alice, bob = (pages.open(s) for s in (Sight("a", True), Sight("al", False), Sight("b", False)))
        assert admin and alice and bob
        pages.publish("record", "al", {"totals": "all"}, {"totals": "alice's"})
        assert b'"all"' in admin.backlog[0] and b"alice's" in alice.backlog[0] and not bob.backlog
        other = pages.open(Sight("a2", True))
        assert other
        pages.publish("well", "b", {"seq": 1})
        assert admin.backlog[-1] is other.backlog[0] is bob.backlog[0]  # the same bytes

    asyncio.run(run())


class Client:
    """The other end of a page's stream: its writes wait while `reading` is clear (its buffers are
    full), and it hangs up when told."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.reading, self.blocked, self.hung_up = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.reading.set()

    async def send(self, message: Any) -> None:
        self.sent.append(message)
        if not self.reading.is_set():
            self.blocked.set()
            await self.reading.wait()

    async def receive(self) -> dict[str, Any]:
        await self.hung_up.wait()
        return {"type": "http.disconnect"}

    def bodies(self) -> list[bytes]:
        return [m.get("body", b"")[:12] for m in self.sent[1:]]


async def dropped_while_writing(client: Client) -> tuple[Pages, asyncio.Task[None]]:
    """A page's stream whose client stops reading at its first record; the page then dropped."""
    pages = Pages(cap=1)
    page = pages.open(EVERYTHING)
    assert page
    stream = EventStream(pages, page, lambda: b"event: hello\ndata: {}\n\n", {}, grace=0.2)
    task = asyncio.create_task(stream({"type": "http"}, client.receive, client.send))
    await asyncio.sleep(0.05)
    client.reading.clear()
    page.offer(b"event: record\ndata: {}\n\n")
    await asyncio.wait_for(client.blocked.wait(), 5)
    page.offer(b"event: well\ndata: {}\n\n")
    page.drop()
    return pages, task


def test_a_page_that_reads_nothing_is_abandoned_but_keeps_its_place() -> None:
    """The client reads nothing: its write never ends. After the grace it is abandoned, and the
    page's place is given back only when the client hangs up."""

    async def run() -> None:
        client = Client()
        pages, task = await dropped_while_writing(client)
        await asyncio.sleep(0.5)
        assert not task.done() and len(pages) == 1 and pages.open(EVERYTHING) is None
        client.hung_up.set()
        await asyncio.wait_for(task, 5)
        assert len(pages) == 0
        assert client.bodies() == [b"event: hello", b"event: recor"]

    asyncio.run(run())


def test_a_page_that_was_only_slow_sees_its_stream_end_and_reconnects() -> None:
    async def run() -> None:
        client = Client()
        pages, task = await dropped_while_writing(client)
        client.reading.set()  # it reads again, within the grace
        await asyncio.wait_for(task, 5)
        assert len(pages) == 0 and not client.hung_up.is_set()
        assert client.bodies() == [b"event: hello", b"event: recor", b""]
        assert client.sent[-1]["more_body"] is False  # the stream's end: the page reconnects

    asyncio.run(run())


# ------------------------------------------------------------------ keys


def keyed_records(**settings: Any) -> Records:
    s = make_settings(window=3000, api_keys="k-alice,k-bob,k-admin", admin_keys="k-admin", **settings)
    return Records(s, Planner(s).counter_for)


def add(records: Records, key: bytes, text: str) -> None:
    s = make_settings(window=3000)
    planner = Planner(s)
    messages = [{"role": "user", "content": text}]
    body = {"model": "m", "messages": messages}
    plan = plan_chat(body, messages, s.window_for("m"), planner.counter("chars4"), planner.policy)
    records.add([(b"authorization", b"Bearer " + key)], "chat", Conversation(body), replace(plan))


def test_each_key_sees_its_own_conversations_and_an_admin_key_all() -> None:
    records = keyed_records(ui_content=True)
    add(records, ALICE, "hello")  # the same opening: still two conversations
    add(records, BOB, "hello")
    add(records, BOB, "hello")
    owners = Owners(make_settings(api_keys="k-alice,k-bob,k-admin", admin_keys="k-admin"))
    sight = {key: owners.sight_of([(b"x-api-key", key)]) for key in (ALICE, BOB, ADMIN)}
    snaps = {key: records.snapshot(s) for key, s in sight.items()}
    assert [len(snaps[k]["conversations"]) for k in (ALICE, BOB, ADMIN)] == [1, 1, 2]
    assert [snaps[k]["totals"]["requests"] for k in (ALICE, BOB, ADMIN)] == [1, 2, 3]
    alices = snaps[ALICE]["conversations"][0]["key"]
    assert records.conversation(alices, sight[BOB]) is None
    assert records.conversation(alices, sight[ADMIN]) is not None
    assert "owner" not in json.dumps(snaps[ADMIN])  # the page never sees whose key it was


def test_admin_keys_must_be_api_keys() -> None:
    with pytest.raises(ValidationError, match="COMPACT_ADMIN_KEYS"):
        make_settings(api_keys="k1", admin_keys="k2")
    with pytest.raises(ValidationError, match="COMPACT_ADMIN_KEYS"):
        make_settings(admin_keys="k2")
    assert Owners(make_settings()).sight_of([(b"x-api-key", b"anything")]) == EVERYTHING


def test_under_a_flood_at_most_a_few_wells_are_built_at_once() -> None:
    """Each well being built holds its request: past `WELLS_AT_ONCE`, a request gets its record only."""

    async def run() -> None:
        records = keyed_records()
        page = records.pages.open(EVERYTHING)
        assert page
        for n in range(3 * WELLS_AT_ONCE):
            add(records, ALICE, f"request {n}")
        assert len(records.wells.under_way) == WELLS_AT_ONCE
        await asyncio.gather(*records.wells.under_way)
        kinds = [chunk.split(b"\n")[0] for chunk in page.backlog]
        assert kinds.count(b"event: record") == 3 * WELLS_AT_ONCE
        assert kinds.count(b"event: well") == WELLS_AT_ONCE

    asyncio.run(run())
