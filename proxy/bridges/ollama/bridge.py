"""An OpenAI chat request as Ollama's native `/api/chat` request, and its answer back (pure).

The translation follows what Ollama's own OpenAI layer does (`openai/openai.go` and
`middleware/openai.go`, v0.33), so the model sees the prompt it would have seen through `/v1`, with
one difference: `options.num_ctx`, the window the proxy compacted for. Whatever that layer cannot
carry faithfully (`n` > 1, `logprobs`, audio, image URLs that are not base64 data, arguments that
are not JSON, fields it does not know) makes `to_ollama_chat` answer None, and the request goes to
`/v1` as it is.

Answers come back as a Chat Completions object, or as SSE chunks (a role chunk first, content and
tool-call deltas, a finish chunk, the usage chunk when `stream_options.include_usage` asks for it,
then `data: [DONE]`), with `usage` from `prompt_eval_count` and `eval_count`.
"""

from __future__ import annotations

import base64
import binascii
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from proxy.errors import error_body

Body = dict[str, Any]

# Fields both paths handle alike: translated, or ignored by Ollama's `/v1` as well.
TRANSLATED = frozenset(
    {
        "model",
        "messages",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "seed",
        "stop",
        "frequency_penalty",
        "presence_penalty",
        "response_format",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "reasoning",
        "reasoning_effort",
        "user",
        "n",
        "logprobs",
        # Ollama's own fields, which an OpenAI client can add through `extra_body`:
        "options",
        "keep_alive",
        "think",
    }
)
# Ollama's reasoning levels for OpenAI's `reasoning_effort` (openai.go, thinkFromReasoningEffort).
THINK_LEVELS: dict[str, bool | str] = {
    "none": False,
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "max",
    "xhigh": "max",
    "ultra": "max",
}
IMAGE_PREFIXES = (
    "data:image/jpeg;base64,",
    "data:image/jpg;base64,",
    "data:image/png;base64,",
    "data:image/webp;base64,",
    "data:;base64,",
)


class Untranslatable(ValueError):
    """The request has something the native API cannot carry as `/v1` would."""


def to_ollama_chat(body: Body, *, num_ctx: int, num_predict: int | None = None) -> Body | None:
    """The native request for an OpenAI chat request, with `options.num_ctx`; None if it cannot be
    carried faithfully. `num_predict` overrides the reply limit (when the proxy clamped it)."""
    try:
        return _to_ollama_chat(body, num_ctx, num_predict)
    except Untranslatable:
        return None


def _to_ollama_chat(body: Body, num_ctx: int, num_predict: int | None) -> Body:
    if not TRANSLATED.issuperset(body) or body.get("n") not in (None, 1) or body.get("logprobs"):
        raise Untranslatable
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise Untranslatable
    native: Body = {
        "model": body.get("model"),
        "messages": _messages(messages),
        "stream": body.get("stream") is True,  # Ollama streams unless told not to; OpenAI the other way
        "options": _options(body, num_ctx, num_predict),
    }
    if tools := body.get("tools"):
        native["tools"] = tools
    if (format_ := _format(body.get("response_format"))) is not None:
        native["format"] = format_
    if (think := _think(body)) is not None:
        native["think"] = think
    if "keep_alive" in body:
        native["keep_alive"] = body["keep_alive"]
    return native


def _messages(messages: list[Any]) -> list[Body]:
    """openai.go's FromChatRequest: content parts become one message each; tool results are named."""
    native: list[Body] = []
    for message in messages:
        if not isinstance(message, dict) or not isinstance(role := message.get("role"), str):
            raise Untranslatable
        role = role.lower()
        content = message.get("content")
        calls = message.get("tool_calls")
        extra: Body = {}
        if calls:
            extra["tool_calls"] = _tool_calls(calls)
        if role == "tool":
            name = message.get("name") or _tool_name(messages, message.get("tool_call_id"))
            if name:
                extra["tool_name"] = name
        if isinstance(message.get("tool_call_id"), str):
            extra["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("reasoning"), str) and message["reasoning"]:
            extra["thinking"] = message["reasoning"]
        if isinstance(content, str):
            native.append({"role": role, "content": content, **extra})
        elif isinstance(content, list) and content:
            native.extend({"role": role, **_part(part)} for part in content)
            native[-1].update(extra)
        elif content is None and calls:
            native.append({"role": role, "content": "", **extra})
        else:
            raise Untranslatable
    return native


def _part(part: Any) -> Body:
    if not isinstance(part, dict):
        raise Untranslatable
    if part.get("type") == "text" and isinstance(part.get("text"), str):
        return {"content": part["text"]}
    if part.get("type") == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        if isinstance(url, str) and url.startswith(IMAGE_PREFIXES):
            data = url.partition(";base64,")[2]
            try:
                base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise Untranslatable from None
            return {"content": "", "images": [data]}
    raise Untranslatable  # audio, files, image URLs to fetch: `/v1` answers those itself


def _tool_calls(calls: Any) -> list[Body]:
    if not isinstance(calls, list):
        raise Untranslatable
    native = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("arguments"), str):
            raise Untranslatable
        try:
            arguments = orjson.loads(function["arguments"])
        except orjson.JSONDecodeError:
            raise Untranslatable from None
        if not isinstance(arguments, dict):
            raise Untranslatable
        entry: Body = {"function": {"name": function.get("name"), "arguments": arguments}}
        if isinstance(call.get("id"), str):
            entry["id"] = call["id"]
        native.append(entry)
    return native


def _tool_name(messages: list[Any], call_id: Any) -> str | None:
    """The function a tool result answers, found by its call id (the last call with that id wins)."""
    for message in reversed(messages):
        for call in message.get("tool_calls") or () if isinstance(message, dict) else ():
            if (
                isinstance(call, dict)
                and call.get("id") == call_id
                and isinstance(call.get("function"), dict)
            ):
                name = call["function"].get("name")
                return name if isinstance(name, str) else None
    return None


def _options(body: Body, num_ctx: int, num_predict: int | None) -> Body:
    # `/v1` sends temperature and top_p 1.0 when the request has none (OpenAI's defaults), not the
    # Modelfile's: so does the proxy. Ollama options given through `extra_body` come next.
    options: Body = {"temperature": 1.0, "top_p": 1.0}
    if isinstance(given := body.get("options"), dict):
        options.update(given)
    for name in ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty"):
        if body.get(name) is not None:
            options[name] = body[name]
    stop = body.get("stop")
    if isinstance(stop, str):
        options["stop"] = [stop]
    elif isinstance(stop, list):
        options["stop"] = [s for s in stop if isinstance(s, str)]
    limit = num_predict or body.get("max_completion_tokens") or body.get("max_tokens")
    if limit is not None:
        options["num_predict"] = limit
    options.setdefault("num_ctx", num_ctx)
    return options


def _format(response_format: Any) -> Any:
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        schema = response_format.get("json_schema")
        return schema.get("schema") if isinstance(schema, dict) else None
    if kind == "text":
        return None
    raise Untranslatable


def _think(body: Body) -> Any:
    if "think" in body:
        return body["think"]
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else body.get("reasoning_effort")
    if effort in (None, ""):
        return None
    if effort not in THINK_LEVELS:
        raise Untranslatable  # `/v1` answers its own error for it
    return THINK_LEVELS[effort]


# The answer back.


def usage(answer: Body) -> Body:
    prompt = _count(answer.get("prompt_eval_count"))
    completion = _count(answer.get("eval_count"))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _openai_tool_calls(calls: Any, first_index: int = 0) -> list[Body]:
    out = []
    for i, call in enumerate(calls if isinstance(calls, list) else ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            continue
        index = first_index + i
        out.append(
            {
                "id": call.get("id") or f"call_{uuid.uuid4().hex[:8]}",
                "index": index,
                "type": "function",
                "function": {
                    "name": function.get("name", ""),
                    "arguments": orjson.dumps(function.get("arguments") or {}).decode(),
                },
            }
        )
    return out


def _finish_reason(answer: Body, tool_calls: bool) -> str | None:
    reason = answer.get("done_reason") or ("stop" if answer.get("done") else None)
    return "tool_calls" if reason == "stop" and tool_calls else reason


def _message(answer: Body) -> Body:
    message = answer.get("message")
    return message if isinstance(message, dict) else {}


def chat_completion(answer: Body, completion_id: str) -> Body:
    """A whole native answer as a Chat Completions object."""
    message = _message(answer)
    calls = _openai_tool_calls(message.get("tool_calls"))
    reply: Body = {"role": "assistant", "content": message.get("content") or ""}
    if calls:
        reply["tool_calls"] = calls
    if message.get("thinking"):
        reply["reasoning"] = message["thinking"]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": answer.get("model", ""),
        "system_fingerprint": "fp_ollama",
        "choices": [{"index": 0, "message": reply, "finish_reason": _finish_reason(answer, bool(calls))}],
        "usage": usage(answer),
    }


def error_from_ollama(status: int, content: bytes) -> bytes:
    """Ollama's `{"error": "..."}` in OpenAI's shape (as its `/v1` says it)."""
    try:
        parsed = orjson.loads(content)
        message = parsed.get("error") if isinstance(parsed, dict) else None
    except orjson.JSONDecodeError:
        message = None
    if not isinstance(message, str):
        message = content.decode("utf-8", "replace").strip() or f"The upstream answered {status}."
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "api_error")
    code = "context_length_exceeded" if "context length" in message else None
    return error_body(message, type=kind, code=code)


@dataclass
class SseTranslator:
    """Native NDJSON stream lines in, Chat Completions SSE events out (middleware/openai.go's
    ChatWriter): one stream's state."""

    completion_id: str
    include_usage: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    model: str = ""
    started: bool = False
    tool_calls: int = 0
    done: bool = False
    prompt_eval_count: int | None = None

    def line(self, line: bytes) -> bytes:
        """The SSE bytes for one NDJSON line (often none)."""
        if not line.strip() or self.done:
            return b""
        try:
            answer = orjson.loads(line)
        except orjson.JSONDecodeError:
            answer = {"error": "The upstream sent a line that is not JSON."}
        if not isinstance(answer, dict):
            answer = {"error": "The upstream sent an unexpected line."}
        if "error" in answer:
            self.done = True
            error = answer["error"] if isinstance(answer["error"], str) else str(answer["error"])
            return b"data: " + error_body(error, type="api_error", code="upstream_stream_error") + b"\n\n"
        self.model = answer.get("model") or self.model
        message = _message(answer)
        out = []
        delta: Body = {}
        if message.get("thinking"):
            delta["reasoning"] = message["thinking"]
        if message.get("content"):
            delta["content"] = message["content"]
        calls = _openai_tool_calls(message.get("tool_calls"), self.tool_calls)
        if calls:
            delta["tool_calls"] = calls
            self.tool_calls += len(calls)
        if delta or not self.started:
            if not self.started:
                delta = {"role": "assistant", "content": delta.pop("content", ""), **delta}
                self.started = True
            out.append(self._chunk([{"index": 0, "delta": delta, "finish_reason": None}]))
        if answer.get("done"):
            self.done = True
            self.prompt_eval_count = _count(answer.get("prompt_eval_count")) or None
            reason = _finish_reason(answer, self.tool_calls > 0) or "stop"
            out.append(self._chunk([{"index": 0, "delta": {}, "finish_reason": reason}]))
            if self.include_usage:
                out.append(self._chunk([], usage=usage(answer)))
            out.append(b"data: [DONE]\n\n")
        return b"".join(out)

    def _chunk(self, choices: list[Body], **extra: Any) -> bytes:
        chunk = {
            "id": self.completion_id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_ollama",
            "choices": choices,
            **extra,
        }
        return b"data: " + orjson.dumps(chunk) + b"\n\n"


@dataclass(frozen=True, slots=True)
class OllamaBridge:
    """How one OpenAI chat goes to Ollama's native API: with this window, streamed or not."""

    num_ctx: int
    stream: bool = False
    include_usage: bool = False
    path: ClassVar[str] = "/api/chat"  # from the server's root

    @classmethod
    def for_request(cls, body: Body, num_ctx: int) -> OllamaBridge:
        options = body.get("stream_options")
        usage_asked = isinstance(options, dict) and options.get("include_usage") is True
        return cls(num_ctx, stream=body.get("stream") is True, include_usage=usage_asked)

    def request_bytes(self, body: Body, num_predict: int | None = None) -> bytes:
        """The native request for `body` (already compacted). It was checked translatable before."""
        native = to_ollama_chat(body, num_ctx=self.num_ctx, num_predict=num_predict)
        if native is None:
            raise ValueError("compaction made the request untranslatable")  # it only shortens strings
        return orjson.dumps(native)


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"
