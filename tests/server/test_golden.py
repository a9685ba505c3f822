"""The golden record: what the upstream received and what the client got, over every route.

Each case sends one request through the proxy (in process, over a canned upstream that answers every
route's shape, whole and streamed, and fails on cue) and writes down each request the upstream
received (method, path, headers, the body's hash) and the client's answer (status, headers, body).
`tests/server/golden/forwarding.json` holds the record made on 957c7e4; a restructuring must reproduce it
byte for byte. Ids and clocks the proxy makes itself are masked. After a deliberate change of
behaviour, record again with `GOLDEN_RECORD=1 python -m pytest tests/server/test_golden.py` and say why in
the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy import formats
from proxy.server.app import create_app
from tests.support.conversations import bike_shop_chat
from tests.support.fakes import anthropic_message, completion, make_settings, sse_chunks
from tests.support.format_chats import in_format
from tests.support.gemini_chats import answer as gemini_answer
from tests.support.gemini_chats import history as gemini_history

RECORD = Path(__file__).parent / "golden" / "forwarding.json"
KEY = "golden-compaction-key"
VOLATILE = re.compile(rb"[0-9a-f]{22,}")  # uuid4 hex ids the proxy draws
CLOCK = re.compile(rb'"(created|created_at)":\s*\d+')
SEALED = re.compile(rb'"encrypted_content":\s*"[^"]*"')
KEPT_HEADERS = {"host", "user-agent"}  # deterministic here; everything else is kept anyway
MASKED_HEADERS = {"x-request-id", "date"}


def events(*items: tuple[str | None, Any]) -> bytes:
    out = b""
    for name, data in items:
        out += (
            (b"event: " + name.encode() + b"\n" if name else b"") + b"data: " + orjson.dumps(data) + b"\n\n"
        )
    return out


RESPONSE = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "status": "completed",
    "model": "m",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hi.", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 300, "output_tokens": 2, "total_tokens": 302},
}
MESSAGE = anthropic_message("Hi.", input_tokens=300, output_tokens=2)
OLLAMA_DONE = {
    "model": "m",
    "created_at": "2026-01-01T00:00:00Z",
    "message": {"role": "assistant", "content": "Hi."},
    "done": True,
    "done_reason": "stop",
    "prompt_eval_count": 300,
    "eval_count": 2,
}
OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 4000 tokens. However, your messages "
        "resulted in 9000 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


@dataclass
class Canned:
    """Answers every route the proxy forwards to, in that server's shape; `fail_first` answers the
    first request with that status and body (an upstream error, or an overflow to retry)."""

    fail_first: tuple[int, Any] | None = None
    received: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.received.append(
            {
                "method": request.method,
                "url": str(request.url),
                "headers": sorted([k, v] for k, v in request.headers.items() if k not in MASKED_HEADERS),
                "body": digest(request.content),
            }
        )
        if self.fail_first and len(self.received) == 1:
            status, body = self.fail_first
            return httpx.Response(status, json=body)
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        stream = bool(isinstance(body, dict) and body.get("stream")) or path.endswith(
            ":streamGenerateContent"
        )
        if path.endswith("/api/show"):
            return httpx.Response(
                200,
                json={
                    "model_info": {"llama.context_length": 131072},
                    "parameters": "num_ctx 4096",
                    "capabilities": ["completion", "tools"],
                },
            )
        if path.endswith("/api/version"):
            return httpx.Response(200, json={"version": "0.33.0-rc2"})
        if path.endswith("/api/chat"):
            if stream:
                lines = [
                    {"model": "m", "message": {"role": "assistant", "content": "Hi."}, "done": False},
                    OLLAMA_DONE,
                ]
                return httpx.Response(
                    200,
                    headers={"content-type": "application/x-ndjson"},
                    content=b"".join(orjson.dumps(line) + b"\n" for line in lines),
                )
            return httpx.Response(200, json=OLLAMA_DONE)
        if path.endswith("/chat/completions"):
            if stream:
                return httpx.Response(
                    200,
                    headers={"content-type": "text/event-stream"},
                    content=b"".join(sse_chunks(["Hel", "lo", "!"])),
                )
            return httpx.Response(200, json=completion(prompt_tokens=300))
        if path.endswith("/responses"):
            if stream:
                return sse_answer(
                    events(
                        (
                            "response.created",
                            {
                                "type": "response.created",
                                "sequence_number": 0,
                                "response": {**RESPONSE, "status": "in_progress"},
                            },
                        ),
                        (
                            "response.completed",
                            {"type": "response.completed", "sequence_number": 1, "response": RESPONSE},
                        ),
                    )
                )
            return httpx.Response(200, json=RESPONSE)
        if path.endswith("/messages"):
            if stream:
                return sse_answer(
                    events(
                        ("message_start", {"type": "message_start", "message": MESSAGE}),
                        (
                            "message_delta",
                            {
                                "type": "message_delta",
                                "delta": {"stop_reason": "end_turn"},
                                "usage": {"output_tokens": 2},
                            },
                        ),
                        ("message_stop", {"type": "message_stop"}),
                    )
                )
            return httpx.Response(200, json=MESSAGE)
        if ":" in path.rsplit("/", 1)[-1]:  # a Gemini API method
            if stream:
                return sse_answer(events((None, gemini_answer("Hi.")), (None, gemini_answer(""))))
            return httpx.Response(200, json=gemini_answer("Hi."))
        return httpx.Response(
            200,
            json={"object": "list", "data": [{"id": "m", "object": "model"}]},
            headers={"x-upstream": "yes"},
        )


def sse_answer(content: bytes) -> httpx.Response:
    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=content)


def digest(content: bytes) -> str:
    return f"{len(content)}:{hashlib.sha256(content).hexdigest()[:24]}"


def masked(content: bytes) -> str:
    content = SEALED.sub(
        b'"encrypted_content":"<sealed>"', CLOCK.sub(rb'"\1":0', VOLATILE.sub(b"<id>", content))
    )
    text = content.decode("utf-8", "replace")
    return text if len(text) <= 1500 else f"{text[:1500]}... {digest(content)}"


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: Any = None  # JSON, or bytes sent as they are
    method: str = "POST"
    settings: tuple[tuple[str, Any], ...] = ()
    fail_first: tuple[int, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()


def chat(items: int) -> list[dict[str, Any]]:
    return bike_shop_chat(items=items)


def body_of(wire: formats.WireFormat, items: int, **extra: Any) -> dict[str, Any]:
    return {**in_format(wire, chat(items)), **extra}


SMALL, LARGE = 3, 200  # items in each tool result: well under, and well over, the window below
BASE = (("window", 4000),)
OLLAMA = (*BASE, ("upstream_kind", "ollama"), ("upstream_url", "http://upstream.test/v1"))
CASES: list[Case] = []
for wire, path in (
    (formats.CHAT, "/v1/chat/completions"),
    (formats.RESPONSES, "/v1/responses"),
    (formats.ANTHROPIC, "/v1/messages"),
    (formats.CHAT, "/openai/deployments/d/chat/completions"),
    (formats.CHAT, "/deployments/d/chat/completions"),
):
    label = path.strip("/").replace("/", "_")
    for size, items in (("under", SMALL), ("over", LARGE)):
        for stream in (False, True):
            CASES.append(
                Case(
                    f"{label}-{size}-{'stream' if stream else 'whole'}",
                    path,
                    body_of(wire, items, stream=stream),
                    settings=BASE,
                )
            )
for size, items in (("under", SMALL), ("over", LARGE)):
    for stream in (False, True):
        ollama_body = {"model": "m", "messages": chat(items), "stream": stream, "options": {"num_ctx": 4000}}
        CASES.append(
            Case(
                f"api_chat-{size}-{'stream' if stream else 'whole'}", "/api/chat", ollama_body, settings=BASE
            )
        )
        CASES.append(
            Case(
                f"ollama_bridge-{size}-{'stream' if stream else 'whole'}",
                "/v1/chat/completions",
                body_of(formats.CHAT, items, stream=stream),
                settings=OLLAMA,
            )
        )
for rounds, size in ((1, "under"), (12, "over")):
    for method in ("generateContent", "streamGenerateContent"):
        for upstream in ("native", "chat"):
            CASES.append(
                Case(
                    f"gemini_{upstream}-{method}-{size}",
                    f"/v1beta/models/m:{method}",
                    gemini_history(rounds),
                    settings=(*BASE, ("gemini_upstream", upstream)),
                )
            )
CASES += [
    Case("passthrough-models", "/v1/models", method="GET", settings=BASE),
    Case("passthrough-embeddings", "/v1/embeddings", {"model": "m", "input": "hi"}, settings=BASE),
    Case("passthrough-api-tags", "/api/tags", method="GET", settings=BASE),
    Case("passthrough-query", "/v1/files?purpose=batch&after=%2e%2e", method="GET", settings=BASE),
    Case("passthrough-count", "/v1beta/models/m:countTokens", {"contents": []}, settings=BASE),
    Case("compact-dry-run", "/compact", body_of(formats.CHAT, LARGE), settings=BASE),
    Case(
        "compact-dry-run-anthropic", "/compact/v1/messages", body_of(formats.ANTHROPIC, LARGE), settings=BASE
    ),
    Case("malformed-chat", "/v1/chat/completions", b'{"model": "m", "messages": [', settings=BASE),
    Case("malformed-anthropic", "/v1/messages", b'{"model": "m", "messages": 5}', settings=BASE),
    Case("malformed-gemini", "/v1beta/models/m:generateContent", b'{"contents": {}}', settings=BASE),
    Case(
        "cannot-fit",
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": "word " * 20000}]},
        settings=BASE,
    ),
    Case(
        "upstream-500",
        "/v1/chat/completions",
        body_of(formats.CHAT, SMALL),
        settings=BASE,
        fail_first=(500, {"error": {"message": "boom", "type": "server_error"}}),
    ),
    Case(
        "overflow-retried",
        "/v1/chat/completions",
        body_of(formats.CHAT, 60),
        settings=(("window", 100000),),
        fail_first=(400, OVERFLOW),
    ),
    Case(
        "anthropic-context-edits",
        "/v1/messages",
        body_of(
            formats.ANTHROPIC, LARGE, context_management={"edits": [{"type": "clear_tool_uses_20250919"}]}
        ),
        settings=BASE,
    ),
    Case(
        "remote-compaction",
        "/v1/responses",
        {
            **body_of(formats.RESPONSES, LARGE),
            "input": [*body_of(formats.RESPONSES, LARGE)["input"], {"type": "compaction_trigger"}],
        },
        settings=(*BASE, ("compaction_key", KEY)),
    ),
    Case(
        "headers-kept",
        "/v1/chat/completions",
        body_of(formats.CHAT, SMALL),
        settings=BASE,
        headers=(("authorization", "Bearer sk-client"), ("openai-organization", "org-1"), ("x-custom", "a")),
    ),
]


async def run(case: Case) -> dict[str, Any]:
    upstream = Canned(case.fail_first)
    app = create_app(make_settings(**dict(case.settings)), transport=httpx.MockTransport(upstream))
    headers = {"x-request-id": "golden", **dict(case.headers)}
    content = (
        case.body if isinstance(case.body, bytes) else None if case.body is None else orjson.dumps(case.body)
    )
    if content is not None:
        headers["content-type"] = "application/json"
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy.test"
    ) as client:
        answer = await client.request(case.method, case.path, content=content, headers=headers)
    return {
        "upstream": upstream.received,
        "status": answer.status_code,
        "headers": sorted([k, v] for k, v in answer.headers.items() if k not in MASKED_HEADERS),
        "body": masked(answer.content),
    }


def recorded() -> dict[str, Any]:
    return json.loads(RECORD.read_text()) if RECORD.exists() else {}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_forwarded_bytes_and_answers_match_the_record(case: Case) -> None:
    got = await run(case)
    if os.environ.get("GOLDEN_RECORD"):
        record = recorded()
        record[case.name] = got
        RECORD.parent.mkdir(exist_ok=True)
        RECORD.write_text(json.dumps(dict(sorted(record.items())), indent=1, ensure_ascii=False) + "\n")
        return
    expected = recorded().get(case.name)
    assert expected is not None, f"no record for {case.name}: record it (see the module's docstring)"
    assert got == expected


def test_every_case_has_a_distinct_name_and_the_record_no_stale_case() -> None:
    names = [case.name for case in CASES]
    assert len(names) == len(set(names))
    if not os.environ.get("GOLDEN_RECORD"):
        assert set(recorded()) == set(names)
