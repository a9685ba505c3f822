"""Fakes for the upstream side: a recording upstream behind httpx.MockTransport, and SSE builders."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from proxy.engine.summary import INSTRUCTIONS
from proxy.server.app import create_app
from proxy.settings import Settings

UPSTREAM = "http://upstream.test/v1"


def completion(content: str = "Hello!", prompt_tokens: int = 10) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 2, "total_tokens": prompt_tokens + 2},
    }


def anthropic_message(
    text: str = "ok", input_tokens: int = 10, output_tokens: int = 1, model: str = "m"
) -> dict[str, Any]:
    """An answer of Anthropic's Messages API, as `completion` is one of Chat Completions."""
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def sse_chunks(words: list[str]) -> list[bytes]:
    chunks = []
    for word in words:
        delta = {"choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}]}
        chunks.append(
            b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", **delta}).encode() + b"\n\n"
        )
    chunks.append(b"data: [DONE]\n\n")
    return chunks


class ClosingStream(httpx.AsyncByteStream):
    """A streamed body that records whether the proxy closed it."""

    def __init__(self, chunks: list[bytes], fail_after: int | None = None) -> None:
        self.chunks = chunks
        self.fail_after = fail_after
        self.closed = False
        self.sent = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            if self.fail_after is not None and self.sent >= self.fail_after:
                raise httpx.ReadError("connection reset by peer")
            self.sent += 1
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


COUNT_PATHS = ("/tokenize", "/apply-template")


@dataclass
class RecordingUpstream:
    """Answers like an OpenAI-compatible server and keeps every request it received."""

    respond: Callable[[httpx.Request], httpx.Response] | None = None
    requests: list[httpx.Request] = field(default_factory=list)
    streams: list[ClosingStream] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.respond:
            return self.respond(request)
        if request.url.path.endswith("/chat/completions"):
            body = json.loads(request.content)
            if body.get("stream"):
                stream = ClosingStream(sse_chunks(["Hel", "lo", "!"]))
                self.streams.append(stream)
                return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)
            return httpx.Response(200, json=completion())
        return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})

    @property
    def last(self) -> httpx.Request:
        return self.requests[-1]

    @property
    def forwarded(self) -> list[httpx.Request]:
        """The requests the proxy sent on a client's behalf: all but its own counts (`/tokenize`,
        `/apply-template`, asked by default before a request near its line is planned)."""
        return [r for r in self.requests if r.url.path not in COUNT_PATHS]

    def last_json(self) -> Any:
        return json.loads(self.last.content)


_MADE: dict[frozenset[tuple[str, Any]], Settings] = {}


def make_settings(**overrides: Any) -> Settings:
    """Settings for a test: the pattern's four-characters-per-token count, so sizes are predictable,
    a fixed window and an upstream that is not Ollama, so no probe reaches the recording upstream.

    Settings are frozen and read nothing else here (no `.env`, and `tests/conftest.py` clears the
    `COMPACT_*` variables), so the ones made of the same overrides are made once: building one takes
    about 2 ms, and the fast tier asks 300 times for 80 different ones."""
    try:
        key = frozenset(overrides.items())
        made = _MADE.get(key)
    except TypeError:  # a list or dict among the overrides
        key, made = None, None
    if made is None:
        defaults = {
            "upstream_url": UPSTREAM,
            "tokenizer": "chars4",
            "window": 8192,
            "upstream_kind": "openai",
        }
        made = Settings(**{"_env_file": None, **defaults, **overrides})
        if key is not None:
            _MADE[key] = made
    return made


def proxy_client(
    upstream: RecordingUpstream | httpx.AsyncBaseTransport, **overrides: Any
) -> httpx.AsyncClient:
    """An httpx client talking in-process to a proxy app whose upstream is `upstream`."""
    transport = upstream if isinstance(upstream, httpx.AsyncBaseTransport) else httpx.MockTransport(upstream)
    app = create_app(make_settings(**overrides), transport=transport)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy.test")


class SummarisingUpstream(RecordingUpstream):
    """Answers chat requests; answers summary requests with a summary naming what it was given."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__(respond=self.answer)
        self.fail = fail
        self.summary_calls = 0

    def answer(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if body["messages"][0].get("content") == INSTRUCTIONS:
            self.summary_calls += 1
            if self.fail:
                return httpx.Response(500, text="summariser down")
            return httpx.Response(200, json=completion(f"- order #4471 summary {self.summary_calls}"))
        return httpx.Response(200, json=completion())

    def chat_requests(self) -> list[dict[str, Any]]:
        bodies = [json.loads(r.content) for r in self.requests]
        return [b for b in bodies if b["messages"][0].get("content") != INSTRUCTIONS]
