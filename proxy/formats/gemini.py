"""Google's Gemini API (`/v1beta/models/{model}:generateContent` and `:streamGenerateContent`).

A request has `contents` (roles `user` and `model`, each a list of `parts`: `text`, `thought`
text, `functionCall {id, name, args}` with its `thoughtSignature` beside it, `functionResponse {id,
name, response}`, `inlineData`, `fileData`), `systemInstruction` and `tools` (the fixed part, never
compacted) and `generationConfig.maxOutputTokens` (the reply limit; a fixed `thinkingConfig.thinkingBudget`
is lowered with it when the proxy clamps it). The model is the path's.

Read into the neutral conversation: `systemInstruction` leads; a `model` content is one assistant
turn (its text parts the content, thought parts the reasoning, `functionCall` parts its calls, with
ids); each `functionResponse` part of a `user` content is a tool result linked to the call it
answers (its `id`, else the first unanswered call of its `name` in the latest model turn that has
one, else the oldest unanswered call), and the content's other parts a user turn after them.
Written back part by part: a kept model content goes as it came (its `thoughtSignature`s with it),
a noted result keeps its `id` and `name` with the note as `response.output`, a dropped result goes
with the call it answers. The stream is plain `data: {candidates, usageMetadata}` events with no
event names and no `[DONE]`; the prompt size is `usageMetadata.promptTokenCount`. Shapes follow
googleapis/js-genai 1.30 (`src/types.ts`, the REST field names) as Gemini CLI 0.61 sends them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from proxy.counting.tokens import json_text, text_of
from proxy.engine.chat import Body, ChatPlan
from proxy.engine.refusal import Refusal
from proxy.errors import ContextOverflowError, ProxyError
from proxy.formats.base import (
    Conversation,
    Message,
    Part,
    int_field,
    rebuild,
    rewrite_items,
    source_field,
    sse_error_event,
    str_field,
)

# google.rpc.Code names by HTTP status (what the API's `error.status` says).
STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_PROMPT_TOKENS = re.compile(rb'"promptTokenCount"\s*:\s*(\d+)')


def gemini_error(
    status: int, message: str, type: str = "", code: str | None = None, param: str | None = None
) -> bytes:
    """Google's error shape (`{"error": {code, message, status}}`), on which `@google/genai` raises
    an `ApiError` with the status."""
    name = STATUS_NAMES.get(status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")
    return orjson.dumps({"error": {"code": status, "message": message, "status": name}})


class Gemini:
    """The Gemini API's `generateContent` (`stream=False`) or `streamGenerateContent`."""

    reply_field = "generationConfig.maxOutputTokens"

    def __init__(self, *, stream: bool) -> None:
        self.stream = stream
        self.name = "gemini"

    def read(self, body: Body, params: Mapping[str, str]) -> Conversation:
        items = body.get("contents")
        if not isinstance(items, list):
            raise ProxyError(400, "contents: must be an array of Content.", param="contents")
        messages: list[Message] = []
        sources: list[tuple[Part, ...]] = []
        if (system := body.get("systemInstruction")) is not None:
            messages.append({"role": "system", "content": _system_text(system)})
            sources.append(())
        calls = _Calls()
        for index, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("parts", []), list):
                field = f"contents[{index}]"
                raise ProxyError(400, f"{field}: must be a Content with a parts array.", param=field)
            _read_content(index, item, messages, sources, calls)
        request: Body = {"model": params.get("model", ""), "messages": messages}
        if tools := _chat_tools(body.get("tools")):
            request["tools"] = tools
        config = body.get("generationConfig")
        if isinstance(config, dict) and (reply := int_field(config.get("maxOutputTokens"))) is not None:
            request["max_tokens"] = reply
        return Conversation(request, sources)

    def write(self, body: Body, conversation: Conversation, plan: ChatPlan) -> Body:
        changed = dict(body)
        if plan.result.changed:
            changed["contents"] = rewrite_items(
                body["contents"],
                rebuild(conversation, plan),
                item_with=_with_note,
                marker=_marker,
                merge=_merge,
            )
        if plan.max_tokens is not None:
            config = body.get("generationConfig")
            changed["generationConfig"] = _with_limit(
                config if isinstance(config, dict) else {}, plan.max_tokens
            )
        return changed

    def streamed(self, body: Body) -> bool:
        return self.stream  # the method in the path says, not the body

    def reported_prompt_tokens(self, tail: bytes) -> int | None:
        matches = _PROMPT_TOKENS.findall(tail)
        return int(matches[-1]) if matches else None

    error_body = staticmethod(gemini_error)

    def overflow_message(self, refusal: Refusal) -> str:
        """The Gemini API's own wording, then the detail."""
        return (
            f"The input token count ({refusal.tokens}) exceeds the maximum number of tokens allowed "
            f"({refusal.maximum}). {refusal.detail}"
        )

    def overflow_error(self, refusal: Refusal, *, streamed: bool) -> ContextOverflowError:
        """A 400 `INVALID_ARGUMENT` before any stream, as the API answers it."""
        return ContextOverflowError(
            self.overflow_message(refusal), param=refusal.field or "contents", shape=gemini_error
        )

    def stream_error_event(self, message: str) -> bytes:
        """A `data: {"error": ...}` event, on which `@google/genai` raises (`processStreamResponse`)."""
        return sse_error_event({"error": {"code": 502, "message": message, "status": "UNAVAILABLE"}})

    def client_field(self, body: Body, conversation: Conversation, index: int) -> str:
        return source_field(conversation, index, items="contents", outside="systemInstruction")

    def server_manages_context(self, body: Body, *, upstream_host: str, upstream_kind: str) -> bool:
        return False  # the Gemini API keeps no history: every request carries all of it

    def context_edits(self, body: Body) -> Body:
        return body


class _Calls:
    """The calls not answered yet, in order: (model content, neutral id, name, the call's own id)."""

    def __init__(self) -> None:
        self.open: list[tuple[int, str, str, str | None]] = []

    def add(self, index: int, position: int, call: dict[str, Any]) -> str:
        own = str_field(call.get("id")) or None
        neutral = own or f"gemini-call-{index}-{position}"
        self.open.append((index, neutral, str_field(call.get("name")) or "", own))
        return neutral

    def answer(self, response: dict[str, Any], index: int, block: int) -> str:
        """The neutral id of the call `response` answers: the call with its `id`; else (Gemini CLI
        gives ids to the results of calls that came without one) the first unanswered call of its
        `name` in the latest model turn that has one; else the oldest unanswered call."""
        own = str_field(response.get("id"))
        matched = [k for k, entry in enumerate(self.open) if own and entry[3] == own]
        if not matched:
            named = [k for k, entry in enumerate(self.open) if entry[2] == response.get("name")]
            if named:
                latest = self.open[named[-1]][0]
                matched = [next(k for k in named if self.open[k][0] == latest)]
        if not matched and self.open:
            matched = [0]
        if matched:
            return self.open.pop(matched[0])[1]
        return own or f"gemini-result-{index}-{block}"  # answers no call: an orphan, kept with its neighbours


def _read_content(
    index: int, item: dict[str, Any], messages: list[Message], sources: list[tuple[Part, ...]], calls: _Calls
) -> None:
    parts = [p if isinstance(p, dict) else {} for p in item.get("parts") or []]
    if item.get("role") == "model":
        message: Message = {"role": "assistant", "content": None}
        texts = [p for p in parts if "functionCall" not in p and p.get("thought") is not True]
        thoughts = [p["text"] for p in parts if p.get("thought") is True and isinstance(p.get("text"), str)]
        tool_calls = [
            _call(calls.add(index, j, p["functionCall"]), p["functionCall"])
            for j, p in enumerate(parts)
            if isinstance(p.get("functionCall"), dict)
        ]
        if texts:
            message["content"] = _chat_content(texts)
        if thoughts:
            message["reasoning_content"] = "\n".join(thoughts)
        if tool_calls:
            message["tool_calls"] = tool_calls
        messages.append(message)
        sources.append((Part(index),))
        return
    results = [b for b, p in enumerate(parts) if isinstance(p.get("functionResponse"), dict)]
    if not results:
        messages.append({"role": "user", "content": _chat_content(parts)})
        sources.append((Part(index),))
        return
    for b in results:
        response = parts[b]["functionResponse"]
        call_id = calls.answer(response, index, b)
        result: Message = {"role": "tool", "tool_call_id": call_id, "content": _result_text(response)}
        if isinstance(name := response.get("name"), str):
            result["name"] = name
        messages.append(result)
        sources.append((Part(index, b),))
    answered = set(results)
    rest = [b for b in range(len(parts)) if b not in answered]
    if rest:
        messages.append({"role": "user", "content": _chat_content([parts[b] for b in rest])})
        sources.append(tuple(Part(index, b) for b in rest))


def _with_limit(config: dict[str, Any], limit: int) -> dict[str, Any]:
    """`generationConfig` with the clamped reply limit; a fixed thinking budget the limit no longer
    holds (thoughts count in the output) lowered to half of it, so the answer keeps room."""
    out = {**config, "maxOutputTokens": limit}
    thinking = config.get("thinkingConfig")
    budget = thinking.get("thinkingBudget") if isinstance(thinking, dict) else None
    if isinstance(thinking, dict) and (fixed := int_field(budget)) is not None and fixed >= limit:
        out["thinkingConfig"] = {**thinking, "thinkingBudget": limit // 2}
    return out


def _call(call_id: str, call: dict[str, Any]) -> Message:
    args = call.get("args")
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": str_field(call.get("name")) or "",
            "arguments": json_text(args if args is not None else {}),
        },
    }


def _result_text(response: dict[str, Any]) -> str:
    """A function's result as text: Gemini CLI's `{"output": text}` as that text, else its JSON."""
    value = response.get("response")
    if isinstance(value, dict) and set(value) == {"output"} and isinstance(value["output"], str):
        return value["output"]
    extra = {k: v for k, v in response.items() if k not in ("id", "name")}
    return json_text(extra)


def _system_text(system: Any) -> Any:
    if isinstance(system, str):
        return system
    if isinstance(system, dict):
        return _chat_content([p for p in system.get("parts") or [] if isinstance(p, dict)])
    return json_text(system)


def _chat_content(parts: Sequence[dict[str, Any]]) -> Any:
    """Parts as Chat Completions content: text as text, images as image parts, the rest (files,
    code, executable results) as their JSON text."""
    out: list[Any] = []
    for part in parts:
        data = part.get("inlineData")
        if isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        elif isinstance(data, dict) and str(data.get("mimeType", "")).startswith("image/"):
            url = f"data:{data.get('mimeType')};base64,{data.get('data', '')}"
            out.append({"type": "image_url", "image_url": {"url": url}})
        else:
            out.append({"type": "text", "text": json_text(part)})
    return out


def _chat_tools(tools: Any) -> list[Any]:
    """Function declarations as Chat Completions tools; any other tool (search, code execution) as
    it is, counted whole."""
    out: list[Any] = []
    for tool in tools if isinstance(tools, list) else ():
        declarations = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        if not isinstance(declarations, list):
            out.append(tool)
            continue
        for declaration in declarations:
            if not isinstance(declaration, dict):
                continue
            function: Message = {"name": str_field(declaration.get("name")) or ""}
            if isinstance(description := declaration.get("description"), str):
                function["description"] = description
            schema = declaration.get("parametersJsonSchema", declaration.get("parameters"))
            if schema is not None:
                function["parameters"] = schema
            out.append({"type": "function", "function": function})
    return out


def _with_note(item: dict[str, Any], blocks: set[int], notes: Mapping[int | None, Any]) -> dict[str, Any]:
    """A user content without its dropped results, its noted ones answering with the note."""
    kept = []
    for b, part in enumerate(item.get("parts") or []):
        if b in blocks:
            continue
        if b in notes and isinstance(response := part.get("functionResponse"), dict):
            note = notes[b]
            text = note if isinstance(note, str) else text_of(note)
            part = {**part, "functionResponse": {**response, "response": {"output": text}}}
        kept.append(part)
    return {**item, "parts": kept}


def _marker(text: str, role: str) -> dict[str, Any]:
    return {"role": "model" if role == "assistant" else "user", "parts": [{"text": text}]}


def _merge(item: dict[str, Any], before: Sequence[str], after: Sequence[str]) -> dict[str, Any]:
    """Marker texts in a model content: before its parts (after its leading thoughts) and after."""
    parts = list(item.get("parts") or [])
    lead = 0
    while lead < len(parts) and isinstance(parts[lead], dict) and parts[lead].get("thought") is True:
        lead += 1
    head = [{"text": text} for text in before]
    tail = [{"text": text} for text in after]
    return {**item, "parts": [*parts[:lead], *head, *parts[lead:], *tail]}
