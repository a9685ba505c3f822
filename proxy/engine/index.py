"""The conversation as the replay reads it, computed once per call and never changed: each message's
role and cost as counted, which tool call each result answers, where the user requests, tool results
and assistant messages are, and the units and exchanges that may be dropped whole. Beside it, what one call is given besides the
messages: its `Budget`, its `Policy` and the caller's `NoteMemo`."""

from __future__ import annotations

import bisect
import fnmatch
import itertools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from proxy.engine.facts import TYPICAL_FACTS
from proxy.engine.notes import dropped_marker, is_dropped_marker

Message = dict[str, Any]
CountMessage = Callable[[Message], int]

LEADING_ROLES = frozenset({"system", "developer"})
TOOL_ROLES = frozenset({"tool", "function"})


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


# Named tuples, not frozen dataclasses: a long history has thousands, and a frozen dataclass takes
# twice as long to build.
class Call(NamedTuple):
    """What a tool result answers."""

    caller: int  # the assistant message that called it (the result's own index when no call is found)
    tool: str | None  # the tool's name
    arguments: str | None  # the call's arguments, as the client sent them


class Unit(NamedTuple):
    """A run of messages level 2 drops whole: one user request and everything up to the next."""

    start: int
    end: int
    protected: bool
    droppable: bool


class Exchange(NamedTuple):
    """An assistant `tool_calls` message and all its results, which follow it: dropped whole."""

    start: int
    end: int
    droppable: bool


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
        n = len(messages)
        positions = tuple(range(n + 1))
        read, calls = _read(messages, positions)
        roles, tools = read.roles, read.tools
        results, strays = _results(messages, tools, calls)
        del calls  # a long history's calls by id: let go before the exchanges are built
        users = read.users
        units = _units(messages, roles, results, users, tools, protected_tools)
        exchanges = _exchanges(
            messages, roles, results, users, read.callers, strays, protected_tools, positions
        )
        marker_cost = max(count(dropped_marker(n)), gap_tokens)
        empty_cost = count({"content": ""})
        # Positional: a named tuple's keyword arguments cost a microsecond, on every call.
        return cls(
            messages,
            roles,
            tuple(costs),
            results,
            users,
            tools,
            read.replies,
            units,
            exchanges,
            protected_tools,
            keep_recent_turns,
            marker_cost,
            empty_cost,
            count({"content": TYPICAL_FACTS}) - empty_cost,
            positions,
        )

    def is_protected(self, tool: str | None) -> bool:
        return _is_protected(tool, self.protected_tools)

    def protected_start(self, end: int) -> int:
        """Where the protected recent part of the request `messages[:end]` starts (0: all of it)."""
        users = self.users
        seen = bisect.bisect_left(users, end)
        keep = self.keep_recent_turns
        return users[seen - keep] if seen >= keep else 0


def _is_protected(tool: str | None, patterns: tuple[str, ...]) -> bool:
    return tool is not None and any(fnmatch.fnmatchcase(tool, p) for p in patterns)


class _Read(NamedTuple):
    roles: tuple[str, ...]
    users: tuple[int, ...]
    tools: tuple[int, ...]
    replies: tuple[int, ...]
    callers: tuple[int, ...]  # the assistant messages with tool calls


def _read(messages: Sequence[Message], positions: tuple[int, ...]) -> tuple[_Read, dict[str, Call]]:
    """One walk of the messages: what each is, and every tool call by its id (the last one of an
    id). (A user message is never among the leading system messages, so every user message is a
    request.)"""
    roles: list[str] = []
    users: list[int] = []
    tools: list[int] = []
    replies: list[int] = []
    callers: list[int] = []
    calls: dict[str, Call] = {}
    for i, message in zip(positions, messages, strict=False):
        role = message.get("role")
        if not isinstance(role, str):
            role = ""
        roles.append(role)
        if role == "assistant":
            replies.append(i)
            if not (tool_calls := message.get("tool_calls")):
                continue
            callers.append(i)
            for call in tool_calls if isinstance(tool_calls, list) else ():
                if isinstance(call, dict) and isinstance(call_id := call.get("id"), str):
                    function = call.get("function")
                    function = function if isinstance(function, dict) else {}
                    name, arguments = function.get("name"), function.get("arguments")
                    calls[call_id] = Call(
                        i,
                        name if isinstance(name, str) else None,
                        arguments if isinstance(arguments, str) else None,
                    )
        elif role == "user":
            users.append(i)
        elif role in TOOL_ROLES:
            tools.append(i)
    return _Read(tuple(roles), tuple(users), tuple(tools), tuple(replies), tuple(callers)), calls


def _results(
    messages: Sequence[Message], tools: tuple[int, ...], calls: Mapping[str, Call]
) -> tuple[dict[int, Call], set[int]]:
    """Map each tool result to its call (the assistant message's index, the tool and arguments), and
    name the calling messages with a result after their own run of results (the tool messages
    right after them): strays, whose exchange cannot be dropped whole (usually none, so a set of
    them, not each caller's last result: 100,000 calls made that a 5 MB table)."""
    results: dict[int, Call] = {}
    strays: set[int] = set()
    run, previous = -1, -2  # where the run of tool messages that `i` is in starts
    for i in tools:
        if i != previous + 1:
            run = i
        previous = i
        message = messages[i]
        call_id = message.get("tool_call_id")
        call = calls.get(call_id) if isinstance(call_id, str) else None
        if call is None:
            name = message.get("name")
            call = Call(i, name if isinstance(name, str) else None, None)
        elif i > call.caller and run != call.caller + 1:
            strays.add(call.caller)
        results[i] = call
    return results, strays


def _units(
    messages: Sequence[Message],
    roles: tuple[str, ...],
    results: Mapping[int, Call],
    users: tuple[int, ...],
    tools: tuple[int, ...],
    protected_tools: tuple[str, ...],
) -> tuple[Unit, ...]:
    """Level 2's units. The first is the answer to the first request (the request itself stays);
    then each later request with its answers. A cut that would orphan a tool result is skipped."""
    if not users:
        return ()
    n = len(messages)
    candidates = [users[0] + 1, *users[1:]]  # in order
    # A cut at c is safe when no tool result at or after c answers a call before c: one sweep from
    # the end over the candidates and the tool results, keeping the earliest call seen.
    safe = [False] * len(candidates)
    earliest, t = n, len(tools) - 1
    for k in range(len(candidates) - 1, -1, -1):
        c = candidates[k]
        while t >= 0 and tools[t] >= c:
            call = results[tools[t]].caller
            if call < earliest:
                earliest = call
            t -= 1
        safe[k] = earliest >= c and c < n
    cuts = [c for c, ok in zip(candidates, safe, strict=True) if ok]
    units = []
    for start, end in itertools.pairwise(cuts):
        span = range(start, end)
        protected = bool(protected_tools) and any(
            roles[i] in TOOL_ROLES and _is_protected(results[i].tool, protected_tools) for i in span
        )
        droppable = False
        for i in span:
            if not is_dropped_marker(messages[i]):
                droppable = True
                break
        units.append(Unit(start, end, protected, droppable))
    return tuple(units)


def _exchanges(
    messages: Sequence[Message],
    roles: tuple[str, ...],
    results: Mapping[int, Call],
    users: tuple[int, ...],
    callers: tuple[int, ...],
    strays: set[int],
    protected_tools: tuple[str, ...],
    positions: tuple[int, ...],
) -> tuple[Exchange, ...]:
    """The tool exchanges, in order. One whose results do not all follow it (or that holds a
    protected tool) is never dropped: that would leave an orphan, or lose what cannot be fetched.
    A system message after an exchange (agents send reminders every few steps) goes with it: left
    behind, each would split the dropped stretch it stands in, and each piece get a marker."""
    n = len(messages)
    first = users[0] if users else n
    out = []
    for i in callers[bisect.bisect_right(callers, first) :]:
        end = i + 1
        while end < n and roles[end] in TOOL_ROLES:
            end += 1
        answers = range(i + 1, end)
        while end < n and roles[end] in LEADING_ROLES:
            end += 1
        droppable = i not in strays
        for j in answers if droppable else ():
            if results[j].caller not in (i, j):
                droppable = False
                break
        if droppable and protected_tools:
            droppable = not (
                any(_is_protected(results[j].tool, protected_tools) for j in answers)
                or any(_is_protected(name, protected_tools) for name in _call_names(messages[i]))
            )
        out.append(Exchange(i, positions[end], droppable))
    return tuple(out)


def _call_names(message: Message) -> list[str]:
    calls = message.get("tool_calls")
    names = []
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if isinstance(name, str):
            names.append(name)
    return names
