"""Calling `/v1/compress` in-process over a recording upstream that must never be called, and the
checks every test of its answers makes: nothing empty, every tool call answered."""

from __future__ import annotations

from typing import Any

from tests.support.fakes import RecordingUpstream, proxy_client

Message = dict[str, Any]


async def compress(body: dict[str, Any], headers: dict[str, str] | None = None, **settings: Any) -> Any:
    """The answer to one call with `body` (and `headers`), from a proxy built with `settings`."""
    upstream = RecordingUpstream()
    async with proxy_client(upstream, **settings) as client:
        response = await client.post("/v1/compress", json=body, headers=headers or {})
    assert upstream.forwarded == []  # answered by the proxy itself (its count asked of the upstream aside)
    return response


def never_empty(rows: list[Message]) -> None:
    """No message or text block comes back empty (Anthropic's API refuses one; stubs are "…")."""
    for row in rows:
        content = row.get("content")
        if isinstance(content, list):
            assert all(b.get("text") != "" for b in content if b.get("type") == "text"), row
        else:
            assert content != "" or row.get("tool_calls"), row


def calls_answered_chat(rows: list[Message]) -> None:
    """Each assistant message's calls answered by the tool results right after it, and each result
    answering a call of the assistant message before its run: paired both ways."""
    for k, row in enumerate(rows):
        if row["role"] == "assistant" and row.get("tool_calls"):
            results = []
            for after in rows[k + 1 :]:
                if after["role"] != "tool":
                    break
                results.append(after["tool_call_id"])
            assert sorted(results) == sorted(c["id"] for c in row["tool_calls"]), row
        elif row["role"] == "tool":
            before = next(r for r in reversed(rows[:k]) if r["role"] != "tool")
            assert row["tool_call_id"] in {c["id"] for c in before.get("tool_calls") or ()}, row


def calls_answered_anthropic(rows: list[Message]) -> None:
    """Each `tool_use` answered by a `tool_result` in the next message, and each result's call in the
    message before it."""

    def blocks(row: Message, kind: str) -> list[str]:
        content = row["content"] if isinstance(row["content"], list) else []
        return [b["id" if kind == "tool_use" else "tool_use_id"] for b in content if b.get("type") == kind]

    for k, row in enumerate(rows):
        uses, results = blocks(row, "tool_use"), blocks(row, "tool_result")
        if uses:
            assert k + 1 < len(rows) and sorted(blocks(rows[k + 1], "tool_result")) == sorted(uses), row
        if results:
            assert k > 0 and set(results) <= set(blocks(rows[k - 1], "tool_use")), row
