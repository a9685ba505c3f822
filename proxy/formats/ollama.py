"""Ollama's native chat API (`/api/chat`), read into the neutral conversation and written back.

Ollama's messages (api/types.go, `Message`, v0.12) differ from the neutral ones: `images` beside a
string `content` (base64, no media type), `thinking` for the reasoning, assistant `tool_calls`
whose `function.arguments` is an object and whose `id` may be missing, tool results named by
`tool_name` (or, in newer versions, `tool_call_id`). The neutral conversation has image parts the
counter counts, `reasoning_content`, calls with ids and JSON-string arguments, each result linked
to the call it answers (its `tool_call_id`, else the latest unanswered call of its `tool_name`,
else the oldest unanswered call), and the reply limit `options.num_predict` as `max_tokens`.
The request may set its own window (`options.num_ctx`); answers stream as NDJSON by default and
report the prompt's size as `prompt_eval_count`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from proxy.counting.tokens import PROMPT_FIELDS, fragment_text, text_of, token_count
from proxy.engine.markers import merged_content
from proxy.engine.plan import Body, ChatPlan, validated_messages
from proxy.engine.refusal import Refusal
from proxy.errors import ContextOverflowError, ProxyError
from proxy.formats.base import Conversation, with_decisions
from proxy.formats.chat import ChatCompletions
from proxy.formats.sources import Part

Message = dict[str, Any]


class OllamaChat(ChatCompletions):
    reply_field = "options.num_predict"

    def __init__(self) -> None:
        super().__init__(name="ollama")

    def read(self, body: Body, params: Mapping[str, str]) -> Conversation:
        messages = validated_messages(body)
        options = body.get("options")
        options = options if isinstance(options, dict) else {}
        request: Body = {"model": body.get("model") or "", "messages": _neutral_messages(messages)}
        request.update({key: body[key] for key in PROMPT_FIELDS if key in body})
        if (reply := token_count(options.get("num_predict"))) is not None:
            request["max_tokens"] = reply
        sources = [(Part(i),) for i in range(len(messages))]
        return Conversation(request, sources, window=token_count(options.get("num_ctx")))

    def write(self, body: Body, conversation: Conversation, plan: ChatPlan) -> Body:
        changed = with_decisions(
            body, "messages", conversation, plan, item_with=_with_note, marker=_marker, merge=_merge
        )
        if plan.max_tokens is not None:
            options = body.get("options")
            changed["options"] = {
                **(options if isinstance(options, dict) else {}),
                "num_predict": plan.max_tokens,
            }
        return changed

    def streamed(self, body: Body) -> bool:
        return body.get("stream") is not False

    @staticmethod
    def error_body(status: int, message: str, type: str, code: str | None, param: str | None) -> bytes:
        """Ollama's own error shape (`{"error": "..."}`, api/types.go), which its clients raise."""
        return orjson.dumps({"error": message})

    def overflow_message(self, refusal: Refusal) -> str:
        """Ollama's own wording ("input length exceeds maximum context length")."""
        return (
            f"input length exceeds maximum context length ({refusal.tokens} tokens > {refusal.maximum}). "
            f"{refusal.detail}"
        )

    def overflow_error(self, refusal: Refusal, *, streamed: bool) -> ContextOverflowError:
        """In Ollama's own shape whatever the path; a 400 for a streamed request too."""
        return ContextOverflowError(
            self.overflow_message(refusal), param=refusal.field or "messages", shape=self.error_body
        )


def _neutral_messages(messages: Sequence[Message]) -> list[Message]:
    """Ollama's messages in the neutral form, each result linked to the call it answers."""
    out: list[Message] = []
    unanswered: list[tuple[int, str, str]] = []  # (assistant message, call id, tool name), in order
    for i, message in enumerate(messages):
        role = message["role"]
        neutral: Message = {"role": role, "content": _content(message, i)}
        if isinstance(thinking := message.get("thinking"), str) and thinking:
            neutral["reasoning_content"] = thinking
        if role == "assistant" and (calls := message.get("tool_calls")):
            neutral["tool_calls"] = [_call(call, i, j) for j, call in enumerate(calls)]
            unanswered += [(i, c["id"], c["function"]["name"]) for c in neutral["tool_calls"]]
        elif role == "tool":
            neutral["tool_call_id"] = _answered(message, unanswered, i)
            if isinstance(name := message.get("tool_name"), str):
                neutral["name"] = name  # what the result's note names, when it answers no call
        out.append(neutral)
    return out


def _content(message: Message, index: int) -> Any:
    """Text and the images beside it as content parts (the counter reads an image's size from its
    header; Ollama's images are bare base64)."""
    content = message.get("content")
    text = (
        content
        if isinstance(content, str)
        else ""
        if content is None
        else json.dumps(content, default=fragment_text)
    )
    images = message.get("images")
    if not images:
        return text
    if not isinstance(images, list):
        raise ProxyError(
            400, f"messages[{index}].images must be an array.", param=f"messages[{index}].images"
        )
    parts: list[Message] = [{"type": "text", "text": text}] if text else []
    for image in images:
        url = image if isinstance(image, str) else ""
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _call(call: Any, index: int, position: int) -> Message:
    if not isinstance(call, dict) or not isinstance(function := call.get("function"), dict):
        field = f"messages[{index}].tool_calls[{position}]"
        raise ProxyError(400, f"{field} must be an object with a function.", param=field)
    arguments = function.get("arguments")
    call_id = call.get("id")
    return {
        "id": call_id if isinstance(call_id, str) and call_id else f"ollama-call-{index}-{position}",
        "type": "function",
        "function": {
            "name": str(function.get("name") or ""),
            "arguments": arguments
            if isinstance(arguments, str)
            else json.dumps(arguments, default=fragment_text),
        },
    }


def _answered(message: Message, unanswered: list[tuple[int, str, str]], index: int) -> str:
    """The id of the call a result answers (then no longer unanswered): its own `tool_call_id`;
    else by its `tool_name`, the first unanswered call of that name in the latest assistant message
    that has one (parallel calls of one tool are answered in their order); else the oldest
    unanswered call."""
    wanted = message.get("tool_call_id")
    if isinstance(wanted, str) and wanted:
        for k, (_, call_id, _) in enumerate(unanswered):
            if call_id == wanted:
                del unanswered[k]
                break
        return wanted
    name = message.get("tool_name")
    named = [k for k, call in enumerate(unanswered) if call[2] == name]
    if named:
        latest = unanswered[named[-1]][0]
        k = next(k for k in named if unanswered[k][0] == latest)
        return unanswered.pop(k)[1]
    if unanswered:
        return unanswered.pop(0)[1]
    return f"ollama-result-{index}"  # answers no call: an orphan result, kept with its neighbours


def _with_note(item: Message, blocks: set[int], notes: Mapping[int | None, Any]) -> Message:
    """A result noted or capped: its text is the note's; images stay only where the note keeps them."""
    note = notes.get(None)
    noted = {k: v for k, v in item.items() if k != "images"}
    if not isinstance(note, list):
        return {**noted, "content": note if isinstance(note, str) else text_of(note)}
    images = [p["image_url"]["url"] for p in note if isinstance(p, dict) and p.get("type") == "image_url"]
    return {**noted, "content": text_of(note), **({"images": images} if images else {})}


def _marker(text: str, role: str) -> Message:
    return {"role": role, "content": text}


def _merge(item: Message, before: Sequence[str], after: Sequence[str]) -> Message:
    return {**item, "content": merged_content(item.get("content") or "", before, after)}
