"""The seam between the engine and the wire formats: what an adapter must do, and the write-back
every adapter shares.

The engine (`proxy.engine.compaction`) works on the neutral conversation: a Chat Completions request whose
`messages` have a `role` (`system`/`developer` leading, `user`, `assistant`, `tool`), text or parts
`content`, assistant `tool_calls` with ids and tool results with `tool_call_id`. Adapters write it
as a chat template takes it (text and image parts, `reasoning_content`, function tools), so the
upstream's own count (`/apply-template`, `/tokenize`) works for every format. An adapter
reads its wire format into that form (`read`), remembering which original item(s) each neutral
message stands for (`Part`s), and applies the engine's decisions back onto the ORIGINAL body
(`write`): a noted tool result gets the note as its content, dropped items are removed and a marker
in the format's own shape stands where they were, with the role that keeps roles alternating, or
merged into the neighbouring assistant turn where no role fits. Nothing else in the body changes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from proxy.engine.compaction import CompactionResult
from proxy.engine.markers import Marker
from proxy.engine.plan import Body, ChatPlan
from proxy.engine.refusal import Refusal
from proxy.errors import ContextOverflowError
from proxy.formats.reports import AnswerReport
from proxy.formats.sources import Part

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Conversation:
    """A request read into the neutral form. `request` is what the planner sees (model, messages,
    reply limit, tool schemas); `sources[i]` are the original parts neutral message `i` stands for
    (none for instructions that live outside the list, which are never compacted)."""

    request: Body
    sources: Sequence[tuple[Part, ...]] = ()
    window: int | None = None  # a window the request sets for itself (Ollama's `options.num_ctx`)


class WireFormat(Protocol):
    """One wire format. A new format is one module implementing this, plus one line in
    `proxy.formats.ROUTES`."""

    name: str  # its metrics label and `/compact` name

    @property
    def reply_field(self) -> str | None:
        """Where the request names its reply limit, for errors (None: as Chat Completions does)."""
        ...

    def read(self, body: Body, params: Mapping[str, str]) -> Conversation | None:
        """The neutral conversation of a request (`params`: the route's path parameters), or None
        when the request must be left alone (the server keeps or compacts the history itself).
        Raises `ProxyError` (400) for a body compaction cannot read."""
        ...

    def write(self, body: Body, conversation: Conversation, plan: ChatPlan) -> Body:
        """The original `body` with `plan`'s decisions applied, and nothing else changed."""
        ...

    def streamed(self, body: Body) -> bool:
        """Whether the client asked for a streamed answer."""
        ...

    def reported_prompt_tokens(self, tail: bytes) -> int | None:
        """The prompt size the upstream reported at the end of its answer (for calibration)."""
        ...

    def error_body(self, status: int, message: str, type: str, code: str | None, param: str | None) -> bytes:
        """A proxy error in the shape this format's clients expect."""
        ...

    def overflow_error(self, refusal: Refusal, *, streamed: bool) -> ContextOverflowError:
        """The "cannot fit" error worded as this format's own server words an overflow, with
        `refusal`'s figures and detail (the words its clients start their own compaction on), and
        answered as they look for it (`streamed`: the client asked for a streamed answer)."""
        ...

    def stream_error_event(self, message: str) -> bytes:
        """The SSE event that ends a stream the upstream broke off, where this format's official
        client raises (`sse_error_event` frames it)."""
        ...

    def client_field(self, body: Body, conversation: Conversation, index: int) -> str:
        """The client's own name for neutral message `index`, for errors (`messages[3]`, `input[7]`,
        `system`); `source_field` finds it from the conversation's sources."""
        ...

    def server_manages_context(self, body: Body, *, upstream_host: str, upstream_kind: str) -> bool:
        """Whether `body` asks for server-side context management that this upstream (its host name,
        `COMPACT_UPSTREAM_KIND`) really implements: then the proxy leaves the history alone."""
        ...

    def context_edits(self, body: Body) -> Body:
        """`body` with the context edits it asks for that the proxy applies itself, for a server that
        does not; `body` itself when none applies."""
        ...

    def context_report(self, original: Body, edited: Body) -> AnswerReport | None:
        """What the answer must report of the context edits that turned `original` into `edited`
        (`context_edits` made them), or None: nothing to report (a format without edits, or whose
        answers have no field for them)."""
        ...

    def resend_after(self, sent: bytes, status: int, error: bytes) -> bytes | None:
        """What to send once more after the server refused `sent` with `status` and `error`, when the
        refusal says how to repair it (Anthropic's thinking block bound to another conversation);
        None for any other refusal, and in a format that repairs none."""
        ...


def source_field(conversation: Conversation, index: int, *, items: str, outside: str) -> str:
    """The client's name for neutral message `index`: `items[i]` for the format's item `i` it comes
    from, `outside` for what lives outside the list (no source)."""
    sources = conversation.sources
    if not sources or index >= len(sources):  # one neutral message per item
        return f"{items}[{index}]"
    parts = sources[index]
    return f"{items}[{parts[0].item}]" if parts else outside


@dataclass(slots=True)
class Decisions:
    """The engine's result in terms of the neutral messages it was given."""

    dropped: frozenset[int]
    notes: dict[int, Any]  # neutral index -> the new content of a noted tool result
    markers: list[Marker]  # one per dropped run: its own message, or merged into a kept assistant one


def decisions(result: CompactionResult) -> Decisions:
    """Walk `result.messages` beside the neutral messages: each dropped run has its marker (or a
    summary) in its own message or merged into a kept neighbour, each noted result its new content."""
    dropped = frozenset(result.dropped)
    truncated = set(result.truncated) | set(result.capped)  # a capped result is written back like a note
    notes: dict[int, Any] = {}
    standalone = {m.position for m in result.markers if m.into is None}
    out = (m for p, m in enumerate(result.messages) if p not in standalone)
    n = (max(dropped | truncated) + 1) if (dropped or truncated) else 0
    for i in range(n):
        if i in dropped:
            continue
        message = next(out)
        if i in truncated:
            notes[i] = message.get("content")
    return Decisions(dropped, notes, list(result.markers))


@dataclass(slots=True)
class Rebuilt:
    """The format's list after the decisions: which items and blocks stay, with which notes, the
    markers (text, role) to insert before or after an item, and the marker texts to merge into an
    assistant item (before its own content, after it)."""

    drop_items: set[int] = field(default_factory=set)
    drop_blocks: dict[int, set[int]] = field(default_factory=dict)
    notes: dict[int, dict[int | None, Any]] = field(default_factory=dict)  # item -> block -> note
    before: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    after: dict[int, list[tuple[str, str]]] = field(default_factory=dict)
    merged: dict[int, tuple[list[str], list[str]]] = field(default_factory=dict)


def rebuild(conversation: Conversation, plan: ChatPlan) -> Rebuilt:
    """Map the engine's decisions onto the original items and blocks."""
    return rebuilt_from(conversation.sources, decisions(plan.result))


def rebuilt_from(sources: Sequence[tuple[Part, ...]], d: Decisions) -> Rebuilt:
    """`d` mapped onto the items and blocks `sources` name (the gateway's own decisions, read back
    in the caller's terms, take this way too)."""
    out = Rebuilt()
    kept_before: dict[int, int] = {}  # item -> the first neutral index that keeps a part of it
    for i, parts in enumerate(sources):  # one walk: `ItemRuns` makes the parts as it goes
        if i in d.dropped:
            for part in parts:
                if part.block is None:
                    out.drop_items.add(part.item)
                else:
                    out.drop_blocks.setdefault(part.item, set()).add(part.block)
            continue
        for part in parts:
            kept_before.setdefault(part.item, i)
        if i in d.notes:
            for part in parts:
                out.notes.setdefault(part.item, {})[part.block] = d.notes[i]
    for item in out.drop_blocks:
        if item not in kept_before:  # every block of it went
            out.drop_items.add(item)
    for marker in d.markers:
        if marker.into is not None and sources[marker.into]:
            parts = sources[marker.into]
            # Into the assistant turn's first item when the run comes before it, else its last.
            item = parts[0].item if marker.merged_before else parts[-1].item
            texts = out.merged.setdefault(item, ([], []))
            texts[0 if marker.merged_before else 1].append(marker.text)
            continue
        role = marker.role or "assistant"
        item = sources[marker.run.start][0].item
        # A run that begins inside an item whose earlier blocks stay goes after that item.
        if kept_before.get(item, marker.run.start) < marker.run.start:
            out.after.setdefault(item, []).append((marker.text, role))
        else:
            out.before.setdefault(item, []).append((marker.text, role))
    return out


def rewrite_items(
    items: Sequence[Any],
    rebuilt: Rebuilt,
    *,
    item_with: Callable[[Any, set[int], Mapping[int | None, Any]], Any],
    marker: Callable[[str, str], Any],
    merge: Callable[[Any, Sequence[str], Sequence[str]], Any] | None = None,
) -> list[Any]:
    """The format's list with items dropped, blocks dropped, notes written and markers inserted.
    `item_with(item, dropped_blocks, notes_by_block)` rewrites one item that stays (block None: the
    whole item's result); `marker(text, role)` builds a marker item in the format's shape;
    `merge(item, before, after)` puts marker texts into an assistant item. A format without `merge`
    (its assistant turn is several items) gets them as assistant marker items beside that item."""
    out: list[Any] = []
    for index, item in enumerate(items):
        out.extend(marker(text, role) for text, role in rebuilt.before.get(index, ()))
        before, after = rebuilt.merged.get(index, ((), ()))
        if index not in rebuilt.drop_items:
            blocks = rebuilt.drop_blocks.get(index, set())
            notes = rebuilt.notes.get(index, {})
            kept = item_with(item, blocks, notes) if blocks or notes else item
            if merge is not None and (before or after):
                kept, before, after = merge(kept, before, after), (), ()
            out.extend(marker(text, "assistant") for text in before)
            out.append(kept)
            out.extend(marker(text, "assistant") for text in after)
        out.extend(marker(text, role) for text, role in rebuilt.after.get(index, ()))
    return out


def with_decisions(
    body: Body,
    key: str,
    conversation: Conversation,
    plan: ChatPlan,
    *,
    item_with: Callable[[Any, set[int], Mapping[int | None, Any]], Any],
    marker: Callable[[str, str], Any],
    merge: Callable[[Any, Sequence[str], Sequence[str]], Any] | None = None,
) -> Body:
    """A copy of `body` whose list `key` carries `plan`'s decisions (`rewrite_items`), the list as it
    came when the plan changed nothing: the start of a format's `write`."""
    changed = dict(body)
    items = body.get(key)
    if plan.result.changed and isinstance(items, list):
        rebuilt = rebuild(conversation, plan)
        changed[key] = rewrite_items(items, rebuilt, item_with=item_with, marker=marker, merge=merge)
    return changed


def last_count(pattern: re.Pattern[bytes], tail: bytes) -> int | None:
    """The last count `pattern` finds in the tail of an answer (its usage comes last)."""
    matches = pattern.findall(tail)
    return int(matches[-1]) if matches else None


def sse_error_event(data: Any, *, event: str | None = None) -> bytes:
    """An SSE event carrying `data` (as JSON), after a blank line, so that it never joins an event
    the upstream left half sent."""
    head = b"\n\nevent: " + event.encode() + b"\ndata: " if event else b"\n\ndata: "
    return head + orjson.dumps(data) + b"\n\n"


def str_field(value: Any) -> str | None:
    """A string field of a client's item, else None (a list or an object there must not be compared
    with names)."""
    return value if isinstance(value, str) else None
