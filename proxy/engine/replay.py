"""One replay of a conversation's history: its progress (the running token total, what is dropped,
how far each frontier has moved) and the decisions that move it, request by request, as a stateful
compactor would have made them. The conversation itself is read from its frozen index."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from proxy.engine.cuts import MIN_CAP_TOKENS, Cuts
from proxy.engine.index import Budget, ConversationIndex
from proxy.engine.reading import Unit

MAX_SETTLE_ROUNDS = 3
# A kept tool result takes at most this share of the target before older exchanges are dropped for it.
KEPT_RESULT_SHARE = 0.5
# Inside a loop, older exchanges are dropped down to this share of the target: each drop changes the
# history near its start (the whole prompt cache is lost), so drops come in big, rare batches.
LOOP_DROP_SHARE = 0.5


class Kept(NamedTuple):
    """The tool results the loop keeps whole in one request (`Replay._kept`)."""

    read: Sequence[int]  # the kept results the model has read (before the request's last reply)
    fresh: Sequence[int]  # those after it: all kept, capped only as far as the line needs
    first: int  # where the kept results start (the request's end when none is kept)
    last_call: int  # what the last call (its reply and its results) cost


@dataclass(slots=True)
class Replay:
    index: ConversationIndex
    budget: Budget
    keep_recent_tool_results: int
    cuts: Cuts  # what is noted and capped
    drop_to: float = 1.0  # old exchanges, once they must go, go down to this share of the target
    room_calls: float = 0.0  # inside a loop, notes that leave less room than this many calls drop now
    costs: list[int] = field(default_factory=list)  # each message's cost now
    acc: int = 0  # the running total of the request being replayed
    dropped: list[bool] = field(default_factory=list)
    skipped: list[Unit] = field(default_factory=list)  # protected units passed over, dropped last
    protected_dropped: bool = False
    next_tool: int = 0
    next_unit: int = 0
    next_exchange: int = 0
    end: int = 0  # the end of the request being shrunk

    def run(self) -> None:
        index, budget = self.index, self.budget
        n = len(index.messages)
        self.costs = costs = list(index.costs)
        self.dropped = [False] * n
        limit = budget.limit
        self.acc = budget.fixed
        # Each earlier request ended where an assistant reply begins; the last one ends here. A
        # request's shrinking changes only messages before its end, so the costs added are as read.
        ends = [i for i in index.replies if i > 0]
        ends.append(n)
        start = 0
        for end in ends:
            self.acc += sum(costs[start:end])
            start = end
            if self.acc > limit:
                self._shrink(end)
        # Notes were costed with their facts' budget; write the surviving ones (within that budget)
        # and, should a count not add up after all, keep compacting the final request.
        for _ in range(MAX_SETTLE_ROUNDS):
            self.acc += self.cuts.write_notes(costs, self.dropped)
            if self.acc <= limit:
                break
            self._shrink(n)
        self.acc += self.cuts.write_notes(costs, self.dropped)

    def _shrink(self, end: int) -> None:
        """Bring the request `messages[:end]` down to the target: the seed's rules first, then, when
        they cannot get it under the line, the agent-loop rules inside the protected part."""
        self.end = end
        keep_from = self.index.protected_start(end)
        self._shrink_old(keep_from)
        if self.acc > self.budget.limit:
            self._shrink_loop(end)

    def _shrink_old(self, keep_from: int) -> None:
        """The seed's rules: touch nothing at or after `keep_from`."""
        budget, units = self.budget, self.index.units
        self._note_before(keep_from, while_over=budget.target)
        # Dropping loses whole exchanges: only when truncating was not enough to reach the target,
        # and then in one batch down to `drop_to` of it, so that level 2 moves rarely. Notes that
        # leave the request between the target and the line would only put off the drop a turn or
        # two, the prefix changed twice (the server's prompt cache lost twice) instead of once.
        dropping = self.acc > budget.target
        drop_to = int(budget.target * self.drop_to)
        while (
            dropping
            and self.acc > drop_to
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
        then caps for kept results bigger than their share, then, unless the notes left room enough,
        older exchanges dropped with notes for the kept results already read, then caps for what
        still does not fit. User messages and assistant answers are never touched."""
        budget = self.budget
        kept = self._kept(end)
        # Every older result at once, not just down to the target: the next calls then append to an
        # unchanged prefix for longer, and each move costs the cache only the results kept last time.
        self._note_before(kept.first)
        # With `room_calls`, notes must leave room for that many more calls like the last one (its
        # reply and results), or this request's older exchanges go now (Anthropic's `clear_at_least`):
        # notes that buy less only put off the drop a call, and the prefix breaks twice (at the notes,
        # then at the drop). The price: the drop comes a few calls sooner, and the notes it drops.
        enough = budget.limit - int(self.room_calls * kept.last_call)
        if self.acc <= enough:
            return
        notes_fit = self.acc <= budget.limit
        # A huge recent result is cut before older exchanges are given up for it: one already read
        # down to the target, a fresh one only down to the line.
        self._cap_biggest(kept, floor=max(MIN_CAP_TOKENS, int(budget.target * KEPT_RESULT_SHARE)))
        # When caps were needed to get under the line, they are enough: a huge recent result is no
        # reason to give up older exchanges.
        if self.acc <= (enough if notes_fit else budget.limit):
            return
        # Dropped early, only this request's own loop: earlier turns go only for the line.
        if self.acc <= budget.limit and not self._next_exchange_in_request(end):
            return
        self._drop_exchanges(before=kept.first)
        # Whatever is still over: the results already read, biggest first, down to what is left for
        # them; then the fresh ones, only to the line (no cap is ever smaller than MIN_CAP_TOKENS).
        self._cap_biggest(kept, floor=MIN_CAP_TOKENS)
        # Only when the protected part alone does not fit even capped: notes for the kept results
        # already read, oldest first, as far as the line needs (the report says which).
        for i in kept.read:
            if self.acc <= budget.limit:
                break
            if not self.dropped[i] and i not in self.cuts.planned and i not in self.cuts.notes:
                self._truncate(i)
        # A fresh result capped before the drops gets back what they freed, up to the line.
        caps = self.cuts.caps
        for i in kept.fresh:
            if i in caps and self.acc < budget.limit:
                self._cap(i, self.costs[i] + budget.limit - self.acc, grow=True)

    def _kept(self, end: int) -> Kept:
        """The tool results of `messages[:end]` kept whole in the loop: the last few, and every result
        after the request's last assistant message, which the model has not read yet (fresh)."""
        tools, replies = self.index.tools, self.index.replies
        last = bisect.bisect_left(tools, end)
        reply = bisect.bisect_left(replies, end) - 1
        fresh_from = bisect.bisect_right(tools, replies[reply]) if reply >= 0 else 0
        kept = tools[max(0, min(last - self.keep_recent_tool_results, fresh_from)) : last]
        fresh = [i for i in kept if i >= tools[fresh_from]] if fresh_from < last else []
        last_call = sum(self.index.costs[replies[reply] : end]) if reply >= 0 else 0
        return Kept(kept[: len(kept) - len(fresh)], fresh, kept[0] if kept else end, last_call)

    def _note_before(self, bound: int, *, while_over: float = -math.inf) -> None:
        """Notes for the tool results before `bound` not passed yet, oldest first, while the request
        is over `while_over` (all of them, by default)."""
        tools = self.index.tools
        while self.acc > while_over and self.next_tool < len(tools) and tools[self.next_tool] < bound:
            i = tools[self.next_tool]
            self.next_tool += 1
            if not self.dropped[i]:
                self._truncate(i)

    def _cap_biggest(self, kept: Kept, *, floor: int) -> None:
        """Caps for the kept results, biggest first, none below `floor`, until the request is under
        the line: those already read down to what the target leaves them, fresh ones to the line."""
        budget, costs = self.budget, self.costs
        for results, aim in ((kept.read, budget.target), (kept.fresh, budget.limit)):
            for i in sorted(results, key=lambda i: -costs[i]):
                if self.acc <= budget.limit or costs[i] <= floor:
                    break
                self._cap(i, max(floor, costs[i] - (self.acc - aim)))

    def _next_exchange_in_request(self, end: int) -> bool:
        """Whether the next exchange to drop belongs to the request `messages[:end]` itself (its own
        loop), not to an earlier turn."""
        exchanges, users = self.index.exchanges, self.index.users
        request_start = users[bisect.bisect_left(users, end) - 1] if users and users[0] < end else 0
        return self.next_exchange < len(exchanges) and exchanges[self.next_exchange].start >= request_start

    def _drop_exchanges(self, *, before: int) -> None:
        """The older tool exchanges, ending by `before`, dropped oldest first down to `LOOP_DROP_SHARE`
        of the target: each drop breaks the prompt cache, so drops come in big, rare batches."""
        exchanges = self.index.exchanges
        drop_to = int(self.budget.target * LOOP_DROP_SHARE)
        while (
            self.acc > drop_to
            and self.next_exchange < len(exchanges)
            and exchanges[self.next_exchange].end <= before
        ):
            exchange = exchanges[self.next_exchange]
            self.next_exchange += 1
            if exchange.droppable:
                self._drop(exchange.start, exchange.end)

    def _truncate(self, i: int) -> None:
        """Plan a note for tool result `i` (written at the end, if it survives)."""
        cost = self.costs[i]
        planned = self.cuts.plan_note(i, cost, self.end)
        self.acc -= cost - planned
        self.costs[i] = planned

    def _cap(self, i: int, tokens: int, *, grow: bool = False) -> None:
        """Cap kept tool result `i` to about `tokens` (with `grow`, again and bigger)."""
        if self.dropped[i]:
            return
        cost = self.costs[i]
        capped = self.cuts.cap(i, tokens, cost, grow=grow)
        self.acc -= cost - capped
        self.costs[i] = capped

    def _drop(self, start: int, end: int) -> None:
        dropped, costs, marker_cost = self.dropped, self.costs, self.index.marker_cost
        for i in range(start, end):
            if dropped[i]:
                continue
            # Each run of dropped messages is replaced by one marker: this one starts, extends or joins runs.
            joins = (i > 0 and dropped[i - 1]) + (i + 1 < len(dropped) and dropped[i + 1])
            dropped[i] = True
            self.acc -= costs[i]
            self.acc += marker_cost * (1 - joins)
