"""A recording upstream that speaks each compacted wire format faithfully, stream and not.

Run it as a process (``python -m tests.support.upstreams.formats --port N --window W``) and point the real
proxy at ``http://127.0.0.1:N/v1``.  Every request it receives is kept (path, query, headers, raw
body) and listed at ``GET /_recorded`` (``DELETE`` clears it).  Like a strict real server it counts
the prompt (four characters per token over what it was sent) and rejects one over its window with
that server's own context error, before any stream begins.

The shapes follow, for each route:
- ``/v1/responses``: openai-python 3.x ``types/responses`` (``Response``, ``ResponseStreamEvent``:
  ``response.created`` ... ``response.completed``, each with ``sequence_number``); usage
  ``input_tokens``; the overflow is OpenAI's ``context_length_exceeded`` error.
- ``/v1/messages``: anthropic-sdk-python 2.x ``types`` (``Message``, ``RawMessageStreamEvent``:
  ``message_start`` ... ``message_stop``, each under its ``event:`` name, with a ``ping``); usage
  ``input_tokens`` plus cache fields, cumulative on ``message_delta`` as the API sends it today; the
  overflow is Anthropic's ``prompt is too long: N tokens > W maximum`` in its error shape; and
  ``/v1/messages/count_tokens``.
- ``/v1/chat/completions`` and Azure's ``/openai/deployments/{name}/chat/completions``: OpenAI chat
  completions (``chat.completion`` / ``chat.completion.chunk`` SSE ending in ``[DONE]``).

With ``--prompt-cache`` it reports a prompt cache as the APIs do: the prompt's start it shares with
the route's previous request counts as cached (OpenAI's ``prompt_tokens_details.cached_tokens``;
Anthropic's ``cache_read_input_tokens``, with ``input_tokens`` the rest, as its API counts them).
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Iterator
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

REPLY = "Happy to help with that."
WORDS = [*(word + " " for word in REPLY.split(" ")[:-1]), REPLY.split(" ")[-1]]  # the streamed deltas


class Recorder:
    def __init__(self, window: int, prompt_cache: bool = False) -> None:
        self.window = window
        self.received: list[dict[str, Any]] = []
        self.ids = itertools.count(1)
        self.prompt_cache = prompt_cache
        self.last_prompt: dict[str, bytes] = {}

    def cached(self, route: str, *parts: Any) -> int:
        """The tokens of the prompt's start shared with the route's previous prompt (none without
        `--prompt-cache`)."""
        if not self.prompt_cache:
            return 0
        prompt = orjson.dumps([p for p in parts if p is not None])
        shared = shared_prefix(self.last_prompt.get(route, b""), prompt)
        self.last_prompt[route] = prompt
        return shared // 4

    def record(self, request: Request, raw: bytes) -> None:
        self.received.append(
            {
                "path": request.url.path,
                "query": request.url.query,
                "headers": {k.decode("latin-1"): v.decode("latin-1") for k, v in request.headers.raw},
                "body": raw.decode("utf-8"),
            }
        )


def shared_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common start of `a` and `b` (a binary search over slices)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prompt_tokens(*parts: Any) -> int:
    return (len(orjson.dumps([p for p in parts if p is not None])) + 3) // 4


def json_response(value: Any, status: int = 200) -> Response:
    """A JSON answer, as every fake model server here sends one."""
    return Response(orjson.dumps(value), status_code=status, media_type="application/json")


def sse(events: Iterator[tuple[str | None, Any]]) -> Response:
    """Server-sent events as the APIs frame them: an `event:` line where the API names its events
    (Anthropic's, Responses'), `data:` with the JSON (or the bytes as given, `[DONE]`), not cached."""
    lines = []
    for name, data in events:
        head = f"event: {name}\n".encode() if name else b""
        payload = data if isinstance(data, bytes) else orjson.dumps(data)
        lines.append(head + b"data: " + payload + b"\n\n")
    return Response(b"".join(lines), media_type="text/event-stream", headers={"cache-control": "no-cache"})


def responses_problem(items: Any) -> str | None:
    """What OpenAI rejects in an input list: a tool output whose call is not before it."""
    called: set[str] = set()
    for item in items if isinstance(items, list) else ():
        if item.get("type") in ("function_call", "custom_tool_call"):
            called.add(item["call_id"])
        elif (
            item.get("type") in ("function_call_output", "custom_tool_call_output")
            and item["call_id"] not in called
        ):
            return f"No tool call found for function call output with call_id {item['call_id']}."
    return None


# --- OpenAI Responses -------------------------------------------------------------------------


def response_object(
    body: dict[str, Any], rid: str, status: str, output: list[Any], usage: dict[str, Any] | None
) -> dict[str, Any]:
    """A Responses API `response` object, as OpenAI's API returns and streams it."""
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body.get("model", ""),
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": None, "summary": None},
        "store": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": body.get("tools", []),
        "top_p": 1.0,
        "truncation": "disabled",
        "metadata": {},
        "usage": usage,
    }


def message_object(
    n: int, body: dict[str, Any], content: list[Any], stop_reason: str, usage: dict[str, Any]
) -> dict[str, Any]:
    """An Anthropic Messages `Message`, the `n`th answer, as the API returns it and starts its stream."""
    return {
        "id": f"msg_{n:024d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", ""),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def response_usage(input_tokens: int, output_tokens: int = 6) -> dict[str, Any]:
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


async def responses(request: Request) -> Response:
    recorder: Recorder = request.app.state.recorder
    raw = await request.body()
    recorder.record(request, raw)
    body = orjson.loads(raw)
    if problem := responses_problem(body.get("input")):
        error = {"message": problem, "type": "invalid_request_error", "param": "input", "code": None}
        return json_response({"error": error}, 400)
    tokens = prompt_tokens(body.get("instructions"), body.get("input"), body.get("tools"))
    if tokens > recorder.window:
        return json_response(
            {
                "error": {
                    "message": "Your input exceeds the context window of this model. Please adjust your "
                    "input and try again.",
                    "type": "invalid_request_error",
                    "param": "input",
                    "code": "context_length_exceeded",
                }
            },
            400,
        )
    n = next(recorder.ids)
    rid, mid = f"resp_{n}", f"msg_{n}"
    part = {"type": "output_text", "text": REPLY, "annotations": [], "logprobs": []}
    item = {"type": "message", "id": mid, "status": "completed", "role": "assistant", "content": [part]}
    if body.get("stream") is not True:
        return json_response(response_object(body, rid, "completed", [item], response_usage(tokens)))

    def events() -> Iterator[tuple[str | None, Any]]:
        seq = itertools.count()
        started = {**item, "status": "in_progress", "content": []}
        empty = {**part, "text": ""}
        for kind, fields in (
            ("response.created", {"response": response_object(body, rid, "in_progress", [], None)}),
            ("response.in_progress", {"response": response_object(body, rid, "in_progress", [], None)}),
            ("response.output_item.added", {"output_index": 0, "item": started}),
            (
                "response.content_part.added",
                {"item_id": mid, "output_index": 0, "content_index": 0, "part": empty},
            ),
            *(
                (
                    "response.output_text.delta",
                    {"item_id": mid, "output_index": 0, "content_index": 0, "delta": word, "logprobs": []},
                )
                for word in WORDS
            ),
            (
                "response.output_text.done",
                {"item_id": mid, "output_index": 0, "content_index": 0, "text": REPLY, "logprobs": []},
            ),
            (
                "response.content_part.done",
                {"item_id": mid, "output_index": 0, "content_index": 0, "part": part},
            ),
            ("response.output_item.done", {"output_index": 0, "item": item}),
            (
                "response.completed",
                {"response": response_object(body, rid, "completed", [item], response_usage(tokens))},
            ),
        ):
            yield kind, {"type": kind, "sequence_number": next(seq), **fields}

    return sse(events())


# --- Anthropic Messages -----------------------------------------------------------------------


def anthropic_problem(messages: Any) -> str | None:
    """What the Messages API rejects: an empty message, a `tool_result` not answering a `tool_use`
    of the message before, a `tool_use` not answered in the message after."""
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, message in enumerate(messages):
        content = message.get("content")
        if not content:
            return f"messages.{i}: all messages must have non-empty content"
        before = messages[i - 1].get("content") if i else None
        uses = {b["id"] for b in before if b.get("type") == "tool_use"} if isinstance(before, list) else set()
        blocks = content if isinstance(content, list) else []
        answered = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        if answered - uses:
            return f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {sorted(answered - uses)}"
        if uses - answered and message.get("role") == "user":
            return f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after"
    return None


def anthropic_prompt(body: dict[str, Any]) -> int:
    return prompt_tokens(body.get("system"), body.get("messages"), body.get("tools"))


def anthropic_error(status: int, kind: str, message: str) -> Response:
    return json_response({"type": "error", "error": {"type": kind, "message": message}}, status)


async def messages(request: Request) -> Response:
    recorder: Recorder = request.app.state.recorder
    raw = await request.body()
    recorder.record(request, raw)
    body = orjson.loads(raw)
    if not isinstance(body.get("max_tokens"), int):
        return anthropic_error(400, "invalid_request_error", "max_tokens: Field required")
    if problem := anthropic_problem(body.get("messages")):
        return anthropic_error(400, "invalid_request_error", problem)
    tokens = anthropic_prompt(body)
    if tokens > recorder.window:
        return anthropic_error(
            400, "invalid_request_error", f"prompt is too long: {tokens} tokens > {recorder.window} maximum"
        )
    n = next(recorder.ids)
    cached = recorder.cached("messages", body.get("system"), body.get("messages"), body.get("tools"))
    usage = {
        "input_tokens": tokens - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }
    message = message_object(
        n, body, [{"type": "text", "text": REPLY}], "end_turn", {**usage, "output_tokens": 6}
    )
    if body.get("stream") is not True:
        return json_response(message)

    def events() -> Iterator[tuple[str | None, Any]]:
        start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        yield "message_start", {"type": "message_start", "message": start}
        yield (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
        yield "ping", {"type": "ping"}
        for word in WORDS:
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": word},
                },
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": 0}
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {**usage, "output_tokens": 6},
            },
        )
        yield "message_stop", {"type": "message_stop"}

    return sse(events())


async def count_tokens(request: Request) -> Response:
    recorder: Recorder = request.app.state.recorder
    raw = await request.body()
    recorder.record(request, raw)
    return json_response({"input_tokens": anthropic_prompt(orjson.loads(raw))})


# --- OpenAI Chat Completions (and Azure's deployment paths) -----------------------------------


async def chat(request: Request) -> Response:
    recorder: Recorder = request.app.state.recorder
    raw = await request.body()
    recorder.record(request, raw)
    body = orjson.loads(raw)
    tokens = prompt_tokens(body.get("messages"), body.get("tools"))
    if tokens > recorder.window:
        return json_response(
            {
                "error": {
                    "message": f"This model's maximum context length is {recorder.window} tokens. However, "
                    f"your messages resulted in {tokens} tokens. Please reduce the length of the messages.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
            400,
        )
    model = request.path_params.get("deployment") or body.get("model", "")
    usage: dict[str, Any] = {"prompt_tokens": tokens, "completion_tokens": 6, "total_tokens": tokens + 6}
    if recorder.prompt_cache:
        cached = recorder.cached("chat", body.get("messages"), body.get("tools"))
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    base = {"id": f"chatcmpl-{next(recorder.ids)}", "created": int(time.time()), "model": model}
    if body.get("stream") is not True:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": REPLY},
            "finish_reason": "stop",
            "logprobs": None,
        }
        return json_response({**base, "object": "chat.completion", "choices": [choice], "usage": usage})

    def events() -> Iterator[tuple[str | None, Any]]:
        chunk = {**base, "object": "chat.completion.chunk"}
        delta = {"role": "assistant", "content": REPLY}
        yield None, {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        yield None, {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}
        yield None, b"[DONE]"

    return sse(events())


async def recorded(request: Request) -> Response:
    recorder: Recorder = request.app.state.recorder
    if request.method == "DELETE":
        recorder.received.clear()
    return json_response(recorder.received)


async def models(request: Request) -> Response:
    return json_response(
        {"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "t"}]}
    )


def create_app(window: int, prompt_cache: bool = False) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/openai/deployments/{deployment}/chat/completions", chat, methods=["POST"]),
            Route("/v1/deployments/{deployment}/chat/completions", chat, methods=["POST"]),
            Route("/_recorded", recorded, methods=["GET", "DELETE"]),
            Route("/v1/models", models),
        ]
    )
    app.state.recorder = Recorder(window, prompt_cache)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--window", type=int, default=4000)
    parser.add_argument("--prompt-cache", action="store_true", help="report cached prompt tokens")
    args = parser.parse_args()
    app = create_app(args.window, args.prompt_cache)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
