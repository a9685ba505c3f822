"""Ollama's native chat API (`/api/chat`): compacted like the OpenAI one, its window taken from the
request's own `options.num_ctx`, its NDJSON stream passed through as it comes."""

from __future__ import annotations

import json
from typing import Any

import httpx

from proxy.engine.notes import NOTE_PREFIX
from tests.support.conversations import SYSTEM, order_result
from tests.support.fakes import ClosingStream, RecordingUpstream, proxy_client

NDJSON = [
    b'{"model":"llama3.1:8b","message":{"role":"assistant","content":"Hel"},"done":false}\n',
    b'{"model":"llama3.1:8b","message":{"role":"assistant","content":"lo"},"done":false}\n',
    b'{"model":"llama3.1:8b","message":{"role":"assistant","content":""},"done":true,"prompt_eval_count":900,"eval_count":2}\n',
]


def native_chat() -> list[dict[str, Any]]:
    """Ollama's shapes: tool calls without ids, arguments as objects, results named by `tool_name`."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for turn in range(8):
        messages.append({"role": "user", "content": f"Question {turn} about order #4471"})
        call = {"function": {"name": "get_order", "arguments": {"order": 4471}}}
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_name": "get_order", "content": order_result(4471, 25, seed=turn)}
        )
        messages.append({"role": "assistant", "content": f"Answer {turn}."})
    messages.append({"role": "user", "content": "And now?"})
    return messages


def ndjson_upstream() -> RecordingUpstream:
    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "application/x-ndjson"}, stream=ClosingStream(list(NDJSON))
        )

    return RecordingUpstream(respond=respond)


async def test_native_chat_is_compacted_to_the_requests_num_ctx() -> None:
    upstream = ndjson_upstream()
    body = {"model": "llama3.1:8b", "messages": native_chat(), "options": {"num_ctx": 4096, "temperature": 0}}
    async with proxy_client(upstream, window=128000) as client:
        response = await client.post("/api/chat", json=body)
    assert response.status_code == 200
    assert response.content == b"".join(NDJSON), "the NDJSON stream is passed on as it came"
    assert str(upstream.last.url) == "http://upstream.test/api/chat"
    sent = json.loads(upstream.last.content)
    assert sent["options"] == {"num_ctx": 4096, "temperature": 0}
    assert int(response.headers["x-compaction-tokens-after"]) <= 0.8 * 4096
    notes = [m["content"] for m in sent["messages"] if str(m.get("content")).startswith(NOTE_PREFIX)]
    assert notes and all("get_order" in note for note in notes)
    assert sent["messages"][-1] == {"role": "user", "content": "And now?"}


async def test_native_chat_under_the_line_is_forwarded_byte_for_byte() -> None:
    upstream = ndjson_upstream()
    raw = json.dumps(
        {"model": "llama3.1:8b", "messages": [{"role": "user", "content": "hi"}], "keep_alive": "5m"}
    ).encode()
    async with proxy_client(upstream) as client:
        response = await client.post("/api/chat", content=raw)
    assert upstream.last.content == raw
    assert response.content == b"".join(NDJSON)


async def test_native_chat_not_streamed_is_read_whole() -> None:
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(
            200, json={"message": {"role": "assistant", "content": "ok"}, "done": True}
        )
    )
    async with proxy_client(upstream) as client:
        response = await client.post(
            "/api/chat", json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}
        )
    assert response.json()["message"]["content"] == "ok"
