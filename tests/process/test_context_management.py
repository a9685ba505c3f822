"""`context_management` applied by the proxy in a local server's place is not forwarded, and the
answer says what was applied, as Anthropic's API says it (issue 26, part 3).

Against the strict upstream (``tests.support.upstreams.strict``: Anthropic's API without the beta, as
Vertex AI and Bedrock answer it, "context_management: Extra inputs are not permitted"), through the
real proxy process, with the official SDKs as clients.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.format_chats import as_anthropic, as_responses
from tests.support.format_fixtures import WINDOW, last_body, recorded, running_proxy
from tests.support.processes import running_module
from tests.support.upstreams.chats import support_chat

pytestmark = pytest.mark.process

# What Claude Code sends on every request while thinking is on.
CLAUDE_CODE = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
CLEAR_TOOL_USES = {
    "edits": [
        {
            "type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 1000},
            "keep": {"type": "tool_uses", "value": 2},
        }
    ]
}


@pytest.fixture(scope="module")
def strict() -> Iterator[str]:
    with running_module("tests.support.upstreams.strict", "--window", str(WINDOW)) as url:
        yield url


@pytest.fixture(scope="module")
def proxy(strict: str) -> Iterator[str]:
    with running_proxy(strict) as url:
        yield url


def claude(base_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url, api_key="sk-ant-test", max_retries=0, timeout=30)


def request(context_management: dict[str, Any], turns: int = 10) -> dict[str, Any]:
    system, messages = as_anthropic(support_chat(turns, result_items=20))
    return {
        "model": "small",
        "max_tokens": 1000,
        "system": system,
        "messages": messages,
        "extra_body": {"context_management": context_management},
    }


def test_the_strict_server_refuses_the_field_as_vertex_and_bedrock_do(strict: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude(strict).messages.create(**request(CLAUDE_CODE, turns=1))
    assert refused.value.body["error"]["message"] == "context_management: Extra inputs are not permitted"  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("turns", [1, 10], ids=["short", "compacted"])
def test_claude_codes_context_management_is_not_forwarded(
    strict: str, proxy: str, stream: bool, turns: int
) -> None:
    kwargs = request(CLAUDE_CODE, turns)
    if stream:
        events = list(claude(proxy).messages.create(**kwargs, stream=True))
        assert [e.type for e in events][-2:] == ["message_delta", "message_stop"]
        reported = events[-2].model_extra
    else:
        message = claude(proxy).messages.create(**kwargs)
        assert message.content[0].type == "text"
        reported = message.model_extra
    sent = last_body(strict)
    assert "context_management" not in sent
    assert sent["system"] == kwargs["system"]
    # keep: "all" clears nothing: the answer says so.
    assert reported and reported["context_management"] == {"applied_edits": []}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_applied_edits_are_reported_as_the_sdk_reads_them(strict: str, proxy: str, stream: bool) -> None:
    kwargs = request(CLEAR_TOOL_USES)
    kwargs["context_management"] = kwargs.pop("extra_body")["context_management"]
    client = claude(proxy).beta.messages
    if stream:
        with client.stream(**kwargs, betas=["context-management-2025-06-27"]) as events:
            message = events.get_final_message()
    else:
        message = client.create(**kwargs, betas=["context-management-2025-06-27"])
    assert message.context_management is not None
    (edit,) = message.context_management.applied_edits
    assert edit.type == "clear_tool_uses_20250919"
    results = sum(
        1
        for m in kwargs["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b["type"] == "tool_result"
    )
    assert edit.cleared_tool_uses == results - 2, "all but the two kept"
    assert edit.cleared_input_tokens > 0
    assert "context_management" not in last_body(strict)


def test_responses_context_management_is_not_forwarded(strict: str, proxy: str) -> None:
    instructions, items = as_responses(support_chat(10, result_items=20))
    body = {
        "model": "small",
        "instructions": instructions,
        "input": items,
        "context_management": [{"type": "compaction", "compact_threshold": 1000}],
    }
    direct = httpx.post(f"{strict}/v1/responses", json=body)
    assert direct.status_code == 400 and "Extra inputs are not permitted" in direct.text
    response = httpx.post(f"{proxy}/v1/responses", json=body)
    assert response.status_code == 200, response.text
    sent = json.loads(recorded(strict)[-1]["body"])
    assert "context_management" not in sent
    assert sent["instructions"] == instructions
