"""Anthropic's context edits (`context_management.edits`), applied by the proxy for a server that
does not implement them: `clear_thinking` and `clear_tool_uses`, on the request's Anthropic messages
as they came, before the request is compacted like any other
(`AnthropicMessages.context_edits` decides when). The edits are read and checked first
(`proxy.formats.anthropic_edit_specs`: a wrong field is a 400 naming it).

The prompt is counted once, whatever the number of edits: each edit then counts only the blocks it
changes and keeps the running total, so the cost is linear in the body, not edits times body.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.engine.plan import Body
from proxy.formats.anthropic_edit_specs import ClearThinking, ClearToolUses, read_edits

CLEARED_RESULT = "[Tool result cleared to save context. Call the tool again if you need it.]"
THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})
Count = Callable[[Any], int]


class _Prompt:
    """The prompt's size, counted the first time an edit needs it, then kept up to date."""

    def __init__(self, body: Body, count_tokens: Callable[[Body], int]) -> None:
        self.body, self.count_tokens = body, count_tokens
        self.tokens: int | None = None

    def size(self) -> int:
        if self.tokens is None:
            self.tokens = self.count_tokens(self.body)
        return self.tokens

    def shrink(self, tokens: int) -> None:
        if self.tokens is not None:
            self.tokens -= tokens


def apply_context_edits(body: Body, count_tokens: Callable[[Body], int], count_part: Count) -> Body:
    """`body` with the edits its `context_management` names applied (the field itself kept as it
    came); `body` itself when none applies. `count_tokens(body)` is the prompt's size, for the
    `input_tokens` triggers; `count_part(block)` one block's share of it. A wrong edit is a 400."""
    edits = read_edits(body)
    messages = body.get("messages")
    if not edits or not isinstance(messages, list):
        return body
    prompt = _Prompt(body, count_tokens)
    edited = messages
    where: list[tuple[int, int, bool]] | None = None  # the tool blocks, found once
    for edit in dict.fromkeys(edits):  # an edit repeated changes nothing more
        if isinstance(edit, ClearThinking):
            edited, cleared = _clear_thinking(edited, edit, count_part)
            where = None if cleared else where  # blocks moved
        else:
            where = _tool_blocks(edited) if where is None else where
            edited, cleared = _clear_tool_uses(edited, edit, prompt, count_part, where)
        prompt.shrink(cleared)
    return body if edited is messages else {**body, "messages": edited}


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


def _clear_thinking(messages: list[Any], edit: ClearThinking, count_part: Count) -> tuple[list[Any], int]:
    """Drop `thinking` blocks of all but the last `keep` assistant turns (`keep: "all"` keeps all;
    the default keeps the last turn's); the tokens cleared."""
    keep = edit.keep
    if keep is None:
        return messages, 0
    turns = _assistant_turns(messages)
    last = max(turns, default=-1)
    out = list(messages)
    cleared = 0
    changed = False
    for i, (message, turn) in enumerate(zip(messages, turns, strict=True)):
        content = message.get("content") if turn >= 0 else None
        if turn > last - keep or not isinstance(content, list):
            continue
        kept = [b for b in content if not (isinstance(b, dict) and b.get("type") in THINKING_TYPES)]
        if kept and len(kept) != len(content):  # a message of nothing but thinking stays whole
            cleared += sum(
                count_part(b) for b in content if isinstance(b, dict) and b.get("type") in THINKING_TYPES
            )
            out[i] = {**message, "content": kept}
            changed = True
    return (out, cleared) if changed else (messages, 0)


def _tool_blocks(messages: list[Any]) -> list[tuple[int, int, bool]]:
    """Where the tool blocks are: (message, block, whether a `tool_use` of the assistant's, else a
    `tool_result`), found once for all the edits that clear tool uses."""
    found = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        assistant = message.get("role") == "assistant"
        for b, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_result" or (kind == "tool_use" and assistant):
                found.append((i, b, kind == "tool_use"))
    return found


def _clear_tool_uses(
    messages: list[Any],
    edit: ClearToolUses,
    prompt: _Prompt,
    count_part: Count,
    where: list[tuple[int, int, bool]],
) -> tuple[list[Any], int]:
    """Once the prompt passes `trigger` (input tokens, or tool uses), replace the results of all but
    the last `keep` tool uses with a placeholder, oldest first, sparing `exclude_tools`; also their
    inputs with `clear_tool_inputs`; not at all if that clears fewer than `clear_at_least` tokens.
    The tokens cleared, counted on the changed blocks only; `where` the tool blocks."""
    uses: list[tuple[str, str]] = []  # id, tool name
    for i, b, is_use in where:
        block = messages[i]["content"][b]
        if is_use and isinstance(block.get("id"), str):
            uses.append((block["id"], str(block.get("name"))))
    if edit.trigger_kind == "tool_uses":
        if len(uses) <= edit.trigger:
            return messages, 0
    elif prompt.size() <= edit.trigger:
        return messages, 0
    keep = edit.keep
    cleared = {
        use[0]: use[1]
        for use in (uses[: len(uses) - keep] if keep else uses)
        if use[1] not in edit.exclude_tools
    }
    if not cleared:
        return messages, 0
    out = list(messages)
    copied: set[int] = set()
    tokens = 0
    for i, b, is_use in where:
        block = out[i]["content"][b]
        if not is_use and block.get("tool_use_id") in cleared:
            if block.get("content") == CLEARED_RESULT:
                continue
            new = {**block, "content": CLEARED_RESULT}
        elif (
            is_use
            and (name := cleared.get(str(block.get("id")))) is not None
            and (edit.clear_all_inputs or name in edit.input_tools)
            and block.get("input") != {}
        ):
            new = {**block, "input": {}}
        else:
            continue
        tokens += count_part(block) - count_part(new)
        if i not in copied:  # the message and its blocks copied once, the client's own left alone
            out[i] = {**out[i], "content": list(out[i]["content"])}
            copied.add(i)
        out[i]["content"][b] = new
    if not copied or (edit.clear_at_least and tokens < edit.clear_at_least):
        return messages, 0
    return out, tokens
