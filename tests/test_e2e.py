"""The proxy as users run it: the real `compacting-proxy` command in front of a real HTTP server,
talked to with the official OpenAI SDK."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.conversations import bike_shop_chat
from tests.processes import VENV_BIN, free_port, running

WINDOW = 4000
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("get_order", "search_parts", "create_return")
]


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    port = free_port()
    args = [sys.executable, "-m", "proxy.stub", "--port", str(port), "--window", str(WINDOW)]
    with running(args, ready_url=f"http://127.0.0.1:{port}/v1/models"):
        yield f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def proxy_url(stub_url: str) -> Iterator[str]:
    port = free_port()
    env = {"COMPACT_UPSTREAM_URL": stub_url, "COMPACT_WINDOW": str(WINDOW)}
    args = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--log-level", "warning"]
    with running(args, ready_url=f"http://127.0.0.1:{port}/healthz", env=env):
        yield f"http://127.0.0.1:{port}/v1"


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=30)


def long_chat() -> list[Any]:
    return bike_shop_chat(items=120)


def test_a_short_chat_goes_through(proxy_url: str, stub_url: str) -> None:
    messages: list[Any] = [{"role": "user", "content": "Hi!"}]
    direct = sdk(stub_url).chat.completions.create(model="stub", messages=messages)
    proxied = sdk(proxy_url).chat.completions.with_raw_response.create(model="stub", messages=messages)
    completion = proxied.parse()
    assert completion.choices[0].message.content == direct.choices[0].message.content
    assert completion.usage and direct.usage
    assert completion.usage.prompt_tokens == direct.usage.prompt_tokens
    assert "x-compaction-tokens-before" not in proxied.headers


def test_a_long_tool_chat_fails_directly_and_succeeds_through_the_proxy(
    proxy_url: str, stub_url: str
) -> None:
    with pytest.raises(openai.BadRequestError) as direct:
        sdk(stub_url).chat.completions.create(model="stub", messages=long_chat(), tools=TOOLS)
    assert direct.value.code == "context_length_exceeded"

    raw = sdk(proxy_url).chat.completions.with_raw_response.create(
        model="stub", messages=long_chat(), tools=TOOLS
    )
    completion = raw.parse()
    assert completion.choices[0].message.tool_calls, "the stub answers a new request with a tool call"
    assert completion.usage and completion.usage.prompt_tokens <= WINDOW
    assert int(raw.headers["x-compaction-tokens-after"]) < int(raw.headers["x-compaction-tokens-before"])
    assert int(raw.headers["x-compaction-truncated"]) + int(raw.headers["x-compaction-dropped"]) >= 1


def test_streaming_a_long_chat_through_the_proxy(proxy_url: str, stub_url: str) -> None:
    with pytest.raises(openai.BadRequestError):
        sdk(stub_url).chat.completions.create(model="stub", messages=long_chat(), stream=True)
    chunks = list(
        sdk(proxy_url).chat.completions.create(
            model="stub", messages=long_chat(), stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Stub answer after")
    usage = [c.usage for c in chunks if c.usage]
    assert usage and usage[0].prompt_tokens <= WINDOW


def test_models_are_forwarded(proxy_url: str) -> None:
    models = sdk(proxy_url).models.list()
    assert [m.id for m in models.data] == ["stub"]


def test_proxy_errors_reach_the_sdk_as_api_errors(proxy_url: str) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        sdk(proxy_url).chat.completions.create(model="stub", messages="not a list")  # type: ignore[arg-type]
    assert error.value.param == "messages"
