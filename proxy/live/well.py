"""The well of one request: its blocks, bottom up, each as tall as its tokens, with what the hammer
did to it. Built only while a page is watching (it counts every message once more).

A block is `[index, kind, tokens, after, state, tool, new]`: its kind (`system`, `user`,
`assistant`, `call`, `result`), its tokens as the client sent it and as it went upstream, its state
(`kept`, `noted`, `capped`, `dropped`), the tool it calls or answers, and whether the hammer struck it
on this request (it was not so on the request before). A run of dropped messages stands as one
marker (`summary` when level 3 replaced it), as the upstream received it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.counting.tokens import RequestCounter, text_of
from proxy.engine.compaction import CompactionResult
from proxy.engine.notes import DROPPED_PREFIX
from proxy.engine.plan import ChatPlan
from proxy.formats.base import decisions
from proxy.live.identity import short_name

LEADING_ROLES = frozenset({"system", "developer"})
PREVIEW_CHARS = 96
PREVIEW_SCAN = 8 * PREVIEW_CHARS  # of a text, what is read for its preview (its spaces folded)


@dataclass(frozen=True, slots=True)
class Decided:
    """What compaction did to one request, by message index (the tuples the engine made)."""

    messages: int
    truncated: tuple[int, ...] = ()
    capped: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()

    @classmethod
    def of(cls, result: CompactionResult, messages: int) -> Decided:
        return cls(messages, result.truncated, result.capped, result.dropped)

    def actions(self) -> dict[int, str]:
        acts = {i: "noted" for i in self.truncated}
        acts.update((i, "capped") for i in self.capped)
        acts.update((i, "dropped") for i in self.dropped)
        return acts


def first_change(previous: Decided | None, current: Decided) -> tuple[int, int]:
    """How many messages the hammer struck on this request (not so on the one before), and how many
    leading messages went upstream as they did on the request before (its prompt-cache prefix)."""
    nothing = not (current.truncated or current.capped or current.dropped)
    if nothing and (previous is None or not (previous.truncated or previous.capped or previous.dropped)):
        return 0, min(previous.messages, current.messages) if previous else 0  # the common case
    if previous is None:  # the engine's three are disjoint; a body of 200,000 items drops as many
        return len(current.truncated) + len(current.capped) + len(current.dropped), 0
    if (current.truncated, current.capped, current.dropped) == (
        previous.truncated,
        previous.capped,
        previous.dropped,
    ):
        return 0, min(previous.messages, current.messages)
    now = current.actions()
    before = previous.actions() if (previous.truncated or previous.capped or previous.dropped) else {}
    struck = sum(1 for i, act in now.items() if before.get(i) != act)
    changed = [i for i in now.keys() | before.keys() if now.get(i) != before.get(i) and i < previous.messages]
    return struck, min(min(changed, default=previous.messages), previous.messages, current.messages)


def build_well(
    request: dict[str, Any],
    plan: ChatPlan,
    counter: RequestCounter,
    decided: Decided,
    previous: Decided | None,
    content: bool,
) -> dict[str, Any]:
    """The blocks and markers of one planned request (`content`: with short previews)."""
    messages: list[dict[str, Any]] = request.get("messages") or []
    result = plan.result
    before = previous.actions() if previous else {}
    well = {
        "window": plan.window.window,
        "line": plan.budget.limit,
        "target": plan.budget.target,
        "fixed": plan.budget.fixed,
        "before": result.tokens_before,
        "after": result.tokens_after,
        "protected_from": result.protected_from,
        "overflow": result.overflow,
        "blocks": _blocks(messages, result, counter, decided.actions(), before),
        "markers": _markers(messages, result, counter, before),
    }
    if content:
        well["previews"] = [_preview(message) for message in messages]
    return well


def _blocks(
    messages: list[dict[str, Any]],
    result: CompactionResult,
    counter: RequestCounter,
    now: dict[int, str],
    before: dict[int, str],
) -> list[list[Any]]:
    """A block a message: what it is, its tokens as sent and as forwarded, what the hammer did to it
    (`now`) and whether it did so newly (`before`: on the request before)."""
    notes = decisions(result).notes if (result.truncated or result.capped) else {}
    names: dict[str, str] = {}  # tool call id -> tool name
    blocks: list[list[Any]] = []
    leading = True
    for i, message in enumerate(messages):
        role = str(message.get("role"))
        leading = leading and role in LEADING_ROLES
        kind, tool = _kind(message, role, leading, names)
        tokens = counter.message(message)
        state = now.get(i, "kept")
        if state == "dropped":
            after = 0
        elif i in notes:
            after = counter.message({**message, "content": notes[i]})
        else:
            after = tokens
        blocks.append([i, kind, tokens, after, state, tool, state != "kept" and before.get(i) != state])
    return blocks


def _kind(message: dict[str, Any], role: str, leading: bool, names: dict[str, str]) -> tuple[str, str]:
    """A message's kind and the tool it calls or answers; `names` learns each call's tool by id."""
    if role == "assistant" and isinstance(calls := message.get("tool_calls"), list) and calls:
        called = [_call_name(call) for call in calls]
        names.update((str(c.get("id")), n) for c, n in zip(calls, called, strict=True) if isinstance(c, dict))
        return "call", short_name(", ".join(dict.fromkeys(called)))
    if role == "tool":
        answered = names.get(str(message.get("tool_call_id")), str(message.get("name") or ""))
        return "result", short_name(answered)
    return ("system" if leading or role not in ("user", "assistant") else role), ""


def _markers(
    messages: list[dict[str, Any]], result: CompactionResult, counter: RequestCounter, before: dict[int, str]
) -> list[dict[str, Any]]:
    """Each run of dropped messages as the upstream received it: its marker (or summary) and size."""
    return [
        {
            "start": m.run.start,
            "count": len(m.run),
            # Merged into a kept assistant message: what it added to that message.
            "tokens": counter.message(result.messages[m.position])
            - (0 if m.into is None else counter.message(messages[m.into])),
            "summary": not m.text.startswith(DROPPED_PREFIX),
            "new": any(before.get(i) != "dropped" for i in m.run),
        }
        for m in result.markers
    ]


def first_user_text(request: dict[str, Any]) -> str | None:
    for message in request.get("messages") or ():
        if isinstance(message, dict) and message.get("role") == "user":
            return _preview(message)
    return None


def _call_name(call: Any) -> str:
    function = call.get("function") if isinstance(call, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    return name[:PREVIEW_SCAN] if isinstance(name, str) else "?"


def _preview(message: dict[str, Any]) -> str:
    """The start of a message's text, its spaces folded: what it costs is bounded by `PREVIEW_SCAN`,
    however long the message."""
    start, more = _text_start(message.get("content"))
    if not start.strip() and isinstance(calls := message.get("tool_calls"), list):
        start, more = " ".join(f"{_call_name(c)}({_arguments(c)})" for c in calls[:8]), len(calls) > 8
    text = " ".join(start.split())
    return text[:PREVIEW_CHARS] + ("…" if more or len(text) > PREVIEW_CHARS else "")


def _text_start(content: Any) -> tuple[str, bool]:
    """Up to `PREVIEW_SCAN` characters of a content's text (media parts left out), and whether it
    holds more."""
    if isinstance(content, str):
        return content[:PREVIEW_SCAN], len(content) > PREVIEW_SCAN
    if not isinstance(content, list):
        whole = text_of(content)  # None, or an odd shape written as JSON
        return whole[:PREVIEW_SCAN], len(whole) > PREVIEW_SCAN
    parts: list[str] = []
    size = 0
    for part in content:
        if isinstance(part, dict) and isinstance(text := part.get("text"), str):
            if size >= PREVIEW_SCAN:
                return "\n".join(parts), True
            parts.append(text[: PREVIEW_SCAN - size])
            size += len(parts[-1]) + 1
            if len(text) > len(parts[-1]):
                return "\n".join(parts), True
    return "\n".join(parts), False


def _arguments(call: Any) -> str:
    function = call.get("function") if isinstance(call, dict) else None
    args = function.get("arguments") if isinstance(function, dict) else None
    return args[:40] if isinstance(args, str) else ""
