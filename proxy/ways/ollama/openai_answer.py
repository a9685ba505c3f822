"""Ollama's native chat answer as OpenAI's Chat Completions answer (pure).

Follows Ollama's own OpenAI layer (`openai/openai.go` and `middleware/openai.go`, v0.33). A whole
answer becomes a Chat Completions object; a stream's NDJSON lines become SSE chunks (a role chunk
first, content and tool-call deltas, a finish chunk, the usage chunk when
`stream_options.include_usage` asks for it, then `data: [DONE]`), with `usage` from
`prompt_eval_count` and `eval_count`. Ollama's errors get OpenAI's error shape.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.errors import openai_error_body
from proxy.formats import CHAT

Body = dict[str, Any]


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


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
    return openai_error_body(message, type=kind, code=code)


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
            return CHAT.stream_error_event(error)  # the OpenAI client's own error event
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
