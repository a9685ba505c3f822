"""Anthropic Messages (`/v1/messages`): a top-level `system` and alternating user/assistant messages
whose content is a string or a list of blocks.

Read into the neutral conversation: `system` (string or blocks) leads and is never compacted; an
assistant message is one turn, its `tool_use` blocks its tool calls, its `thinking` blocks staying
with it; each `tool_result` block of a user message is a tool result paired by `tool_use_id`, and
the user message's other blocks, if any, a user turn after them. Written back block by block: a
noted `tool_result` keeps its other fields (`cache_control`, `is_error`); a dropped one goes with
the `tool_use` it answers, so no result is ever left without its call. A dropped-run marker merged
into an assistant message is a text block after its thinking blocks; no block is added with
`cache_control`, so the request never carries more of those markers than it came with.

A request that asks for the server's own context management (`context_management`) is left alone
only where the server implements it (`AnthropicMessages.server_manages_context`); elsewhere the edits a
proxy can apply faithfully are applied first (`proxy.formats.anthropic_context_edits`), the field is
not forwarded (strict servers refuse it), the answer reports what was applied as Anthropic's API does
(`proxy.formats.anthropic_edit_report`), and the request is compacted like any other. A model that
binds its thinking blocks to the conversation loses those the proxy's changes invalidate
(`proxy.formats.anthropic_thinking`).
Shapes follow anthropic-sdk-python's `MessageCreateParams` and llama.cpp's
`server_chat_convert_anthropic_to_oai`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.bodies.jsonbody import dump_json, parse_json_object
from proxy.counting.estimator import estimate_text_tokens
from proxy.counting.tokens import json_text, token_count
from proxy.engine.plan import Body, ChatPlan
from proxy.engine.refusal import Refusal
from proxy.errors import ContextOverflowError, ProxyError, anthropic_error
from proxy.formats.anthropic_context_edits import apply_context_edits
from proxy.formats.anthropic_edit_report import AppliedEdits, applied_edits
from proxy.formats.anthropic_thinking import (
    refused_for_unbound_thinking,
    thinking_dropped,
    unbound_thinking_dropped,
)
from proxy.formats.base import (
    Conversation,
    Message,
    rebuild,
    rewrite_items,
    source_field,
    sse_error_event,
    str_field,
)
from proxy.formats.sources import Part

TOOL_USES = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
THINKING = frozenset({"thinking", "redacted_thinking"})
THINKING_OR_TOOL_USES = TOOL_USES | THINKING
USAGE_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class AnthropicMessages:
    name = "messages"
    reply_field = "max_tokens"

    def read(self, body: Body, params: Mapping[str, str]) -> Conversation | None:
        items = body.get("messages")
        if not isinstance(items, list):
            raise ProxyError(400, "messages: Field required, an array of messages.", param="messages")
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise ProxyError(400, "model: must be a string.", param="model")
        messages: list[Message] = []
        sources: list[tuple[Part, ...]] = []
        if body.get("system") is not None:
            messages.append({"role": "system", "content": _chat_content(body["system"])})
            sources.append(())
        for index, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get("role"), str):
                raise ProxyError(
                    400, f"messages.{index}: must be an object with a string role.", param=f"messages.{index}"
                )
            _read_message(index, item, messages, sources)
        request: Body = {"model": model or "", "messages": messages}
        if isinstance(tools := body.get("tools"), list):
            request["tools"] = [_chat_tool(tool) for tool in tools]
        if (reply := token_count(body.get("max_tokens"))) is not None:
            request["max_tokens"] = reply
        thinking = body.get("thinking")
        enabled = isinstance(thinking, dict) and thinking.get("type") == "enabled"
        if enabled and (budget := token_count(thinking.get("budget_tokens"))) is not None:  # type: ignore[union-attr]
            request["thinking_budget"] = budget  # kept under a lowered max_tokens
        return Conversation(request, sources)

    def write(self, body: Body, conversation: Conversation, plan: ChatPlan) -> Body:
        changed = dict(body)
        if plan.result.changed:
            rebuilt = rebuild(conversation, plan)
            changed["messages"] = rewrite_items(
                body["messages"], rebuilt, item_with=_with_note, marker=_marker, merge=merge_marker_texts
            )
            changed = unbound_thinking_dropped(body, changed)
        if plan.max_tokens is not None:
            changed["max_tokens"] = plan.max_tokens
        if plan.thinking_budget is not None:
            # Anthropic: 1024 <= budget_tokens < max_tokens, else thinking off.
            budget = plan.thinking_budget
            changed["thinking"] = (
                {**body["thinking"], "budget_tokens": budget} if budget else {"type": "disabled"}
            )
        return changed

    def streamed(self, body: Body) -> bool:
        return body.get("stream") is True

    def reported_prompt_tokens(self, tail: bytes) -> int | None:
        """The whole prompt of the last `usage` object: fresh input plus cache writes and reads."""
        usage = _last_usage(tail)
        if usage is None or "input_tokens" not in usage:
            return None
        return sum(token_count(usage.get(key)) or 0 for key in USAGE_KEYS) or None

    error_body = staticmethod(anthropic_error)

    def overflow_message(self, refusal: Refusal) -> str:
        """Anthropic's own wording ("prompt is too long: N tokens > M maximum"), which Claude Code
        matches to start its own compaction."""
        return f"prompt is too long: {refusal.tokens} tokens > {refusal.maximum} maximum. {refusal.detail}"

    def overflow_error(self, refusal: Refusal, *, streamed: bool) -> ContextOverflowError:
        return ContextOverflowError(self.overflow_message(refusal), param=refusal.field or "messages")

    def client_field(self, body: Body, conversation: Conversation, index: int) -> str:
        return source_field(conversation, index, items="messages", outside="system")

    def server_manages_context(self, body: Body, *, upstream_host: str, upstream_kind: str) -> bool:
        """`context_management` is Anthropic's own API's (or a server configured as one):
        llama.cpp, vLLM, Ollama and LiteLLM ignore it, so for them the proxy compacts."""
        asks = body.get("context_management") is not None
        return asks and (upstream_kind == "anthropic" or upstream_host == "api.anthropic.com")

    def context_edits(self, body: Body) -> Body:
        """The `clear_thinking` and `clear_tool_uses` edits `context_management` asks for, applied
        by the proxy for a server that does not, and the field itself taken out: it is done."""
        if "context_management" not in body:
            return body
        edited = apply_context_edits(body, _prompt_estimate, _part_estimate)
        return unbound_thinking_dropped(body, {k: v for k, v in edited.items() if k != "context_management"})

    def context_report(self, original: Body, edited: Body) -> AppliedEdits | None:
        """`context_management.applied_edits` for the answer, once the proxy applied the edits."""
        if original.get("context_management") is None or "context_management" in edited:
            return None
        return applied_edits(original, edited)

    def resend_after(self, sent: bytes, status: int, error: bytes) -> bytes | None:
        """After the API refused `sent` for a thinking block bound to another conversation (or a
        signature it no longer takes): the same request without thinking blocks, which it takes."""
        if not refused_for_unbound_thinking(status, error):
            return None
        again = thinking_dropped(parse_json_object(sent))
        return None if again is None else dump_json(again)

    def stream_error_event(self, message: str) -> bytes:
        """Anthropic's `error` event, on which its SDK raises."""
        error = {"type": "api_error", "message": message}
        return sse_error_event({"type": "error", "error": error}, event="error")


def _read_message(
    index: int, item: dict[str, Any], messages: list[Message], sources: list[tuple[Part, ...]]
) -> None:
    role, content = item["role"], item.get("content")
    if not isinstance(content, list):
        messages.append({"role": role, "content": _chat_content(content)})
        sources.append((Part(index),))
        return
    kinds = [str_field(b.get("type")) if isinstance(b, dict) else None for b in content]
    if role == "assistant":
        message: Message = {"role": "assistant", "content": None}
        calls = [_call(b) for b, kind in zip(content, kinds, strict=True) if kind in TOOL_USES]
        thinking = [b.get("thinking") for b, kind in zip(content, kinds, strict=True) if kind == "thinking"]
        rest = [b for b, kind in zip(content, kinds, strict=True) if kind not in THINKING_OR_TOOL_USES]
        if rest:
            message["content"] = _chat_content(rest)
        if thinking:
            message["reasoning_content"] = "\n".join(t for t in thinking if isinstance(t, str))
        if calls:
            message["tool_calls"] = calls
        messages.append(message)
        sources.append((Part(index),))
        return
    results = [
        b
        for b, kind in enumerate(kinds)
        if kind == "tool_result" and isinstance(content[b].get("tool_use_id"), str)
    ]
    if not results:
        messages.append({"role": role, "content": _chat_content(content)})
        sources.append((Part(index),))
        return
    for b in results:
        block = content[b]
        result = _chat_content(block.get("content", ""))
        messages.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": result})
        sources.append((Part(index, b),))
    answered = set(results)
    rest = [b for b in range(len(content)) if b not in answered]
    if rest:
        messages.append({"role": role, "content": _chat_content([content[b] for b in rest])})
        sources.append(tuple(Part(index, b) for b in rest))


def _chat_content(content: Any) -> Any:
    """Content as Chat Completions writes it (what a chat template and `/tokenize` accept): text
    blocks as text parts, images as image parts, anything else as its JSON text."""
    if not isinstance(content, list):
        return content if isinstance(content, str) or content is None else json_text(content)
    parts: list[Any] = []
    for block in content:
        kind = str_field(block.get("type")) if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and isinstance(source := block.get("source"), dict):
            url = source.get("url") or f"data:{source.get('media_type')};base64,{source.get('data')}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            parts.append({"type": "text", "text": json_text(block)})
    return parts


def _chat_tool(tool: Any) -> Any:
    """A client tool in Chat Completions' shape; a server tool (no schema) as it is."""
    if not (isinstance(tool, dict) and isinstance(tool.get("name"), str) and "input_schema" in tool):
        return tool
    function = {"name": tool["name"], "parameters": tool["input_schema"]}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _call(block: dict[str, Any]) -> dict[str, Any]:
    arguments = block.get("input")
    return {
        "id": block.get("id"),
        "type": "function",
        "function": {
            "name": block.get("name"),
            "arguments": json_text(arguments if arguments is not None else {}),
        },
    }


def _with_note(item: dict[str, Any], blocks: set[int], notes: Mapping[int | None, Any]) -> dict[str, Any]:
    content = item["content"]
    kept = [
        {**block, "content": notes[b]} if b in notes else block
        for b, block in enumerate(content)
        if b not in blocks
    ]
    return {**item, "content": kept}


def _marker(text: str, role: str) -> dict[str, Any]:
    return {"role": role, "content": text}


def merge_marker_texts(item: dict[str, Any], before: Sequence[str], after: Sequence[str]) -> dict[str, Any]:
    """Marker texts in an assistant message: as text blocks before its other blocks (after its
    thinking blocks, which must lead) and after them; into a string content as text."""
    content = item.get("content")
    if not isinstance(content, list):
        own = [content] if isinstance(content, str) and content else []
        return {**item, "content": "\n\n".join([*before, *own, *after])}
    lead = 0
    while lead < len(content) and isinstance(content[lead], dict) and content[lead].get("type") in THINKING:
        lead += 1
    blocks = [{"type": "text", "text": text} for text in before]
    tail = [{"type": "text", "text": text} for text in after]
    return {**item, "content": [*content[:lead], *blocks, *content[lead:], *tail]}


def _last_usage(tail: bytes) -> dict[str, Any] | None:
    at = tail.rfind(b'"usage"')
    start = tail.find(b"{", at) if at >= 0 else -1
    if start < 0:
        return None
    try:
        usage, _ = json.JSONDecoder().raw_decode(tail[start:].decode("utf-8", "replace"))
    except ValueError:
        return None
    return usage if isinstance(usage, dict) else None


def _prompt_estimate(body: Body) -> int:
    return estimate_text_tokens(json_text({k: body.get(k) for k in ("system", "messages", "tools")}))


def _part_estimate(part: object) -> int:
    return estimate_text_tokens(json_text(part))
