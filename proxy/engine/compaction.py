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

This module is the engine's face. The conversation is read once into a frozen index (`index.py`,
with the call's inputs: `Budget`, `Policy`, `NoteMemo`; the walk of its messages, `reading.py`);
one replay's progress and decisions are `replay.py`; how a tool result is noted or capped is
`cuts.py`; where the markers of dropped runs stand is `markers.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import compress

from proxy.engine.cuts import Cuts
from proxy.engine.index import Budget, ConversationIndex, CountMessage, NoteMemo, Policy
from proxy.engine.markers import Marker, assemble, merged_content
from proxy.engine.reading import LEADING_ROLES, Message
from proxy.engine.replay import Replay


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
    # The last `keep_recent_tool_results` results noted all the same: the protected part alone did
    # not fit the line, even with its results capped (`x-compaction-recent-noted`).
    recent_noted: tuple[int, ...] = ()

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
    policy = policy or Policy()
    index = ConversationIndex.of(
        messages,
        costs,
        count,
        protected_tools=policy.protected_tools,
        keep_recent_turns=policy.keep_recent_turns,
        gap_tokens=policy.gap_tokens,
    )
    cuts = Cuts(index, count, policy.preview_chars, memo)
    replay = Replay(
        index,
        budget,
        policy.keep_recent_tool_results,
        cuts,
        policy.drop_to,
        room_calls=policy.loop_room_calls,
    )
    replay.run()
    return _result(replay, count, before)


def _result(replay: Replay, count: CountMessage, before: int) -> CompactionResult:
    index, budget, dropped, cuts = replay.index, replay.budget, replay.dropped, replay.cuts
    out, extra, markers = assemble(index, dropped, cuts.notes, cuts.caps, replay.costs, count)
    after = replay.acc + extra
    protected_from = index.protected_start(len(index.messages))
    window = budget.window
    if window is not None and after > budget.limit and (after > window or before <= window):
        # Still over the line: compacting was for nothing when the request fits the window as it
        # came (it goes out as it came, marked), or when nothing fits it (a 400 naming the culprit).
        over = before > window
        return CompactionResult(
            messages=list(index.messages),
            tokens_before=before,
            tokens_after=before,
            limit=budget.limit,
            overflow=True,
            protected_from=protected_from,
            over_window=over,
            oversized=_oversized(index, count) if over else None,
        )
    return CompactionResult(
        messages=out,
        tokens_before=before,
        tokens_after=after,
        limit=budget.limit,
        truncated=tuple(sorted(i for i in cuts.notes if not dropped[i])),
        dropped=tuple(compress(index.positions, dropped)),
        protected_dropped=replay.protected_dropped,
        overflow=after > budget.limit,
        capped=tuple(sorted(i for i in cuts.caps if not dropped[i] and i not in cuts.notes)),
        protected_from=protected_from,
        markers=markers,
        recent_noted=_recent_noted(replay, protected_from),
    )


def _recent_noted(replay: Replay, protected_from: int) -> tuple[int, ...]:
    """The last kept tool results of the protected part that were noted all the same."""
    keep = replay.keep_recent_tool_results
    recent = replay.index.tools[-keep:] if keep else ()
    notes = replay.cuts.notes
    return tuple(i for i in recent if i >= protected_from and i in notes and not replay.dropped[i])


def _oversized(index: ConversationIndex, count: CountMessage) -> tuple[int, int] | None:
    """The biggest message compaction may not cut: a leading system message or a user message."""
    never_cut = [i for i, role in enumerate(index.roles) if role in LEADING_ROLES or role == "user"]
    if not never_cut:
        return None
    sizes = {i: count(index.messages[i]) for i in never_cut}
    i = max(never_cut, key=lambda i: (sizes[i], -i))
    return i, sizes[i]
