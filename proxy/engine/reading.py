"""One walk of a conversation's messages, and what the replay reads from it: where the user requests,
tool results and assistant messages are, which tool call each result answers, and the runs level 2
drops whole (a request's unit, a tool exchange), each with whether it may be dropped. Computed once
per call (`ConversationIndex.of`) and never changed."""

from __future__ import annotations

import bisect
import fnmatch
import itertools
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from proxy.engine.notes import is_dropped_marker

Message = dict[str, Any]

LEADING_ROLES = frozenset({"system", "developer"})
TOOL_ROLES = frozenset({"tool", "function"})


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


class Read(NamedTuple):
    """What each message is, and what each tool result answers."""

    roles: tuple[str, ...]
    users: tuple[int, ...]  # the user requests (never among the leading system messages)
    tools: tuple[int, ...]  # the tool results
    replies: tuple[int, ...]  # the assistant messages
    callers: tuple[int, ...]  # the assistant messages with tool calls
    results: dict[int, Call]  # each tool result's call
    # The calling messages with a result after their own run of results (the tool messages right
    # after them): strays, whose exchange cannot be dropped whole. Usually none, so a set of them,
    # not each caller's last result (100,000 calls made that a 5 MB table).
    strays: set[int]


def is_protected_tool(tool: str | None, patterns: tuple[str, ...]) -> bool:
    return tool is not None and any(fnmatch.fnmatchcase(tool, p) for p in patterns)


def read(messages: Sequence[Message], positions: Sequence[int]) -> Read:
    """One walk of the messages: what each is, and every tool call by its id; then each tool result
    mapped to its call (the assistant message's index, the tool and arguments). `positions` are the
    ints 0 to len(messages), made once and shared with the index."""
    roles: list[str] = []
    users: list[int] = []
    tools: list[int] = []
    replies: list[int] = []
    callers: list[int] = []
    calls: dict[str, Call] = {}  # each call by its id (the last one of an id)
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
    results, strays = _results(messages, tools, calls)
    return Read(tuple(roles), tuple(users), tuple(tools), tuple(replies), tuple(callers), results, strays)


def _results(
    messages: Sequence[Message], tools: list[int], calls: Mapping[str, Call]
) -> tuple[dict[int, Call], set[int]]:
    """Each tool result's call, and the strays (`Read.strays`)."""
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


def units(messages: Sequence[Message], walked: Read, protected_tools: tuple[str, ...]) -> tuple[Unit, ...]:
    """Level 2's units. The first is the answer to the first request (the request itself stays);
    then each later request with its answers. A cut that would orphan a tool result is skipped."""
    roles, results, users, tools = walked.roles, walked.results, walked.users, walked.tools
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
    out = []
    for start, end in itertools.pairwise(cuts):
        span = range(start, end)
        protected = bool(protected_tools) and any(
            roles[i] in TOOL_ROLES and is_protected_tool(results[i].tool, protected_tools) for i in span
        )
        droppable = False
        for i in span:
            if not is_dropped_marker(messages[i]):
                droppable = True
                break
        out.append(Unit(start, end, protected, droppable))
    return tuple(out)


def exchanges(
    messages: Sequence[Message], walked: Read, protected_tools: tuple[str, ...], positions: Sequence[int]
) -> tuple[Exchange, ...]:
    """The tool exchanges, in order. One whose results do not all follow it (or that holds a
    protected tool) is never dropped: that would leave an orphan, or lose what cannot be fetched.
    A system message after an exchange (agents send reminders every few steps) goes with it: left
    behind, each would split the dropped stretch it stands in, and each piece get a marker."""
    roles, results, callers, strays = walked.roles, walked.results, walked.callers, walked.strays
    n = len(messages)
    first = walked.users[0] if walked.users else n
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
                any(is_protected_tool(results[j].tool, protected_tools) for j in answers)
                or any(is_protected_tool(name, protected_tools) for name in _call_names(messages[i]))
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
