"""The live page's records, in-process: who a request belongs to, what a record says, the bounds,
the well's blocks against the engine's report, the event stream's first events, and the page's
routes (off, behind a key, no text unless asked). The page in a real browser is
`tests/browser/test_live_page_browser.py`."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, replace
from typing import Any

import httpx
import orjson
import pytest

from proxy.engine.plan import plan_chat
from proxy.formats import Conversation
from proxy.live.answers import cached_tokens
from proxy.live.identity import conversation_key
from proxy.live.owners import EVERYTHING
from proxy.live.records import Records
from proxy.live.shared import take
from proxy.live.well import Decided, build_well
from proxy.planning.planner import Planner
from tests.support.fakes import RecordingUpstream, completion, make_settings, proxy_client
from tests.support.format_chats import as_responses
from tests.support.live_page import as_chat, coding_loop, requests_of
from tests.support.upstreams.chats import support_chat

CHAT = "/v1/chat/completions"
SECRET = "order-4471"


def planned(messages: list[dict[str, Any]], window: int = 3000, **settings: Any) -> tuple[Any, Any, Records]:
    s = make_settings(window=window, **settings)
    planner = Planner(s)
    body = {"model": "m", "messages": messages}
    plan = plan_chat(body, messages, s.window_for("m"), planner.counter("chars4"), planner.policy)
    plan = replace(plan, counted_by="chars4")  # as the planner says which counter it used
    return Conversation(body), plan, Records(s, planner.counter_for)


# ------------------------------------------------------------------ identity


def test_a_session_header_names_the_conversation() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    claude = conversation_key([(b"X-Claude-Code-Session-Id", b"abc")], body)
    codex = conversation_key([(b"session-id", b"abc")], body)  # Codex 0.171 (session_id before)
    assert claude[1] == "x-claude-code-session-id" and codex[1] == "session-id"
    assert claude[0] != codex[0]
    other = {"model": "m", "messages": [{"role": "user", "content": "something else"}]}
    assert (
        conversation_key([(b"x-session-affinity", b"s1")], other)[0]
        == conversation_key([(b"x-session-affinity", b"s1")], body)[0]
    )


def test_without_one_the_opening_names_it_as_the_history_grows() -> None:
    chats = requests_of(coding_loop(6))
    keys = {conversation_key([], {"model": "m", "messages": m}) for m in chats}
    assert len(keys) == 1 and next(iter(keys))[1] == "hash"
    other_system = [{**chats[0][0], "content": "another agent"}, *chats[0][1:]]
    assert conversation_key([], {"model": "m", "messages": other_system}) not in keys
    assert conversation_key([], {"model": "n", "messages": chats[0]}) not in keys


# ------------------------------------------------------------------ records


def test_a_record_says_what_the_hammer_did_and_what_is_new() -> None:
    chats = requests_of(coding_loop(16))
    records = None
    seen: list[Any] = []
    for messages in chats:
        conversation, plan, fresh = planned(messages)
        records = records or fresh
        record = records.add([], "chat", conversation, plan)
        assert record is not None
        seen.append((record, plan))
    compacted = [(r, p) for r, p in seen if p.result.changed]
    assert compacted, "the loop must cross the line"
    first, plan = compacted[0]
    assert first.struck == len(plan.result.truncated) + len(plan.result.capped) + len(plan.result.dropped)
    assert first.headers == plan.headers() and first.before == plan.result.tokens_before
    assert first.line == plan.budget.limit and first.window == 3000
    # A request that changes nothing old keeps the whole prefix of the one before.
    again = Records(make_settings(window=3000), Planner(make_settings()).counter_for)
    conversation, plan = planned(chats[-1])[:2]
    again.add([], "chat", conversation, plan)
    repeat = again.add([], "chat", conversation, plan)
    assert repeat is not None and repeat.struck == 0 and repeat.prefix == len(chats[-1])
    assert records is not None
    assert records.totals.sent == sum(r.before for r, _ in seen)
    assert records.totals.forwarded == sum(r.after for r, _ in seen)


def test_a_record_is_written_out_whole_and_apart_from_the_store() -> None:
    conversation, plan, records = planned(requests_of(coding_loop(4))[-1])
    record = records.add([], "chat", conversation, plan)
    assert record is not None
    record.truncation = {"sent": 10, "read": 8, "window": 8}
    data = record.to_json()
    assert data == asdict(record) and list(data) == list(asdict(record))
    assert orjson.loads(orjson.dumps(record)) == data  # what the other replicas read
    data["headers"]["x"] = data["truncation"]["sent"] = 0
    assert "x" not in record.headers and record.truncation["sent"] == 10
    assert records.totals.to_json() == asdict(records.totals)


def test_the_store_is_bounded_by_conversations_and_requests() -> None:
    records = Records(make_settings(ui_conversations=2, ui_requests=3), Planner(make_settings()).counter_for)
    for c in range(4):
        for k in range(5):
            messages = [
                {"role": "system", "content": f"agent {c}"},
                {"role": "user", "content": "fix it"},
                {"role": "assistant", "content": "x" * k},
            ]
            conversation, plan = planned(messages)[:2]
            records.add([], "chat", conversation, plan)
    assert len(records) == 6
    assert [c["requests"] for c in records.snapshot()["conversations"]] == [5, 5]
    assert records.totals.requests == 20


def test_the_well_stacks_to_what_was_forwarded() -> None:
    messages = requests_of(coding_loop(16))[-1]
    conversation, plan, records = planned(messages)
    result = plan.result
    assert result.truncated and result.dropped
    well = build_well(
        conversation.request, plan, records.counter_for(plan), Decided.of(result, len(messages)), None, False
    )
    blocks = well["blocks"]
    assert len(blocks) == len(messages)
    assert sum(b[4] == "noted" for b in blocks) == len(result.truncated)
    assert sum(b[4] == "capped" for b in blocks) == len(result.capped)
    assert sum(m["count"] for m in well["markers"]) == len(result.dropped)
    stacked = well["fixed"] + sum(b[3] for b in blocks) + sum(m["tokens"] for m in well["markers"])
    assert stacked == result.tokens_after
    assert all(b[6] for b in blocks if b[4] != "kept")  # all struck: no request before it
    assert "previews" not in well and "order" not in json.dumps(well)


def test_a_page_watching_gets_the_record_then_its_well() -> None:
    async def watch() -> list[tuple[str, dict[str, Any]]]:
        conversation, plan, records = planned(requests_of(coding_loop(16))[-1])
        page = records.pages.open(EVERYTHING)
        assert page is not None and records.watched
        records.add([(b"session_id", b"t1")], "chat", conversation, plan)
        frames = [await page.next(30), await page.next(30)]
        records.pages.close(page)
        assert not records.pages and not records.watched
        return [(f.split(b"\n")[0][7:].decode(), json.loads(f.split(b"\ndata: ")[1])) for f in frames if f]

    (kind1, first), (kind2, second) = asyncio.run(watch())
    assert (kind1, kind2) == ("record", "well")
    assert first["conversation"]["source"] == "session_id"
    assert second["seq"] == first["record"]["seq"] and len(second["blocks"]) > 0


@pytest.mark.parametrize(
    ("tail", "cached"),
    [
        (b'"usage":{"prompt_tokens":900,"prompt_tokens_details":{"cached_tokens":768}}}', 768),
        (b'"usage":{"input_tokens":12,"cache_read_input_tokens":4000,"output_tokens":5}', 4000),
        (b'"timings":{"cache_n":1536,"prompt_n":20}', 1536),
        (b'"usage":{"prompt_tokens":900}', None),
    ],
)
def test_cached_tokens_are_read_from_the_answer(tail: bytes, cached: int | None) -> None:
    assert cached_tokens(tail) == cached


# ------------------------------------------------------------------ the routes


def long_chat() -> dict[str, Any]:
    messages = requests_of(coding_loop(16))[-1]
    messages = [
        messages[0],
        {**messages[1], "content": SECRET + ": " + messages[1]["content"]},
        *messages[2:],
    ]
    return as_chat("m", messages)


async def test_the_page_and_its_records_through_the_app() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=completion(prompt_tokens=2500)))
    async with proxy_client(upstream, window=3000) as client:
        page = await client.get("/ui")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert (await client.get("/ui/static/main.mjs")).status_code == 200
        assert (await client.get("/ui/static/secrets.txt")).status_code == 404
        answer = await client.post(CHAT, json=long_chat(), headers={"session_id": "codex-thread-1"})
        assert answer.headers["x-compaction-dropped"] != "0"
        snap = (await client.get("/ui/conversations")).json()
        (conv,) = snap["conversations"]
        assert conv["source"] == "session_id" and conv["requests"] == 1 and conv["preview"] is None
        detail = await client.get(f"/ui/conversations/{conv['key']}")
        (record,) = detail.json()["records"]
        assert record["headers"] == {k: v for k, v in answer.headers.items() if k.startswith("x-compaction-")}
        assert record["prompt_tokens"] == 2500
        assert SECRET not in detail.text and SECRET not in snap.__repr__()
        metrics = (await client.get("/metrics")).text
        assert 'compacting_proxy_table_entries{table="ui_records"} 1.0' in metrics


async def test_previews_only_when_asked() -> None:
    async with proxy_client(RecordingUpstream(), window=3000, ui_content=True) as client:
        await client.post(CHAT, json=long_chat())
        snap = (await client.get("/ui/conversations")).json()
        assert SECRET in snap["conversations"][0]["preview"]


async def test_the_page_can_be_turned_off() -> None:
    async with proxy_client(RecordingUpstream(), window=3000, ui=False) as client:
        await client.post(CHAT, json=long_chat())
        for path in ("/ui", "/ui/events", "/ui/conversations", "/ui/static/main.mjs"):
            assert (await client.get(path)).status_code == 404
        assert "ui_records" in (await client.get("/metrics")).text  # the gauge stays, at 0


async def test_with_api_keys_the_data_needs_a_key_the_page_does_not() -> None:
    async with proxy_client(RecordingUpstream(), window=3000, api_keys="k1") as client:
        assert (await client.get("/ui")).status_code == 200
        assert (await client.get("/ui/static/main.mjs")).status_code == 200
        assert (await client.get("/ui/conversations")).status_code == 401
        assert (await client.get("/ui/events")).status_code == 401
        assert (await client.get("/ui/conversations?key=k1")).status_code == 401  # never in the query
        assert (await client.get("/ui/conversations", headers={"x-api-key": "k1"})).status_code == 200


async def test_refusals_and_retries_are_recorded() -> None:
    calls = 0

    def overflow_once(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            error = {"message": "maximum context length is 2000 tokens", "code": "context_length_exceeded"}
            return httpx.Response(400, json={"error": {**error, "type": "invalid_request_error"}})
        return httpx.Response(200, json=completion())

    async with proxy_client(RecordingUpstream(respond=overflow_once), window=3000) as client:
        assert (await client.post(CHAT, json=long_chat())).status_code == 200
        huge = {"model": "m", "messages": [{"role": "user", "content": "word " * 20000}]}
        assert (await client.post(CHAT, json=huge)).status_code == 400
        snap = (await client.get("/ui/conversations")).json()
        assert snap["totals"]["requests"] == 2
        by_requests = {c["last"]["refused"]: c["last"] for c in snap["conversations"]}
        assert by_requests[True]["before"] > 3000
        assert by_requests[False]["retried"] and by_requests[False]["after"] < by_requests[False]["before"]


async def test_every_compacted_format_appears() -> None:
    """Each route's requests are recorded from their neutral conversation, under their format."""
    from proxy import formats
    from tests.support.format_chats import in_format

    chat = requests_of(coding_loop(16))[-1]
    paths = {
        "chat": "/v1/chat/completions",
        "responses": "/v1/responses",
        "messages": "/v1/messages",
        "ollama": "/api/chat",
        "azure": "/openai/deployments/d1/chat/completions?api-version=2024-10-21",
    }
    wires = {"chat": formats.CHAT, "responses": formats.RESPONSES, "messages": formats.ANTHROPIC}
    wires |= {"ollama": formats.OLLAMA, "azure": formats.AZURE}
    async with proxy_client(RecordingUpstream(), window=3000) as client:
        for name, path in paths.items():
            body = in_format(wires[name], chat)
            await client.post(path, json={**body, "model": name})
        snap = (await client.get("/ui/conversations")).json()
    seen = {c["model"]: c for c in snap["conversations"]}
    assert {c["format"] for c in seen.values()} == {w.name for w in wires.values()}
    for conversation in seen.values():
        assert conversation["last"]["dropped"] or conversation["last"]["truncated"]


# ------------------------------------------------------------------ another replica's records


def test_another_replicas_records_are_added_once_and_updated_in_place() -> None:
    conversation, plan, sender = planned(requests_of(coding_loop(4))[-1])
    first, second = (sender.add([], "chat", conversation, plan) for _ in range(2))
    assert first is not None and second is not None
    here = Records(make_settings(), Planner(make_settings()).counter_for)
    newest: dict[str, int] = {}

    def arrive(record: Any) -> None:
        event = {
            "event": "record",
            "record": record,
            "conversation": {"source": "hash", "first_at": 1.0, "preview": None},
        }
        event["decided"] = [record.messages, [], [], []]
        take(here, {**orjson.loads(orjson.dumps(event)), "origin": "b"}, newest)

    arrive(first)
    arrive(second)
    first.prompt_tokens = 7  # answered late: its update comes after the newer record
    arrive(first)
    arrive(second)  # a backlog replay of what is known changes nothing
    (log,) = here.conversations.values()
    assert [(r.origin_seq, r.prompt_tokens) for r in log.records] == [(1, 7), (2, None)]
    assert here.totals.requests == 2 and here.totals.reported == 7 and newest == {"b": 2}


async def test_a_remote_compaction_is_recorded_with_what_it_replaced() -> None:
    """Issue 36, row 4: Codex's `compaction_trigger`, answered by the proxy, is a record of its own:
    counted as a request and a compaction, its history's size before and after (not in SENT: nothing
    went upstream), and how many items the sealed one stands for."""
    instructions, items = as_responses(support_chat(12, result_items=20))
    body = {"model": "m", "instructions": instructions, "input": [*items, {"type": "compaction_trigger"}]}
    async with proxy_client(RecordingUpstream(), window=100_000) as client:
        answer = await client.post("/v1/responses", json=body, headers={"session-id": "codex-1"})
        assert answer.headers["x-compaction-remote"] == "answered"
        snap = (await client.get("/ui/conversations")).json()
        (conv,) = snap["conversations"]
        detail = (await client.get(f"/ui/conversations/{conv['key']}")).json()
    (record,) = detail["records"]
    assert record["headers"] == {"x-compaction-remote": "answered"}
    assert record["remote"] == {"items": len(items), "sealed": record["remote"]["sealed"]}
    assert 0 < record["remote"]["sealed"] < len(items)
    assert record["window"] == 100_000 and 0 < record["after"] < record["before"]
    assert snap["totals"]["requests"] == snap["totals"]["compacted"] == 1
    assert snap["totals"]["sent"] == snap["totals"]["forwarded"] == 0
    assert conv["source"] == "session-id" and conv["format"] == "responses"
