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

Agent loops. A coding agent sends one request followed by hundreds of tool calls, so the protected
part is the whole conversation. When the seed's rules cannot bring a request under the line, the
engine goes on inside the protected part, never touching user messages or leading system messages:
older tool results there get notes (the last `keep_recent_tool_results` stay whole), a kept result
too big for what is left is capped to its head, tail and error lines, and older tool exchanges (an
assistant `tool_calls` message with all its results, and the system messages after it) are dropped,
oldest first. Results the model has not read yet (after the last assistant message) are never noted
and are capped only as far as the line needs. Each dropped stretch gets one marker, in the role that
keeps roles alternating, or merged into the neighbouring assistant message. Nothing is thrown away
for nothing: when all that still ends over the line, the request goes back as it came if it fits the
window (marked over the line), else `over_window` says which message, never cut, is too big.

Each message is counted once per call; the replay moves pointers forward, so the whole call is
linear in the size of the history.
"""

from __future__ import annotations

import bisect
import fnmatch
import itertools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from proxy.counting.tokens import text_of
from proxy.engine.caps import cap_text
from proxy.engine.facts import TYPICAL_FACTS
from proxy.engine.notes import (
    build_note,
    dropped_marker,
    is_dropped_marker,
    is_note,
    note_without_facts,
)

Message = dict[str, Any]
CountMessage = Callable[[Message], int]

LEADING_ROLES = frozenset({"system", "developer"})
TOOL_ROLES = frozenset({"tool", "function"})
MIN_NOTE_CHARS = 80  # a note's own words, besides its preview
MAX_SETTLE_ROUNDS = 3
# Counts of concatenated text differ from the sum of their parts by a token or two at the seams.
ADDITIVITY_SLACK = 3
# A kept tool result takes at most this share of the target before older exchanges are dropped for it.
KEPT_RESULT_SHARE = 0.5
# Inside a loop, older exchanges are dropped down to this share of the target: each drop changes the
# history near its start (the whole prompt cache is lost), so drops come in big, rare batches.
LOOP_DROP_SHARE = 0.5
MIN_CAP_TOKENS = 256  # less would keep too little to be worth more than a note
CAP_ROUNDS = 4
CAP_FILL = 0.95  # a cap this close to its size is close enough
CAP_NOTE_CHARS = 240  # what `cap_text` takes of its size for its own words


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
    # Inside the protected part, the last tool results that are never noted or dropped (but may be capped).
    keep_recent_tool_results: int = 3
    protected_tools: tuple[str, ...] = ()
    preview_chars: int = 150
    # Tokens to reserve where dropped exchanges are replaced (a summary goes there, when summarising).
    gap_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Marker:
    """What stands where the run of messages `run` was dropped, placed so that roles still alternate
    (strict chat templates raise otherwise): its own message with `role` (assistant between two
    user-side messages, tool results and system messages being on the user's side; user between
    two assistant answers in words), or, where no role fits both neighbours, its text merged into
    the kept assistant message `into` (before that message's own content when it follows the run,
    after it when it comes before). `position` is the index in `CompactionResult.messages` of the
    message that holds it."""

    run: range
    text: str
    role: str | None
    into: int | None = None
    position: int = 0

    @property
    def merged_before(self) -> bool:
        """Merged at the start of the message after the run (else at the end of the one before)."""
        return self.into is not None and self.into >= self.run.stop


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
    capped: tuple[int, ...] = ()  # tool results cut to their head, tail and error lines
    protected_from: int = 0  # where the protected recent part starts (the seed's rules stop there)
    # Over the window whatever is done: the messages are returned unchanged, and this is the biggest
    # message that may not be cut (a system or user message), with its tokens.
    over_window: bool = False
    oversized: tuple[int, int] | None = None
    markers: tuple[Marker, ...] = ()  # one per run of dropped messages, in order

    @property
    def changed(self) -> bool:
        return bool(self.truncated or self.dropped or self.capped)

    def inside_protected(self, indices: Sequence[int]) -> list[int]:
        """Those of `indices` inside the protected recent part (the agent-loop rules changed them)."""
        return [i for i in indices if i >= self.protected_from]

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
        """The highest level used: 0 nothing, 1 tool results truncated or capped, 2 exchanges dropped."""
        return 2 if self.dropped else 1 if self.truncated or self.capped else 0


def merged_content(content: Any, before: Sequence[str], after: Sequence[str]) -> Any:
    """`content` (text or parts) with marker texts before and after it."""
    if isinstance(content, list):
        return [
            *({"type": "text", "text": t} for t in before),
            *content,
            *({"type": "text", "text": t} for t in after),
        ]
    own = [content] if isinstance(content, str) and content else []
    return "\n\n".join([*before, *own, *after])


def with_marker_texts(
    result: CompactionResult, texts: Mapping[int, str], messages: Sequence[Message]
) -> CompactionResult:
    """`result` with the text of marker `k` replaced by `texts[k]` (a summary) where it stands,
    merged ones merged again into the original `messages` they were merged into."""
    markers = [replace(m, text=texts[k]) if k in texts else m for k, m in enumerate(result.markers)]
    out = list(result.messages)
    for k, marker in enumerate(markers):
        if k not in texts:
            continue
        if marker.into is None:
            out[marker.position] = {**out[marker.position], "content": marker.text}
            continue
        into = [m for m in markers if m.into == marker.into]
        message = messages[marker.into]
        out[marker.position] = {
            **message,
            "content": merged_content(
                message.get("content"),
                [m.text for m in into if m.merged_before],
                [m.text for m in into if not m.merged_before],
            ),
        }
    return replace(result, messages=out, markers=tuple(markers))


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
class _Exchange:
    """An assistant `tool_calls` message and all its results, which follow it: dropped whole."""

    start: int
    end: int
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
    caps: dict[int, str] = field(default_factory=dict)
    uncapped: dict[int, int] = field(default_factory=dict)  # a capped result's cost before its cap
    # Tool results planned as notes: their text, tool, arguments and cost before the plan.
    planned: dict[int, tuple[str, str | None, str | None, int]] = field(default_factory=dict)
    facts_cost: int = 0
    empty_cost: int = 0
    dropped: list[bool] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    calls: dict[str, tuple[int, str | None, str | None]] = field(default_factory=dict)
    skipped: list[_Unit] = field(default_factory=list)
    users: list[int] = field(default_factory=list)
    tools: list[int] = field(default_factory=list)
    replies: list[int] = field(default_factory=list)  # the assistant messages
    units: list[_Unit] = field(default_factory=list)
    exchanges: list[_Exchange] = field(default_factory=list)
    protected_dropped: bool = False
    marker_cost: int = 0
    acc: int = 0
    next_tool: int = 0
    next_unit: int = 0
    next_exchange: int = 0

    def run(self, before: int) -> CompactionResult:
        messages, n = self.messages, len(self.messages)
        self.roles = [r if isinstance(r := m.get("role"), str) else "" for m in messages]
        self.dropped = [False] * n
        self._index_calls()
        self.users = [i for i in range(self._head_end(), n) if self.roles[i] == "user"]
        self.units = self._units(self.users)
        self.tools = [i for i in range(n) if self.roles[i] in TOOL_ROLES]
        self.replies = [i for i in range(n) if self.roles[i] == "assistant"]
        self.exchanges = self._exchanges()
        self.marker_cost = max(self.count(dropped_marker(n)), self.policy.gap_tokens)
        self.empty_cost = self.count({"content": ""})
        self.facts_cost = self.count({"content": TYPICAL_FACTS}) - self.empty_cost

        self.acc = self.budget.fixed
        for i in range(n + 1):
            # Each earlier request ended where an assistant reply begins; the last one ends here.
            at_request = i == n or (i > 0 and self.roles[i] == "assistant")
            if at_request and self.acc > self.budget.limit:
                self._shrink(i)
            if i < n:
                self.acc += self.costs[i]
        # Notes were costed with their facts' budget; write the surviving ones (within that budget)
        # and, should a count not add up after all, keep compacting the final request.
        for _ in range(MAX_SETTLE_ROUNDS):
            self._write_notes()
            if self.acc <= self.budget.limit:
                break
            self._shrink(n)
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

    def _exchanges(self) -> list[_Exchange]:
        """The tool exchanges, in order. One whose results do not all follow it (or that holds a
        protected tool) is never dropped: that would leave an orphan, or lose what cannot be fetched.
        A system message after an exchange (agents send reminders every few steps) goes with it: left
        behind, each would split the dropped stretch it stands in, and each piece get a marker."""
        n = len(self.messages)
        last_result: dict[int, int] = {}
        for i in self.tools:
            call = self._call_of(i)[0]
            if call != i:
                last_result[call] = i
        first = self.users[0] if self.users else n
        out = []
        for i in range(first + 1, n):
            if self.roles[i] != "assistant" or not self.messages[i].get("tool_calls"):
                continue
            end = i + 1
            while end < n and self.roles[end] in TOOL_ROLES:
                end += 1
            results = range(i + 1, end)
            while end < n and self.roles[end] in LEADING_ROLES:
                end += 1
            droppable = (
                last_result.get(i, i) < end
                and all(self._call_of(j)[0] in (i, j) for j in results)
                and not any(self._is_protected(self._call_of(j)[1]) for j in results)
                and not any(self._is_protected(name) for name in self._call_names(i))
            )
            out.append(_Exchange(i, end, droppable))
        return out

    def _call_names(self, i: int) -> list[str]:
        calls = self.messages[i].get("tool_calls")
        names = []
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(name, str):
                names.append(name)
        return names

    def _shrink(self, end: int) -> None:
        """Bring the request `messages[:end]` down to the target: the seed's rules first, then, when
        they cannot get it under the line, the agent-loop rules inside the protected part."""
        keep_from = self._protected_start(self.users, end)
        self._shrink_old(keep_from)
        if self.acc > self.budget.limit:
            self._shrink_loop(end)

    def _shrink_old(self, keep_from: int) -> None:
        """The seed's rules: touch nothing at or after `keep_from`."""
        budget, tools, units = self.budget, self.tools, self.units
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
                self._drop(unit.start, unit.end)
        # Protected exchanges go only when nothing else is left, and only as far as the line.
        nothing_else = self.next_unit == len(units) or units[self.next_unit].end > keep_from
        while self.acc > budget.limit and nothing_else and self.skipped:
            unit = self.skipped.pop(0)
            self._drop(unit.start, unit.end)
            self.protected_dropped = True

    def _shrink_loop(self, end: int) -> None:
        """Inside the protected part of `messages[:end]`: notes for all but the last kept tool results,
        then caps for kept results bigger than their share, then older exchanges dropped, then caps
        for what still does not fit. User messages and assistant answers are never touched."""
        budget, tools = self.budget, self.tools
        last = bisect.bisect_left(tools, end)
        # Results after the request's last assistant message are fresh: the model has not read them
        # yet. They are all kept, and capped only as far as the line needs, after older material.
        reply = bisect.bisect_left(self.replies, end) - 1
        fresh_from = bisect.bisect_right(tools, self.replies[reply]) if reply >= 0 else 0
        kept = tools[max(0, min(last - self.policy.keep_recent_tool_results, fresh_from)) : last]
        fresh = [i for i in kept if i >= tools[fresh_from]] if fresh_from < last else []
        read = kept[: len(kept) - len(fresh)]
        first_kept = kept[0] if kept else end
        # Every older result at once, not just down to the target: the next calls then append to an
        # unchanged prefix for longer, and each move costs the cache only the results kept last time.
        while self.next_tool < last and tools[self.next_tool] < first_kept:
            i = tools[self.next_tool]
            self.next_tool += 1
            if not self.dropped[i]:
                self._truncate(i)
        if self.acc <= budget.limit:
            return
        # A huge recent result is cut before older exchanges are given up for it: one already read
        # down to the target, a fresh one only down to the line.
        share = max(MIN_CAP_TOKENS, int(budget.target * KEPT_RESULT_SHARE))
        for results, aim in ((read, budget.target), (fresh, budget.limit)):
            for i in sorted(results, key=lambda i: -self.costs[i]):
                if self.acc <= budget.limit or self.costs[i] <= share:
                    break
                self._cap(i, max(share, self.costs[i] - (self.acc - aim)))
        if self.acc <= budget.limit:
            return
        exchanges = self.exchanges
        drop_to = int(budget.target * LOOP_DROP_SHARE)
        while (
            self.acc > drop_to
            and self.next_exchange < len(exchanges)
            and exchanges[self.next_exchange].end <= first_kept
        ):
            exchange = exchanges[self.next_exchange]
            self.next_exchange += 1
            if exchange.droppable:
                self._drop(exchange.start, exchange.end)
        # Whatever is still over: the results already read, biggest first, down to what is left for
        # them; then the fresh ones, only to the line.
        for results, aim in ((read, budget.target), (fresh, budget.limit)):
            for i in sorted(results, key=lambda i: -self.costs[i]):
                if self.acc <= budget.limit:
                    break
                self._cap(i, self.costs[i] - (self.acc - aim))
        # A fresh result capped before the drops gets back what they freed, up to the line.
        for i in fresh:
            if i in self.caps and self.acc < budget.limit:
                self._cap(i, self.costs[i] + budget.limit - self.acc, grow=True)

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
        # The head is found again at every call of a loop (its outline scans the whole result): memoised.
        key = ("head", hash(text), len(text), tool, arguments, self.policy.preview_chars)
        head = self.memo.get(key) if self.memo is not None else None
        if head is None:
            head = note_without_facts(
                text, tool=tool, arguments=arguments, preview_chars=self.policy.preview_chars
            )
            if self.memo is not None:
                self.memo.put(key, head)
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

    def _cap(self, i: int, tokens: int, *, grow: bool = False) -> None:
        """Cut kept tool result `i` to about `tokens`, keeping its head, tail and error lines; with
        `grow`, cut a capped result again from the whole, bigger (or not at all, if it all fits)."""
        message = self.messages[i]
        content = message.get("content")
        _, tool, _ = self._call_of(i)
        if (
            self.dropped[i]
            or i in self.notes
            or i in self.planned
            or self._is_protected(tool)
            or is_note(content)
        ):
            return
        text = text_of(content)
        tokens = max(MIN_CAP_TOKENS, tokens)
        whole = self.uncapped.get(i, self.costs[i])
        if grow and tokens >= whole:
            self.caps.pop(i, None)
            self.acc += whole - self.costs[i]
            self.costs[i] = whole
            return
        if (tokens >= self.costs[i] and not grow) or not text:
            return
        chars = int(len(text) * tokens / max(1, whole))
        best: tuple[int, str] | None = None
        for _ in range(CAP_ROUNDS):
            capped = self._cap_text(text, chars, tool)
            if capped is None:
                break
            cost = self.count({**message, "content": capped})
            if cost <= tokens:
                if best is None or cost > best[0]:
                    best = (cost, capped)
                if cost >= tokens * CAP_FILL:
                    break
                # `cap_text` keeps less than it is given when the cut part has few error lines.
                grown = min(int(chars * tokens / max(1, cost) * 0.98), len(text) + CAP_NOTE_CHARS - 1)
                if grown <= chars:
                    break
                chars = grown
            else:
                chars = int(chars * tokens / cost * 0.95)
        if best is not None and (best[0] < self.costs[i] or (grow and best[0] > self.costs[i])):
            cost, capped = best
            self.uncapped.setdefault(i, whole)
            self.caps[i] = capped
            self.acc -= self.costs[i] - cost
            self.costs[i] = cost

    def _cap_text(self, text: str, chars: int, tool: str | None) -> str | None:
        # A loop caps its latest results again at every call (the same text to the same size, as the
        # replay makes the same decisions): memoised like the notes, by hash. `cap_text` is a pure
        # function of this key, so the decisions never depend on the memo.
        key = ("cap", hash(text), len(text), chars, tool)
        memo = self.memo
        capped = memo.get(key) if memo is not None else None
        if capped is None:
            capped = cap_text(text, chars, tool=tool) or ""
            if memo is not None:
                memo.put(key, capped)
        return capped or None

    def _facts_fit(self, kept: str) -> bool:
        """Whether a note's facts section stays within what the plan costed it at."""
        return self.count({"content": kept}) - self.empty_cost <= self.facts_cost

    def _drop(self, start: int, end: int) -> None:
        dropped = self.dropped
        for i in range(start, end):
            if dropped[i]:
                continue
            # Each run of dropped messages is replaced by one marker: this one starts, extends or joins runs.
            joins = (i > 0 and dropped[i - 1]) + (i + 1 < len(dropped) and dropped[i + 1])
            dropped[i] = True
            self.acc -= self.costs[i]
            self.acc += self.marker_cost * (1 - joins)

    def _placements(self) -> list[Marker]:
        """Each dropped run's marker, placed so that roles alternate around it: tool results and
        system messages stand on the user's side."""
        n, dropped, roles = len(self.messages), self.dropped, self.roles
        placed: list[Marker] = []
        i = 0
        while i < n:
            if not dropped[i]:
                i += 1
                continue
            start = i
            while i < n and dropped[i]:
                i += 1
            run = range(start, i)
            text = text_of(dropped_marker(len(run)).get("content"))
            # A run never starts the conversation: the first user request is never dropped.
            prev = "assistant" if start > 0 and roles[start - 1] == "assistant" else "user"
            nxt = None if i == n else "assistant" if roles[i] == "assistant" else "user"
            calls = nxt == "assistant" and bool(self.messages[i].get("tool_calls"))
            if prev == "user" and nxt != "assistant":
                placed.append(Marker(run, text, "assistant"))
            elif prev == "assistant" and nxt == "assistant" and not calls:
                placed.append(Marker(run, text, "user"))
            elif prev == "user":  # then an assistant message: no role fits both, the marker joins it
                placed.append(Marker(run, text, None, into=i))
            else:
                # After an assistant message, before a user-side one or a tool-calls message (which
                # strict templates such as Mistral's skip when they check roles, so a user marker
                # there could meet the next user message): it joins the one before.
                placed.append(Marker(run, text, None, into=start - 1))
        return placed

    def _result(self, before: int) -> CompactionResult:
        out: list[Message] = []
        after = self.acc
        placed = self._placements()
        standalone = {m.run.start: k for k, m in enumerate(placed) if m.into is None}
        merged: dict[int, list[int]] = {}
        for k, m in enumerate(placed):
            if m.into is not None:
                merged.setdefault(m.into, []).append(k)
        for i, message in enumerate(self.messages):
            if i in standalone:
                k = standalone[i]
                marker_message = {"role": placed[k].role, "content": placed[k].text}
                placed[k] = replace(placed[k], position=len(out))
                out.append(marker_message)
                after += self.count(marker_message) - self.marker_cost  # the real marker, not its reserve
            if self.dropped[i]:
                continue
            content = self.notes.get(i, self.caps.get(i))
            kept = message if content is None else {**message, "content": content}
            if i in merged:
                into = [placed[k] for k in merged[i]]
                kept = {
                    **kept,
                    "content": merged_content(
                        kept.get("content"),
                        [m.text for m in into if m.merged_before],
                        [m.text for m in into if not m.merged_before],
                    ),
                }
                for k in merged[i]:
                    placed[k] = replace(placed[k], position=len(out))
                after += self.count(kept) - self.costs[i] - self.marker_cost * len(into)
            out.append(kept)
        protected_from = self._protected_start(self.users, len(self.messages))
        window = self.budget.window
        if window is not None and after > self.budget.limit and (after > window or before <= window):
            # Still over the line: compacting was for nothing when the request fits the window as it
            # came (it goes out as it came, marked), or when nothing fits it (a 400 naming the culprit).
            over = before > window
            return CompactionResult(
                messages=list(self.messages),
                tokens_before=before,
                tokens_after=before,
                limit=self.budget.limit,
                overflow=True,
                protected_from=protected_from,
                over_window=over,
                oversized=self._oversized() if over else None,
            )
        return CompactionResult(
            messages=out,
            tokens_before=before,
            tokens_after=after,
            limit=self.budget.limit,
            truncated=tuple(sorted(i for i in self.notes if not self.dropped[i])),
            dropped=tuple(i for i, gone in enumerate(self.dropped) if gone),
            protected_dropped=self.protected_dropped,
            overflow=after > self.budget.limit,
            capped=tuple(sorted(i for i in self.caps if not self.dropped[i] and i not in self.notes)),
            protected_from=protected_from,
            markers=tuple(placed),
        )

    def _oversized(self) -> tuple[int, int] | None:
        """The biggest message compaction may not cut: a leading system message or a user message."""
        never_cut = [i for i, role in enumerate(self.roles) if role in LEADING_ROLES or role == "user"]
        if not never_cut:
            return None
        sizes = {i: self.count(self.messages[i]) for i in never_cut}
        i = max(never_cut, key=lambda i: (sizes[i], -i))
        return i, sizes[i]
