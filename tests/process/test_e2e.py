"""The proxy as users run it: the real `compacting-proxy` command in front of a real HTTP server,
talked to with the official OpenAI SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.support.conversations import bike_shop_chat
from tests.support.processes import VENV_BIN, free_port, running
from tests.support.upstreams.proxy_server import running_stub

pytestmark = pytest.mark.process  # starts the real proxy (and upstreams) on loopback

WINDOW = 4000
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("get_order", "search_parts", "create_return")
]


@pytest.fixture(scope="module")
def stub_url() -> Iterator[str]:
    with running_stub(WINDOW) as url:
        yield url


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
    changed = int(raw.headers["x-compaction-truncated"]) + int(raw.headers["x-compaction-dropped"])
    assert changed + int(raw.headers.get("x-compaction-capped", "0")) >= 1


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


def test_several_workers_serve_and_stop_cleanly(stub_url: str) -> None:
    import signal
    from concurrent.futures import ThreadPoolExecutor

    port = free_port()
    env = {"COMPACT_UPSTREAM_URL": stub_url, "COMPACT_WINDOW": str(WINDOW)}
    args = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--workers", "2", "--no-access-log"]
    with running(args, ready_url=f"http://127.0.0.1:{port}/healthz", env=env) as process:
        client = sdk(f"http://127.0.0.1:{port}/v1")
        with ThreadPoolExecutor(8) as pool:
            replies = list(
                pool.map(
                    lambda _: client.chat.completions.create(model="stub", messages=long_chat()), range(16)
                )
            )
        assert all(r.choices[0].message.content for r in replies)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def raw_request(proxy_url: str, head: bytes, body: bytes = b"") -> bytes:
    import socket

    port = int(proxy_url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks) and not body:
                break
        return b"".join(chunks)


def test_oversize_headers_get_431_and_the_connection_closed(proxy_url: str) -> None:
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\nConnection: close\r\n\r\n"
    answer = raw_request(proxy_url, big)
    assert answer.startswith(b"HTTP/1.1 431")
    assert b'"code":"request_header_fields_too_large"' in answer
    fine = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Ok: " + b"a" * 8_000 + b"\r\nConnection: close\r\n\r\n"
    assert raw_request(proxy_url, fine).startswith(b"HTTP/1.1 200")


def test_a_big_body_is_not_mistaken_for_big_headers(proxy_url: str) -> None:
    import json

    messages = [{"role": "user", "content": "x" * 20}] + [{"role": "assistant", "content": "y" * 1000}] * 300
    body = json.dumps({"model": "stub", "messages": messages, "max_tokens": 10}).encode()
    head = (
        b"POST /compact HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\nConnection: close\r\n"
        b"content-length: " + str(len(body)).encode() + b"\r\n\r\n"
    )
    assert raw_request(proxy_url, head, body).startswith(b"HTTP/1.1 200")
