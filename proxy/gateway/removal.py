"""The rows of a caller that takes the list back whole (Kong's AI Prompt Compressor, Portkey's
guardrail, a plain HTTP caller), where the count may change: the dropped messages removed, so a
dropped run costs one marker (`merge`: the engine's words, where the engine puts them on the proxy's
own routes, in its own message or merged into the neighbouring assistant turn) or nothing
(`remove`). Without a stub for each message dropped, any history whose untouchable part fits (the
system prompt, the first request, the latest request and the last tool results) comes back fitting,
however long it was.

`stub`, one message out for each one in, stays the default: LiteLLM's guardrail refuses any other
count. Pure: dicts in, dicts out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.engine.markers import Marker
from proxy.formats.anthropic import merge_marker_texts
from proxy.formats.base import Decisions, rebuilt_from, rewrite_items
from proxy.formats.sources import Part
from proxy.gateway.view import Decided, Run


def collapsed(
    rows: Sequence[Any],
    sources: Sequence[tuple[Part, ...]],
    made: Decided,
    markers: Mapping[int, str] | None,
) -> list[Any]:
    """`rows` (the caller's messages, written row by row) without the dropped ones, and with one
    marker per dropped run saying `markers[run's first member]` (none when `markers` is None)."""
    placed = [] if markers is None else [_marker(run, markers[run.members[0]]) for run in made.runs]
    rebuilt = rebuilt_from(sources, Decisions(made.dropped, {}, placed))
    return rewrite_items(rows, rebuilt, item_with=_without_blocks, marker=_message, merge=merge_marker_texts)


def _marker(run: Run, text: str) -> Marker:
    return Marker(range(run.members[0], run.members[-1] + 1), text, run.role, run.into)


def _message(text: str, role: str) -> dict[str, Any]:
    return {"role": role, "content": text}


def _without_blocks(item: Any, blocks: set[int], notes: Mapping[int | None, Any]) -> Any:
    """A kept message without the blocks that were dropped (their notes are already written)."""
    content = item.get("content") if isinstance(item, dict) else None
    if not blocks or not isinstance(content, list):
        return item
    return {**item, "content": [block for k, block in enumerate(content) if k not in blocks]}
