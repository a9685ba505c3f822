"""Anthropic's context edits (`context_management.edits`), applied by the proxy for a server that
does not implement them: `clear_thinking` and `clear_tool_uses`, on the request's Anthropic messages
as they came, before the request is compacted like any other
(`AnthropicMessages.context_edits` decides when).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.engine.chat import Body
from proxy.formats.base import int_field

# Context editing, as Anthropic documents it (docs.claude.com, "Context editing", beta
# `context-management-2025-06-27`): the two strategies a proxy can apply itself, faithfully, for a
# server that does not implement them. Other edit types (`compact_20260112`: a summary the model
# writes) are left to the proxy's own compaction.
CLEAR_THINKING = "clear_thinking_20251015"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEARED_RESULT = "[Tool result cleared to save context. Call the tool again if you need it.]"
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_KEEP_THINKING_TURNS = 1
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


def apply_context_edits(body: Body, count_tokens: Callable[[Body], int]) -> Body:
    """`body` with the edits its `context_management` names applied (the field itself kept as it
    came); `body` itself when none applies. `count_tokens(body)` is the prompt's size, for the
    `input_tokens` triggers."""
    edits = body.get("context_management")
    edits = edits.get("edits") if isinstance(edits, dict) else None
    messages = body.get("messages")
    if not isinstance(edits, list) or not isinstance(messages, list):
        return body
    edited = messages
    for edit in edits:
        kind = edit.get("type") if isinstance(edit, dict) else None
        if kind == CLEAR_THINKING:
            edited = _clear_thinking(edited, edit)
        elif kind == CLEAR_TOOL_USES:
            edited = _clear_tool_uses(edited, edit, lambda m: count_tokens({**body, "messages": m}))
    return body if edited is messages else {**body, "messages": edited}


def _value(spec: Any, kind: str, default: int | None) -> int | None:
    """The `value` of a `{"type": kind, "value": N}` setting, else `default`."""
    if isinstance(spec, dict) and spec.get("type") == kind:
        return int_field(spec.get("value")) if spec.get("value") != 0 else 0
    return default


def _assistant_turns(messages: list[Any]) -> list[int]:
    """The assistant turn each message belongs to (-1 for the others): a turn is everything the
    assistant says between two user messages that are more than tool results."""
    turns, turn, open_turn = [], -1, False
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        if role == "assistant":
            if not open_turn:
                turn, open_turn = turn + 1, True
            turns.append(turn)
            continue
        content = message.get("content") if isinstance(message, dict) else None
        only_results = (
            isinstance(content, list)
            and bool(content)
            and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
        )
        if not only_results:
            open_turn = False
        turns.append(-1)
    return turns


def _clear_thinking(messages: list[Any], edit: dict[str, Any]) -> list[Any]:
    """Drop `thinking` blocks of all but the last `keep` assistant turns (`keep: "all"` keeps all;
    the default keeps the last turn's)."""
    keep_spec = edit.get("keep")
    if keep_spec == "all":
        return messages
    keep = _value(keep_spec, "thinking_turns", DEFAULT_KEEP_THINKING_TURNS)
    if keep is None:
        return messages
    turns = _assistant_turns(messages)
    last = max(turns, default=-1)
    out = list(messages)
    changed = False
    for i, (message, turn) in enumerate(zip(messages, turns, strict=True)):
        content = message.get("content") if turn >= 0 else None
        if turn > last - keep or not isinstance(content, list):
            continue
        kept = [b for b in content if not (isinstance(b, dict) and b.get("type") in THINKING_TYPES)]
        if kept and len(kept) != len(content):  # a message of nothing but thinking stays whole
            out[i] = {**message, "content": kept}
            changed = True
    return out if changed else messages


def _clear_tool_uses(
    messages: list[Any], edit: dict[str, Any], count_tokens: Callable[[list[Any]], int]
) -> list[Any]:
    """Once the prompt passes `trigger` (input tokens, or tool uses), replace the results of all but
    the last `keep` tool uses with a placeholder, oldest first, sparing `exclude_tools`; also their
    inputs with `clear_tool_inputs`; not at all if that clears fewer than `clear_at_least` tokens."""
    uses: list[tuple[int, int, str, str]] = []  # message, block, id, tool name
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and message.get("role") == "assistant":
            for b, block in enumerate(content):
                if (
                    isinstance(block, dict)
                    and block.get("type") == "tool_use"
                    and isinstance(block.get("id"), str)
                ):
                    uses.append((i, b, block["id"], str(block.get("name"))))
    trigger = edit.get("trigger")
    tool_trigger = _value(trigger, "tool_uses", None)
    if tool_trigger is not None:
        if len(uses) <= tool_trigger:
            return messages
    elif count_tokens(messages) <= (_value(trigger, "input_tokens", DEFAULT_TRIGGER_TOKENS) or 0):
        return messages
    keep = _value(edit.get("keep"), "tool_uses", DEFAULT_KEEP_TOOL_USES) or 0
    excluded = set(edit.get("exclude_tools") or ())
    inputs = edit.get("clear_tool_inputs")
    clear_all_inputs = inputs is True
    input_tools = set(inputs) if isinstance(inputs, list) else set()
    cleared = {use[2]: use for use in (uses[: len(uses) - keep] if keep else uses) if use[3] not in excluded}
    if not cleared:
        return messages
    out = list(messages)
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        blocks = list(content)
        for b, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result" and block.get("tool_use_id") in cleared:
                blocks[b] = {**block, "content": CLEARED_RESULT}
            elif (
                block.get("type") == "tool_use"
                and (use := cleared.get(str(block.get("id"))))
                and (clear_all_inputs or use[3] in input_tools)
            ):
                blocks[b] = {**block, "input": {}}
        if blocks != content:
            out[i] = {**message, "content": blocks}
    at_least = _value(edit.get("clear_at_least"), "input_tokens", None)
    if at_least and count_tokens(messages) - count_tokens(out) < at_least:
        return messages
    return out
