"""The pipeline's steps (`proxy/server/pipeline.py`), driven one by one over a mock upstream
(`httpx.MockTransport`, an OpenAI-compatible server as `tests/support/fakes.py` fakes it): what the
upstream received, and what the client got. Each step takes the request in flight (`Flight`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from proxy.formats import RouteTable
from proxy.metrics import Metrics
from proxy.server.flight import Flight
from proxy.server.parts import Parts
from proxy.server.pipeline import Pipeline
from proxy.ways.base import READ
from proxy.ways.direct import Direct
from proxy.ways.passing import Passing
from tests.support.conversations import bike_shop_chat
from tests.support.fakes import ClosingStream, RecordingUpstream, completion, make_settings

Respond = Callable[[httpx.Request], httpx.Response]


def pipeline_over(upstream: RecordingUpstream, **settings: Any) -> Pipeline:
    transport = httpx.MockTransport(upstream)
    return Pipeline(Parts.wire(make_settings(**settings), transport, Metrics(), RouteTable()))


def request(
    path: str, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None, method: str = "POST"
) -> Request:
    """A client's request as the server hands it to the app, its body not yet read."""
    sent = [False]

    async def receive() -> dict[str, Any]:
        if sent[0]:  # the client waits for its answer
            await asyncio.Event().wait()
        sent[0] = True
        return {"type": "http.request", "body": body, "more_body": False}

    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [(b"content-type", b"application/json"), *(headers or [])],
        "path_params": {},
    }
    return Request(scope, receive)


async def client_gets(response: Response) -> tuple[int, dict[str, str], bytes]:
    """What the client receives of `response`: its status, headers and every body byte."""
    messages: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        await asyncio.Event().wait()  # the client stays till the end
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await response({"type": "http", "method": "POST", "headers": []}, receive, send)
    start = messages[0]
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in messages[1:])


def chat(**extra: Any) -> bytes:
    return json.dumps({"model": "llama3.1:8b", "messages": bike_shop_chat(items=5), **extra}).encode()


async def test_a_chat_under_the_line_goes_as_it_came_and_its_answer_comes_back_whole() -> None:
    upstream = RecordingUpstream()
    pipeline = pipeline_over(upstream)
    raw = chat(seed=7).replace(b", ", b",  ")  # odd spacing, as a client may send it
    route = pipeline.parts.routes.for_path("/v1/chat/completions")
    response = await pipeline.compact_and_forward(request("/v1/chat/completions", raw), route)
    assert str(upstream.last.url) == "http://upstream.test/v1/chat/completions"
    assert upstream.last.content == raw
    status, headers, body = await client_gets(response)
    assert status == 200 and json.loads(body) == completion()
    assert headers["content-length"] == str(len(body))
    assert "x-compaction-upstream-truncated" not in headers


async def test_plan_takes_the_routes_own_way_and_send_strips_the_decoded_bodys_encoding() -> None:
    upstream = RecordingUpstream()
    pipeline = pipeline_over(upstream)
    route = pipeline.parts.routes.for_path("/v1/chat/completions")
    raw = chat()
    client = request("/v1/chat/completions?api-version=1", raw, [(b"content-encoding", b"gzip")])
    flight = Flight.read(client, route, raw)
    flight.body, flight.raw, flight.conversation = pipeline.adapt(route.format, json.loads(raw), raw, {})
    flight.way = Direct(route.format, "/chat/completions", False, streamed=False)
    plan = await pipeline.plan(flight)
    assert flight.way.path == "/chat/completions" and not plan.result.changed  # no bridge for OpenAI
    await pipeline.send(flight)
    sent = upstream.last
    assert str(sent.url) == "http://upstream.test/v1/chat/completions?api-version=1"
    assert "content-encoding" not in sent.headers and sent.headers["x-request-id"]
    assert sent.content == raw, "an unchanged plan sends the original bytes"


async def test_a_request_passing_through_keeps_its_encoding_and_is_streamed_back() -> None:
    upstream = RecordingUpstream()
    pipeline = pipeline_over(upstream)
    client = request("/v1/files", b"\x1f\x8b-not-json", [(b"content-encoding", b"gzip")])
    response = await pipeline.forward_as_is(client, "/files", from_root=False)
    assert str(upstream.last.url) == "http://upstream.test/v1/files"
    assert upstream.last.headers["content-encoding"] == "gzip"
    assert upstream.last.content == b"\x1f\x8b-not-json"
    status, _, body = await client_gets(response)
    assert status == 200 and json.loads(body)["object"] == "list"
    assert 'route="passthrough"' in pipeline.parts.metrics.render().decode()


OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


async def test_an_overflow_the_upstream_reports_is_sent_again_harder() -> None:
    answers = iter([httpx.Response(400, json=OVERFLOW), httpx.Response(200, json=completion())])
    upstream = RecordingUpstream(respond=lambda r: next(answers))
    pipeline = pipeline_over(upstream, window=16384)  # the chat is under its line: sent whole first
    route = pipeline.parts.routes.for_path("/v1/chat/completions")
    raw = json.dumps({"model": "llama3.1:8b", "messages": bike_shop_chat()}).encode()
    response = await pipeline.compact_and_forward(request("/v1/chat/completions", raw), route)
    first, second = (json.loads(r.content) for r in upstream.requests)
    assert len(json.dumps(second["messages"])) < len(json.dumps(first["messages"]))
    status, headers, body = await client_gets(response)
    assert status == 200 and json.loads(body) == completion()
    assert int(headers["x-compaction-tokens-after"]) < int(headers["x-compaction-tokens-before"])


@pytest.mark.parametrize("stream", [False, True])
async def test_an_error_that_cannot_be_retried_comes_back_whole_as_it_came(stream: bool) -> None:
    """Read to see whether it is an overflow, it goes back whole with its length, even to a client
    that asked for a stream."""
    error = b'{"error": {"message": "bad model", "type": "invalid_request_error"}}'
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(
            400, headers={"content-type": "application/json"}, stream=ClosingStream([error])
        )
    )
    pipeline = pipeline_over(upstream)
    route = pipeline.parts.routes.for_path("/v1/chat/completions")
    flight = Flight.read(request("/v1/chat/completions", chat(stream=stream)), route, chat(stream=stream))
    flight.body, flight.raw, flight.conversation = pipeline.adapt(
        route.format, json.loads(flight.raw), flight.raw, {}
    )
    flight.way = Direct(route.format, "/chat/completions", False, streamed=stream)
    await pipeline.plan(flight)
    again = await pipeline.retry(flight, await pipeline.send(flight))
    assert again.extensions[READ] and len(upstream.requests) == 1
    status, headers, body = await client_gets(await pipeline.relay(flight, again))
    assert (status, body) == (400, error)
    assert headers["content-length"] == str(len(error))


async def test_a_bridge_is_a_way_like_the_routes_own() -> None:
    """A Gemini API request to a Chat Completions server: the pipeline sends and relays over the
    bridge the plan chose, as over the route's own way."""
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=completion("Hi there")))
    pipeline = pipeline_over(upstream)
    path = "/v1beta/models/gemma:generateContent"
    body = {"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}
    client = request(path + "?key=k1", json.dumps(body).encode())
    response = await pipeline.compact_and_forward(client, pipeline.parts.routes.match(path)[0])  # type: ignore[index]
    sent = upstream.last
    assert str(sent.url) == "http://upstream.test/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer k1"
    assert json.loads(sent.content)["messages"] == [{"role": "user", "content": "Hello"}]
    status, _, answer = await client_gets(response)
    assert status == 200
    assert json.loads(answer)["candidates"][0]["content"]["parts"] == [{"text": "Hi there"}]


async def test_a_request_the_server_keeps_is_answered_in_its_routes_own_words() -> None:
    """A Responses request with `previous_response_id` goes as it came; a stream the upstream breaks
    off ends with the Responses API's error event (its route's, not looked up again by path)."""
    chunks = [b'event: response.created\ndata: {"type":"response.created"}\n\n', b"never sent"]
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=ClosingStream(chunks, fail_after=1)
        )
    )
    pipeline = pipeline_over(upstream)
    raw = json.dumps(
        {"model": "m", "input": "go on", "previous_response_id": "resp_1", "stream": True}
    ).encode()
    route = next(r for r in pipeline.parts.routes.routes if r.path == "/v1/responses")
    flight_response = await pipeline.compact_and_forward(request("/v1/responses", raw), route)
    assert upstream.last.content == raw
    _, _, body = await client_gets(flight_response)
    assert body.startswith(chunks[0])
    assert b"event: error" in body and b'"type":"error"' in body


def test_a_way_as_it_came_sends_the_bytes_it_was_given() -> None:
    way = Passing("/models", from_root=False)
    assert way.outgoing([(b"a", b"1")], b"q=1") == ([(b"a", b"1")], b"q=1")
    assert way.retries is False and way.window is None
