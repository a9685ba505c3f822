"""What the proxy's own context edits did, reported in the answer as Anthropic's API reports them.

Once the proxy has applied a request's `context_management` edits itself (for a server that does
not implement them), the field is not forwarded: strict servers and gateways refuse it (Anthropic's
API without the beta, as Vertex AI or Bedrock answer it: 400 "context_management: Extra inputs are not
permitted", which Claude Code does not retry). The answer then carries what was applied, as
anthropic-sdk-python's `BetaContextManagementResponse`: `{"applied_edits": [{"type":
"clear_tool_uses_20250919", "cleared_tool_uses": N, "cleared_input_tokens": T}, {"type":
"clear_thinking_20251015", "cleared_thinking_turns": N, "cleared_input_tokens": T}]}`, at the top of a
message (`BetaMessage.context_management`) and in a stream's `message_delta` event
(`BetaRawMessageDeltaEvent.context_management`, which the SDK's stream accumulator copies onto the
final message). Only edits that cleared something are listed, in the order the request named them.

The figures come from comparing the messages before and after the edits (the edits replace blocks
and never add or drop a message): a cleared tool use is a `tool_result` whose content became the
placeholder; a cleared thinking turn is an assistant turn that lost thinking blocks; the tokens are
the proxy's estimate of what was removed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.counting.estimator import estimate_text_tokens
from proxy.counting.tokens import json_text
from proxy.engine.plan import Body
from proxy.formats.anthropic_context_edits import CLEARED_RESULT, THINKING_TYPES, _assistant_turns
from proxy.formats.anthropic_edit_specs import CLEAR_THINKING, CLEAR_TOOL_USES


@dataclass(frozen=True, slots=True)
class AppliedEdits:
    """The `context_management` object an answer reports; rewrites the answer's bytes."""

    applied_edits: tuple[dict[str, Any], ...]

    @property
    def report(self) -> dict[str, Any]:
        return {"applied_edits": list(self.applied_edits)}

    def into_body(self, body: bytes) -> bytes:
        """A message answer (`"type": "message"`) with the report at its top; anything else as it came."""
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body
        if not isinstance(message, dict) or message.get("type") != "message":
            return body
        return orjson.dumps({**message, "context_management": self.report})

    async def into_stream(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The stream with the report added to its `message_delta` event; every other event passes
        as it came, each as soon as it is whole."""
        pending = b""
        async for chunk in chunks:
            pending += chunk
            end = _event_end(pending)
            if end < 0:
                continue
            whole, pending = pending[:end], pending[end:]
            yield self._rewrite(whole) if b"message_delta" in whole else whole
        if pending:
            yield self._rewrite(pending) if b"message_delta" in pending else pending

    def _rewrite(self, events: bytes) -> bytes:
        out = []
        for event in events.split(b"\n\n"):
            lines = event.split(b"\n")
            for i, line in enumerate(lines):
                if not line.startswith(b"data:"):
                    continue
                try:
                    data = orjson.loads(line[5:])
                except orjson.JSONDecodeError:
                    continue
                if isinstance(data, dict) and data.get("type") == "message_delta":
                    lines[i] = b"data: " + orjson.dumps({**data, "context_management": self.report})
            out.append(b"\n".join(lines))
        return b"\n\n".join(out)


def _event_end(buffer: bytes) -> int:
    """Where the last whole SSE event in `buffer` ends (after its blank line), or -1."""
    at = buffer.rfind(b"\n\n")
    return at + 2 if at >= 0 else -1


def applied_edits(original: Body, edited: Body) -> AppliedEdits:
    """What the edits of `original`'s `context_management` changed, `edited` being the result."""
    before, after = original.get("messages"), edited.get("messages")
    spec = original.get("context_management")
    edits = spec.get("edits") if isinstance(spec, dict) else None
    kinds = [str(e.get("type")) for e in edits if isinstance(e, dict)] if isinstance(edits, list) else []
    if not (isinstance(before, list) and isinstance(after, list)) or len(before) != len(after):
        return AppliedEdits(())
    found = {
        CLEAR_TOOL_USES: _cleared_tool_uses(before, after),
        CLEAR_THINKING: _cleared_thinking(before, after),
    }
    return AppliedEdits(tuple(r for k in dict.fromkeys(kinds) if (r := found.get(k)) is not None))


def _tokens(value: Any) -> int:
    return estimate_text_tokens(json_text(value))


def _changed_blocks(before: list[Any], after: list[Any]) -> list[tuple[int, list[Any], list[Any]]]:
    """(message index, blocks before, blocks after) of each message whose content the edits changed."""
    changed = []
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        if old is new or not isinstance(old, dict) or not isinstance(new, dict):
            continue
        old_content, new_content = old.get("content"), new.get("content")
        if isinstance(old_content, list) and isinstance(new_content, list) and old_content != new_content:
            changed.append((i, old_content, new_content))
    return changed


def _cleared_tool_uses(before: list[Any], after: list[Any]) -> dict[str, Any] | None:
    cleared, removed, added = 0, 0, 0
    for _, old, new in _changed_blocks(before, after):
        if len(old) != len(new):
            continue  # thinking was dropped here: no tool use of this message was cleared
        for old_block, new_block in zip(old, new, strict=True):
            if old_block == new_block or not isinstance(new_block, dict):
                continue
            if new_block.get("type") == "tool_result" and new_block.get("content") == CLEARED_RESULT:
                cleared += 1
            elif new_block.get("type") != "tool_use":
                continue
            removed, added = removed + _tokens(old_block), added + _tokens(new_block)
    if not cleared:
        return None
    return {
        "type": CLEAR_TOOL_USES,
        "cleared_tool_uses": cleared,
        "cleared_input_tokens": max(0, removed - added),
    }


def _cleared_thinking(before: list[Any], after: list[Any]) -> dict[str, Any] | None:
    turns = _assistant_turns(before)
    cleared_turns: set[int] = set()
    tokens = 0
    for i, old, new in _changed_blocks(before, after):
        thinking = [b for b in old if isinstance(b, dict) and b.get("type") in THINKING_TYPES]
        kept = [b for b in new if isinstance(b, dict) and b.get("type") in THINKING_TYPES]
        if len(kept) < len(thinking):
            cleared_turns.add(turns[i])
            tokens += _tokens(thinking) - _tokens(kept) if kept else _tokens(thinking)
    if not cleared_turns:
        return None
    return {
        "type": CLEAR_THINKING,
        "cleared_thinking_turns": len(cleared_turns),
        "cleared_input_tokens": max(0, tokens),
    }
