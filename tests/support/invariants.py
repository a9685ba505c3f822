"""What every compaction must keep true, checked on its result: counts, the head and the user
messages untouched, no orphaned tool result, nothing reordered."""

from __future__ import annotations

import json
from typing import Any

from proxy.counting.tokens import RequestCounter, count_chars4
from proxy.engine.caps import CAP_WORDS
from proxy.engine.compaction import CompactionResult
from proxy.engine.index import Budget
from proxy.engine.notes import NOTE_PREFIX
from tests.support.format_chats import is_marker_item, unmerged

count = RequestCounter(count_chars4).message


def total(messages: list[dict[str, Any]]) -> int:
    return sum(count(m) for m in messages)


def assert_invariants(
    chat: list[dict[str, Any]], result: CompactionResult, budget: Budget, keep: int = 2
) -> None:
    out = result.messages
    before = total(chat) + budget.fixed
    assert result.tokens_before == before
    assert result.tokens_after == total(out) + budget.fixed
    if before <= budget.limit:
        assert out == chat and not result.changed
    assert result.overflow == (result.tokens_after > budget.limit) or result.over_window
    if result.over_window:
        assert out == chat, "nothing is dropped for nothing"
        assert budget.window is not None and result.oversized is not None
    elif budget.window is not None:
        assert result.tokens_after <= budget.window
        if result.overflow and before <= budget.window:
            assert out == chat, "still over the line: nothing dropped for nothing"

    # Leading system/developer messages and every user message are never changed, nor reordered.
    head = next((i for i, m in enumerate(chat) if m["role"] not in ("system", "developer")), len(chat))
    assert out[:head] == chat[:head]
    users = [m for m in chat if m["role"] == "user"]
    # User messages are never cut; only the seed's level 2 drops (old) requests, never the last `keep`.
    assert all(any(m is u for u in users) for m in out if m["role"] == "user" and not is_marker_item(m))
    assert all(any(m is u for m in out) for u in users[-keep:])
    if users:
        assert any(m is users[0] for m in out), "the first request stays"
        assert any(m is users[-1] for m in out), "the latest request stays"
    assert_no_orphans(out)
    # Nothing is reordered: the output is the input with notes swapped in and runs replaced by markers.
    assert_subsequence(out, chat)


def assert_no_orphans(messages: list[dict[str, Any]]) -> None:
    open_calls: set[str] = set()
    answered: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            open_calls.add(call["id"])
        if message["role"] == "tool":
            assert message["tool_call_id"] in open_calls, f"orphan tool result {message['tool_call_id']}"
            answered.add(message["tool_call_id"])
    assert open_calls <= answered | {"late"}, f"calls without results: {open_calls - answered}"


def assert_subsequence(out: list[dict[str, Any]], chat: list[dict[str, Any]]) -> None:
    position = 0
    for message in out:
        if is_marker_item(message):
            continue
        message = unmerged(message)
        while position < len(chat) and not same_message(chat[position], message):
            position += 1
        assert position < len(chat), f"{json.dumps(message)[:200]} is not from the input, or out of order"
        position += 1


def same_message(original: dict[str, Any], message: dict[str, Any]) -> bool:
    if original == message:
        return True
    note = message.get("content")
    rest = {k: v for k, v in message.items() if k != "content"}
    return (
        isinstance(note, str)
        and (note.startswith(NOTE_PREFIX) or CAP_WORDS in note)
        and rest == {k: v for k, v in original.items() if k != "content"}
    )
