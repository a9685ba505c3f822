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

from proxy.counting.tokens import text_of, token_count
from proxy.engine.plan import Body, ChatPlan
from proxy.engine.refusal import Refusal
from proxy.errors import ContextOverflowError, ProxyError
from proxy.formats.base import (
    Conversation,
    Message,
    last_count,
    source_field,
    sse_error_event,
    with_decisions,
)
from proxy.formats.gemini_read import Calls, chat_tools, read_content, system_text
from proxy.formats.sources import Part
from proxy.formats.stateless import StatelessServer

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


class Gemini(StatelessServer):
    """The Gemini API's `generateContent` (`stream=False`) or `streamGenerateContent`: its server
    keeps no history, every request carries all of it."""

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
            messages.append({"role": "system", "content": system_text(system)})
            sources.append(())
        calls = Calls()
        for index, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("parts", []), list):
                field = f"contents[{index}]"
                raise ProxyError(400, f"{field}: must be a Content with a parts array.", param=field)
            read_content(index, item, messages, sources, calls)
        request: Body = {"model": params.get("model", ""), "messages": messages}
        if tools := chat_tools(body.get("tools")):
            request["tools"] = tools
        config = body.get("generationConfig")
        if isinstance(config, dict) and (reply := token_count(config.get("maxOutputTokens"))) is not None:
            request["max_tokens"] = reply
        return Conversation(request, sources)

    def write(self, body: Body, conversation: Conversation, plan: ChatPlan) -> Body:
        changed = with_decisions(
            body, "contents", conversation, plan, item_with=_with_note, marker=_marker, merge=_merge
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
        return last_count(_PROMPT_TOKENS, tail)

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


def _with_limit(config: dict[str, Any], limit: int) -> dict[str, Any]:
    """`generationConfig` with the clamped reply limit; a fixed thinking budget the limit no longer
    holds (thoughts count in the output) lowered to half of it, so the answer keeps room."""
    out = {**config, "maxOutputTokens": limit}
    thinking = config.get("thinkingConfig")
    budget = thinking.get("thinkingBudget") if isinstance(thinking, dict) else None
    if isinstance(thinking, dict) and (fixed := token_count(budget)) is not None and fixed >= limit:
        out["thinkingConfig"] = {**thinking, "thinkingBudget": limit // 2}
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
