"""The real `compacting-proxy` process in front of a fake Ollama (v0.33, `tests/support/upstreams/ollama.py`)
at its default 4,096-token context, driven by the official `openai` and `ollama` clients.

With no proxy settings at all, chats that grow to 50,000 tokens are never cut by the upstream:
OpenAI chats go to `/api/chat` with `num_ctx` set to the window the proxy compacts for, native chats
are compacted for the window Ollama really runs them at. And an upstream that cuts at a window the
proxy was not told is caught on the first cut and never cuts again.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import httpx
import ollama
import pytest
from openai import OpenAI

from tests.support.conversations import screenshot_steps
from tests.support.upstreams.chats import SYSTEM, TOOLS, parts_result
from tests.support.upstreams.ollama import FakeOllama, prompt_size, running_fake_ollama
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy

pytestmark = pytest.mark.process  # starts the real proxy (and upstreams) on loopback

MODEL = "llama3.2:3b"  # trained for 131,072 tokens, like the real one
GOAL = 50_000  # tokens of history, by the fake's own count
OLLAMA_MAX_NUM_CTX = 32768  # the proxy's default cap on the window it asks Ollama for

Message = dict[str, Any]


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    with running_fake_ollama() as server:
        yield server


def opening() -> list[Message]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Hi! My order #4471 came with a bent front wheel. Which wheels fit?"},
    ]


def ask_openai(client: OpenAI, messages: list[Message], *, stream: bool, tools: bool) -> tuple[Message, Any]:
    """One turn through the OpenAI SDK: the assistant's message, and the response headers (None when
    streamed). A stream is read the way the SDK's users read it: deltas, tool calls by index."""
    extra: dict[str, Any] = {"tools": TOOLS} if tools else {}
    if not stream:
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages, **extra)  # type: ignore[arg-type]
        choice = raw.parse().choices[0]
        message: Message = {"role": "assistant", "content": choice.message.content or ""}
        if choice.message.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }  # type: ignore[union-attr]
                for c in choice.message.tool_calls
            ]
            assert choice.finish_reason == "tool_calls"
        return message, raw.headers
    content, calls, finish, usage = "", {}, None, None
    for chunk in client.chat.completions.create(
        model=MODEL,
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
        **extra,  # type: ignore[arg-type]
    ):
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for delta in choice.delta.tool_calls or ():
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = delta.id or call["id"]
                call["name"] += delta.function.name or "" if delta.function else ""
                call["arguments"] += delta.function.arguments or "" if delta.function else ""
            finish = choice.finish_reason or finish
    assert usage is not None and usage.prompt_tokens > 0, "include_usage: the last chunk carries the usage"
    assert finish == ("tool_calls" if calls else "stop")
    message = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls.values()
        ]
    return message, None


def grow_openai_chat(proxy: ProxyServer, *, stream: bool, tools: bool) -> tuple[list[Message], list[Any]]:
    """An agent loop (or, without tools, a user pasting catalog exports) until the history reaches GOAL."""
    client = OpenAI(base_url=f"{proxy.base_url}/v1", api_key="unused", max_retries=0)
    rng = random.Random(0)
    messages, headers = opening(), []
    while prompt_size(messages, TOOLS if tools else None) < GOAL:
        reply, response_headers = ask_openai(client, messages, stream=stream, tools=tools)
        headers.append(response_headers)
        messages.append(reply)
        for call in reply.get("tool_calls", ()):
            assert json.loads(call["function"]["arguments"]), "arguments arrive as a JSON string"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": parts_result(rng, 25)})
        if not reply.get("tool_calls"):
            pasted = "" if tools else f" Here is the catalog export: {parts_result(rng, 25)}"
            messages.append({"role": "user", "content": f"Thanks. Which one is cheapest?{pasted}"})
    return messages, headers


def compacted_window(proxy: ProxyServer, messages: list[Message]) -> int:
    """The window the proxy compacts this model's chats for (its dry run says)."""
    report = httpx.post(f"{proxy.base_url}/compact", json={"model": MODEL, "messages": messages}, timeout=30)
    return int(report.json()["report"]["window"])


@pytest.mark.parametrize(
    ("stream", "tools"), [(False, False), (True, True), (False, True)], ids=["plain", "stream", "tools"]
)
def test_openai_chat_to_50k_tokens_is_never_cut_by_ollama(
    fake: FakeOllama, stream: bool, tools: bool
) -> None:
    with running_proxy(f"{fake.base_url}/v1", None) as proxy:  # no window settings
        messages, headers = grow_openai_chat(proxy, stream=stream, tools=tools)
        window = compacted_window(proxy, messages)
    assert fake.truncations == [], "Ollama never cut a prompt"
    chats = [path for path, _ in fake.requests if path in ("/api/chat", "/v1/chat/completions")]
    assert chats and set(chats) == {"/api/chat"}, "OpenAI chats go to Ollama's native API"
    assert window == OLLAMA_MAX_NUM_CTX, "the trained length (131,072), capped"
    assert {a.num_ctx for a in fake.answers} == {window}, "Ollama answered with the window compacted for"
    assert fake.loads == [(MODEL, window)], "one num_ctx per model: Ollama never reloads it"
    sent = [body for path, body in fake.requests if path == "/api/chat"]
    assert all(body["options"]["num_ctx"] == window for body in sent)
    assert len(sent[-1]["messages"]) < len(messages) - 1, "the proxy compacted the long history"
    assert max(a.prompt_eval_count for a in fake.answers) <= 0.8 * window
    if not stream:
        assert int(headers[-1]["x-compaction-tokens-after"]) <= 0.8 * window


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_ollama_client_chat_to_50k_tokens_is_never_cut(fake: FakeOllama, stream: bool) -> None:
    """The native API keeps the client's own choice (no `num_ctx` here: Ollama's default, 4,096), and
    the proxy compacts for the window Ollama really runs the model at."""
    rng = random.Random(1)
    with running_proxy(f"{fake.base_url}/v1", None) as proxy:
        client = ollama.Client(host=proxy.base_url)
        messages = opening()
        while prompt_size(messages, TOOLS) < GOAL:
            if stream:
                parts = list(client.chat(model=MODEL, messages=messages, tools=TOOLS, stream=True))
                content = "".join(p.message.content or "" for p in parts)
                calls = [c for p in parts for c in p.message.tool_calls or ()]
                assert parts[-1].done and parts[-1].prompt_eval_count
            else:
                answer = client.chat(model=MODEL, messages=messages, tools=TOOLS)
                content, calls = answer.message.content or "", list(answer.message.tool_calls or ())
            messages.append(
                {"role": "assistant", "content": content, "tool_calls": [c.model_dump() for c in calls]}
            )
            for call in calls:
                result = parts_result(rng, 12)
                messages.append({"role": "tool", "tool_name": call.function.name, "content": result})
            if not calls:
                messages.append({"role": "user", "content": "Thanks. Which one is cheapest?"})
        window = compacted_window(proxy, messages)
    assert fake.truncations == []
    assert window == 4096 and {a.num_ctx for a in fake.answers} == {window}
    sent = [body for path, body in fake.requests if path == "/api/chat"]
    assert all("num_ctx" not in (body.get("options") or {}) for body in sent), "the client's request, as sent"
    assert len(sent[-1]["messages"]) < len(messages) - 1


def prose(rng: random.Random, sentences: int) -> str:
    sentence = "the wheel arrived bent and the rim was scratched near the valve so I would like a refund"
    words = sentence.split(" ")
    return " ".join(
        " ".join(rng.choice(words) for _ in range(12)).capitalize() + "." for _ in range(sentences)
    )


def test_a_silent_cut_is_caught_and_learned_from(fake: FakeOllama) -> None:
    """The proxy is told 16,384 and goes through `/v1`, which ignores `num_ctx`: Ollama runs at 4,096.
    A client resumes a 10,000-token chat: Ollama cuts it, the answer is flagged, and from then on the
    chat is compacted to fit."""
    rng = random.Random(2)
    messages = opening()
    for _ in range(12):
        messages += [{"role": "user", "content": prose(rng, 60)}, {"role": "assistant", "content": "Noted."}]
    messages.append({"role": "user", "content": "So what do you suggest?"})
    settings = {"upstream_kind": "openai"}
    with running_proxy(f"{fake.base_url}/v1", 16384, **settings) as proxy:
        client = OpenAI(base_url=f"{proxy.base_url}/v1", api_key="unused", max_retries=0)
        flags = []
        for _ in range(6):
            raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
            flags.append(raw.headers.get("x-compaction-upstream-truncated"))
            messages.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
            messages.append({"role": "user", "content": prose(rng, 60)})
        metrics = httpx.get(f"{proxy.base_url}/metrics").text
        log = proxy.log_tail(200)
    assert fake.truncations[0].prompt_tokens > 9000
    assert flags == ["true", None, None, None, None, None]
    assert len(fake.truncations) == 1, "after the first cut, every request fit"
    assert {path for path, _ in fake.requests if "chat" in path} == {"/v1/chat/completions"}
    assert "compacting_proxy_upstream_truncations_total 1.0" in metrics
    warning = next(line for line in log.splitlines() if "cut the prompt silently" in line)
    assert "WARNING" in warning and MODEL in warning
    assert f"read {fake.truncations[0].read_tokens}" in warning


def test_ollama_client_tool_loop_with_screenshots_is_compacted_on_the_real_process(fake: FakeOllama) -> None:
    """Ollama's own shapes through the real process: calls without ids, results named by `tool_name`,
    screenshots as base64 `images`. The old results go, whole with their calls, so the prompt fits
    the request's `num_ctx`; the latest screenshot reaches Ollama as it was sent."""
    messages: list[Message] = [*opening(), *screenshot_steps(10, 1024, 768)]
    with running_proxy(f"{fake.base_url}/v1", None) as proxy:
        client = ollama.Client(host=proxy.base_url)
        answer = client.chat(model=MODEL, messages=messages, options={"num_ctx": 4096, "temperature": 0})
    assert answer.message.role == "assistant"
    route, sent = fake.requests[-1]
    assert route == "/api/chat" and sent["options"] == {"num_ctx": 4096, "temperature": 0}
    assert prompt_size(messages, None) > 4096, "sent as it was, the prompt would not fit"
    assert prompt_size(sent["messages"], None) <= 4096
    results = [m for m in sent["messages"] if m["role"] == "tool"]
    assert 0 < len(results) < 10
    assert results[-1]["images"] == messages[-1]["images"] and results[-1]["content"] == "screen 9"
    for i, message in enumerate(sent["messages"]):  # every result still follows the call it answers
        if message["role"] == "tool" and "images" in message:
            (call,) = sent["messages"][i - 1]["tool_calls"]
            assert f"screen {call['function']['arguments']['step']}" == message["content"]
