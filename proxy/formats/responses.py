"""OpenAI Responses (`/v1/responses`): `instructions` plus `input`, a string or a list of items.

Read into the neutral conversation: `instructions` and leading system/developer items lead (never
compacted); user items are user turns; everything the model produced between two of those (output
messages, reasoning, `function_call`, `custom_tool_call` and other calls) is one assistant turn, so
a reasoning item stays with the call that follows it; each `*_output` item is a tool result paired
by `call_id`. Only `function_call_output` and `custom_tool_call_output` results are ever noted (the
others, screenshots or shell output objects, have no plain text to shorten).

Left alone: a request that continues a stored response (`previous_response_id`: the history is on
the server). A request that asks the server to compact (`context_management`, or a `compaction`
item) is left alone only where the server does that (`Responses.server_manages_context`);
elsewhere it is compacted like any other, the field taken out (the proxy does it) and a `compaction`
item counted whole.
Shapes follow the openai-python 3.x `ResponseCreateParams` types and llama.cpp's
`server_chat_convert_responses_to_chatcmpl` (which accepts an assistant item only with
`"type": "message"` and `output_text` parts, hence the markers' shape, and merges consecutive
assistant items into one chat message, so a marker beside an assistant turn joins it).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

import orjson
from starlette.responses import Response

from proxy.counting.tokens import json_text, text_of, token_count
from proxy.engine.plan import Body, ChatPlan
from proxy.engine.refusal import Refusal
from proxy.errors import ContextOverflowError, ErrorShape, ProxyError, openai_error
from proxy.formats.base import (
    Conversation,
    Message,
    last_count,
    source_field,
    sse_error_event,
    str_field,
    with_decisions,
)
from proxy.formats.sources import ItemRuns

NOTED_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
SERVER_COMPACTION = frozenset({"compaction", "compaction_summary"})
USER_SIDE_ROLES = frozenset({"user", "system", "developer"})
_INPUT_TOKENS = re.compile(rb'"input_tokens"\s*:\s*(\d+)')
Functions = dict[tuple[str, str], dict[str, str]]  # a call's neutral `function`, by name and arguments


class Responses:
    name = "responses"
    reply_field = "max_output_tokens"

    def read(self, body: Body, params: Mapping[str, str]) -> Conversation | None:
        if body.get("previous_response_id") is not None:
            return None
        items = body.get("input")
        if items is None:
            return None  # nothing to compact (a stored prompt, say): the server judges it
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise ProxyError(400, "'model' must be a string.", param="model")
        messages: list[Message] = []
        sources = ItemRuns()
        instructions = body.get("instructions")
        if instructions is not None:
            messages.append({"role": "system", "content": instructions})
            sources.append(0, 0)
        if isinstance(items, str):
            messages.append({"role": "user", "content": items})
            sources.append(0, 1)
        elif isinstance(items, list):
            _read_items(items, messages, sources)
        else:
            raise ProxyError(400, "'input' must be a string or an array of input items.", param="input")
        request: Body = {"model": model or "", "messages": messages}
        if isinstance(tools := body.get("tools"), list):
            request["tools"] = [_chat_tool(tool) for tool in tools]
        if (reply := token_count(body.get("max_output_tokens"))) is not None:
            request["max_tokens"] = reply
        return Conversation(request, sources)

    def write(self, body: Body, conversation: Conversation, plan: ChatPlan) -> Body:
        changed = with_decisions(body, "input", conversation, plan, item_with=_with_note, marker=_marker)
        if plan.max_tokens is not None:
            changed["max_output_tokens"] = plan.max_tokens
        return changed

    def streamed(self, body: Body) -> bool:
        return body.get("stream") is True

    def reported_prompt_tokens(self, tail: bytes) -> int | None:
        return last_count(_INPUT_TOKENS, tail)

    error_body = staticmethod(openai_error)

    def overflow_message(self, refusal: Refusal) -> str:
        """OpenAI's Responses wording, then its chat wording (clients match either)."""
        return (
            f"Your input exceeds the context window of this model: its maximum context length is "
            f"{refusal.window} tokens, and your input resulted in {refusal.tokens} tokens. {refusal.detail} "
            "Please reduce the length of the messages."
        )

    def overflow_error(self, refusal: Refusal, *, streamed: bool) -> ContextOverflowError:
        error = FailedResponse if streamed else ContextOverflowError
        return error(self.overflow_message(refusal), param=refusal.field or "input")

    def client_field(self, body: Body, conversation: Conversation, index: int) -> str:
        field = source_field(conversation, index, items="input", outside="instructions")
        return "input" if field != "instructions" and isinstance(body.get("input"), str) else field

    def server_manages_context(self, body: Body, *, upstream_host: str, upstream_kind: str) -> bool:
        """`context_management` and `compaction` items are OpenAI's own API's: llama.cpp, vLLM and
        LiteLLM ignore them, so for them the proxy compacts."""
        items = body.get("input")
        asks = body.get("context_management") is not None or (
            isinstance(items, list)
            and any(isinstance(i, dict) and str_field(i.get("type")) in SERVER_COMPACTION for i in items)
        )
        return asks and upstream_host == "api.openai.com"

    def context_edits(self, body: Body) -> Body:
        """`context_management` taken out: the proxy compacts in the server's place (a strict server
        refuses the field). The answer reports nothing: OpenAI's `Response` has no field for it (its
        server's compaction shows as a `compaction` output item, which would replace the history)."""
        if "context_management" not in body:
            return body
        return {k: v for k, v in body.items() if k != "context_management"}

    def context_report(self, original: Body, edited: Body) -> None:
        return None  # the answer has no field for it (see `context_edits`)

    def resend_after(self, sent: bytes, status: int, error: bytes) -> None:
        return None

    def stream_error_event(self, message: str) -> bytes:
        """An `error` event, whose `error` object also makes the openai SDK raise."""
        error = {"message": message, "type": "upstream_error", "param": None, "code": "upstream_stream_error"}
        event = {"type": "error", "code": error["code"], "message": message, "param": None, "error": error}
        return sse_error_event(event, event="error")


class FailedResponse(ContextOverflowError):
    """A streamed request's overflow, answered as OpenAI's stream answers it: a `response.failed`
    event with code `context_length_exceeded`. That, not a 400, is what Codex starts its compaction on."""

    def to_response(self, headers: dict[str, str] | None = None, shape: ErrorShape | None = None) -> Response:
        return Response(
            failed_response_stream(self.message, self.code or "context_length_exceeded", self.param),
            status_code=200,
            media_type="text/event-stream",
            headers=headers,
        )


def failed_response_stream(message: str, code: str, param: str | None) -> bytes:
    """A Responses stream that fails at once: `response.created`, then `response.failed` carrying
    the error (the events OpenAI's Responses API streams for a request it cannot run)."""
    rid = "resp_" + uuid.uuid4().hex
    base = {"id": rid, "object": "response", "created_at": int(time.time()), "output": []}
    created = {
        "type": "response.created",
        "sequence_number": 0,
        "response": {**base, "status": "in_progress"},
    }
    error = {"code": code, "message": message, "param": param, "type": "invalid_request_error"}
    failed = {
        "type": "response.failed",
        "sequence_number": 1,
        "response": {**base, "status": "failed", "error": error},
    }
    return b"".join(
        f"event: {event['type']}\ndata: ".encode() + orjson.dumps(event) + b"\n\n"
        for event in (created, failed)
    )


def _read_items(items: list[Any], messages: list[Message], sources: ItemRuns) -> None:
    turn: Message | None = None  # the assistant turn being gathered, from item `turn_start` on
    turn_start = 0
    functions: Functions = {}

    def close_turn(end: int) -> None:
        nonlocal turn
        if turn is not None:
            if not turn["content"]:
                turn["content"] = None
            messages.append(turn)
            sources.append(turn_start, end)
        turn = None

    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise ProxyError(400, f"input[{index}] must be an object.", param=f"input[{index}]")
        kind, role, call_id = str_field(item.get("type")), str_field(item.get("role")), item.get("call_id")
        if kind in (None, "message") and role in USER_SIDE_ROLES:
            close_turn(index)
            messages.append({"role": role, "content": _chat_content(item.get("content"))})
            sources.append(index, index + 1)
        elif kind is not None and kind.endswith("_output") and isinstance(call_id, str):
            close_turn(index)
            output = item.get("output")
            # Results with no text to shorten (a screenshot, a shell's output objects) are never noted.
            content = _chat_content(output) if kind in NOTED_OUTPUTS else [_unnoted(output)]
            messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
            sources.append(index, index + 1)
        else:
            if turn is None:
                turn, turn_start = {"role": "assistant", "content": []}, index
            _add_to_turn(turn, item, kind, call_id, functions)
    close_turn(len(items))


def _add_to_turn(
    turn: Message, item: dict[str, Any], kind: str | None, call_id: Any, functions: Functions
) -> None:
    """One item the model produced, in a neutral assistant message: calls as `tool_calls`,
    reasoning as `reasoning_content`, text as text parts. An agent makes the same call many times
    (a test run, `git status`): equal calls share their `function` (`functions`, by name and
    arguments)."""
    if isinstance(call_id, str):
        arguments = item.get("arguments")
        if not isinstance(arguments, str):  # custom tools take free text, others an action: as JSON
            arguments = json_text(item.get("input", item.get("action", {})))
        name = str_field(item.get("name")) or kind or "tool"
        # Equal calls share one function object (none is changed in place: a note or a cap copies).
        function = functions.setdefault((name, arguments), {"name": name, "arguments": arguments})
        call = {"id": call_id, "type": "function", "function": function}
        calls = turn.get("tool_calls")
        if calls is None:  # a list of one, not `setdefault`'s spare room: most turns make one call
            turn["tool_calls"] = [call]
        else:
            calls.append(call)
    elif kind == "reasoning":
        texts = [text_of(item.get("summary")), text_of(item.get("content"))]
        turn["reasoning_content"] = "\n".join(filter(None, [turn.get("reasoning_content"), *texts]))
    elif kind in (None, "message"):
        content = _chat_content(item.get("content"))
        turn["content"].extend(content if isinstance(content, list) else [{"type": "text", "text": content}])
    else:  # references, server-side tool calls: counted whole
        turn["content"].append(_as_text(item))


def _chat_content(content: Any) -> Any:
    """Content as Chat Completions writes it (what a chat template and `/tokenize` accept)."""
    if not isinstance(content, list):
        return content if isinstance(content, str) else json_text(content)
    parts: list[Any] = []
    for part in content:
        kind = str_field(part.get("type")) if isinstance(part, dict) else None
        if kind in ("input_text", "output_text", "text") and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image":
            parts.append(
                {"type": "image_url", "image_url": {"url": part.get("image_url") or part.get("file_id")}}
            )
        else:
            parts.append(_as_text(part))
    return parts


def _chat_tool(tool: Any) -> Any:
    """A function tool in Chat Completions' shape; any other tool as it is."""
    if not (isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("name"), str)):
        return tool
    function = {k: v for k, v in tool.items() if k in ("name", "description", "parameters")}
    return {"type": "function", "function": function}


def _as_text(value: Any) -> dict[str, Any]:
    return {"type": "text", "text": json_text(value)}


def _unnoted(output: Any) -> dict[str, Any]:
    """A result compaction must not note, as a part with no `text` (what notes shorten): a
    screenshot as the image it is, anything else whole (counted as its JSON)."""
    if isinstance(output, dict) and isinstance(url := output.get("image_url"), str):
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "output", "output": output}


def _with_note(item: dict[str, Any], blocks: set[int], notes: Mapping[int | None, Any]) -> dict[str, Any]:
    return {**item, "output": notes[None]} if None in notes else item


def _marker(text: str, role: str) -> dict[str, Any]:
    # An assistant message's text as `output_text`, as Codex replays it: llama.cpp takes no other
    # part in an assistant item, and folds it into the assistant turn beside it (one chat message).
    part = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": part, "text": text}]}
