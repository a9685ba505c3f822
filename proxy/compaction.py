"""The compaction engine: messages + budget + policy in, compacted messages + a report out.

Pure and deterministic: no I/O, no clock, no state between calls. It follows the pattern's rules:
below the line nothing changes; the leading system/developer messages, the first user request and
the last `keep_recent_turns` user requests with everything after them are never touched; level 1
shrinks old tool results to a note, oldest first; level 2 drops whole old exchanges, oldest first,
never separating an assistant `tool_calls` message from its results.

Two choices keep the upstream's prompt cache warm, since a transparent proxy sees the whole history
again on every turn and must make the same decisions again without being told:

- Replay. The engine walks the history as the client grew it, checking each earlier request (every
  prefix that ends where an assistant reply begins) as a stateful compactor would have, and moves
  its frontiers only forward. The decisions made for turn N are therefore made again, identically,
  for turn N+1, and the compacted prefix stays byte-identical until the frontier has to move.
- Batches. When a request crosses the line, compaction goes down to the *target* (below the line),
  not just under the line, so the next turns have room to grow before anything moves again.

Each message is counted once per call; the replay moves two pointers forward, so the whole call is
linear in the size of the history.
"""

from __future__ import annotations

import bisect
import fnmatch
import itertools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.notes import (
    TYPICAL_FACTS,
    build_note,
    dropped_marker,
    is_dropped_marker,
    is_note,
    note_without_facts,
)
from proxy.tokens import text_of

Message = dict[str, Any]
CountMessage = Callable[[Message], int]

LEADING_ROLES = frozenset({"system", "developer"})
TOOL_ROLES = frozenset({"tool", "function"})
MIN_NOTE_CHARS = 80  # a note's own words, besides its preview
MAX_SETTLE_ROUNDS = 3
# Counts of concatenated text differ from the sum of their parts by a token or two at the seams.
ADDITIVITY_SLACK = 3


@dataclass(frozen=True, slots=True)
class Budget:
    """Token sizes for one request. `limit` is the line; a compaction aims for `target` below it;
    `fixed` is what the request costs besides its messages (tool schemas, response format)."""

    limit: int
    target: int
    fixed: int = 0


@dataclass(frozen=True, slots=True)
class Policy:
    keep_recent_turns: int = 2
    protected_tools: tuple[str, ...] = ()
    preview_chars: int = 150
    # Tokens to reserve where dropped exchanges are replaced (a summary goes there, when summarising).
    gap_tokens: int = 0


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What the engine decided. Indices refer to the messages it was given."""

    messages: list[Message]
    tokens_before: int
    tokens_after: int
    limit: int
    truncated: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    protected_dropped: bool = False
    overflow: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.truncated or self.dropped)

    @property
    def runs(self) -> list[range]:
        """The runs of consecutive dropped messages; the k-th is where the k-th marker stands."""
        runs: list[range] = []
        for i in self.dropped:
            if runs and runs[-1].stop == i:
                runs[-1] = range(runs[-1].start, i + 1)
            else:
                runs.append(range(i, i + 1))
        return runs

    @property
    def level(self) -> int:
        """The highest level used: 0 nothing, 1 tool results truncated, 2 exchanges dropped."""
        return 2 if self.dropped else 1 if self.truncated else 0


class NoteMemo(Protocol):
    """Where the caller keeps written notes between calls (a chat resends the same old results every
    turn); the engine's decisions do not depend on it, only its speed."""

    def get(self, key: Hashable) -> str | None: ...

    def put(self, key: Hashable, value: str) -> None: ...


def compact(
    messages: Sequence[Message],
    budget: Budget,
    count: CountMessage,
    policy: Policy | None = None,
    memo: NoteMemo | None = None,
) -> CompactionResult:
    """Compact `messages` so that they fit `budget.limit`, counting each message with `count`."""
    costs = [count(message) for message in messages]
    before = budget.fixed + sum(costs)
    if before <= budget.limit:
        return CompactionResult(list(messages), before, before, budget.limit)
    return _Replay(messages, costs, budget, count, policy or Policy(), memo).run(before)


@dataclass(slots=True)
class _Unit:
    """A run of messages level 2 drops whole: one user request and everything up to the next."""

    start: int
    end: int
    protected: bool
    droppable: bool


@dataclass(slots=True)
class _Replay:
    messages: Sequence[Message]
    costs: list[int]
    budget: Budget
    count: CountMessage
    policy: Policy
    memo: NoteMemo | None = None
    notes: dict[int, str] = field(default_factory=dict)
    # Tool results planned as notes: their text, tool, arguments and cost before the plan.
    planned: dict[int, tuple[str, str | None, str | None, int]] = field(default_factory=dict)
    facts_cost: int = 0
    empty_cost: int = 0
    dropped: list[bool] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    calls: dict[str, tuple[int, str | None, str | None]] = field(default_factory=dict)
    skipped: list[_Unit] = field(default_factory=list)
    protected_dropped: bool = False
    marker_cost: int = 0
    acc: int = 0
    next_tool: int = 0
    next_unit: int = 0

    def run(self, before: int) -> CompactionResult:
        messages, n = self.messages, len(self.messages)
        self.roles = [r if isinstance(r := m.get("role"), str) else "" for m in messages]
        self.dropped = [False] * n
        self._index_calls()
        users = [i for i in range(self._head_end(), n) if self.roles[i] == "user"]
        units = self._units(users)
        tools = [i for i in range(n) if self.roles[i] in TOOL_ROLES]
        self.marker_cost = max(self.count(dropped_marker(n)), self.policy.gap_tokens)
        self.empty_cost = self.count({"content": ""})
        self.facts_cost = self.count({"content": TYPICAL_FACTS}) - self.empty_cost

        self.acc = self.budget.fixed
        for i in range(n + 1):
            # Each earlier request ended where an assistant reply begins; the last one ends here.
            at_request = i == n or (i > 0 and self.roles[i] == "assistant")
            if at_request and self.acc > self.budget.limit:
                self._shrink(self._protected_start(users, i), tools, units)
            if i < n:
                self.acc += self.costs[i]
        # Notes were costed with their facts' budget; write the surviving ones (within that budget)
        # and, should a count not add up after all, keep compacting the final request.
        keep_from = self._protected_start(users, n)
        for _ in range(MAX_SETTLE_ROUNDS):
            self._write_notes()
            if self.acc <= self.budget.limit:
                break
            self._shrink(keep_from, tools, units)
        self._write_notes()
        return self._result(before)

    def _head_end(self) -> int:
        for i, role in enumerate(self.roles):
            if role not in LEADING_ROLES:
                return i
        return len(self.messages)

    def _protected_start(self, users: list[int], end: int) -> int:
        """Where the protected recent part of the request `messages[:end]` starts (0: all of it)."""
        seen = bisect.bisect_left(users, end)
        keep = self.policy.keep_recent_turns
        return users[seen - keep] if seen >= keep else 0

    def _index_calls(self) -> None:
        """Map each tool result to its call: the assistant message's index, the tool and arguments."""
        for i, message in enumerate(self.messages):
            tool_calls = message.get("tool_calls") if self.roles[i] == "assistant" else None
            for call in tool_calls if isinstance(tool_calls, list) else ():
                if isinstance(call, dict) and isinstance(call.get("id"), str):
                    function = call.get("function")
                    function = function if isinstance(function, dict) else {}
                    name, arguments = function.get("name"), function.get("arguments")
                    self.calls[call["id"]] = (
                        i,
                        name if isinstance(name, str) else None,
                        arguments if isinstance(arguments, str) else None,
                    )

    def _call_of(self, i: int) -> tuple[int, str | None, str | None]:
        message = self.messages[i]
        call_id = message.get("tool_call_id")
        if isinstance(call_id, str) and call_id in self.calls:
            return self.calls[call_id]
        name = message.get("name") or message.get("tool_name")  # Ollama's native API: tool_name
        return i, name if isinstance(name, str) else None, None

    def _is_protected(self, tool: str | None) -> bool:
        return tool is not None and any(fnmatch.fnmatchcase(tool, p) for p in self.policy.protected_tools)

    def _units(self, users: list[int]) -> list[_Unit]:
        """Level 2's units. The first is the answer to the first request (the request itself stays);
        then each later request with its answers. A cut that would orphan a tool result is skipped."""
        if not users:
            return []
        n = len(self.messages)
        earliest_call = [n] * (n + 1)  # earliest call index among tool results at or after i
        for i in range(n - 1, -1, -1):
            earliest_call[i] = earliest_call[i + 1]
            if self.roles[i] in TOOL_ROLES:
                earliest_call[i] = min(earliest_call[i], self._call_of(i)[0])
        cuts = [c for c in [users[0] + 1, *users[1:]] if earliest_call[c] >= c and c < n]
        units = []
        for start, end in itertools.pairwise(cuts):
            span = range(start, end)
            protected = bool(self.policy.protected_tools) and any(
                self.roles[i] in TOOL_ROLES and self._is_protected(self._call_of(i)[1]) for i in span
            )
            droppable = not all(is_dropped_marker(self.messages[i]) for i in span)
            units.append(_Unit(start, end, protected, droppable))
        return units

    def _shrink(self, keep_from: int, tools: list[int], units: list[_Unit]) -> None:
        """Bring the request checked now down to the target, touching nothing at or after `keep_from`."""
        budget = self.budget
        while self.acc > budget.target and self.next_tool < len(tools) and tools[self.next_tool] < keep_from:
            i = tools[self.next_tool]
            self.next_tool += 1
            if not self.dropped[i]:
                self._truncate(i)
        # Dropping loses whole exchanges: only when truncating was not enough to get under the line,
        # and then in one batch down to the target, so that level 2 moves rarely.
        dropping = self.acc > budget.limit
        while (
            dropping
            and self.acc > budget.target
            and self.next_unit < len(units)
            and units[self.next_unit].end <= keep_from
        ):
            unit = units[self.next_unit]
            self.next_unit += 1
            if unit.protected:
                self.skipped.append(unit)
            elif unit.droppable:
                self._drop(unit)
        # Protected exchanges go only when nothing else is left, and only as far as the line.
        nothing_else = self.next_unit == len(units) or units[self.next_unit].end > keep_from
        while self.acc > budget.limit and nothing_else and self.skipped:
            self._drop(self.skipped.pop(0))
            self.protected_dropped = True

    def _truncate(self, i: int) -> None:
        """Plan a note for tool result `i`. Building a note means finding the facts in the result, the
        costly part, so the plan costs the note with its facts' budget; only the notes that survive
        the replay are written (`_write_notes`), since most old results are dropped later."""
        message = self.messages[i]
        content = message.get("content")
        _, tool, arguments = self._call_of(i)
        if is_note(content) or self._is_protected(tool):
            return
        text = text_of(content)
        if len(text) <= self.policy.preview_chars + MIN_NOTE_CHARS:
            return  # the note would be as long as the result
        head = note_without_facts(
            text, tool=tool, arguments=arguments, preview_chars=self.policy.preview_chars
        )
        cost = self.count({**message, "content": head}) + self.facts_cost + ADDITIVITY_SLACK
        if cost < self.costs[i]:
            self.planned[i] = (text, tool, arguments, self.costs[i])
            self.acc -= self.costs[i] - cost
            self.costs[i] = cost

    def _write_notes(self) -> None:
        for i, (text, tool, arguments, original) in self.planned.items():
            if self.dropped[i]:
                continue
            note = self._note(text, tool, arguments)
            cost = self.count({**self.messages[i], "content": note})
            if cost >= original:  # the facts made it no shorter after all: keep the result
                cost = original
            else:
                self.notes[i] = note
            self.acc += cost - self.costs[i]
            self.costs[i] = cost
        self.planned.clear()

    def _note(self, text: str, tool: str | None, arguments: str | None) -> str:
        # By hash, not by text: the memo stays small whatever the results' size.
        key = (hash(text), len(text), tool, arguments, self.policy.preview_chars, self.facts_cost)
        note = self.memo.get(key) if self.memo is not None else None
        if note is None:
            note = build_note(
                text,
                tool=tool,
                arguments=arguments,
                preview_chars=self.policy.preview_chars,
                fits=self._facts_fit,
            )
            if self.memo is not None:
                self.memo.put(key, note)
        return note

    def _facts_fit(self, kept: str) -> bool:
        """Whether a note's facts section stays within what the plan costed it at."""
        return self.count({"content": kept}) - self.empty_cost <= self.facts_cost

    def _drop(self, unit: _Unit) -> None:
        joins_gap = unit.start > 0 and self.dropped[unit.start - 1]
        joins_next = unit.end < len(self.dropped) and self.dropped[unit.end]
        for i in range(unit.start, unit.end):
            self.dropped[i] = True
            self.acc -= self.costs[i]
        # Each run of dropped messages is replaced by one marker.
        self.acc += self.marker_cost * (1 - joins_gap - joins_next)

    def _result(self, before: int) -> CompactionResult:
        out: list[Message] = []
        after = self.acc
        run = 0
        for i, message in enumerate(self.messages):
            if self.dropped[i]:
                run += 1
                continue
            if run:
                out.append(marker := dropped_marker(run))
                after += self.count(marker) - self.marker_cost  # the real marker, not its reserve
                run = 0
            out.append({**message, "content": self.notes[i]} if i in self.notes else message)
        return CompactionResult(
            messages=out,
            tokens_before=before,
            tokens_after=after,
            limit=self.budget.limit,
            truncated=tuple(sorted(i for i in self.notes if not self.dropped[i])),
            dropped=tuple(i for i, gone in enumerate(self.dropped) if gone),
            protected_dropped=self.protected_dropped,
            overflow=after > self.budget.limit,
        )
