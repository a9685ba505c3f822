"""Audit mode on the compacted routes (`proxy/gateway/audit.py`): the request reaches the upstream
byte for byte as the client sent it, never retried harder, and the answer says what compaction
would have cut and saved; without it, the same request is compacted (so the test can fail)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.conversations import agent_chat
from tests.support.fakes import RecordingUpstream, proxy_client
from tests.support.format_chats import as_anthropic


def body() -> dict[str, Any]:
    chat = [*agent_chat(12, seed=4, result_items=40), {"role": "user", "content": "Which orders are open?"}]
    return {"model": "m", "messages": chat, "max_tokens": 64}


async def send(path: str, payload: dict[str, Any], headers: dict[str, str], **settings: Any) -> Any:
    upstream = RecordingUpstream()
    raw = json.dumps(payload).encode()
    async with proxy_client(upstream, window=4096, **settings) as client:
        response = await client.post(
            path, content=raw, headers={"content-type": "application/json", **headers}
        )
    return response, upstream, raw


@pytest.mark.parametrize("asked", ["header", "setting"])
async def test_an_audited_chat_is_forwarded_untouched_with_what_would_be_cut(asked: str) -> None:
    headers = {"x-compaction-audit": "true"} if asked == "header" else {}
    settings = {"audit": True} if asked == "setting" else {}
    response, upstream, raw = await send("/v1/chat/completions", body(), headers, **settings)
    assert response.status_code == 200
    assert upstream.last.content == raw  # as it came
    assert response.headers["x-compaction-audit"] == "true"
    before = int(response.headers["x-compaction-audit-tokens-before"])
    assert int(response.headers["x-compaction-audit-tokens-after"]) < before
    assert int(response.headers["x-compaction-audit-dropped"]) + int(
        response.headers["x-compaction-audit-truncated"]
    )
    assert "x-compaction-tokens-after" not in response.headers  # nothing was compacted


async def test_without_audit_the_same_chat_is_compacted() -> None:
    response, upstream, raw = await send("/v1/chat/completions", body(), {})
    assert upstream.last.content != raw and "x-compaction-audit" not in response.headers
    assert int(response.headers["x-compaction-tokens-after"]) < int(
        response.headers["x-compaction-tokens-before"]
    )


async def test_an_audited_anthropic_request_is_forwarded_untouched() -> None:
    chat = body()["messages"]
    system, messages = as_anthropic(chat)
    payload = {"model": "claude", "system": system, "messages": messages, "max_tokens": 64}

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"type": "message", "content": [], "usage": {"input_tokens": 9}})

    upstream = RecordingUpstream(respond=answer)
    raw = json.dumps(payload).encode()
    async with proxy_client(upstream, window=4096, audit=True) as client:
        response = await client.post(
            "/v1/messages", content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code == 200 and upstream.last.content == raw
    assert int(response.headers["x-compaction-audit-tokens-after"]) < int(
        response.headers["x-compaction-audit-tokens-before"]
    )


async def test_an_overflow_the_upstream_reports_is_not_retried_when_audited() -> None:
    def overflow(request: httpx.Request) -> httpx.Response:
        error = {
            "message": "too long",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 9000,
            "n_ctx": 4096,
        }
        return httpx.Response(400, json={"error": {"code": 400, **error}})

    upstream = RecordingUpstream(respond=overflow)
    async with proxy_client(upstream, window=4096, audit=True) as client:
        response = await client.post("/v1/chat/completions", json=body())
    assert response.status_code == 400 and len(upstream.requests) == 1
