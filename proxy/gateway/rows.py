"""The engine's decisions written onto the caller's messages, one message out for each one in.

Headroom's callers put the answer back row by row (LiteLLM 1.108.7 refuses an answer with another
number of messages, and puts the messages it held back between them by position), so nothing is
removed here: a kept message comes back as it came, a noted or capped tool result with its note, and
a dropped one as a stub in its own role that keeps what pairs it (a tool result's `tool_call_id`, an
assistant's call ids and names, Anthropic's `tool_use_id`), the first of a dropped run carrying the
engine's words for it. Where originals are kept, each note and run names the id to retrieve it by.

Pure: dicts in, dicts out.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.formats import Conversation
from proxy.formats.sources import Part
from proxy.gateway.contract import ANTHROPIC
from proxy.gateway.view import Decided

Message = dict[str, Any]
STUB_TEXT = "…"  # the run's other messages, in their role (never empty: Anthropic refuses that)
HASH_CHARS = 24  # what LiteLLM's guardrail and Headroom's markers read: 12 to 24 hex digits


def original_id(original: Any) -> str:
    """The stable id of an original: the same content always gets the same id."""
    return hashlib.sha256(orjson.dumps(original, option=orjson.OPT_SORT_KEYS)).hexdigest()[:HASH_CHARS]


def retrieval_hint(key: str) -> str:
    """What a note says of its original (Headroom's own marker words, which its tools look for)."""
    return f" Retrieve original: hash={key}"


@dataclass(slots=True)
class Written:
    """The caller's messages after the decisions, and the originals of what was cut, by id."""

    messages: list[Any]
    originals: dict[str, Any] = field(default_factory=dict)
    markers: dict[int, str] = field(default_factory=dict)  # a run's first member -> what its stub says

    def keep(self, original: Any, keep: bool) -> str:
        """The suffix naming `original`'s id (kept for retrieval), or nothing when none are kept."""
        if not keep:
            return ""
        key = original_id(original)
        self.originals[key] = original
        return retrieval_hint(key)


def sources_of(conversation: Conversation, messages: Sequence[Any]) -> Sequence[tuple[Part, ...]]:
    """The caller's item (or block) each neutral message stands for: one each where the format
    reads one neutral message per item."""
    return conversation.sources or tuple((Part(i),) for i in range(len(messages)))


def write_rows(
    fmt: str,
    messages: Sequence[Any],
    conversation: Conversation,
    made: Decided,
    *,
    keep: bool,
    keep_runs: bool = True,
) -> Written:
    """`messages` (the caller's, in `fmt`) with `made` applied row by row; with `keep`, the originals
    of the notes (and of the dropped runs, unless not `keep_runs`) kept under the ids they name."""
    sources = sources_of(conversation, messages)
    written = Written(list(messages))
    first = {run.members[0]: run for run in made.runs}
    rewrite = _anthropic_part if fmt == ANTHROPIC else _chat_part
    for index, parts in enumerate(sources):
        if index in made.notes:
            note = _with_suffix(made.notes[index], written, _originals(messages, parts), keep)
            for part in parts:
                rewrite(written.messages, part, functools.partial(_noted, note=note))
        elif index in made.dropped:
            text = STUB_TEXT
            if index in first:  # the run's first message says what went, and where it is kept
                run = first[index]
                originals = [o for m in run.members for o in _originals(messages, _parts_of(sources, m))]
                text = written.markers[index] = run.text + written.keep(originals, keep and keep_runs)
            for part in parts:
                rewrite(written.messages, part, functools.partial(_stub, text=text))
                text = STUB_TEXT
    return written


def _parts_of(sources: Sequence[tuple[Part, ...]], index: int) -> tuple[Part, ...]:
    return sources[index] if index < len(sources) else ()


def _originals(messages: Sequence[Any], parts: Sequence[Part]) -> list[Any]:
    """The caller's own items (or blocks) a neutral message stands for."""
    out = []
    for part in parts:
        item = messages[part.item]
        out.append(item if part.block is None else item["content"][part.block])
    return out


def _with_suffix(note: Any, written: Written, originals: list[Any], keep: bool) -> Any:
    """The note, naming its original's id at its end."""
    original = originals[0] if len(originals) == 1 else originals
    content = original.get("content") if isinstance(original, dict) and "role" in original else original
    if isinstance(content, dict) and content.get("type") == "tool_result":
        content = content.get("content")
    suffix = written.keep(content, keep)
    if not suffix:
        return note
    if isinstance(note, str):
        return note + suffix
    if isinstance(note, list):
        return [*note, {"type": "text", "text": suffix.strip()}]
    return note


Rewrite = Callable[[Any], Any]


def _chat_part(rows: list[Any], part: Part, rewrite: Rewrite) -> None:
    rows[part.item] = rewrite(rows[part.item])


def _anthropic_part(items: list[Any], part: Part, rewrite: Rewrite) -> None:
    """An Anthropic item (a whole message) or one block of it rewritten; the other blocks stay."""
    item = items[part.item]
    if part.block is None:
        items[part.item] = rewrite(item)
        return
    content = list(item["content"])
    content[part.block] = rewrite(content[part.block])
    items[part.item] = {**item, "content": [b for b in content if b is not None]}


def _noted(item: Any, note: Any) -> Any:
    if isinstance(item, dict) and item.get("type") == "tool_result":
        return {**item, "content": note}
    if isinstance(item, dict) and "type" in item and "role" not in item:  # another block: its text
        return {"type": "text", "text": note if isinstance(note, str) else orjson.dumps(note).decode()}
    return {**item, "content": note}


def _stub(item: Any, text: str) -> Any:
    """`item` (a message or a block) reduced to `text`, keeping what pairs it with its call."""
    if not isinstance(item, dict):
        return {"type": "text", "text": text}
    kind = item.get("type")
    if kind == "tool_result":
        return {**item, "content": text}
    if kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        return {**item, "input": {}}
    if kind is not None and "role" not in item:  # text, image, thinking: a short text in its place
        return {"type": "text", "text": text}
    stub = {k: v for k, v in item.items() if k not in ("reasoning_content", "reasoning", "thinking")}
    content = item.get("content")
    if isinstance(content, list) and any(isinstance(b, dict) and "type" in b for b in content):
        calls = [_stub(b, text) for b in content if isinstance(b, dict) and b.get("type") == "tool_use"]
        stub["content"] = [{"type": "text", "text": text}, *calls]
    else:
        stub["content"] = text
    if isinstance(item.get("tool_calls"), list):
        stub["tool_calls"] = [_call_without_arguments(c) for c in item["tool_calls"]]
    return stub


def _call_without_arguments(call: Any) -> Any:
    if isinstance(call, dict) and isinstance(function := call.get("function"), dict):
        return {**call, "function": {**function, "arguments": "{}"}}
    return call
