"""What the proxy reports of the context edits it applied (`context_management.applied_edits`, as
anthropic-sdk-python's `BetaContextManagementResponse` reads it), in a message and in a stream. The SDK
itself reads it from the real process in tests/process/test_context_management.py (a second of import
kept out of the fast tier)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from proxy.formats import ANTHROPIC
from proxy.formats.anthropic_edit_report import AppliedEdits
from tests.support.fakes import anthropic_message


def loop(turns: int) -> list[dict[str, Any]]:
    """Each request answered by thinking + a tool call, its result, then thinking + text."""
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        think = {"type": "thinking", "thinking": f"plan {t} " * 20, "signature": "s"}
        call = {"type": "tool_use", "id": f"tu_{t}", "name": "Read", "input": {"n": t}}
        result = {"type": "tool_result", "tool_use_id": f"tu_{t}", "content": "x" * 4000}
        messages += [
            {"role": "user", "content": f"request {t}"},
            {"role": "assistant", "content": [think, call]},
            {"role": "user", "content": [result]},
            {
                "role": "assistant",
                "content": [{**think, "thinking": f"done {t}"}, {"type": "text", "text": "ok"}],
            },
        ]
    return messages


def report(edits: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"model": "m", "max_tokens": 10, "messages": loop(5), "context_management": {"edits": edits}}
    edited = ANTHROPIC.context_edits(body)
    assert "context_management" not in edited
    applied = ANTHROPIC.context_report(body, edited)
    assert applied is not None
    return applied.report


def test_both_edits_are_reported_in_the_order_asked() -> None:
    got = report(
        [
            {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 1}},
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
        ]
    )
    tools, thinking = got["applied_edits"]
    assert tools["type"] == "clear_tool_uses_20250919" and tools["cleared_tool_uses"] == 2, "5 uses, 3 kept"
    assert 1500 < tools["cleared_input_tokens"] < 2500, "two results of 4,000 characters"
    assert thinking == {
        "type": "clear_thinking_20251015",
        "cleared_thinking_turns": 3,
        "cleared_input_tokens": thinking["cleared_input_tokens"],
    }
    assert thinking["cleared_input_tokens"] > 0


def test_an_edit_that_clears_nothing_is_not_listed() -> None:
    assert report([{"type": "clear_thinking_20251015", "keep": "all"}]) == {"applied_edits": []}
    assert report([{"type": "clear_tool_uses_20250919"}]) == {"applied_edits": []}, "under the 100k trigger"


def test_the_report_is_the_messages_context_management() -> None:
    applied = AppliedEdits(
        ({"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2, "cleared_input_tokens": 9},)
    )
    message = anthropic_message("hi", input_tokens=5)
    parsed = orjson.loads(applied.into_body(orjson.dumps(message)))
    assert parsed == {**message, "context_management": {"applied_edits": list(applied.applied_edits)}}
    assert applied.into_body(b'{"type": "error"}') == b'{"type": "error"}'


async def test_the_stream_gets_it_on_message_delta_however_it_is_cut() -> None:
    applied = AppliedEdits(
        ({"type": "clear_thinking_20251015", "cleared_thinking_turns": 1, "cleared_input_tokens": 3},)
    )
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}}
    stream = (
        b'event: ping\ndata: {"type": "ping"}\n\n'
        + b"event: message_delta\ndata: "
        + orjson.dumps(delta)
        + b'\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    for size in (1, 7, 50, len(stream)):

        async def chunks(size: int = size) -> AsyncIterator[bytes]:
            for i in range(0, len(stream), size):
                yield stream[i : i + size]

        out = b"".join([c async for c in applied.into_stream(chunks())])
        events = out.split(b"\n\n")
        assert events[0] == b'event: ping\ndata: {"type": "ping"}' and events[2].endswith(
            b'{"type":"message_stop"}'
        )
        data = orjson.loads(events[1].split(b"data: ", 1)[1])
        assert data == {**delta, "context_management": {"applied_edits": list(applied.applied_edits)}}
