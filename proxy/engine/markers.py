"""Where the markers of dropped runs stand: each run's marker gets the role that keeps roles
alternating around it, or is merged into a neighbouring assistant message; and the compacted
messages put together from what the replay kept, noted, capped and dropped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from proxy.counting.tokens import text_of
from proxy.engine.index import ConversationIndex, CountMessage
from proxy.engine.notes import dropped_marker
from proxy.engine.reading import Message


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


def placements(index: ConversationIndex, dropped: Sequence[bool]) -> list[Marker]:
    """Each dropped run's marker, placed so that roles alternate around it: tool results and
    system messages stand on the user's side."""
    messages, roles = index.messages, index.roles
    n = len(messages)
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
        calls = nxt == "assistant" and bool(messages[i].get("tool_calls"))
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


def assemble(
    index: ConversationIndex,
    dropped: Sequence[bool],
    notes: Mapping[int, str],
    caps: Mapping[int, str],
    costs: Sequence[int],
    count: CountMessage,
) -> tuple[list[Message], int, tuple[Marker, ...]]:
    """The compacted messages, the markers where they stand, and what the real markers cost besides
    the reserve the replay counted for each (`index.marker_cost`)."""
    out: list[Message] = []
    extra = 0
    marker_cost = index.marker_cost
    placed = placements(index, dropped)
    standalone = {m.run.start: k for k, m in enumerate(placed) if m.into is None}
    merged: dict[int, list[int]] = {}
    for k, m in enumerate(placed):
        if m.into is not None:
            merged.setdefault(m.into, []).append(k)
    for i, message in enumerate(index.messages):
        if i in standalone:
            k = standalone[i]
            marker_message = {"role": placed[k].role, "content": placed[k].text}
            placed[k] = replace(placed[k], position=len(out))
            out.append(marker_message)
            extra += count(marker_message) - marker_cost  # the real marker, not its reserve
        if dropped[i]:
            continue
        content = notes.get(i, caps.get(i))
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
            extra += count(kept) - costs[i] - marker_cost * len(into)
        out.append(kept)
    return out, extra, tuple(placed)
