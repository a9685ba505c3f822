"""Every wire format through its official client, against the real proxy process and a recording
upstream that speaks the format (``tests.support.upstreams.formats``): the OpenAI SDK's ``responses``, the
Anthropic SDK's ``messages`` and ``AzureOpenAI``, stream and not.

Each long history is sent once straight to the upstream (which rejects it, and records exactly what
the client sent) and once through the proxy; the same invariants are checked on what the upstream
received (``tests.support.format_chats.check_compacted``), with the fields besides the history untouched, and
the compacted request sent again goes through unchanged (idempotence).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.format_chats import ANTHROPIC, RESPONSES, as_anthropic, as_responses, check_compacted
from tests.support.format_fixtures import API_KEY, WINDOW, last_body, recorded, running_proxy
from tests.support.upstreams.chats import support_chat
from tests.support.upstreams.formats import REPLY

pytestmark = pytest.mark.process  # starts the real proxy (and upstreams) on loopback

TOOLS_RESPONSES: list[Any] = [
    {"type": "function", "name": n, "parameters": {"type": "object", "properties": {}}, "strict": False}
    for n in ("get_order", "search_parts", "create_return")
]
TOOLS_ANTHROPIC: list[Any] = [
    {"name": n, "input_schema": {"type": "object", "properties": {}}} for n in ("get_order", "search_parts")
]


def without(body: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != key}


def shrunk(headers: Any) -> bool:
    """Whether the proxy's headers say it compacted the request: fewer tokens after than before."""
    return int(headers["x-compaction-tokens-after"]) < int(headers["x-compaction-tokens-before"])


def assert_idempotent(upstream: str, url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
    """The compacted request, sent again, goes through byte for byte."""
    raw = json.dumps(body).encode()
    response = httpx.post(url, content=raw, headers={"content-type": "application/json", **headers})
    assert response.status_code == 200, response.text
    assert recorded(upstream)[-1]["body"].encode() == raw
    assert "x-compaction-tokens-before" not in response.headers


# --- OpenAI Responses -------------------------------------------------------------------------


def oai(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-test", max_retries=0, timeout=30)


def long_responses_with(extra: dict[str, Any]) -> dict[str, Any]:
    """A Responses body over the window with `extra`: a field of the body, or items before the
    history's (`input_prefix`)."""
    instructions, items = as_responses(support_chat(10, result_items=20))
    body: dict[str, Any] = {"model": "small", "instructions": instructions, "input": items}
    if "input_prefix" in extra:
        return {**body, "input": [*extra["input_prefix"], *items]}
    return body | extra


def test_responses_a_short_request_goes_through_byte_for_byte(
    upstream: str, proxy: str, fresh_record: None
) -> None:
    kwargs: dict[str, Any] = {
        "model": "small",
        "instructions": "Be brief.",
        "input": "Hi!",
        "max_output_tokens": 50,
    }
    oai(upstream).responses.create(**kwargs)
    raw = oai(proxy).responses.with_raw_response.create(**kwargs)
    assert raw.parse().output_text == REPLY
    direct, proxied = recorded(upstream)
    assert proxied["body"] == direct["body"]
    assert proxied["path"] == "/v1/responses"
    assert "x-compaction-tokens-before" not in raw.headers


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_responses_a_long_history_is_compacted(
    upstream: str, proxy: str, fresh_record: None, stream: bool
) -> None:
    kwargs = long_responses_with(
        {
            "tools": TOOLS_RESPONSES,
            "max_output_tokens": 300,
            "metadata": {"ticket": "4471"},
            "temperature": 0.2,
            "stream": stream,
        }
    )
    with pytest.raises(openai.BadRequestError) as direct:
        oai(upstream).responses.create(**kwargs)
    assert direct.value.code == "context_length_exceeded"
    original = last_body(upstream)

    with oai(proxy).responses.with_streaming_response.create(**kwargs) as response:
        assert shrunk(response.headers)
        if stream:
            events = list(response.parse())
            text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
            assert events[-1].type == "response.completed"
        else:
            text = response.parse().output_text
    assert text == REPLY

    sent = last_body(upstream)
    assert without(sent, "input") == without(original, "input"), "only the history may change"
    assert sent["instructions"] == kwargs["instructions"]
    assert sent["input"][0] == original["input"][0], "the leading developer item is never compacted"
    check_compacted(RESPONSES, original["input"], sent["input"])
    # Reasoning stays with the call that follows it.
    for i, item in enumerate(sent["input"]):
        if item.get("type") == "reasoning":
            assert sent["input"][i + 1]["type"] == "function_call"
    assert_idempotent(upstream, f"{proxy}/v1/responses", {**sent, "stream": False}, {})


@pytest.mark.parametrize(
    "extra",
    [
        {"previous_response_id": "resp_123"},
    ],
    ids=["previous_response_id"],
)
def test_responses_the_server_keeps_or_compacts_its_history_left_alone(
    upstream: str, proxy: str, fresh_record: None, extra: dict[str, Any]
) -> None:
    raw = json.dumps(long_responses_with(extra)).encode()
    response = httpx.post(f"{proxy}/v1/responses", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400  # the upstream's own answer, relayed
    assert recorded(upstream)[-1]["body"].encode() == raw


# --- Anthropic Messages -----------------------------------------------------------------------


def claude(base_url: str, api_key: str = "sk-ant-test") -> anthropic.Anthropic:
    """The Anthropic client with its key in `x-api-key`, as Claude Code sends it (this SDK sends
    `api_key` as a bearer token)."""
    return anthropic.Anthropic(
        base_url=base_url,
        api_key=None,
        max_retries=0,
        timeout=30,
        default_headers={"x-api-key": api_key, "anthropic-beta": "interleaved-thinking-2025-05-14"},
    )


def test_anthropic_a_short_request_goes_through_with_its_headers(
    upstream: str, proxy: str, fresh_record: None
) -> None:
    kwargs: dict[str, Any] = {
        "model": "small",
        "max_tokens": 100,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": "Hi!"}],
    }
    claude(upstream).messages.create(**kwargs)
    message = claude(proxy).messages.create(**kwargs)
    assert message.content[0].type == "text" and message.content[0].text == REPLY
    direct, proxied = recorded(upstream)
    assert proxied["body"] == direct["body"]
    assert proxied["path"] == "/v1/messages"
    for name in ("x-api-key", "anthropic-version", "anthropic-beta"):
        assert proxied["headers"][name] == direct["headers"][name]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_anthropic_a_long_history_is_compacted(
    upstream: str, proxy: str, fresh_record: None, stream: bool
) -> None:
    system, messages = as_anthropic(support_chat(10, result_items=20))
    kwargs: dict[str, Any] = {
        "model": "small",
        "max_tokens": 300,
        "system": system,
        "messages": messages,
        "tools": TOOLS_ANTHROPIC,
        "metadata": {"user_id": "u-4471"},
        "stream": stream,
    }
    with pytest.raises(anthropic.BadRequestError) as direct:
        claude(upstream).messages.create(**kwargs)
    assert "prompt is too long" in str(direct.value)
    original = last_body(upstream)

    with claude(proxy).messages.with_streaming_response.create(**kwargs) as response:
        assert shrunk(response.headers)
        if stream:
            events = list(response.parse())
            text = "".join(
                e.delta.text
                for e in events
                if e.type == "content_block_delta" and e.delta.type == "text_delta"
            )
            assert events[-1].type == "message_stop"
        else:
            message = response.parse()
            text = "".join(block.text for block in message.content if block.type == "text")
    assert text == REPLY

    sent = last_body(upstream)
    assert without(sent, "messages") == without(original, "messages"), "only the history may change"
    assert sent["system"] == system
    check_compacted(ANTHROPIC, original["messages"], sent["messages"])
    markers = json.dumps(sent["messages"]).count("cache_control")
    assert markers <= json.dumps(original["messages"]).count("cache_control")
    assert sent["messages"][-1] == original["messages"][-1], "the last request keeps its cache marker"
    # Thinking stays with its tool calls: every assistant turn that calls a tool kept its thinking.
    for message_ in sent["messages"]:
        kinds = [b["type"] for b in message_["content"]] if isinstance(message_["content"], list) else []
        if "tool_use" in kinds:
            assert kinds[0] == "thinking"
    headers = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01"}
    assert_idempotent(upstream, f"{proxy}/v1/messages", {**sent, "stream": False}, headers)


# What Claude Code 2.1.197 sends on every request while thinking is on (its bundled binary,
# `function Ydc(e){...if(t)return{edits:[{type:"clear_thinking_20251015",keep:"all"}]}}`).
CLAUDE_CODE_CONTEXT_MANAGEMENT = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}


def test_anthropic_claude_codes_context_management_is_compacted_for_a_local_server(
    upstream: str, proxy: str, fresh_record: None
) -> None:
    system, messages = as_anthropic(support_chat(10, result_items=20))
    kwargs: dict[str, Any] = {
        "model": "small",
        "max_tokens": 32000,  # what Claude Code asks for
        "system": system,
        "messages": messages,
        "tools": TOOLS_ANTHROPIC,
        "extra_body": {"context_management": CLAUDE_CODE_CONTEXT_MANAGEMENT},
    }
    with pytest.raises(anthropic.BadRequestError):
        claude(upstream).messages.create(**kwargs)
    original = last_body(upstream)
    response = claude(proxy).messages.with_raw_response.create(**kwargs)
    assert shrunk(response.headers)
    sent = last_body(upstream)
    assert "context_management" not in sent, "applied by the proxy, the field is not forwarded"
    check_compacted(ANTHROPIC, original["messages"], sent["messages"])
    # keep: "all" keeps every thinking block of what is left.
    for message_ in sent["messages"]:
        kinds = [b["type"] for b in message_["content"]] if isinstance(message_["content"], list) else []
        if "tool_use" in kinds:
            assert kinds[0] == "thinking"


@pytest.mark.parametrize(
    "extra",
    [
        {"context_management": [{"type": "compaction", "compact_threshold": 1000}]},
        {"input_prefix": [{"type": "compaction", "id": "cmp_1", "encrypted_content": "abc"}]},
    ],
    ids=["context_management", "compaction_item"],
)
def test_responses_server_compaction_is_compacted_for_a_local_server(
    upstream: str, proxy: str, fresh_record: None, extra: dict[str, Any]
) -> None:
    """Only OpenAI's own API implements these; in front of anything else the proxy compacts."""
    body = long_responses_with(extra)
    response = httpx.post(f"{proxy}/v1/responses", json=body)
    assert response.status_code == 200, response.text
    assert shrunk(response.headers)
    sent = last_body(upstream)
    kept = without(body, "context_management")
    assert without(sent, "input") == without(kept, "input"), "only the field the proxy applied is taken out"
    if "input_prefix" in extra:
        assert sent["input"][0] == extra["input_prefix"][0]


def test_anthropic_count_tokens_is_passed_through(upstream: str, proxy: str, fresh_record: None) -> None:
    system, messages = as_anthropic(support_chat(10, result_items=20))
    counted = claude(proxy).messages.count_tokens(model="small", system=system, messages=messages)
    assert counted.input_tokens > WINDOW  # counted whole: nothing compacted
    (record,) = recorded(upstream)
    assert record["path"] == "/v1/messages/count_tokens"
    assert json.loads(record["body"])["messages"] == messages


@pytest.fixture(scope="module")
def anthropic_proxy(upstream: str) -> Iterator[str]:
    """The proxy told its upstream is Anthropic's own API, which implements `context_management`."""
    with running_proxy(upstream, COMPACT_UPSTREAM_KIND="anthropic") as url:
        yield url


def test_anthropic_context_management_is_left_alone_for_anthropics_api(
    upstream: str, anthropic_proxy: str, fresh_record: None
) -> None:
    proxy = anthropic_proxy
    system, messages = as_anthropic(support_chat(10, result_items=20))
    body = {
        "model": "small",
        "max_tokens": 100,
        "system": system,
        "messages": messages,
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]},
    }
    raw = json.dumps(body).encode()
    response = httpx.post(f"{proxy}/v1/messages", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["type"] == "error"
    assert recorded(upstream)[-1]["body"].encode() == raw


def test_anthropic_errors_come_in_anthropics_shape(upstream: str, proxy: str, fresh_record: None) -> None:
    with pytest.raises(anthropic.BadRequestError) as bad:
        claude(proxy).messages.create(model="small", max_tokens=10, messages="hello")  # type: ignore[arg-type]
    assert bad.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": bad.value.body["error"]["message"]},  # type: ignore[index]
    }
    assert recorded(upstream) == [], "nothing reached the upstream"


def test_anthropic_x_api_key_is_the_proxys_key(upstream: str, locked_proxy: str, fresh_record: None) -> None:
    kwargs: dict[str, Any] = {
        "model": "small",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "Hi!"}],
    }
    with pytest.raises(anthropic.AuthenticationError) as denied:
        claude(locked_proxy, api_key="wrong").messages.create(**kwargs)
    assert denied.value.body["type"] == "error"  # type: ignore[index]
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    claude(locked_proxy, api_key=API_KEY).messages.create(**kwargs)
    (record,) = recorded(upstream)
    assert "x-api-key" not in record["headers"], "the proxy's key is not the upstream's"


# --- Azure OpenAI -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("style", ["azure_endpoint", "base_url"])
def test_azure_deployment_paths_are_compacted_for_the_deployment(
    upstream: str, proxy: str, fresh_record: None, stream: bool, style: str
) -> None:
    if style == "azure_endpoint":  # posts /openai/deployments/{name}/chat/completions
        client = openai.AzureOpenAI(
            azure_endpoint=proxy,
            azure_deployment="small",
            api_version="2024-10-21",
            api_key="k",
            max_retries=0,
        )
        path = "/openai/deployments/small/chat/completions"
    else:  # a base URL: posts /deployments/{model}/chat/completions, forwarded from the upstream's base
        client = openai.AzureOpenAI(base_url=proxy, api_version="2024-10-21", api_key="k", max_retries=0)
        path = "/v1/deployments/small/chat/completions"
    messages: list[Any] = support_chat(10, result_items=20)
    # The body names another model: the deployment is what the per-model settings see.
    model = "gpt-4o" if style == "azure_endpoint" else "small"
    raw = client.chat.completions.with_raw_response.create(model=model, messages=messages, stream=stream)
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    else:
        text = raw.parse().choices[0].message.content or ""
    assert text == REPLY
    assert int(raw.headers["x-compaction-dropped"]) + int(raw.headers["x-compaction-truncated"]) >= 1
    (record,) = recorded(upstream)
    assert record["path"] == path and record["query"] == "api-version=2024-10-21"
    sent = json.loads(record["body"])
    assert (
        sent["model"] == model and sent["messages"][0] == messages[0] and sent["messages"][-1] == messages[-1]
    )
    assert len(sent["messages"]) < len(messages) or sent["messages"] != messages


def test_azure_api_key_is_the_proxys_key(upstream: str, locked_proxy: str, fresh_record: None) -> None:
    def client(key: str) -> openai.AzureOpenAI:
        return openai.AzureOpenAI(
            azure_endpoint=locked_proxy, api_version="2024-10-21", api_key=key, max_retries=0
        )

    messages: list[Any] = [{"role": "user", "content": "Hi!"}]
    with pytest.raises(openai.AuthenticationError):
        client("wrong").chat.completions.create(model="small", messages=messages)
    assert client(API_KEY).chat.completions.create(model="small", messages=messages).choices
    (record,) = recorded(upstream)
    assert "api-key" not in record["headers"], "the proxy's key is not the upstream's"
