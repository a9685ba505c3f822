"""A small OpenAI-compatible stub model server, for the demo and for tests that need a real socket.

It behaves like a strict real server where it matters to the proxy: it counts the prompt (about four
characters per token over what it receives), rejects a prompt over its window with OpenAI's
`context_length_exceeded` error, reports `usage`, streams SSE, and answers the first step of each
user request with a tool call when tools are offered. Run it with `python -m proxy.stub --port 9000`.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from proxy.counting.tokens import json_text


def prompt_tokens(body: dict[str, Any]) -> int:
    sent = [body.get("messages"), body.get("tools")]
    return (len(json_text(sent)) + 3) // 4


def reply_for(body: dict[str, Any]) -> dict[str, Any]:
    """The assistant message: a tool call to start a request when tools are offered, else text."""
    messages = body.get("messages") or [{}]
    last = messages[-1] if isinstance(messages[-1], dict) else {}
    tools = body.get("tools") or []
    users = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "user")
    if last.get("role") == "user" and tools:
        tool = tools[(users - 1) % len(tools)].get("function", {}).get("name", "tool")
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{users}_{len(messages)}",
                    "type": "function",
                    "function": {"name": tool, "arguments": orjson.dumps({"order": 4471}).decode()},
                }
            ],
        }
    return {"role": "assistant", "content": f"Stub answer after {len(messages)} messages."}


def create_stub(window: int = 8192, *, chunk_delay: float = 0.0) -> Starlette:
    ids = itertools.count(1)

    async def chat(request: Request) -> Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _error(400, "Invalid JSON body.", "invalid_json")
        used = prompt_tokens(body)
        if used > window:
            return _error(
                400,
                f"This model's maximum context length is {window} tokens. However, your messages "
                f"resulted in {used} tokens. Please reduce the length of the messages.",
                "context_length_exceeded",
            )
        message = reply_for(body)
        completion_tokens = max(1, len(json_text(message)) // 4)
        usage = {
            "prompt_tokens": used,
            "completion_tokens": completion_tokens,
            "total_tokens": used + completion_tokens,
        }
        base = {
            "id": f"chatcmpl-stub-{next(ids)}",
            "created": int(time.time()),
            "model": body.get("model", "stub"),
        }
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                _chunks(base, message, finish, usage if include_usage else None, chunk_delay),
                media_type="text/event-stream",
            )
        choice = {"index": 0, "message": message, "finish_reason": finish}
        payload = {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
        return Response(orjson.dumps(payload), media_type="application/json")

    async def models(request: Request) -> Response:
        data = [{"id": "stub", "object": "model", "created": 0, "owned_by": "stub", "context_length": window}]
        return Response(orjson.dumps({"object": "list", "data": data}), media_type="application/json")

    return Starlette(
        routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)]
    )


async def _chunks(
    base: dict[str, Any], message: dict[str, Any], finish: str, usage: dict[str, int] | None, delay: float
) -> AsyncIterator[bytes]:
    def event(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish_reason}]
        chunk = {**base, "object": "chat.completion.chunk", "choices": choices, **extra}
        return b"data: " + orjson.dumps(chunk) + b"\n\n"

    yield event({"role": "assistant", "content": ""})
    if message.get("tool_calls"):
        calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        yield event({"tool_calls": calls})
    else:
        for word in str(message["content"]).split(" "):
            await asyncio.sleep(delay)
            yield event({"content": word + " "})
    yield event({}, finish)
    if usage:
        yield b"data: " + orjson.dumps(
            {**base, "object": "chat.completion.chunk", "choices": [], "usage": usage}
        )
        yield b"\n\n"
    yield b"data: [DONE]\n\n"


def _error(status: int, message: str, code: str) -> Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": "messages", "code": code}}
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(prog="python -m proxy.stub", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between streamed chunks")
    args = parser.parse_args()
    app = create_stub(args.window, chunk_delay=args.chunk_delay)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
