"""The caller's messages as the engine reads them, and what the engine decided, per message.

A gateway does not always send the whole conversation: LiteLLM's `headroom` guardrail (1.108.7)
holds back the system prompt, every assistant message and the latest turn, and sends the rest, so
tool results arrive without the assistant message that called them, and often without any user
request. The engine pairs a tool result with its call, and an exchange with the request it answers,
to know what it may cut. `with_stand_ins` puts a stand-in call before each result no call announced
and a stand-in request where none came (counted, so what was withheld is not free, and never
returned), and `Decided` reads the engine's result back in terms of the messages given.

Pure: dicts in, dicts out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from proxy.engine.compaction import CompactionResult
from proxy.engine.reading import LEADING_ROLES
from proxy.formats import Conversation
from proxy.formats.base import decisions
from proxy.formats.sources import Part

Message = dict[str, Any]
STAND_IN_TOOL = "tool"  # the name of a stand-in call (the withheld call's own is unknown)
# Where no user request came (held back as the latest turn), one stands in for it: the engine keeps
# the request a history answers, and cuts the exchanges after it one by one.
STAND_IN_REQUEST: Message = {"role": "user", "content": "(the request, held back by the gateway)"}


@dataclass(frozen=True, slots=True)
class View:
    """The neutral conversation the engine plans, with `origin[k]`: the index in the adapter's own
    neutral messages of message `k`, None for a stand-in."""

    conversation: Conversation
    origin: tuple[int | None, ...]

    @property
    def stand_ins(self) -> int:
        return sum(1 for o in self.origin if o is None)


def with_stand_ins(conversation: Conversation) -> View:
    """`conversation` with a stand-in assistant call before each tool result that no call
    announced (one each: the engine can then note them, or drop them one exchange at a time)."""
    messages = conversation.request["messages"]
    out: list[Message] = []
    origin: list[int | None] = []
    sources: list[tuple[Part, ...]] = []
    announced: set[Any] = set()
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "assistant":
            announced = {c.get("id") for c in message.get("tool_calls") or () if isinstance(c, dict)}
        elif role == "tool" and message.get("tool_call_id") not in announced:
            out.append(_stand_in(message.get("tool_call_id")))
            origin.append(None)
            sources.append(())
        elif role != "tool":
            announced = set()
        out.append(message)
        origin.append(i)
        sources.append(conversation.sources[i] if conversation.sources else (Part(i),))
    if not any(m.get("role") == "user" for m in messages):  # the request was held back too
        lead = next((k for k, m in enumerate(out) if m.get("role") not in LEADING_ROLES), len(out))
        out.insert(lead, STAND_IN_REQUEST)
        origin.insert(lead, None)
        sources.insert(lead, ())
    if len(out) == len(messages):
        return View(conversation, tuple(range(len(messages))))
    request = {**conversation.request, "messages": out}
    return View(replace(conversation, request=request, sources=tuple(sources)), tuple(origin))


def _stand_in(call_id: Any) -> Message:
    call = {"id": call_id, "type": "function", "function": {"name": STAND_IN_TOOL, "arguments": "{}"}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


@dataclass(frozen=True, slots=True)
class Run:
    """A dropped run in the adapter's neutral messages: its members, the engine's words for it, and
    where its marker stands (the engine's placement): its own message in `role`, or merged into the
    kept assistant message `into`."""

    members: tuple[int, ...]
    text: str
    role: str | None = None
    into: int | None = None


@dataclass(frozen=True, slots=True)
class Decided:
    """The engine's decisions for the adapter's neutral messages: the new content of each noted
    or capped one, which were dropped, and each dropped run."""

    notes: dict[int, Any]
    dropped: frozenset[int]
    runs: tuple[Run, ...]


def decided(view: View, result: CompactionResult) -> Decided:
    """`result` (on the view's messages) in terms of the adapter's neutral messages."""
    made = decisions(result)
    origin = view.origin
    notes: dict[int, Any] = {}
    for k, content in made.notes.items():
        if (o := origin[k]) is not None:
            notes[o] = content
    dropped = frozenset(o for k in result.dropped if (o := origin[k]) is not None)
    runs: list[Run] = []
    for marker in result.markers:
        members = tuple(o for k in marker.run if (o := origin[k]) is not None)
        into = origin[marker.into] if marker.into is not None else None
        if members:  # merged into a stand-in call, the marker stands on its own where the call stood
            role = marker.role if marker.into is None or into is not None else "assistant"
            runs.append(Run(members, marker.text, role, into))
    return Decided(notes, dropped, tuple(runs))
