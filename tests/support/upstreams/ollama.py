"""A fake Ollama that behaves like the real server where the proxy depends on it.

It follows Ollama v0.33.0-rc2 (github.com/ollama/ollama at fb30760, 2026-08-21), read for this:

- `server/prompt.go` chatPrompt: a prompt longer than the context is cut silently by dropping
  messages from the front (keeping the system messages among them, and always the last message),
  then `llm/llama_server.go` context-shifts a prompt that is still too long. The answer is a 200
  whose `prompt_eval_count` is the size of what was kept (cache_n + prompt_n: the whole prompt).
- `server/routes.go`: the context is `options.num_ctx`, else the Modelfile's `num_ctx`, else the
  server's default (`OLLAMA_CONTEXT_LENGTH`, else 4,096 below 24 GiB of VRAM), never more than the
  trained length; a request with another `num_ctx` reloads the model (`needsReload`); `/api/ps` shows
  the context a loaded model runs at, `/api/show` the Modelfile's parameters and
  `model_info["<arch>.context_length"]`, `/api/version` the version. Errors are `{"error": "..."}`.
- `openai/openai.go`, `middleware/openai.go`: `/v1/chat/completions` translates to the same chat and
  ignores `options` (so it always runs at the default context); its answer is a Chat Completions
  object or SSE chunks ending in `data: [DONE]`, usage from `prompt_eval_count` and `eval_count`.
- `api/types.go`: native tool calls carry `arguments` as an object, tool results `tool_name`,
  streams are NDJSON lines ending in one with `done: true`, `done_reason` and the counts.

Tokens are counted as a llama3.x model's runner counts them: Meta's Llama 3 vocabulary over a
llama-3-style template (its special tokens one each), so the proxy's count by the model's name is
short of it only by the template, as against a real Ollama. Every request, answer, model load and
truncation is recorded for the tests.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from proxy.counting.tokenizers import load_text_counter

VERSION = "0.33.0-rc2"
DEFAULT_CONTEXT = 4096  # the default below 24 GiB of VRAM
IMAGE_TOKENS = 768  # prompt.go counts each image as this many tokens
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")

Message = dict[str, Any]


def count_tokens(text: str) -> int:
    """What a llama3.x model's runner counts: Meta's Llama 3 vocabulary (the copy the proxy's default
    install bundles), each of the template's special tokens one."""
    llama3 = load_text_counter("llama3")
    return sum(map(llama3, _SPECIAL.split(text))) + len(_SPECIAL.findall(text))


def render(messages: list[Message], tools: list[Any] | None) -> str:
    """A llama-3-style chat template: what the model reads."""
    parts = ["<|begin_of_text|>"]
    if tools:
        parts.append(f"<|start_header_id|>system<|end_header_id|>\n\nTools: {json.dumps(tools)}<|eot_id|>")
    for m in messages:
        body = m.get("content") or ""
        for call in m.get("tool_calls") or ():
            body += json.dumps(
                {"name": call["function"]["name"], "parameters": call["function"]["arguments"]}
            )
        parts.append(f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{body}<|eot_id|>")
    parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(parts)


def prompt_size(messages: list[Message], tools: list[Any] | None) -> int:
    return count_tokens(render(messages, tools)) + IMAGE_TOKENS * sum(
        len(m.get("images") or ()) for m in messages
    )


@dataclass(frozen=True)
class ModelSpec:
    trained: int = 131072  # model_info["llama.context_length"]
    num_ctx: int | None = None  # PARAMETER num_ctx in its Modelfile


@dataclass(frozen=True)
class Truncation:
    route: str
    model: str
    num_ctx: int
    prompt_tokens: int  # what the whole request would have been
    read_tokens: int  # what the model read
    dropped_messages: int


@dataclass(frozen=True)
class Answer:
    route: str
    model: str
    num_ctx: int
    prompt_eval_count: int


@dataclass
class FakeOllama:
    models: dict[str, ModelSpec] = field(default_factory=lambda: {"llama3.2:3b": ModelSpec()})
    default_context: int = DEFAULT_CONTEXT
    requests: list[tuple[str, Any]] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)  # each `/v1/chat/completions` body, as it came
    answers: list[Answer] = field(default_factory=list)
    truncations: list[Truncation] = field(default_factory=list)
    loads: list[tuple[str, int]] = field(default_factory=list)
    loaded: dict[str, tuple[int, bool]] = field(default_factory=dict)  # model -> (num_ctx, auto)
    base_url: str = ""

    # -- the chat itself (routes.go ChatHandler + prompt.go chatPrompt) --

    def chat(self, route: str, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        model = request.get("model")
        spec = self.models.get(model) if isinstance(model, str) else None
        if spec is None:
            return 404, {"error": f"model '{model}' not found"}
        messages = request.get("messages") or []
        options = request.get("options") or {}
        asked = options.get("num_ctx")
        auto = asked is None and spec.num_ctx is None
        num_ctx = min(asked or spec.num_ctx or self.default_context, spec.trained)
        self._load(model, num_ctx, auto)
        num_ctx = self.loaded[model][0]
        tools = request.get("tools")
        full = prompt_size(messages, tools)
        start = 0
        for i in range(len(messages)):
            kept = [m for m in messages[:i] if m["role"] == "system"] + messages[i:]
            if prompt_size(kept, tools) <= num_ctx or i == len(messages) - 1:
                start = i
                break
        kept = [m for m in messages[:start] if m["role"] == "system"] + messages[start:]
        read = prompt_size(kept, tools)
        if read > num_ctx - 1:  # llama_server.go: a context shift keeps the start and the end
            read = num_ctx - max(num_ctx // 2, 1)
        if start or read < full:
            self.truncations.append(Truncation(route, model, num_ctx, full, read, len(messages) - len(kept)))
        self.answers.append(Answer(route, model, num_ctx, read))
        return 200, self._reply(model, messages, tools, read, options)

    def _load(self, model: str, num_ctx: int, auto: bool) -> None:
        current = self.loaded.get(model)
        if current and (current[0] == num_ctx or (current[1] and auto)):
            return
        self.loaded[model] = (num_ctx, auto)
        self.loads.append((model, num_ctx))

    def _reply(
        self, model: str, messages: list[Message], tools: Any, read: int, options: dict[str, Any]
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": ""}
        if tools and messages and messages[-1].get("role") == "user":
            function = tools[0]["function"]
            message["tool_calls"] = [
                {
                    "id": f"call_{len(self.answers):08d}",
                    "function": {"index": 0, "name": function["name"], "arguments": _arguments(function)},
                }
            ]
        else:
            message["content"] = f"Noted: I read {read} tokens of this chat."
        limit = options.get("num_predict")
        done_reason = "stop"
        if isinstance(limit, int) and 0 < limit < count_tokens(message["content"]):
            message["content"] = "Noted"
            done_reason = "length"
        return {
            "model": model,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime()),
            "message": message,
            "done": True,
            "done_reason": done_reason,
            "total_duration": 1000,
            "load_duration": 10,
            "prompt_eval_count": read,
            "prompt_eval_duration": 100,
            "eval_count": max(1, count_tokens(message["content"])),
            "eval_duration": 100,
        }

    # -- HTTP --

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/api/version", self.version, methods=["GET", "HEAD"]),
                Route("/api/ps", self.ps, methods=["GET"]),
                Route("/api/show", self.show, methods=["POST"]),
                Route("/api/tags", self.tags, methods=["GET"]),
                Route("/api/chat", self.native_chat, methods=["POST"]),
                Route("/v1/models", self.openai_models, methods=["GET"]),
                Route("/v1/chat/completions", self.openai_chat, methods=["POST"]),
            ]
        )

    async def version(self, request: Request) -> Response:
        self.requests.append(("/api/version", None))
        return JSONResponse({"version": VERSION})

    async def ps(self, request: Request) -> Response:
        self.requests.append(("/api/ps", None))
        models = [
            {
                "name": name,
                "model": name,
                "size": 1,
                "digest": "d",
                "details": {},
                "expires_at": "2099-01-01T00:00:00Z",
                "size_vram": 1,
                "context_length": num_ctx,
            }
            for name, (num_ctx, _) in self.loaded.items()
        ]
        return JSONResponse({"models": models})

    async def show(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(("/api/show", body))
        spec = self.models.get(body.get("model"))
        if spec is None:
            return JSONResponse({"error": f"model '{body.get('model')}' not found"}, status_code=404)
        parameters = 'stop                           "<|eot_id|>"'
        if spec.num_ctx:
            parameters += f"\nnum_ctx                        {spec.num_ctx}"
        return JSONResponse(
            {
                "parameters": parameters,
                "template": "{{ .Messages }}",
                "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B"},
                "model_info": {"general.architecture": "llama", "llama.context_length": spec.trained},
                "capabilities": ["completion", "tools"],
            }
        )

    async def tags(self, request: Request) -> Response:
        return JSONResponse({"models": [{"name": name, "model": name} for name in self.models]})

    async def openai_models(self, request: Request) -> Response:
        data = [{"id": name, "object": "model", "created": 0, "owned_by": "library"} for name in self.models]
        return JSONResponse({"object": "list", "data": data})

    async def native_chat(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        self.requests.append(("/api/chat", body))
        status, answer = self.chat("/api/chat", body)
        if status != 200 or body.get("stream") is False:
            return JSONResponse(answer, status_code=status)
        return StreamingResponse(_ndjson(answer), media_type="application/x-ndjson")

    async def openai_chat(self, request: Request) -> Response:
        self.bodies.append(await request.body())
        try:
            body = await request.json()
        except ValueError as exc:
            return _openai_error(400, str(exc))
        self.requests.append(("/v1/chat/completions", body))
        native = {  # openai.go FromChatRequest: `options` is not read, so no num_ctx
            "model": body.get("model"),
            "messages": [_native_message(m, body["messages"]) for m in body.get("messages", [])],
            "tools": body.get("tools"),
            "options": {"num_predict": body["max_tokens"]} if body.get("max_tokens") else {},
        }
        status, answer = self.chat("/v1/chat/completions", native)
        if status != 200:
            return _openai_error(status, answer["error"])
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(_sse(answer, include_usage), media_type="text/event-stream")
        return JSONResponse(_completion(answer))


def _arguments(function: dict[str, Any]) -> dict[str, Any]:
    """Arguments a model might fill in for a tool: one plausible value per required parameter."""
    parameters = function.get("parameters") or {}
    properties = parameters.get("properties") or {}
    samples = {"integer": 4471, "number": 1.5, "array": ["SC-1001"], "boolean": True}
    return {
        name: samples.get(properties.get(name, {}).get("type"), "wheel")
        for name in parameters.get("required") or []
    }


async def _ndjson(answer: dict[str, Any]) -> AsyncIterator[bytes]:
    message = answer["message"]
    content = message.get("content", "")
    pieces = [content[i : i + 12] for i in range(0, len(content), 12)]
    base = {"model": answer["model"], "created_at": answer["created_at"], "done": False}
    for piece in pieces:
        yield json.dumps({**base, "message": {"role": "assistant", "content": piece}}).encode() + b"\n"
        await asyncio.sleep(0)
    if message.get("tool_calls"):
        part = {"role": "assistant", "content": "", "tool_calls": message["tool_calls"]}
        yield json.dumps({**base, "message": part}).encode() + b"\n"
    done = {**answer, "message": {"role": "assistant", "content": ""}}
    yield json.dumps(done).encode() + b"\n"


def _native_message(message: dict[str, Any], messages: list[dict[str, Any]]) -> Message:
    native: Message = {"role": message["role"], "content": ""}
    content = message.get("content")
    if isinstance(content, str):
        native["content"] = content
    elif isinstance(content, list):
        native["content"] = "".join(p.get("text", "") for p in content if p.get("type") == "text")
        native["images"] = [
            p["image_url"]["url"].partition(",")[2] for p in content if p.get("type") == "image_url"
        ]
    if message.get("tool_calls"):
        native["tool_calls"] = [
            {
                "id": c.get("id"),
                "function": {
                    "name": c["function"]["name"],
                    "arguments": json.loads(c["function"]["arguments"]),
                },
            }
            for c in message["tool_calls"]
        ]
    return native


def _openai_tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "id": c["id"],
            "index": i,
            "type": "function",
            "function": {"name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"])},
        }
        for i, c in enumerate(message.get("tool_calls") or ())
    ]


def _usage(answer: dict[str, Any]) -> dict[str, int]:
    p, c = answer["prompt_eval_count"], answer["eval_count"]
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _completion(answer: dict[str, Any]) -> dict[str, Any]:
    calls = _openai_tool_calls(answer["message"])
    message: dict[str, Any] = {"role": "assistant", "content": answer["message"]["content"]}
    if calls:
        message["tool_calls"] = calls
    reason = "tool_calls" if calls and answer["done_reason"] == "stop" else answer["done_reason"]
    return {
        "id": "chatcmpl-123",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": answer["model"],
        "system_fingerprint": "fp_ollama",
        "choices": [{"index": 0, "message": message, "finish_reason": reason}],
        "usage": _usage(answer),
    }


async def _sse(answer: dict[str, Any], include_usage: bool) -> AsyncIterator[bytes]:
    base = {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": answer["model"],
        "system_fingerprint": "fp_ollama",
    }
    calls = _openai_tool_calls(answer["message"])
    delta: dict[str, Any] = {"role": "assistant", "content": answer["message"]["content"]}
    if calls:
        delta["tool_calls"] = calls
    events = [{**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}]
    reason = "tool_calls" if calls and answer["done_reason"] == "stop" else answer["done_reason"]
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    if include_usage:
        events.append({**base, "choices": [], "usage": _usage(answer)})
    for event in events:
        yield b"data: " + json.dumps(event).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def _openai_error(status: int, message: str) -> Response:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": None}}, status_code=status
    )


@contextmanager
def running_fake_ollama(fake: FakeOllama | None = None) -> Iterator[FakeOllama]:
    """Serve a `FakeOllama` on a free loopback port, in a thread with its own event loop."""
    fake = fake or FakeOllama()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    fake.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(fake.app(), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield fake
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()
