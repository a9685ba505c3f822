"""What a request is allowed: the reply room, the margin for the estimate's error, the
`x-compaction-*` counts, and the server-side context management the proxy must honour or apply
(issues 16 and 19). In-process through `httpx.ASGITransport`, for the logic."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.formats import ANTHROPIC, RESPONSES, WireFormat, context_edits, server_manages_context
from proxy.formats.anthropic import CLEARED_RESULT
from tests.fakes import RecordingUpstream, proxy_client
from tests.test_loops import PYTEST, one_request_loop, step


async def test_capped_is_a_count_like_truncated_and_dropped() -> None:
    loop = one_request_loop(3, lines=80)
    log = "\n".join(f"2026-12-03 07:{k % 60:02}:00 INFO step {k} ok" for k in range(9000))
    step(loop, 99, [("bash", log + "\n" + PYTEST)])
    upstream = RecordingUpstream()
    async with proxy_client(upstream, window=32000) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": loop})
        report = (await client.post("/compact", json={"model": "m", "messages": loop})).json()["report"]
    assert response.status_code == 200
    assert report["capped"] == [len(loop) - 1], "the indices stay in /compact's report"
    assert response.headers["x-compaction-capped"] == "1"
    for name in ("truncated", "dropped", "capped"):
        assert response.headers[f"x-compaction-{name}"].isdigit()


# --- context_management: honoured where the server implements it, applied by the proxy elsewhere --


def thinking_loop(turns: int) -> list[dict[str, Any]]:
    """An Anthropic tool loop: each user request answered by thinking + a tool call, its result,
    then thinking + text."""
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        messages.append({"role": "user", "content": f"request {t}"})
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"plan {t}", "signature": "s"},
                    {
                        "type": "tool_use",
                        "id": f"tu_{t}",
                        "name": "Read" if t % 2 else "Bash",
                        "input": {"n": t},
                    },
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"tu_{t}", "content": "x" * 400}],
            }
        )
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"done {t}", "signature": "s"},
                    {"type": "text", "text": f"answer {t}"},
                ],
            }
        )
    return messages


def thinking_turns(messages: list[dict[str, Any]]) -> list[int]:
    """Which requests' answers still hold thinking."""
    return sorted(
        {
            i // 4
            for i, m in enumerate(messages)
            if m["role"] == "assistant" and any(b["type"] == "thinking" for b in m["content"])
        }
    )


def edited(messages: list[dict[str, Any]], *edits: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"model": "m", "messages": messages, "context_management": {"edits": list(edits)}}
    out = context_edits(ANTHROPIC, body)
    assert out["context_management"] == body["context_management"], "the field is kept as it came"
    result: list[dict[str, Any]] = out["messages"]
    return result


def test_clear_thinking_keep_all_as_claude_code_sends_it_changes_nothing() -> None:
    messages = thinking_loop(4)
    body = {
        "model": "m",
        "messages": messages,
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    }
    assert context_edits(ANTHROPIC, body) is body


def test_clear_thinking_keeps_the_last_turns_thinking_by_default_and_keep_turns() -> None:
    messages = thinking_loop(4)
    assert thinking_turns(edited(messages, {"type": "clear_thinking_20251015"})) == [3]
    kept = edited(
        messages, {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}}
    )
    assert thinking_turns(kept) == [2, 3]
    assert [b["type"] for b in kept[1]["content"]] == ["tool_use"], "the call stays, its thinking goes"
    assert kept[2] == messages[2] and len(kept) == len(messages)


def results(messages: list[dict[str, Any]]) -> list[str]:
    return [
        "cleared" if b["content"] == CLEARED_RESULT else "kept"
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


def test_clear_tool_uses_clears_all_but_the_last_keep_once_triggered() -> None:
    messages = thinking_loop(5)
    tokens = {"type": "input_tokens", "value": 100}
    assert edited(messages, {"type": "clear_tool_uses_20250919"}) == messages, "below the default 100k"
    out = edited(
        messages,
        {"type": "clear_tool_uses_20250919", "trigger": tokens, "keep": {"type": "tool_uses", "value": 2}},
    )
    assert results(out) == ["cleared", "cleared", "cleared", "kept", "kept"]
    assert out[1]["content"][1]["input"] == {"n": 0}, "inputs stay unless clear_tool_inputs"
    spared = edited(
        messages, {"type": "clear_tool_uses_20250919", "trigger": tokens, "exclude_tools": ["Read"]}
    )
    assert results(spared) == ["cleared", "kept", "kept", "kept", "kept"]  # tu_1 is a Read; the last 3 kept
    inputs = edited(
        messages,
        {
            "type": "clear_tool_uses_20250919",
            "trigger": tokens,
            "keep": {"type": "tool_uses", "value": 1},
            "clear_tool_inputs": True,
        },
    )
    assert inputs[1]["content"][1]["input"] == {} and inputs[-3]["content"][1]["input"] == {"n": 4}
    too_little = {"type": "input_tokens", "value": 10**6}
    assert (
        edited(
            messages, {"type": "clear_tool_uses_20250919", "trigger": tokens, "clear_at_least": too_little}
        )
        == messages
    )


@pytest.mark.parametrize(
    ("url", "kind", "wire", "body", "honoured"),
    [
        ("http://localhost:8080/v1", "auto", ANTHROPIC, {"context_management": {"edits": []}}, False),
        ("http://localhost:8080/v1", "anthropic", ANTHROPIC, {"context_management": {"edits": []}}, True),
        ("https://api.anthropic.com/v1", "auto", ANTHROPIC, {"context_management": {"edits": []}}, True),
        ("https://api.anthropic.com/v1", "auto", ANTHROPIC, {}, False),
        (
            "http://localhost:8000/v1",
            "auto",
            RESPONSES,
            {"context_management": [{"type": "compaction"}]},
            False,
        ),
        (
            "https://api.openai.com/v1",
            "auto",
            RESPONSES,
            {"context_management": [{"type": "compaction"}]},
            True,
        ),
        ("https://api.openai.com/v1", "auto", RESPONSES, {"input": [{"type": "compaction"}]}, True),
        ("http://localhost:8000/v1", "auto", RESPONSES, {"input": [{"type": "compaction"}]}, False),
    ],
)
def test_server_side_context_management_is_honoured_only_where_the_server_does_it(
    url: str, kind: str, wire: WireFormat, body: dict[str, Any], honoured: bool
) -> None:
    assert server_manages_context(wire, body, upstream_url=url, upstream_kind=kind) is honoured
