"""The conversation as the replay reads it, computed once per call and never changed: each message's
cost as counted, and what one walk of the messages found (`reading.py`: roles, which tool call each
result answers, the units and exchanges that may be dropped whole). Beside it, what one call is given
besides the messages: its `Budget`, its `Policy` and the caller's `NoteMemo`."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from proxy.engine.facts import TYPICAL_FACTS
from proxy.engine.notes import dropped_marker
from proxy.engine.reading import Call, Exchange, Message, Unit, exchanges, is_protected_tool, read, units

CountMessage = Callable[[Message], int]


@dataclass(frozen=True, slots=True)
class Budget:
    """Token sizes for one request. `limit` is the line; a compaction aims for `target` below it;
    `fixed` is what the request costs besides its messages (tool schemas, response format)."""

    limit: int
    target: int
    fixed: int = 0
    window: int | None = None  # the model's real window: never returned compacted above it


@dataclass(frozen=True, slots=True)
class Policy:
    keep_recent_turns: int = 2
    # Inside the protected part, the last tool results that are never dropped (but may be capped), nor
    # noted unless older exchanges are dropped: then those the model has read are noted with them.
    keep_recent_tool_results: int = 3
    protected_tools: tuple[str, ...] = ()
    preview_chars: int = 150
    # Tokens to reserve where dropped exchanges are replaced (a summary goes there, when summarising).
    gap_tokens: int = 0
    # Old exchanges, once they must go, go down to this share of the target (hysteresis).
    drop_to: float = 1.0
    # Inside a loop, notes must leave room for this many calls like the last one, or older exchanges
    # are dropped at once (fewer breaks of the prefix, less history kept); 0: only for the line.
    loop_room_calls: float = 0.0


class NoteMemo(Protocol):
    """Where the caller keeps written notes between calls (a chat resends the same old results every
    turn); the engine's decisions do not depend on it, only its speed."""

    def get(self, key: Hashable) -> str | None: ...

    def put(self, key: Hashable, value: str) -> None: ...


class ConversationIndex(NamedTuple):
    """The conversation as one call's replay reads it. A named tuple: as immutable as a frozen
    dataclass and built in a quarter of the time (it is built on every call that compacts)."""

    messages: Sequence[Message]
    roles: tuple[str, ...]
    costs: tuple[int, ...]  # each message as counted, before anything is changed
    results: Mapping[int, Call]  # each tool result's call
    users: tuple[int, ...]  # the user requests after the leading system messages
    tools: tuple[int, ...]  # the tool results
    replies: tuple[int, ...]  # the assistant messages
    units: tuple[Unit, ...]
    exchanges: tuple[Exchange, ...]
    protected_tools: tuple[str, ...]
    keep_recent_turns: int
    marker_cost: int  # what a marker is reserved at (or the gap a summary takes)
    empty_cost: int  # a message with no content
    facts_cost: int  # what a note's facts are costed at before they are written
    # 0 to len(messages): one int object for each position, which every index here and the result
    # share (a history of 200,000 messages made each position's int anew three times: 5 MB each).
    positions: tuple[int, ...]

    @classmethod
    def of(
        cls,
        messages: Sequence[Message],
        costs: Sequence[int],
        count: CountMessage,
        *,
        protected_tools: tuple[str, ...],
        keep_recent_turns: int,
        gap_tokens: int,
    ) -> ConversationIndex:
        positions = tuple(range(len(messages) + 1))
        walked = read(messages, positions)
        marker_cost = max(count(dropped_marker(len(messages))), gap_tokens)
        empty_cost = count({"content": ""})
        # Positional: a named tuple's keyword arguments cost a microsecond, on every call.
        return cls(
            messages,
            walked.roles,
            tuple(costs),
            walked.results,
            walked.users,
            walked.tools,
            walked.replies,
            units(messages, walked, protected_tools),
            exchanges(messages, walked, protected_tools, positions),
            protected_tools,
            keep_recent_turns,
            marker_cost,
            empty_cost,
            count({"content": TYPICAL_FACTS}) - empty_cost,
            positions,
        )

    def is_protected(self, tool: str | None) -> bool:
        return is_protected_tool(tool, self.protected_tools)

    def protected_start(self, end: int) -> int:
        """Where the protected recent part of the request `messages[:end]` starts (0: all of it)."""
        users = self.users
        seen = bisect.bisect_left(users, end)
        keep = self.keep_recent_turns
        return users[seen - keep] if seen >= keep else 0
