"""Anthropic's preserved thinking: a signed `thinking` block holds only over the conversation it was
made in (pure).

From Claude Fable 5.1 on, the API checks each `thinking` or `redacted_thinking` block sent back
against its prefix: the top-level `system` and `tools` and everything before the block. If that
differs from what the model saw when it made the block, the block and every later one are invalid,
and the API answers 400 ("... Invalid `signature` in `thinking` block. The block is bound to a
different conversation. ..."); leaving a thinking block out between others fails the check too;
taking thinking blocks out from some point on is allowed (platform.claude.com, "Preserved thinking",
"Prefix checks on thinking blocks", "Fix a thinking block bound to a different conversation").

So when the proxy changes a request of such a model (its context edits, its compaction), every
thinking block from the first change on is taken out (`unbound_thinking_dropped`): what comes
before the change is as the client sent it, and so as the model saw it. Earlier models take any
thinking block back, and require the last assistant turn of a tool loop to start with one (400
"a final `assistant` message must start with a thinking block"): theirs are left in. Whatever the
model, a request the API refuses for a bound block is sent once more without any thinking block
(`thinking_dropped`).
"""

from __future__ import annotations

import re
from typing import Any

Body = dict[str, Any]
THINKING = frozenset({"thinking", "redacted_thinking"})
# The binding error, and the one for a signature the API no longer takes (an old session's).
UNBOUND = re.compile(
    rb"bound to a different conversation|Invalid `?signature`? in `?(?:redacted_)?thinking`? block"
)
# `claude-<family>-<major>-<minor>`, as the API names its models (and Bedrock's `anthropic.claude-...`,
# Vertex's `claude-...@date`): Fable 5.1 was the first to bind its thinking to the conversation.
VERSION = re.compile(r"claude-[a-z]+-(\d+)(?:-(\d+))?(?![0-9])")
FIRST_BINDING = (5, 1)


def binds_thinking(model: object) -> bool:
    """Whether `model` is one whose thinking blocks hold only over an unchanged prefix."""
    found = VERSION.search(model.lower()) if isinstance(model, str) else None
    if found is None:
        return False
    minor = int(found[2]) if found[2] and len(found[2]) < 3 else 0  # not a date: `claude-x-5-20260101`
    return (int(found[1]), minor) >= FIRST_BINDING


def _is_thinking(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") in THINKING


def _has_thinking(messages: Any) -> bool:
    return isinstance(messages, list) and any(
        isinstance(m, dict) and isinstance(m.get("content"), list) and any(map(_is_thinking, m["content"]))
        for m in messages
    )


def _first_change(before: Body, after: Body) -> tuple[int, int]:
    """Where `after` first differs from `before`: a message index and a block index in it (0, 0
    when `system` or `tools` differ; past the end when nothing does)."""
    if before.get("system") != after.get("system") or before.get("tools") != after.get("tools"):
        return 0, 0
    old, new = before.get("messages") or [], after.get("messages") or []
    for i, message in enumerate(new):
        if i < len(old) and old[i] == message:
            continue
        was = old[i] if i < len(old) and isinstance(old[i], dict) else {}
        if was.get("role") != message.get("role"):
            return i, 0
        blocks, old_blocks = message.get("content"), was.get("content")
        if not isinstance(blocks, list) or not isinstance(old_blocks, list):
            return i, 0
        j = 0
        while j < min(len(blocks), len(old_blocks)) and blocks[j] == old_blocks[j]:
            j += 1
        return i, j
    return len(new), 0


def _without_thinking(messages: list[Any], start: tuple[int, int]) -> list[Any]:
    """`messages` with every thinking block at or after `start` taken out; a message left empty
    (an assistant turn that was all thinking) goes with them."""
    out = messages[: start[0]]
    for i in range(start[0], len(messages)):
        message = messages[i]
        blocks = message.get("content") if isinstance(message, dict) else None
        if not isinstance(blocks, list):
            out.append(message)
            continue
        first = start[1] if i == start[0] else 0
        kept = blocks[:first] + [b for b in blocks[first:] if not _is_thinking(b)]
        if len(kept) != len(blocks):
            message = {**message, "content": kept}
        if kept:
            out.append(message)
    return out


def unbound_thinking_dropped(before: Body, after: Body) -> Body:
    """`after` (the request the proxy made of `before`) without the thinking blocks its changes
    invalidate, for a model that binds them; `after` itself when there are none."""
    if not binds_thinking(after.get("model")) or not _has_thinking(after.get("messages")):
        return after
    start = _first_change(before, after)
    messages = after["messages"]
    if start[0] >= len(messages):
        return after
    return {**after, "messages": _without_thinking(messages, start)}


def thinking_dropped(body: Body) -> Body | None:
    """`body` without any thinking block, or None when it has none to take out."""
    if not _has_thinking(body.get("messages")):
        return None
    return {**body, "messages": _without_thinking(body["messages"], (0, 0))}


def refused_for_unbound_thinking(status: int, error: bytes) -> bool:
    """Whether the API refused a request for a thinking block bound to another conversation."""
    return status == 400 and UNBOUND.search(error[:4096]) is not None
