"""Preserved thinking (proxy/formats/anthropic_thinking.py): which models bind their thinking blocks
to the conversation, which blocks a change invalidates, and the refusal that says so."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.formats.anthropic_thinking import (
    binds_thinking,
    refused_for_unbound_thinking,
    thinking_dropped,
    unbound_thinking_dropped,
)


@pytest.mark.parametrize(
    ("model", "binds"),
    [
        ("claude-opus-5-5", True),
        ("claude-fable-5-1", True),
        ("claude-sonnet-5-5-20261101", True),
        ("us.anthropic.claude-haiku-5-5-20261001-v1:0", True),
        ("claude-opus-5-5@20261101", True),
        ("claude-opus-6", True),
        ("claude-opus-5", False),
        ("claude-opus-5-20260301", False),
        ("claude-sonnet-4-5-20250929", False),
        ("claude-3-7-sonnet-20250219", False),
        ("qwen3-coder:30b", False),
        (None, False),
    ],
)
def test_models_from_fable_5_1_on_bind_their_thinking(model: Any, binds: bool) -> None:
    assert binds_thinking(model) is binds


def thought(n: int) -> dict[str, Any]:
    return {"type": "thinking", "thinking": f"thought {n}", "signature": f"sig{n}"}


def turn(n: int) -> list[dict[str, Any]]:
    call = {"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {}}
    result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": f"result {n}"}
    return [{"role": "assistant", "content": [thought(n), call]}, {"role": "user", "content": [result]}]


BODY = {
    "model": "claude-opus-5-5",
    "system": "be brief",
    "messages": [{"role": "user", "content": "go"}, *turn(1), *turn(2), *turn(3)],
}


def thinking_left(body: dict[str, Any]) -> list[str]:
    return [
        b["signature"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "thinking"
    ]


def test_every_thinking_block_after_the_first_change_goes() -> None:
    noted = [dict(m) for m in BODY["messages"]]
    noted[4] = {"role": "user", "content": [{**noted[4]["content"][0], "content": "[Truncated]"}]}
    after = unbound_thinking_dropped(BODY, {**BODY, "messages": noted})
    assert thinking_left(after) == ["sig1", "sig2"], "those before the change were made over it as it is"
    assert [m["role"] for m in after["messages"]] == [m["role"] for m in BODY["messages"]]
    assert after["messages"][5]["content"] == [noted[5]["content"][1]], "the call stays, its thinking goes"


def test_a_marker_after_an_assistant_turns_thinking_keeps_that_block() -> None:
    merged = [dict(m) for m in BODY["messages"]]
    content = merged[3]["content"]
    merged[3] = {
        "role": "assistant",
        "content": [content[0], {"type": "text", "text": "[dropped]"}, content[1]],
    }
    after = unbound_thinking_dropped(BODY, {**BODY, "messages": merged})
    assert thinking_left(after) == ["sig1", "sig2"]


def test_a_changed_system_or_dropped_exchange_takes_them_all_or_from_there() -> None:
    assert thinking_left(unbound_thinking_dropped(BODY, {**BODY, "system": "other"})) == []
    dropped = [BODY["messages"][0], *BODY["messages"][3:]]
    assert thinking_left(unbound_thinking_dropped(BODY, {**BODY, "messages": dropped})) == []


def test_nothing_changes_for_an_unchanged_request_or_a_model_that_does_not_bind() -> None:
    same = {**BODY, "messages": list(BODY["messages"])}
    assert unbound_thinking_dropped(BODY, same) is same
    older = {**BODY, "model": "claude-sonnet-4-5"}
    changed = {**older, "system": "other"}
    assert unbound_thinking_dropped(older, changed) is changed, "a final turn must start with its thinking"


def test_an_assistant_turn_of_thinking_alone_goes_with_it() -> None:
    body = {**BODY, "messages": [*BODY["messages"], {"role": "assistant", "content": [thought(9)]}]}
    after = thinking_dropped(body)
    assert after is not None and thinking_left(after) == []
    assert after["messages"][-1] == BODY["messages"][-1]
    assert thinking_dropped({"messages": [{"role": "user", "content": "hi"}]}) is None


def test_the_refusal_is_known_by_its_words() -> None:
    bound = (
        b'{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0: Invalid '
        b"`signature` in `thinking` block. The block is bound to a different conversation. Remove the block, "
        b'or set `thinking.block_binding.prefix_mismatch_behavior` to \\"drop_block\\"."}}'
    )
    assert refused_for_unbound_thinking(400, bound)
    assert refused_for_unbound_thinking(400, b"messages.1.content.440: Invalid signature in thinking block")
    assert not refused_for_unbound_thinking(400, b"prompt is too long: 300000 tokens > 200000 maximum")
    assert not refused_for_unbound_thinking(500, bound)
