"""A new wire format is one module and one row of the route table: a toy "transcript" format (its
turns are `{"speaker", "text"}`), added to the proxy's own table and nothing else, is compacted end
to end (in process), named in metrics, dry-run by name, answered in its own error shape, refused
in its own overflow wording naming its own field, told of a broken stream in its own event, and left
alone when it says its server keeps the history."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import orjson

from proxy.engine.plan import Body, ChatPlan
from proxy.engine.refusal import Refusal
from proxy.errors import ContextOverflowError
from proxy.formats import ROUTES, Conversation, FormatRoute, RouteTable
from proxy.formats.base import rebuild, rewrite_items, source_field, sse_error_event
from proxy.formats.sources import Part
from proxy.server.app import create_app
from tests.support.fakes import ClosingStream, RecordingUpstream, make_settings, sse_chunks


class Transcript:
    """The toy format's whole adapter."""

    name = "transcript"
    reply_field = None

    def read(self, body: Body, params: Mapping[str, str]) -> Conversation:
        turns = body["turns"]
        messages = [{"role": t["speaker"], "content": t["text"]} for t in turns]
        return Conversation(
            {"model": body.get("model"), "messages": messages}, [(Part(i),) for i in range(len(turns))]
        )

    def write(self, body: Body, conversation: Conversation, plan: ChatPlan) -> Body:
        def item_with(turn: Any, blocks: set[int], notes: Mapping[int | None, Any]) -> Any:
            return {**turn, "text": notes.get(None, turn["text"])}

        def merge(turn: Any, before: Sequence[str], after: Sequence[str]) -> Any:
            return {**turn, "text": "\n".join([*before, turn["text"], *after])}

        turns = rewrite_items(
            body["turns"],
            rebuild(conversation, plan),
            item_with=item_with,
            marker=lambda text, role: {"speaker": role, "text": text},
            merge=merge,
        )
        return {**body, "turns": turns}

    def streamed(self, body: Body) -> bool:
        return False

    def reported_prompt_tokens(self, tail: bytes) -> int | None:
        return None

    @staticmethod
    def error_body(status: int, message: str, type: str, code: str | None, param: str | None) -> bytes:
        return orjson.dumps({"transcript_error": message})

    def overflow_error(self, refusal: Refusal, *, streamed: bool) -> ContextOverflowError:
        message = f"transcript too long: {refusal.tokens} of {refusal.maximum} tokens. {refusal.detail}"
        return ContextOverflowError(message, param=refusal.field or "turns")

    def stream_error_event(self, message: str) -> bytes:
        return sse_error_event({"transcript_error": message}, event="transcript_error")

    def client_field(self, body: Body, conversation: Conversation, index: int) -> str:
        return source_field(conversation, index, items="turns", outside="turns")

    def server_manages_context(self, body: Body, *, upstream_host: str, upstream_kind: str) -> bool:
        return body.get("server_keeps_history") is True

    def context_edits(self, body: Body) -> Body:
        return body

    def context_report(self, original: Body, edited: Body) -> None:
        return None


TOY = FormatRoute(
    "/v1/transcripts", Transcript(), "/transcripts", scope=("/v1/transcripts", "/v1/transcripts/")
)


def toy_client(upstream: RecordingUpstream, **overrides: Any) -> httpx.AsyncClient:
    app = create_app(
        make_settings(**overrides), transport=httpx.MockTransport(upstream), routes=RouteTable((*ROUTES, TOY))
    )
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy.test")


def transcript(turns: int) -> dict[str, Any]:
    speakers = ("user", "assistant")
    said = [{"speaker": speakers[i % 2], "text": f"turn {i}: " + "word " * 100} for i in range(turns)]
    return {"model": "m", "turns": [{"speaker": "system", "text": "Be brief."}, *said]}


async def test_a_toy_format_with_one_table_row_is_compacted_end_to_end() -> None:
    upstream = RecordingUpstream(respond=lambda request: httpx.Response(200, json={"said": "ok"}))
    body = transcript(41)
    async with toy_client(upstream, window=2000) as client:
        response = await client.post("/v1/transcripts", json=body)
        report = (await client.post("/compact", json={**body, "format": "transcript"})).json()
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 200
    assert response.json() == {"said": "ok"}
    assert str(upstream.last.url) == "http://upstream.test/v1/transcripts"
    sent = upstream.last_json()
    assert set(sent) == {"model", "turns"}
    assert len(sent["turns"]) < len(body["turns"])
    assert sent["turns"][0] == body["turns"][0]  # the system turn is never cut
    assert sent["turns"][-1] == body["turns"][-1]  # nor the latest
    assert len(json.dumps(sent)) < len(json.dumps(body)) / 2
    assert report["body"] == sent
    assert 'compacting_proxy_requests_total{route="transcript",status="200"} 1.0' in metrics


async def test_a_toy_format_under_its_window_is_forwarded_byte_for_byte() -> None:
    upstream = RecordingUpstream(respond=lambda request: httpx.Response(200, json={"said": "ok"}))
    content = json.dumps(transcript(3), indent=1).encode()
    async with toy_client(upstream, window=100000) as client:
        response = await client.post("/v1/transcripts", content=content)
    assert response.status_code == 200
    assert upstream.last.content == content


async def test_a_toy_format_decides_when_its_server_keeps_the_history() -> None:
    upstream = RecordingUpstream(respond=lambda request: httpx.Response(200, json={"said": "ok"}))
    content = json.dumps({**transcript(41), "server_keeps_history": True}).encode()
    async with toy_client(upstream, window=2000) as client:
        response = await client.post("/v1/transcripts", content=content)
    assert response.status_code == 200
    assert upstream.last.content == content  # over the window, but the server compacts: untouched


async def test_a_toy_formats_errors_come_in_its_own_shape() -> None:
    async with toy_client(RecordingUpstream(), max_body_bytes=100) as client:
        too_large = await client.post("/v1/transcripts", content=b"{" + b" " * 200 + b"}")
    assert too_large.status_code == 413
    assert "transcript_error" in too_large.json()


async def test_a_toy_format_refuses_what_cannot_fit_in_its_own_words() -> None:
    upstream = RecordingUpstream()
    body = {
        "model": "m",
        "turns": [{"speaker": "system", "text": "word " * 3000}, *transcript(3)["turns"][1:]],
    }
    async with toy_client(upstream, window=2000) as client:
        response = await client.post("/v1/transcripts", json=body)
    assert response.status_code == 400
    message = response.json()["transcript_error"]
    assert re.fullmatch(
        r"transcript too long: \d+ of 2000 tokens\. No compaction can make it fit: .+", message
    )
    assert "The largest part is turns[0], about" in message  # the client's own field, named by the toy
    assert "shorten the system prompt." in message  # the engine's detail, in the toy's words
    assert not upstream.forwarded


async def test_a_toy_formats_broken_stream_ends_with_its_own_event() -> None:
    stream = ClosingStream(sse_chunks(["a", "b"]), fail_after=1)
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)
    )
    async with toy_client(upstream, window=100000) as client:
        response = await client.post("/v1/transcripts", json=transcript(3))
    assert response.content.startswith(sse_chunks(["a"])[0])
    event, data = response.content.strip().split(b"\n\n")[-1].split(b"\n")
    assert event == b"event: transcript_error"
    assert orjson.loads(data.removeprefix(b"data: ")) == {
        "transcript_error": "The upstream stream broke off (ReadError)."
    }
    assert stream.closed
