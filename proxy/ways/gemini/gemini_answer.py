"""A Chat Completions answer as the Gemini API's (pure).

A whole answer becomes a `GenerateContentResponse`: one candidate whose `content` (role `model`)
has the reasoning as a `thought` part, the text as a text part, each tool call as a `functionCall`
part (its id kept, so the result Gemini CLI sends back links to it), a `finishReason` (`stop` and
`tool_calls` → `STOP`, `length` → `MAX_TOKENS`, `content_filter` → `SAFETY`) and `usageMetadata`
from `usage`. A stream's chunks become plain `data: {...}` events, no event names and no `[DONE]`,
as `@google/genai` reads them: text and thoughts as they come, the tool calls assembled from their
deltas and sent whole in the last event with the finish reason and the usage. Shapes follow
googleapis/js-genai 1.30 (`GenerateContentResponse`) and Gemini CLI 0.61's `geminiChat.ts`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.formats.gemini import gemini_error

Body = dict[str, Any]
FINISH_REASONS = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "function_call": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
}


def response_id() -> str:
    return uuid.uuid4().hex[:22]


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_metadata(usage: Any) -> Body:
    usage = usage if isinstance(usage, dict) else {}
    prompt, completion = _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
    return {
        "promptTokenCount": prompt,
        "candidatesTokenCount": completion,
        "totalTokenCount": _count(usage.get("total_tokens")) or prompt + completion,
    }


def _args(arguments: Any) -> Any:
    if isinstance(arguments, dict):
        return arguments
    try:
        value = orjson.loads(arguments or "{}")
    except (orjson.JSONDecodeError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def function_call(call_id: Any, name: Any, arguments: Any) -> Body:
    call: Body = {"name": name if isinstance(name, str) else "", "args": _args(arguments)}
    if isinstance(call_id, str) and call_id:
        call["id"] = call_id
    return {"functionCall": call}


def _reasoning(message: Body) -> str | None:
    value = message.get("reasoning_content") or message.get("reasoning")
    return value if isinstance(value, str) and value else None


def generate_response(answer: Body, model: str) -> Body:
    """A whole chat completion as a `GenerateContentResponse`."""
    choices = answer.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message = choice.get("message")
    message = message if isinstance(message, dict) else {}
    parts: list[Body] = []
    if (thought := _reasoning(message)) is not None:
        parts.append({"text": thought, "thought": True})
    if isinstance(content := message.get("content"), str) and content:
        parts.append({"text": content})
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            parts.append(function_call(call.get("id"), function.get("name"), function.get("arguments")))
    candidate: Body = {
        "content": {"role": "model", "parts": parts},
        "finishReason": FINISH_REASONS.get(str(choice.get("finish_reason")), "STOP"),
        "index": 0,
    }
    return {
        "candidates": [candidate],
        "usageMetadata": usage_metadata(answer.get("usage")),
        "modelVersion": answer.get("model") or model,
        "responseId": answer.get("id") or response_id(),
    }


def error_from_chat(status: int, content: bytes) -> bytes:
    """A chat server's error (`{"error": {"message"}}`, `{"error": "..."}`) in Google's shape, with
    its status: an overflow stays an overflow ("exceeds the maximum number of tokens")."""
    try:
        parsed = orjson.loads(content)
    except orjson.JSONDecodeError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    if not isinstance(message, str) or not message:
        message = content.decode("utf-8", "replace").strip()[:2000] or f"The upstream answered {status}."
    return gemini_error(status, message)


def event(data: Body) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\r\n\r\n"


@dataclass
class StreamTranslator:
    """Chat Completions SSE `data:` payloads in, Gemini `data:` events out: one stream's state."""

    model: str
    response_id: str = field(default_factory=response_id)
    calls: dict[int, Body] = field(default_factory=dict)  # index -> id, name, argument text
    finish_reason: str | None = None
    usage: Body | None = None
    done: bool = False

    @property
    def prompt_tokens(self) -> int | None:
        return _count(self.usage.get("prompt_tokens")) or None if self.usage else None

    def data(self, payload: bytes) -> bytes:
        """The Gemini events for one chat SSE `data:` payload (often none)."""
        if self.done:
            return b""
        if payload.strip() == b"[DONE]":
            return self.finish()
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            chunk = {"error": {"message": "The upstream sent an event that is not JSON."}}
        if not isinstance(chunk, dict):
            chunk = {"error": {"message": "The upstream sent an unexpected event."}}
        if "error" in chunk:
            self.done = True
            return self.error(error_from_chat(500, orjson.dumps(chunk)))
        self.model = chunk.get("model") or self.model
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        parts: list[Body] = []
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if (thought := _reasoning(delta)) is not None:
                parts.append({"text": thought, "thought": True})
            if isinstance(content := delta.get("content"), str) and content:
                parts.append({"text": content})
            for call in delta.get("tool_calls") or ():
                self._add_call(call)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        if not parts:
            return b""
        return event(self._response({"content": {"role": "model", "parts": parts}, "index": 0}))

    def finish(self) -> bytes:
        """The last event: the assembled calls, the finish reason, the usage."""
        self.done = True
        parts = [
            function_call(c.get("id"), c.get("name"), c.get("arguments"))
            for _, c in sorted(self.calls.items())
        ]
        candidate = {
            "content": {"role": "model", "parts": parts or [{"text": ""}]},
            "finishReason": FINISH_REASONS.get(str(self.finish_reason), "STOP"),
            "index": 0,
        }
        return event({**self._response(candidate), "usageMetadata": usage_metadata(self.usage)})

    def error(self, body: bytes) -> bytes:
        self.done = True
        return b"data: " + body + b"\r\n\r\n"

    def _add_call(self, call: Any) -> None:
        if not isinstance(call, dict):
            return
        index = call["index"] if isinstance(call.get("index"), int) else len(self.calls)
        entry = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
        entry["id"] = call.get("id") or entry["id"]
        function = call.get("function")
        if isinstance(function, dict):
            if isinstance(name := function.get("name"), str) and name:
                entry["name"] = name
            if isinstance(arguments := function.get("arguments"), str):
                entry["arguments"] += arguments

    def _response(self, candidate: Body) -> Body:
        return {"candidates": [candidate], "modelVersion": self.model, "responseId": self.response_id}
