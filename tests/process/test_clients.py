"""The README's client table, row by row: each Python client configured exactly as its row says,
against the real `compacting-proxy` process and a recording upstream, with the pattern's long
bike-shop chat (`tests.support.conversations.bike_shop_chat`).

Each chat is sent once straight to the upstream (which records exactly what the client sends) and
once through the proxy: the client gets the answer, the upstream receives a compacted version of
what the client sent (system prompt and last request kept, the old tool result replaced by a note,
fewer tokens), and the `x-compaction-*` headers are read the way the row says. The Node `openai` SDK
and the Vercel AI SDK have their own tests (tests/process/test_real_sockets.py, tests/process/test_vercel_ai.py);
LiteLLM is not installed here (see the README).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import openai
import pytest

from proxy.engine.caps import CAP_WORDS
from proxy.engine.notes import DROPPED_PREFIX, NOTE_PREFIX
from tests.support.conversations import SYSTEM, bike_shop_chat
from tests.support.format_chats import RESPONSES, check_compacted
from tests.support.format_fixtures import recorded
from tests.support.upstreams.formats import REPLY
from tests.support.upstreams.ollama import FakeOllama, running_fake_ollama
from tests.support.upstreams.proxy_server import running_proxy

pytestmark = pytest.mark.process  # starts the real proxy (and upstreams) on loopback

MODEL = "small"  # the model the proxy and the upstream know a 4,000-token window for
MODEL_OLLAMA = "llama3.2:3b"  # Ollama runs it at its default context, 4,096 tokens
# LangChain and pydantic-ai are imported in the tests that use them: about a second each, which
# every collection of the suite would pay otherwise.
Message = dict[str, Any]


@pytest.fixture
def chat() -> list[Message]:
    return bike_shop_chat(items=80)  # over the line of the model's 4,000-token window by the proxy's count


def received(upstream: str, path: str) -> list[Message]:
    """The bodies the upstream received on `path` (its own probes and the other routes left out)."""
    return [json.loads(r["body"]) for r in recorded(upstream) if r["path"] == path]


def check_chat_compacted(sent: list[Message], got: list[Message]) -> None:
    """`got` is `sent` compacted: system prompt and last request kept, each message an original one,
    a tool result replaced by a note, or a dropped-run marker, in order; fewer tokens."""
    assert got[0] == sent[0] and got[0]["content"] == SYSTEM, "the system prompt is kept"
    assert got[-1] == sent[-1], "the last request is kept"
    assert len(json.dumps(got)) < 0.75 * len(json.dumps(sent)), "fewer tokens"
    notes = [m for m in got if m.get("role") == "tool" and shrunk(m["content"])]
    markers = [m for m in got if str(m.get("content")).startswith(DROPPED_PREFIX)]
    assert notes or markers, "a tool result noted or a run dropped"
    at = 0
    for message in got:
        if message in markers:
            continue
        while at < len(sent) and not same_but_noted(message, sent[at]):
            at += 1
        assert at < len(sent), f"not an original message, in order: {message}"
        at += 1


def check_route_compacted(upstream: str, *, responses: bool) -> None:
    """What the upstream got through the proxy is what it got directly, compacted, on either route."""
    if responses:
        direct, proxied = received(upstream, "/v1/responses")
        check_compacted(RESPONSES, direct["input"], proxied["input"])
        assert proxied["input"][0] == direct["input"][0], "the system prompt is kept"
    else:
        direct, proxied = received(upstream, "/v1/chat/completions")
        check_chat_compacted(direct["messages"], proxied["messages"])


def same_but_noted(message: Message, original: Message) -> bool:
    if message == original:
        return True
    return (
        message.get("role") == "tool"
        and shrunk(message["content"])
        and {**message, "content": None} == {**original, "content": None}
    )


def shrunk(content: str) -> bool:
    """A tool result noted (level 1), or capped (the agent-loop rules, in an earlier request)."""
    return content.startswith(NOTE_PREFIX) or CAP_WORDS in content


def check_headers(headers: Any) -> None:
    """The `x-compaction-*` headers, as the client let us read them."""
    lower = {k.lower(): v for k, v in dict(headers).items()}
    assert int(lower["x-compaction-tokens-after"]) < int(lower["x-compaction-tokens-before"])
    # The first tool result is noted, or capped (the agent-loop rules, in an earlier request).
    capped = int(lower.get("x-compaction-capped", "0"))
    assert int(lower["x-compaction-truncated"]) + capped >= 1 and lower["x-compaction-dropped"] == "0"
    assert "x-compaction-overflow" not in lower, "it fits"


# --- the openai SDK ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openai_sdk(upstream: str, proxy: str, fresh_record: None, chat: list[Message], stream: bool) -> None:
    def client(base: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0)

    client(upstream).chat.completions.create(model=MODEL, messages=chat)  # type: ignore[arg-type]
    raw = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=chat,  # type: ignore[arg-type]
        stream=stream,
    )
    check_headers(raw.headers)
    if stream:
        answer = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)  # type: ignore[union-attr]
    else:
        answer = raw.parse().choices[0].message.content or ""  # type: ignore[union-attr]
    assert answer == REPLY
    direct, proxied = received(upstream, "/v1/chat/completions")
    check_chat_compacted(direct["messages"], proxied["messages"])


# --- LangChain ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("responses", "stream"),
    [(False, False), (False, True), (True, False)],
    ids=["chat-whole", "chat-streamed", "responses"],
)
def test_langchain_chat_openai(
    upstream: str, proxy: str, fresh_record: None, chat: list[Message], responses: bool, stream: bool
) -> None:
    from langchain_core.messages import AIMessage, convert_to_messages
    from langchain_openai import ChatOpenAI

    def model(base: str) -> ChatOpenAI:
        return ChatOpenAI(
            model=MODEL,
            base_url=f"{base}/v1",
            api_key="sk-test",  # type: ignore[arg-type]
            max_retries=0,
            use_responses_api=responses,
            include_response_headers=True,
        )

    history = convert_to_messages(chat)
    model(upstream).invoke(history)
    if stream:
        chunks = list(model(proxy).stream(history))
        headers = chunks[0].response_metadata["headers"]
        answer = "".join(str(c.content) for c in chunks)
    else:
        reply = model(proxy).invoke(history)
        assert isinstance(reply, AIMessage)
        headers, answer = reply.response_metadata["headers"], reply.text
    check_headers(headers)
    assert answer == REPLY
    check_route_compacted(upstream, responses=responses)


# --- pydantic-ai ----------------------------------------------------------------------------------


def pydantic_ai_history(chat: list[Message]) -> list[Any]:
    """A Chat Completions history as pydantic-ai's messages (requests and the model's responses)."""
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    names = {c["id"]: c["function"]["name"] for m in chat for c in m.get("tool_calls") or []}
    history: list[ModelMessage] = []
    for m in chat:
        if m["role"] == "assistant":
            parts: list[Any] = [
                ToolCallPart(c["function"]["name"], c["function"]["arguments"], c["id"])
                for c in m.get("tool_calls") or []
            ]
            history.append(ModelResponse(parts=parts or [TextPart(m["content"])]))
            continue
        if m["role"] == "system":
            part: Any = SystemPromptPart(m["content"])
        elif m["role"] == "user":
            part = UserPromptPart(m["content"])
        else:
            part = ToolReturnPart(names[m["tool_call_id"]], m["content"], m["tool_call_id"])
        if history and isinstance(history[-1], ModelRequest):
            history[-1].parts = [*history[-1].parts, part]
        else:
            history.append(ModelRequest(parts=[part]))
    return history


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_pydantic_ai(upstream: str, proxy: str, fresh_record: None, chat: list[Message], api: str) -> None:
    from pydantic_ai.direct import model_request_sync
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    headers: list[Any] = []

    async def keep_headers(response: Any) -> None:
        headers.append(response.headers)

    def model(base: str) -> OpenAIChatModel | OpenAIResponsesModel:
        http_client = openai.DefaultAsyncHttpxClient(event_hooks={"response": [keep_headers]})
        provider = OpenAIProvider(base_url=f"{base}/v1", api_key="sk-test", http_client=http_client)
        kind = OpenAIResponsesModel if api == "responses" else OpenAIChatModel
        return kind(MODEL, provider=provider)

    history = pydantic_ai_history(chat)
    model_request_sync(model(upstream), history)
    headers.clear()
    reply = model_request_sync(model(proxy), history)
    assert reply.text == REPLY
    [response_headers] = headers
    check_headers(response_headers)
    check_route_compacted(upstream, responses=api == "responses")


# --- curl -----------------------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
def test_curl(upstream: str, proxy: str, fresh_record: None, chat: list[Message]) -> None:
    body = json.dumps({"model": MODEL, "messages": chat})
    command = ["curl", "-sS", "-D", "-", f"{proxy}/v1/chat/completions"]
    done = subprocess.run(
        [*command, "-H", "content-type: application/json", "--data-binary", "@-"],
        input=body,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    *_, head, answer = done.stdout.split("\n\n")  # text mode reads CRLF as LF; skips a "100 Continue"
    headers = dict(line.split(": ", 1) for line in head.splitlines()[1:])
    check_headers(headers)
    assert json.loads(answer)["choices"][0]["message"]["content"] == REPLY
    [proxied] = received(upstream, "/v1/chat/completions")
    check_chat_compacted(chat, proxied["messages"])


# --- the ollama client ----------------------------------------------------------------------------


@pytest.fixture
def fake_ollama() -> Iterator[FakeOllama]:
    with running_fake_ollama() as server:
        yield server


def ollama_history(chat: list[Message]) -> list[Message]:
    """A Chat Completions history as Ollama's native messages (tool call arguments as objects)."""

    def native(call: Message) -> Message:
        function = call["function"]
        return {"function": {"name": function["name"], "arguments": json.loads(function["arguments"])}}

    return [
        {**m, "tool_calls": [native(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in chat
    ]


def test_ollama_client(fake_ollama: FakeOllama) -> None:
    """The native `/api/chat`, compacted for the context Ollama runs the model at (its 4,096 default
    here); the headers through an httpx event hook, as `ollama.Client` passes its keyword arguments
    to `httpx.Client`."""
    chat = ollama_history(bike_shop_chat(items=80))  # about 5,200 tokens
    ollama.Client(host=fake_ollama.base_url).chat(model=MODEL_OLLAMA, messages=chat)  # cut by Ollama
    headers: list[httpx.Headers] = []
    with running_proxy(f"{fake_ollama.base_url}/v1", None) as proxy:
        client = ollama.Client(
            host=proxy.base_url, event_hooks={"response": [lambda r: headers.append(r.headers)]}
        )
        answer = client.chat(model=MODEL_OLLAMA, messages=chat)
    assert answer.message.content
    [response_headers] = headers
    check_headers(response_headers)
    direct, proxied = [body for path, body in fake_ollama.requests if path == "/api/chat"]
    assert len(fake_ollama.truncations) == 1, "Ollama cut the direct chat, not the compacted one"
    check_chat_compacted(direct["messages"], proxied["messages"])
